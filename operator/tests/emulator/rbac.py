"""Authentication (bearer tokens) and RBAC authorization, as kube-apiserver does them.

Off unless a `Security` is given to the server (the operator's tests run with any token).
When on:
- A request must carry a known bearer token, else 401. Static tokens map to users (the admin
  of a kubeconfig is in `system:masters`); ServiceAccount tokens are minted per account and
  stop working when the account is deleted (or recreated: the token is bound to its uid).
- Discovery and health paths are open to every authenticated identity (what the default
  `system:discovery` / `system:public-info-viewer` bindings allow on a real cluster).
- A resource request is allowed when a rule of a Role/ClusterRole bound to the identity (a
  RoleBinding in the request's namespace, or any ClusterRoleBinding) covers its verb, API
  group, resource[/subresource] and name; otherwise 403 with the real server's message.
- Escalation prevention: writing a Role/ClusterRole needs every permission it grants (or the
  `escalate` verb); writing a binding needs every permission of the bound role (or `bind`).

Not emulated: ABAC/webhook authorizers, aggregated ClusterRoles, the default
`system:*` roles, SubjectAccessReviews.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import errors

JSON = dict[str, Any]
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
RBAC_GROUP = "rbac.authorization.k8s.io"

# Looks up a stored object: (group, plural, namespace or None, name) -> object or None.
Lookup = Callable[[str, str, str | None, str], JSON | None]
# Lists stored objects of one group/plural.
Lister = Callable[[str, str], Iterable[JSON]]


@dataclass(frozen=True)
class Identity:
    user: str
    groups: tuple[str, ...] = ()

    @property
    def is_master(self) -> bool:
        return MASTERS in self.groups


@dataclass(frozen=True)
class Attributes:
    """What a request asks to do, in RBAC's terms."""

    verb: str
    group: str
    resource: str  # plural, with "/subresource" when there is one
    namespace: str | None
    name: str | None


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


@dataclass
class Security:
    lookup: Lookup
    lister: Lister
    static_tokens: dict[str, Identity] = field(default_factory=dict)
    _sa_tokens: dict[str, tuple[str, str, str]] = field(default_factory=dict)

    # --- authentication ---------------------------------------------------------------------

    def add_user(self, user: str, groups: Iterable[str] = ()) -> str:
        """A new static token for `user` (e.g. the admin of a kubeconfig)."""
        token = secrets.token_urlsafe(32)
        self.static_tokens[token] = Identity(user, (*groups, AUTHENTICATED))
        return token

    def service_account_token(self, namespace: str, name: str) -> str:
        """The token of a ServiceAccount (minted once per account uid), as the kubelet mounts
        it. KeyError when the account does not exist: a real kubelet cannot get one either."""
        account = self.lookup("", "serviceaccounts", namespace, name)
        if account is None:
            raise KeyError(f'serviceaccount "{name}" not found in namespace "{namespace}"')
        uid = account["metadata"]["uid"]
        for token, bound in self._sa_tokens.items():
            if bound == (namespace, name, uid):
                return token
        token = secrets.token_urlsafe(32)
        self._sa_tokens[token] = (namespace, name, uid)
        return token

    def authenticate(self, authorization: str | None) -> Identity:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and token:
            if token in self.static_tokens:
                return self.static_tokens[token]
            bound = self._sa_tokens.get(token)
            if bound is not None:
                namespace, name, uid = bound
                account = self.lookup("", "serviceaccounts", namespace, name)
                if account is not None and account["metadata"]["uid"] == uid:
                    return Identity(
                        service_account_user(namespace, name),
                        (
                            "system:serviceaccounts",
                            f"system:serviceaccounts:{namespace}",
                            AUTHENTICATED,
                        ),
                    )
        raise errors.ApiError(401, "Unauthorized", "Unauthorized")

    # --- authorization ----------------------------------------------------------------------

    def _bound(self, subject: Mapping[str, Any], identity: Identity) -> bool:
        kind, name = subject.get("kind"), subject.get("name")
        if kind == "User":
            return bool(name == identity.user)
        if kind == "Group":
            return name in identity.groups
        if kind == "ServiceAccount":
            return service_account_user(str(subject.get("namespace", "")), str(name)) == (
                identity.user
            )
        return False

    def _role_rules(self, ref: Mapping[str, Any], namespace: str | None) -> list[JSON]:
        if ref.get("kind") == "ClusterRole":
            role = self.lookup(RBAC_GROUP, "clusterroles", None, str(ref.get("name")))
        else:
            role = self.lookup(RBAC_GROUP, "roles", namespace, str(ref.get("name")))
        return list((role or {}).get("rules") or [])

    def rules_for(self, identity: Identity, namespace: str | None) -> Iterator[JSON]:
        """Every rule that applies to `identity` for requests in `namespace` (None: cluster)."""
        for binding in self.lister(RBAC_GROUP, "clusterrolebindings"):
            if any(self._bound(s, identity) for s in binding.get("subjects") or []):
                yield from self._role_rules(binding.get("roleRef") or {}, None)
        if namespace is None:
            return
        for binding in self.lister(RBAC_GROUP, "rolebindings"):
            if binding["metadata"].get("namespace") != namespace:
                continue
            if any(self._bound(s, identity) for s in binding.get("subjects") or []):
                yield from self._role_rules(binding.get("roleRef") or {}, namespace)

    def allows(self, identity: Identity, attrs: Attributes) -> bool:
        if identity.is_master:
            return True
        return any(rule_covers(rule, attrs) for rule in self.rules_for(identity, attrs.namespace))

    def authorize(self, identity: Identity, attrs: Attributes) -> None:
        if not self.allows(identity, attrs):
            raise forbidden(identity, attrs)

    def check_escalation(self, identity: Identity, resource: str, obj: Mapping[str, Any]) -> None:
        """A subject may only grant (or bind) what it holds itself, as on a real cluster."""
        if identity.is_master:
            return
        namespace = (obj.get("metadata") or {}).get("namespace")
        name = str((obj.get("metadata") or {}).get("name", ""))
        if resource in ("roles", "clusterroles"):
            if self.allows(identity, Attributes("escalate", RBAC_GROUP, resource, namespace, name)):
                return
            rules = list(obj.get("rules") or [])
        elif resource in ("rolebindings", "clusterrolebindings"):
            ref = obj.get("roleRef") or {}
            role_resource = "clusterroles" if ref.get("kind") == "ClusterRole" else "roles"
            bind = Attributes("bind", RBAC_GROUP, role_resource, namespace, str(ref.get("name")))
            if self.allows(identity, bind):
                return
            rules = self._role_rules(ref, namespace)
        else:
            return
        missing = [
            a for rule in rules for a in expand(rule, namespace) if not self.allows(identity, a)
        ]
        if missing:
            raise errors.forbidden(
                f'{resource}.{RBAC_GROUP} "{name}" is forbidden: user "{identity.user}" '
                f"(groups={list(identity.groups)}) is attempting to grant RBAC permissions not "
                f"currently held: {sorted({_describe(a) for a in missing})}"
            )


