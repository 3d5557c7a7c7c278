"""What kube-apiserver checks and fills in before it stores an object (pure functions).

Covered: object metadata validation (names, labels, annotations, owner references), the
system-owned metadata fields, `generation`, status-subresource semantics, custom-resource
schema admission (prune/default/validate via `support.crd_schema`), Secret `stringData`, and
CRD well-formedness. Not covered: the schemas of built-in kinds (a ConfigMap with an int value
would be accepted here), admission webhooks, quotas, RBAC.
"""

from __future__ import annotations

import base64
import copy
import re
from collections.abc import Mapping
from typing import Any

from support.crd_schema import FieldError

from . import errors
from .resources import ResourceInfo

JSON = dict[str, Any]

# Set by the server only; a client's values for these are ignored (on update: kept from storage).
SYSTEM_METADATA = (
    "uid",
    "creationTimestamp",
    "resourceVersion",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
)

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN_RE = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_DNS_LABEL_RE = re.compile(rf"^{_DNS_LABEL}$")
_QUALIFIED_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_RBAC_KINDS = {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
_MAX_ANNOTATIONS_BYTES = 256 * 1024


def _name_errors(name: str, kind: str) -> list[str]:
    if kind == "Namespace":
        if len(name) > 63 or not _DNS_LABEL_RE.match(name):
            return [
                "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                "characters or '-', start and end with one, and be at most 63 characters"
            ]
        return []
    if kind in _RBAC_KINDS:  # RBAC names are path segments, e.g. `system:controller:x` is fine
        if name in (".", "..") or "/" in name or "%" in name:
            return ["may not contain '/' or '%' and may not be '.' or '..'"]
        return []
    if len(name) > 253 or not _DNS_SUBDOMAIN_RE.match(name):
        return [
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.', start and end with an alphanumeric character, "
            "and be at most 253 characters"
        ]
    return []


def _qualified_name_errors(key: str) -> list[str]:
    prefix, slash, name = key.rpartition("/")
    problems = []
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.match(prefix)):
        problems.append("prefix part must be a lowercase RFC 1123 subdomain")
    if not name or len(name) > 63 or not _QUALIFIED_NAME_RE.match(name):
        problems.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', "
            "start and end with an alphanumeric character, at most 63 characters"
        )
    return problems


def metadata_errors(obj: Mapping[str, Any], info: ResourceInfo) -> list[FieldError]:
    """kube-apiserver's ObjectMeta validation, for the parts an operator can get wrong."""
    meta = obj.get("metadata") or {}
    found: list[FieldError] = []
    name = meta.get("name")
    if not name:
        found.append(
            FieldError("metadata.name", "Required value: name or generateName is required")
        )
    elif not isinstance(name, str):
        found.append(FieldError("metadata.name", f"Invalid value: {name!r}: must be a string"))
    else:
        found += [
            FieldError("metadata.name", f"Invalid value: {name!r}: {p}")
            for p in _name_errors(name, info.kind)
        ]
    labels = meta.get("labels") or {}
    if not isinstance(labels, Mapping):
        found.append(FieldError("metadata.labels", "Invalid value: must be a map of strings"))
        labels = {}
    for key, value in labels.items():
        found += [
            FieldError("metadata.labels", f"Invalid value: {key!r}: {p}")
            for p in _qualified_name_errors(key)
        ]
        if not isinstance(value, str):
            found.append(
                FieldError("metadata.labels", f"Invalid value: {value!r}: must be a string")
            )
        elif value and (len(value) > 63 or not _QUALIFIED_NAME_RE.match(value)):
            found.append(
                FieldError(
                    "metadata.labels",
                    f"Invalid value: {value!r}: a valid label must be an empty string or "
                    "consist of alphanumeric characters, '-', '_' or '.', and must start and "
                    "end with an alphanumeric character, at most 63 characters",
                )
            )
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        found.append(FieldError("metadata.annotations", "Invalid value: must be a map of strings"))
        annotations = {}
    size = 0
    for key, value in annotations.items():
        found += [
            FieldError("metadata.annotations", f"Invalid value: {key!r}: {p}")
            for p in _qualified_name_errors(key.lower())
        ]
        if not isinstance(value, str):
            found.append(
                FieldError("metadata.annotations", f"Invalid value: {value!r}: must be a string")
            )
            continue
        size += len(key) + len(value)
    if size > _MAX_ANNOTATIONS_BYTES:
        found.append(FieldError("metadata.annotations", "Too long: must have at most 262144 bytes"))
    controllers = 0
    for index, ref in enumerate(meta.get("ownerReferences") or []):
        for field in ("apiVersion", "kind", "name", "uid"):
            if not isinstance(ref, Mapping) or not ref.get(field):
                found.append(
                    FieldError(f"metadata.ownerReferences[{index}].{field}", "Required value")
                )
        if isinstance(ref, Mapping) and ref.get("controller"):
            controllers += 1
    if controllers > 1:
        found.append(
            FieldError(
                "metadata.ownerReferences",
                "Invalid value: only one reference can have Controller set to true",
            )
        )
    finalizers = meta.get("finalizers") or []
    if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
        found.append(FieldError("metadata.finalizers", "Invalid value: must be a list of strings"))
    return found


