"""What the emulated API server serves: built-in resources plus every registered CRD's versions."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from support.crd_schema import CRDValidator

from . import errors

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceInfo:
    """One group/version/resource as discovery reports it (and how the store treats it)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    subresources: frozenset[str] = frozenset()
    # Custom resources only: the version's openAPIV3Schema and extras from the CRD.
    schema: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    custom: bool = False
    storage: bool = True
    deprecation_warning: str | None = None
    printer_columns: tuple[Mapping[str, Any], ...] = field(default=(), compare=False, repr=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> tuple[str, str]:
        """Storage identity: all versions of one group/plural share the same objects."""
        return (self.group, self.plural)

    @property
    def qualified(self) -> str:
        """`configmaps`, `rayjobs.ray.io`: how the real server names a resource in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


def _builtin(
    group: str,
    version: str,
    plural: str,
    kind: str,
    *,
    namespaced: bool = True,
    short: tuple[str, ...] = (),
    categories: tuple[str, ...] = (),
    subresources: tuple[str, ...] = (),
    verbs: tuple[str, ...] = ALL_VERBS,
) -> ResourceInfo:
    return ResourceInfo(
        group=group,
        version=version,
        plural=plural,
        kind=kind,
        namespaced=namespaced,
        singular=kind.lower(),
        short_names=short,
        categories=categories,
        subresources=frozenset(subresources),
        verbs=verbs,
    )


BUILTINS: tuple[ResourceInfo, ...] = (
    _builtin(
        "",
        "v1",
        "namespaces",
        "Namespace",
        namespaced=False,
        short=("ns",),
        subresources=("status", "finalize"),
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
    ),
    _builtin("", "v1", "configmaps", "ConfigMap", short=("cm",)),
    _builtin("", "v1", "secrets", "Secret"),
    _builtin("", "v1", "serviceaccounts", "ServiceAccount", short=("sa",), subresources=("token",)),
    _builtin(
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        short=("pvc",),
        subresources=("status",),
    ),
    _builtin(
        "",
        "v1",
        "pods",
        "Pod",
        short=("po",),
        categories=("all",),
        subresources=("status", "log", "eviction"),
    ),
    _builtin(
        "",
        "v1",
        "services",
        "Service",
        short=("svc",),
        categories=("all",),
        subresources=("status",),
    ),
    _builtin("", "v1", "events", "Event", short=("ev",)),
    _builtin("events.k8s.io", "v1", "events", "Event", short=("ev",)),
    _builtin("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    _builtin("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    _builtin("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
    _builtin(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        namespaced=False,
    ),
    _builtin("coordination.k8s.io", "v1", "leases", "Lease"),
    # Object-count limits are enforced at create (quota.py).
    _builtin(
        "", "v1", "resourcequotas", "ResourceQuota", short=("quota",), subresources=("status",)
    ),
    # Stored and served only (the chart's gateway renders them).
    _builtin(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        short=("pdb",),
        subresources=("status",),
    ),
    _builtin(
        "networking.k8s.io", "v1", "ingresses", "Ingress", short=("ing",), subresources=("status",)
    ),
    # Answered, never stored (authn.py).
    _builtin(
        "authentication.k8s.io",
        "v1",
        "tokenreviews",
        "TokenReview",
        namespaced=False,
        verbs=("create",),
    ),
    # Stored and served only; the local substrate (e2e/local) plays their controllers.
    _builtin(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        short=("deploy",),
        categories=("all",),
        subresources=("status",),
    ),
    _builtin("batch", "v1", "jobs", "Job", categories=("all",), subresources=("status",)),
    # Stored and served; nothing enforces them (the local substrate's pods reach each other).
    _builtin("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", short=("netpol",)),
    _builtin(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        namespaced=False,
        short=("crd", "crds"),
        categories=("api-extensions",),
        subresources=("status",),
    ),
)


def infos_from_crd(crd: Mapping[str, Any]) -> list[ResourceInfo]:
    """One ResourceInfo per served version of a CRD (already admitted, so well-formed)."""
    spec = crd["spec"]
    names = spec["names"]
    infos = []
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        subresources = version.get("subresources") or {}
        warning = version.get("deprecationWarning")
        if version.get("deprecated") and not warning:
            warning = f"{spec['group']}/{version['name']} {names['kind']} is deprecated"
        infos.append(
            ResourceInfo(
                group=spec["group"],
                version=version["name"],
                plural=names["plural"],
                kind=names["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                singular=names.get("singular") or names["kind"].lower(),
                short_names=tuple(names.get("shortNames", ())),
                categories=tuple(names.get("categories", ())),
                subresources=frozenset(k for k in ("status", "scale") if k in subresources),
                schema=(version.get("schema") or {}).get("openAPIV3Schema"),
                custom=True,
                storage=bool(version.get("storage")),
                deprecation_warning=warning if version.get("deprecated") else None,
                printer_columns=tuple(version.get("additionalPrinterColumns", ())),
            )
        )
    return infos


_VERSION_RE = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Kubernetes' version order: GA before beta before alpha, higher numbers first."""
    match = _VERSION_RE.match(version)
    if not match:
        return (3, 0, 0, version)  # non-Kubernetes-style names sort last, alphabetically
    major, stage, minor = match.groups()
    stage_rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (stage_rank, -int(major), -int(minor or 0), version)


class Registry:
    """The discoverable resources; CRDs add and remove theirs as they come and go."""

    def __init__(self, builtins: Iterable[ResourceInfo] = BUILTINS) -> None:
        self._infos: dict[tuple[str, str, str], ResourceInfo] = {}
        self._validators: dict[tuple[str, str, str, bool], CRDValidator] = {}
        for info in builtins:
            self._infos[(info.group, info.version, info.plural)] = info

    def lookup(self, group: str, version: str, plural: str) -> ResourceInfo | None:
        return self._infos.get((group, version, plural))

    def all(self) -> list[ResourceInfo]:
        return list(self._infos.values())

    def storage_info(self, group: str, plural: str) -> ResourceInfo | None:
        """The version objects of a group/plural are stored as."""
        candidates = [i for i in self._infos.values() if i.group_resource == (group, plural)]
        stored = [i for i in candidates if i.storage] or candidates
        return min(stored, key=lambda i: version_priority(i.version)) if stored else None

    def set_crd(self, crd: Mapping[str, Any]) -> None:
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        self.remove_crd(group, plural)
        for info in infos_from_crd(crd):
            self._infos[(info.group, info.version, info.plural)] = info

    def remove_crd(self, group: str, plural: str) -> None:
        for key in [k for k, i in self._infos.items() if i.custom and k[0::2] == (group, plural)]:
            del self._infos[key]
        for cached in [k for k in self._validators if (k[0], k[2]) == (group, plural)]:
            del self._validators[cached]

    def validator(self, info: ResourceInfo, *, strict: bool) -> CRDValidator | None:
        """The (cached) schema validator of a custom resource version; None without schema."""
        if info.schema is None:
            return None
        key = (info.group, info.version, info.plural, strict)
        if key not in self._validators:
            self._validators[key] = CRDValidator(info.schema, strict=strict)
        return self._validators[key]

    def groups(self) -> dict[str, list[str]]:
        """Named groups (not the core one) -> served versions, preferred version first."""
        found: dict[str, set[str]] = {}
        for info in self._infos.values():
            if info.group:
                found.setdefault(info.group, set()).add(info.version)
        return {g: sorted(vs, key=version_priority) for g, vs in sorted(found.items())}

    def in_group_version(self, group: str, version: str) -> list[ResourceInfo]:
        return [i for i in self._infos.values() if (i.group, i.version) == (group, version)]

    def resolve(self, spec: str) -> ResourceInfo:
        """`configmaps`, `rayjobs.ray.io`, `ray.io/v1/rayjobs` or `v1/configmaps` -> info.

        A bare plural prefers the core group (`events` is core `v1/events`); otherwise the
        group's preferred version is used.
        """
        parts = spec.split("/")
        if len(parts) == 3:
            info = self.lookup(parts[0], parts[1], parts[2])
        elif len(parts) == 2:
            info = self.lookup("", parts[0], parts[1])
        else:
            plural, _, group = spec.partition(".")
            matches = [
                i for i in self._infos.values() if i.plural == plural and i.group == group
            ] or ([] if group else [i for i in self._infos.values() if i.plural == plural])
            groups = {i.group for i in matches}
            info = None
            if len(groups) == 1:
                info = min(matches, key=lambda i: version_priority(i.version))
        if info is None:
            raise errors.bad_request(f"unknown or ambiguous resource {spec!r}")
        return info
