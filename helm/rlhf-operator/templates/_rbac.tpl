{{/*
Every permission the operator uses, with why. No wildcards. The same list is rendered into a
ClusterRole (cluster-wide mode) or into a Role per watched namespace (namespaced mode), so the two
modes can never drift apart. manifests/base/rbac.yaml mirrors it (deploy_tests checks that).
*/}}
{{- define "rlhf-operator.namespacedRules" -}}
# The RLHFJobs themselves: kopf lists/watches them and patches metadata (its annotations);
# `delete` is for runPolicy.ttlSecondsAfterFinished. `get`/`patch` on rlhfjobs/status also let
# the operator grant exactly that to each job's trainer Role: RBAC only lets a subject grant
# what it holds itself.
- apiGroups: ["rlhf.dev"]
  resources: ["rlhfjobs"]
  verbs: ["get", "list", "watch", "patch", "delete"]
- apiGroups: ["rlhf.dev"]
  resources: ["rlhfjobs/status"]
  verbs: ["get", "patch"]
# Children carry ownerReferences with blockOwnerDeletion: clusters that enable the
# OwnerReferencesPermissionEnforcement admission plugin require `update` on the owner's finalizers.
- apiGroups: ["rlhf.dev"]
  resources: ["rlhfjobs/finalizers"]
  verbs: ["update"]
# One RayJob per RLHFJob attempt; KubeRay turns it into a RayCluster, which the operator only
# reads. Children are created, replaced (PUT, with resourceVersion) when they drift from the
# spec, patched when adopted, and deleted.
- apiGroups: ["ray.io"]
  resources: ["rayjobs"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["ray.io"]
  resources: ["rayclusters"]
  verbs: ["get", "list", "watch"]
# Per-job children: the job config (ConfigMap), checkpoint storage (PVC), and the trainer's
# ServiceAccount.
- apiGroups: [""]
  resources: ["configmaps", "persistentvolumeclaims", "serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
# The trainer's Role + RoleBinding: it may patch the status of its own RLHFJob and nothing else.
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
# Events on RLHFJobs: kopf posts core v1 events (never events.k8s.io).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# While an attempt starts, its pods (KubeRay's, labelled with the job) are listed to say on
# the job's status why they do not run (unschedulable, image pull, a missing Secret). Read only:
# no get/watch, no exec, no logs.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
{{- end }}

{{/* kopf's peering objects: each replica writes its keep-alive into their status. */}}
{{- define "rlhf-operator.peeringRule" -}}
- apiGroups: ["kopf.dev"]
  resources: [{{ if include "rlhf-operator.clusterWide" . }}"clusterkopfpeerings"{{ else }}"kopfpeerings"{{ end }}]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}

{{/*
Cluster-scoped reads kopf needs in cluster-wide mode: CRDs (to notice RLHFJob/RayJob CRDs being
installed or upgraded) and namespaces (to follow namespaces appearing). In namespaced mode kopf
runs without them: it logs that CRD changes are noticed only at restart.
*/}}
{{- define "rlhf-operator.clusterRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list", "watch"]
{{- end }}
