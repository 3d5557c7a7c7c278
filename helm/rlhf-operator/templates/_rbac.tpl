{{/*
Every permission the operator uses, with why. No wildcards. The same list is rendered into a
ClusterRole (cluster-wide mode) or into a Role per watched namespace (namespaced mode), so the two
modes can never drift apart. manifests/base/rbac.yaml mirrors it (deploy_tests checks that).
*/}}
{{- define "rlhf-operator.namespacedRules" -}}
# Exactly the requests the operator makes (deploy_tests/test_least_privilege.py records them
# against the API emulator and compares), plus two grants it never uses as requests, marked.
#
# The RLHFJobs: kopf lists/watches them (it keeps no annotations on them); `get` confirms a
# job still exists when one of its children was deleted; `delete` is
# runPolicy.ttlSecondsAfterFinished; `create` makes an RLHFPipeline's stage jobs, and `patch`
# also sets their runPolicy.suspend when the pipeline is suspended or resumed. The status is
# patched by the operator alone.
- apiGroups: ["rlhf.dev"]
  resources: ["rlhfjobs"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["rlhf.dev"]
  resources: ["rlhfjobs/status"]
  verbs: ["patch"]
# Not a request: children carry ownerReferences with blockOwnerDeletion, which clusters with the
# OwnerReferencesPermissionEnforcement admission plugin allow only with `update` on finalizers.
- apiGroups: ["rlhf.dev"]
  resources: ["rlhfjobs/finalizers"]
  verbs: ["update"]
# RLHFPipelines: kopf lists/watches them and patches their annotations; their status is the
# operator's. Not a request: `update` on their finalizers, for the stage jobs' ownerReferences
# (blockOwnerDeletion), as for RLHFJobs above.
- apiGroups: ["rlhf.dev"]
  resources: ["rlhfpipelines"]
  verbs: ["list", "watch", "patch"]
- apiGroups: ["rlhf.dev"]
  resources: ["rlhfpipelines/status"]
  verbs: ["patch"]
- apiGroups: ["rlhf.dev"]
  resources: ["rlhfpipelines/finalizers"]
  verbs: ["update"]
# One RayJob per attempt: watched, created, replaced (PUT, with resourceVersion) when it drifts
# from the spec, deleted when a newer attempt replaces it or a deadline stops it.
- apiGroups: ["ray.io"]
  resources: ["rayjobs"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# ConfigMaps: the job config (replaced when it drifts) and the trainer's report, watched (the
# API server filters by label: only report ConfigMaps reach the operator). Not a request:
# `patch`, which the trainer's Role grants on its report (RBAC lets a subject grant only what
# it holds itself).
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch"]
# The trainer's ServiceAccount, Role and RoleBinding, and the job's NetworkPolicy: created, and
# put back when edited by hand. Never deleted by the operator: garbage collection does that.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "create", "patch"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "create", "patch"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create", "patch"]
# Create-only children: the storage PVC (its spec is immutable) and the job's Ray token Secret
# (generated once, never rotated under a running job). `get` on Secrets is the one read of
# them the operator needs, to tell its own from a foreign one with the same name; it asks for
# metadata only (PartialObjectMetadata), so no token it did not make reaches it. No list,
# watch, update or delete.
- apiGroups: [""]
  resources: ["persistentvolumeclaims", "secrets"]
  verbs: ["get", "create"]
# Events on RLHFJobs: kopf posts core v1 events (never events.k8s.io). Not requests: `list`
# and `watch`, which the trainer's Role grants its head pod, which keeps the job's Events with
# its logs on the job's volume (RBAC lets a subject grant only what it holds itself).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "list", "watch"]
# The jobs' pods (KubeRay's, labelled with the job) are watched, by that label, to say on the
# job's status why a starting attempt does not run (unschedulable, image pull, a missing
# Secret): one watch for all jobs, not a list per job. Read only: no get, no exec, no logs.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
{{- end }}

{{/* kopf's peering objects: each replica writes its keep-alive into their status. */}}
{{- define "rlhf-operator.peeringRule" -}}
- apiGroups: ["kopf.dev"]
  resources: [{{ if include "rlhf-operator.clusterWide" . }}"clusterkopfpeerings"{{ else }}"kopfpeerings"{{ end }}]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}

{{/*
Cluster-scoped reads kopf needs in cluster-wide mode: CRDs (to notice RLHFJob/RayJob CRDs being
installed or upgraded). In namespaced mode kopf runs without them: it logs that CRD changes are
noticed only at restart. (Namespaces are not watched: kopf follows them only for glob patterns,
which the chart never passes.)
*/}}
{{- define "rlhf-operator.clusterRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
{{- end }}