def rule_covers(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    groups, resources = rule.get("apiGroups") or [], rule.get("resources") or []
    verbs, names = rule.get("verbs") or [], rule.get("resourceNames") or []
    if not ("*" in verbs or attrs.verb in verbs):
        return False
    if not ("*" in groups or attrs.group in groups):
        return False
    sub = attrs.resource.partition("/")[2]
    wanted = {attrs.resource, "*"} | ({f"*/{sub}"} if sub else set())
    if not wanted & set(resources):
        return False
    return not names or (attrs.name is not None and attrs.name in names)


def expand(rule: Mapping[str, Any], namespace: str | None) -> Iterator[Attributes]:
    """The single permissions a rule grants (wildcards kept as they are)."""
    names = rule.get("resourceNames") or [None]
    for group in rule.get("apiGroups") or []:
        for resource in rule.get("resources") or []:
            for verb in rule.get("verbs") or []:
                for name in names:
                    yield Attributes(verb, group, resource, namespace, name)


def _describe(a: Attributes) -> str:
    names = f" ResourceNames:[{a.name}]" if a.name else ""
    return f"{{APIGroups:[{a.group!r}], Resources:[{a.resource!r}]{names}, Verbs:[{a.verb!r}]}}"


def forbidden(identity: Identity, attrs: Attributes) -> errors.ApiError:
    """403 worded like kube-apiserver's RBAC denial."""
    base = attrs.resource.split("/", 1)[0]
    qualified = f"{base}.{attrs.group}" if attrs.group else base
    subject = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    where = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    message = (
        f'{subject} is forbidden: User "{identity.user}" cannot {attrs.verb} resource '
        f'"{attrs.resource}" in API group "{attrs.group}" {where}'
    )
    details: JSON = {"kind": base}
    if attrs.name:
        details["name"] = attrs.name
    if attrs.group:
        details["group"] = attrs.group
    return errors.ApiError(403, "Forbidden", message, details)
