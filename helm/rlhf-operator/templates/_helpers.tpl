{{/* Names, labels and images shared by every template. */}}

{{- define "rlhf-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: <release>-<chart>, shortened to <release> when it already holds the chart name. */}}
{{- define "rlhf-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "rlhf-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels: stable across upgrades (a Deployment's selector is immutable). */}}
{{- define "rlhf-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rlhf-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "rlhf-operator.labels" -}}
helm.sh/chart: {{ include "rlhf-operator.chart" . }}
{{ include "rlhf-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: rlhf-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "rlhf-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rlhf-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository@digest when a digest is set, else repository:tag (tag defaults to appVersion). */}}
{{- define "rlhf-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "rlhf-operator.trainerImage" -}}
{{- default (printf "ghcr.io/rlhf-operator/rlhf-trainer:%s" .Chart.AppVersion) .Values.trainer.defaultImage }}
{{- end }}

{{/* "true" when the operator serves the whole cluster, "" when it serves watchNamespaces. */}}
{{- define "rlhf-operator.clusterWide" -}}
{{- if not .Values.watchNamespaces }}true{{- end }}
{{- end }}

{{/*
Cross-value rules that JSON Schema cannot say with a useful message. Included by the Deployment,
so `helm template` and `helm install` fail before anything is applied.
*/}}
{{- define "rlhf-operator.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.peering.enabled) }}
{{- fail "replicaCount > 1 needs peering.enabled=true: without kopf peering every replica would reconcile the same RLHFJobs" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.service.enabled) }}
{{- fail "metrics.serviceMonitor.enabled=true needs metrics.service.enabled=true: a ServiceMonitor scrapes a Service" }}
{{- end }}
{{- if eq (int .Values.metrics.port) (int .Values.health.port) }}
{{- fail "metrics.port and health.port must differ: the operator serves /metrics and /healthz on separate listeners" }}
{{- end }}
{{- end }}

{{/* A map as `key=value,key2=value2` (sorted by key), as RLHF_OPERATOR_NODE_SELECTOR reads it. */}}
{{- define "rlhf-operator.pairs" -}}
{{- $pairs := list -}}
{{- range $key, $value := . -}}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/*
The KubeRay operator's namespace, the only one whose pods reach the jobs' Ray dashboards: the
value, else this release's namespace when KubeRay comes with this chart, else empty (any
namespace may reach the dashboard port, which the job's Ray token still guards).
*/}}
{{- define "rlhf-operator.kuberayNamespace" -}}
{{- if .Values.network.kuberayNamespace -}}
{{- .Values.network.kuberayNamespace -}}
{{- else if .Values.kuberay.enabled -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/*
The gateway's pods: their own name label, so that the operator's Deployment and PDB selectors
(name + instance) never match them.
*/}}
{{- define "rlhf-operator.gatewaySelectorLabels" -}}
app.kubernetes.io/name: {{ include "rlhf-operator.name" . }}-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end }}

{{- define "rlhf-operator.gatewayLabels" -}}
helm.sh/chart: {{ include "rlhf-operator.chart" . }}
{{ include "rlhf-operator.gatewaySelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: rlhf-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
