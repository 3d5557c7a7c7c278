"""Patterns for every spec value that ends up in a pod, a `ray start` line or an object name.

They are strict on purpose: these values are pasted into KubeRay's shell command lines and
into pod specs, so anything outside a plain name (a quote, a space, a `;`) is refused by the
CRD and by `rlhf validate` before it can reach a shell or the scheduler.
"""

from __future__ import annotations

# RFC 1123 subdomain (most object names: PriorityClass, Secret, PVC, StorageClass, ...):
# dot-separated labels, so no `..` (the length, at most 253, is each field's maxLength).
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# RFC 1123 label (namespaced names that become labels, e.g. a Kueue LocalQueue).
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
# A key inside a ConfigMap or Secret: not `.` or `..`, nor starting with `..` (the kubelet's
# own entries of a mounted volume, `..data`); at most 253 characters (each field's maxLength).
DATA_KEY = r"^(\.[-_a-zA-Z0-9][-._a-zA-Z0-9]*|[-_a-zA-Z0-9][-._a-zA-Z0-9]*)$"
# An environment variable's name as the API server takes it (C identifier plus '-' and '.').
ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
# A storage size (a Kubernetes quantity in bytes: no milli), greater than zero (the API server
# refuses a PVC of 0 bytes; an emptyDir of 0 bytes would evict its pod at once).
STORAGE_QUANTITY = r"^([1-9][0-9]*(\.[0-9]+)?|0\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$"
# CPU or memory of a container, greater than zero.
RESOURCE_QUANTITY = r"^([1-9][0-9]*(\.[0-9]+)?|0\.[0-9]*[1-9][0-9]*)(m|Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$"
# Quantities are short; a limit keeps them within what the API server parses (int64 scaled).
QUANTITY_MAX_LENGTH = 24
# A label key or taint key (Kubernetes "qualified name"): an optional DNS subdomain prefix and
# '/', then a name of at most 63 characters.
QUALIFIED_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
QUALIFIED_NAME_MAX_LENGTH = 317  # 253 + '/' + 63
# A label value or taint value: empty, or up to 63 characters of a restricted alphabet.
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
# A Kubernetes extended resource: a domain-prefixed name such as nvidia.com/gpu.
EXTENDED_RESOURCE = (
    r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
# A Ray resource name as the trainer asks for it ("GPU", or a custom name such as GPU-like).
RAY_RESOURCE = r"^[A-Za-z][A-Za-z0-9_-]{0,62}$"
# An OCI image reference: [registry[:port]/]path[:tag][@sha256:digest].
IMAGE = (
    r"^([a-zA-Z0-9][a-zA-Z0-9.-]*(:[0-9]{1,5})?/)?"
    r"[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$"
)
# Bounds on free-text fields (their values are data: the job's config file, never a command
# line), so that every object stays within Kubernetes' size limits.
NAME_MAX = 256  # column names, splits, revisions, W&B names, tokens
PATH_MAX = 4096  # paths, model and dataset ids, URLs
# An IPv4 or IPv6 network in CIDR notation (the field validator parses it for real).
CIDR = r"^[0-9a-fA-F.:]{2,39}/[0-9]{1,3}$"


# What each pattern means, for error messages (`errors.py`): "must be <this>".
DESCRIPTIONS = {
    DNS_SUBDOMAIN: "a DNS subdomain (lowercase letters, digits, '-' and '.', no '..')",
    DNS_LABEL: "a DNS label (lowercase letters, digits and '-', at most 63)",
    DATA_KEY: "a ConfigMap or Secret key (letters, digits, '-', '_', '.'; not '.', '..' or '..*')",
    STORAGE_QUANTITY: "a size greater than zero, such as 10Gi",
    RESOURCE_QUANTITY: "a quantity greater than zero, such as 8, 500m or 64Gi",
    QUALIFIED_NAME: "a label key: [DNS-subdomain/]name, the name at most 63 letters, digits, "
    "'-', '_' or '.'",
    LABEL_VALUE: "a label value: at most 63 letters, digits, '-', '_' or '.', starting and "
    "ending with a letter or digit",
    ENV_NAME: "an environment variable name (letters, digits, '_', '-', '.'; not starting "
    "with a digit)",
    IMAGE: "an image reference such as registry.example.com/team/trainer:1.0",
    EXTENDED_RESOURCE: "an extended resource name such as nvidia.com/gpu",
    RAY_RESOURCE: "a Ray resource name (letters, digits, '_', '-')",
}