def identify(
    body: Any, info: ResourceInfo, storage_api_version: str, namespace: str | None
) -> JSON:
    """The body must be an object of the URL's kind, in the URL's namespace.

    The result is stored under the storage version's apiVersion (no conversion is done:
    all versions of a CRD share one schema shape here, as with `strategy: None`)."""
    if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
        raise errors.bad_request("the request body must be a JSON object with metadata")
    # The store owns `body` from here on (a parsed request, or a copy made by the caller);
    # its top level and metadata are copied because a patch result may share them.
    obj = dict(body)
    obj["metadata"] = dict(obj.get("metadata") or {})
    sent_version, sent_kind = obj.get("apiVersion"), obj.get("kind")
    if sent_version and sent_version != info.api_version:
        raise errors.bad_request(
            f"the API version in the data ({sent_version}) does not match the expected "
            f"API version ({info.api_version})"
        )
    if sent_kind and sent_kind != info.kind:
        raise errors.bad_request(
            f"the kind in the data ({sent_kind}) does not match the expected kind ({info.kind})"
        )
    obj["apiVersion"], obj["kind"] = storage_api_version, info.kind
    meta = obj.setdefault("metadata", {})
    if info.namespaced:
        if meta.get("namespace") and namespace and meta["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent "
                "on the request"
            )
        meta["namespace"] = namespace or meta.get("namespace")
        if not meta["namespace"]:
            raise errors.bad_request("a namespaced object needs a namespace")
    else:
        meta.pop("namespace", None)
    return obj


def spec_part(obj: Mapping[str, Any]) -> JSON:
    """What `generation` tracks: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def keep_system_metadata(new: JSON, old: Mapping[str, Any]) -> None:
    """On update, the server-owned metadata comes from storage, whatever the client sent."""
    meta = new.setdefault("metadata", {})
    for key in SYSTEM_METADATA:
        if key in old["metadata"]:
            meta[key] = copy.deepcopy(old["metadata"][key])
        else:
            meta.pop(key, None)


def for_status_write(old: Mapping[str, Any], new: Mapping[str, Any]) -> JSON:
    """Writes to `/status` change `.status` and nothing else.

    The result shares everything but its top level and metadata with `old`: stored objects
    are never mutated, so sharing their unchanged parts is safe and cheap.
    """
    result = {**old, "metadata": dict(old["metadata"])}
    if "status" in new:
        result["status"] = new["status"]
    else:
        result.pop("status", None)
    return result


def for_main_write(info: ResourceInfo, old: Mapping[str, Any] | None, new: JSON) -> JSON:
    """Writes to the main resource cannot change `.status` when there is a status subresource."""
    if info.has_status:
        if old is not None and "status" in old:
            new["status"] = old["status"]
        else:
            new.pop("status", None)
    return new


def finalizer_errors(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldError]:
    if not old["metadata"].get("deletionTimestamp"):
        return []
    added = set(new["metadata"].get("finalizers") or []) - set(
        old["metadata"].get("finalizers") or []
    )
    if added:
        return [
            FieldError(
                "metadata.finalizers",
                f"Forbidden: no new finalizers can be added if the object is being "
                f"deleted, found new finalizers {sorted(added)!r}",
            )
        ]
    return []


def admit_object(
    obj: JSON,
    info: ResourceInfo,
    validator: Any,
    *,
    field_validation: str,
    previous: Mapping[str, Any] | None = None,
) -> tuple[JSON, list[str]]:
    """Validate what is about to be stored; returns (object to store, warnings) or raises.

    Custom resources are pruned and defaulted first. Unknown fields are a 400 with
    `fieldValidation=Strict` (the real server reports them while decoding, before validating),
    a `Warning` otherwise. Metadata and schema problems together make one 422 Invalid.
    On updates, `previous` (the stored object) lets unchanged top-level fields skip the schema.
    """
    warnings: list[str] = []
    problems: list[FieldError] = []
    if not info.custom and field_validation == "Strict":
        strict_builtin(obj)
    if validator is not None:
        obj, removed, problems = validator.admit(obj, previous)
        if removed and field_validation == "Strict":
            listed = ", ".join(f'unknown field "{path}"' for path in removed)
            raise errors.bad_request(f"strict decoding error: {listed}")
        if field_validation != "Ignore":
            warnings = [f'unknown field "{path}"' for path in removed]
    problems = metadata_errors(obj, info) + problems
    if problems:
        raise errors.invalid(info.kind, info.group, obj["metadata"].get("name", ""), problems)
    if info.group == "" and info.kind == "Secret":
        obj = convert_secret(obj)
    if info.group == "apiextensions.k8s.io" and info.kind == "CustomResourceDefinition":
        obj = admit_crd(obj)
    return obj, warnings


_UNEXPECTED = re.compile(r"'([^']+)' (?:was|were) unexpected|'([^']+)', ")


def strict_builtin(obj: JSON) -> None:
    """`fieldValidation=Strict` for a built-in kind (what kubectl asks for): checked against
    Kubernetes' own schemas (kubernetes-validate, the newest version it bundles). Unknown
    fields are a 400, as the real server's strict decoding reports them; other violations a
    422. Without kubernetes-validate installed, built-ins are not checked."""
    try:
        import kubernetes_validate
    except ImportError:
        return
    try:
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return
    except kubernetes_validate.ValidationError as err:
        first = str(err).splitlines()[0]
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.path).lstrip(".")
        if first.startswith("Additional properties are not allowed"):
            names = [a or b for a, b in _UNEXPECTED.findall(first)]
            where = f"{path}." if path else ""
            listed = ", ".join(f'unknown field "{where}{name}"' for name in names)
            raise errors.bad_request(f"strict decoding error: {listed}") from None
        name = str((obj.get("metadata") or {}).get("name", ""))
        group = str(obj.get("apiVersion", "")).rpartition("/")[0]
        raise errors.invalid(
            str(obj.get("kind", "")), group, name, [FieldError(path or "<root>", first)]
        ) from None


def convert_secret(obj: JSON) -> JSON:
    """A Secret's `stringData` is write-only: the server folds it into base64 `data`."""
    string_data = obj.pop("stringData", None)
    if string_data:
        data = dict(obj.get("data") or {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        obj["data"] = data
    return obj


def admit_crd(crd: JSON) -> JSON:
    """Check a CRD is well-formed enough to serve, and fill in the status the server reports."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    versions = spec.get("versions") or []
    found: list[FieldError] = []
    for path, value in (
        ("spec.group", spec.get("group")),
        ("spec.names.plural", names.get("plural")),
        ("spec.names.kind", names.get("kind")),
    ):
        if not value:
            found.append(FieldError(path, "Required value"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        found.append(
            FieldError("spec.scope", 'Unsupported value: supported values: "Cluster", "Namespaced"')
        )
    if not versions:
        found.append(FieldError("spec.versions", "Invalid value: must have at least one version"))
    elif sum(bool(v.get("storage")) for v in versions) != 1:
        found.append(
            FieldError(
                "spec.versions",
                "Invalid value: must have exactly one version marked as storage version",
            )
        )
    expected = f"{names.get('plural')}.{spec.get('group')}"
    if crd["metadata"].get("name") != expected:
        found.append(
            FieldError(
                "metadata.name",
                f'Invalid value: must be spec.names.plural+"."+spec.group ({expected})',
            )
        )
    if found:
        raise errors.invalid(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            crd["metadata"].get("name", ""),
            found,
        )
    accepted = dict(names)
    accepted.setdefault("singular", names["kind"].lower())
    accepted.setdefault("listKind", f"{names['kind']}List")
    crd["status"] = {
        "acceptedNames": accepted,
        "storedVersions": [v["name"] for v in versions if v.get("storage")],
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
            },
        ],
    }
    return crd
