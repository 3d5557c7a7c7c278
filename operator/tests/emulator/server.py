"""The HTTP face of the emulator: kube-apiserver's URL layout, verbs, errors and watch streams."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web

from . import authn, discovery, errors, openapi, podlogs, protobuf, tables
from .accounting import Faults, RequestLog, RequestRecord, now
from .rbac import Attributes, Identity, Security
from .resources import Registry, ResourceInfo
from .selectors import field_matcher, label_matcher
from .store import APPLY, Store
from .watch import END, bookmark

# libyaml's safe loader where PyYAML has it: the pure-Python one costs milliseconds per object.
_YAML_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
JSON = dict[str, Any]
_TRUE = ("true", "1", "True")
PodLogs = podlogs.PodLogs


@dataclass(frozen=True)
class Target:
    """A parsed resource URL."""

    info: ResourceInfo
    namespace: str | None
    name: str | None
    subresource: str | None


def _json(body: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    response = web.Response(
        body=json.dumps(body).encode(), status=status, content_type="application/json"
    )
    for warning in warnings or []:
        escaped = warning.replace("\\", "\\\\").replace('"', '\\"')
        response.headers.add("Warning", f'299 - "{escaped}"')
    return response


class ApiServer:
    # As kube-apiserver's watch cache: a watch that asked for bookmarks gets one this often
    # when nothing else came (its `bookmarkFrequency`); a client that hears nothing for
    # longer takes the stream for dead (kopf: after 70 s) and opens it again.
    bookmark_seconds = 60.0

    def __init__(self, store: Store, log: RequestLog, faults: Faults) -> None:
        self.store = store
        self.registry: Registry = store.registry
        self.log = log
        self.faults = faults
        # Authentication and RBAC (rbac.py); None: every request is allowed, whatever its token.
        self.security: Security | None = None
        # `pods/<name>/log`; None: the subresource answers 404 as no kubelet serves it.
        self.pod_logs: PodLogs | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        return app

    # --- routing ----------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        verb, resource, target = "get", "discovery", None
        response: web.StreamResponse | None
        try:
            identity = authn.impersonated(
                self.security, self._authenticate(request), request.headers
            )
            if request.method == "GET" and (response := self._discovery(parts)) is not None:
                code = response.status
            else:
                target = self._parse_target(parts)
                verb = self._verb(request, target)
                resource = target.info.qualified + (
                    f"/{target.subresource}" if target.subresource else ""
                )
                self._authorize(identity, verb, target)
                self.faults.check(verb, resource, target.name)
                if verb == "watch":  # counted when it opens: it may stream for minutes
                    self._record(request, verb, resource, target, 200)
                    return await self._watch(request, target)
                if target.subresource == "log":
                    self._record(request, verb, resource, target, 200)
                    self.store.get(target.info, target.namespace, target.name or "")  # 404?
                    return await podlogs.serve(
                        request, target.namespace, target.name, self.pod_logs
                    )
                response = await self._serve(request, verb, target, identity)
                code = response.status
        except errors.ApiError as error:
            response, code = _json(error.status(), error.code), error.code
        self._record(request, verb, resource, target, code)
        return response

    def _authenticate(self, request: web.Request) -> Identity | None:
        if self.security is None:
            return None
        return self.security.authenticate(request.headers.get("Authorization"))

    def _authorize(self, identity: Identity | None, verb: str, target: Target) -> None:
        if self.security is None or identity is None:
            return
        resource = target.info.plural + (f"/{target.subresource}" if target.subresource else "")
        attrs = Attributes(verb, target.info.group, resource, target.namespace, target.name)
        self.security.authorize(identity, attrs)

    def _check_escalation(self, identity: Identity | None, info: ResourceInfo, obj: Any) -> None:
        rbac = info.group == "rbac.authorization.k8s.io"
        if self.security is not None and identity is not None and rbac and isinstance(obj, dict):
            self.security.check_escalation(identity, info.plural, obj)

    def _record(
        self, request: web.Request, verb: str, resource: str, target: Target | None, code: int
    ) -> None:
        namespace, name = (target.namespace, target.name) if target else (None, None)
        self.log.add(RequestRecord(verb, resource, namespace, name, request.path, code, now()))

    def _discovery(self, parts: list[str]) -> web.Response | None:
        if not parts:
            return _json(discovery.root_paths(self.registry))
        if parts == ["version"]:
            return _json(discovery.SERVER_VERSION)
        if parts[0] in ("healthz", "livez", "readyz"):
            return web.Response(text="ok")
        if parts == ["api"]:
            return _json(discovery.api_versions())
        if parts == ["apis"]:
            return _json(discovery.api_group_list(self.registry))
        if parts[0] == "apis" and len(parts) == 2:
            return _json(discovery.api_group(self.registry, parts[1]))
        if parts[0] == "api" and len(parts) == 2:
            return _json(discovery.api_resource_list(self.registry, "", parts[1]))
        if parts[0] == "apis" and len(parts) == 3:
            return _json(discovery.api_resource_list(self.registry, parts[1], parts[2]))
        if parts[0] == "openapi":
            return _json(openapi.serve(self.registry, parts[1:]))
        return None

    def _parse_target(self, parts: list[str]) -> Target:
        path = "/" + "/".join(parts)
        if len(parts) >= 3 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 4 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise errors.no_such_path(path)
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise errors.no_such_path(path)
        info = self.registry.lookup(group, version, rest[0])
        if info is None or (namespace is not None and not info.namespaced):
            raise errors.no_such_path(path)
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        if info.namespaced and name is not None and namespace is None:
            raise errors.no_such_path(path)
        if subresource is not None and subresource not in info.subresources:
            raise errors.no_such_path(path)
        return Target(info, namespace, name, subresource)

    @staticmethod
    def _verb(request: web.Request, target: Target) -> str:
        method, named = request.method, target.name is not None
        if method == "GET":
            if request.query.get("watch") in _TRUE:
                return "watch"
            return "get" if named else "list"
        verbs = {
            ("POST", False): "create",
            ("PUT", True): "update",
            ("PATCH", True): "patch",
            ("DELETE", True): "delete",
            ("DELETE", False): "deletecollection",
        }
        if target.subresource in ("token", "eviction"):  # a TokenRequest (authn.py), Eviction
            verbs[("POST", True)] = "create"
        if (method, named) not in verbs:
            raise errors.method_not_allowed(f"{method} is not supported on {request.path}")
        verb = verbs[(method, named)]
        if verb not in target.info.verbs:
            raise errors.method_not_allowed(f"{verb} is not supported on {target.info.qualified}")
        return verb

    # --- serving ----------------------------------------------------------------------------

    def _evict(self, info: ResourceInfo, ns: str, name: str, body: Any) -> web.Response:
        """`POST pods/<name>/eviction` (policy/v1 Eviction), as a node drain or Kueue sends
        it: the pod gets the `DisruptionTarget` condition (reason `EvictionByEvictionAPI`, as
        the real server sets it), then a graceful delete with the eviction's deleteOptions.
        PodDisruptionBudgets are not evaluated (they are stored only)."""
        if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
            raise errors.bad_request("the body of pods/eviction must be a policy/v1 Eviction")
        pod = self.store.get(info, ns, name)
        conditions = [
            c
            for c in (pod.get("status") or {}).get("conditions", [])
            if c.get("type") != "DisruptionTarget"
        ]
        conditions.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "EvictionByEvictionAPI",
                "message": "Eviction API: evicting",
                "lastTransitionTime": self.store.timestamp(),
            }
        )
        self.store.patch(
            info,
            ns,
            name,
            "application/merge-patch+json",
            {"status": {"conditions": conditions}},
            subresource="status",
        )
        options = body.get("deleteOptions") or {}
        grace = options.get("gracePeriodSeconds")
        self.store.delete(
            info,
            ns,
            name,
            preconditions=options.get("preconditions"),
            grace_period=int(grace) if grace is not None else None,
        )
        return _json(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}, 201
        )

    async def _body(self, request: web.Request, *, yaml_allowed: bool = False) -> Any:
        raw = await request.read()
        if not raw:
            return None
        if "protobuf" in request.content_type:
            return protobuf.decode(raw)  # the kinds kubectl creates imperatively; else 415
        if "cbor" in request.content_type:
            raise errors.unsupported_media_type(
                request.content_type, ["application/json", "application/yaml"]
            )
        try:
            if yaml_allowed or "yaml" in request.content_type:
                try:  # JSON is YAML, and clients send it (the operator's applies): parse it fast
                    return json.loads(raw)
                except ValueError:
                    return yaml.load(raw, Loader=_YAML_LOADER)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as error:
            raise errors.bad_request(f"the request body is not valid JSON/YAML: {error}") from None

    async def _serve(
        self, request: web.Request, verb: str, target: Target, identity: Identity | None = None
    ) -> web.StreamResponse:
        info, ns, name, sub = target.info, target.namespace, target.name, target.subresource
        query = request.query
        dry_run = query.get("dryRun") == "All"
        validation = query.get("fieldValidation", "Warn")
        warnings = [info.deprecation_warning] if info.deprecation_warning else []
        if info.plural == "tokenreviews":
            return _json(authn.token_review(self.security, await self._body(request)), 201)
        if sub == "token":  # kubectl sends it as protobuf: its spec (audiences) is not used
            body = None if "protobuf" in request.content_type else await self._body(request)
            return _json(authn.token_request(self.security, ns or "", name or "", body), 201)
        if sub == "eviction":
            return self._evict(info, ns or "", name or "", await self._body(request))
        if verb == "get":
            obj = self.store.get(info, ns, name or "")
            return self._render(request, info, [obj], single=True)
        if verb == "list":
            items, rv, token = self.store.select(
                info,
                ns,
                label_matcher(query.get("labelSelector")),
                field_matcher(query.get("fieldSelector")),
                limit=int(query["limit"]) if query.get("limit", "").isdigit() else None,
                continue_token=query.get("continue"),
            )
            return self._render(request, info, items, rv=rv, token=token)
        if verb == "create":
            body = await self._body(request)
            if isinstance(body, dict) and ns and not (body.get("metadata") or {}).get("namespace"):
                body.setdefault("metadata", {})["namespace"] = ns
            self._check_escalation(identity, info, body)
            obj, more = self.store.create(
                info, ns, body, dry_run=dry_run, field_validation=validation
            )
            return _json(self._served(obj, info), 201, warnings + more)
        if verb == "update":
            body = await self._body(request)
            self._check_escalation(identity, info, body)
            obj, more = self.store.update(
                info,
                ns,
                name or "",
                body,
                subresource=sub,
                dry_run=dry_run,
                field_validation=validation,
            )
            return _json(self._served(obj, info), 200, warnings + more)
        if verb == "patch":
            content_type = request.content_type
            body = await self._body(request, yaml_allowed=content_type == APPLY)
            if content_type == APPLY and self.store.find(info, ns, name or "") is None:
                self._authorize(identity, "create", target)  # an apply that creates
            if self.security is not None and info.group == "rbac.authorization.k8s.io":
                # Escalation is judged on the patched object: a dry run computes it first.
                preview, _, _ = self.store.patch(
                    info,
                    ns,
                    name or "",
                    content_type,
                    body,
                    subresource=sub,
                    dry_run=True,
                    field_manager=query.get("fieldManager"),
                )
                self._check_escalation(identity, info, preview)
            obj, more, created = self.store.patch(
                info,
                ns,
                name or "",
                content_type,
                body,
                subresource=sub,
                dry_run=dry_run,
                field_validation=validation,
                field_manager=query.get("fieldManager"),
            )
            return _json(self._served(obj, info), 201 if created else 200, warnings + more)
        if verb == "delete":
            options = await self._body(request) or {}
            grace = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
            obj, gone = self.store.delete(
                info,
                ns,
                name or "",
                propagation=query.get("propagationPolicy") or options.get("propagationPolicy"),
                preconditions=options.get("preconditions"),
                dry_run=dry_run,
                grace_period=int(grace) if grace is not None else None,
            )
            if gone and not info.custom:
                details = {
                    "name": name,
                    "group": info.group,
                    "kind": info.plural,
                    "uid": obj["metadata"]["uid"],
                }
                return _json(
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": details,
                    },
                    200,
                    warnings,
                )
            return _json(self._served(obj, info), 200, warnings)
        # deletecollection
        self.store.delete_collection(
            info,
            ns,
            label_matcher(query.get("labelSelector")),
            field_matcher(query.get("fieldSelector")),
        )
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})

    @staticmethod
    def _served(obj: JSON, info: ResourceInfo) -> JSON:
        """Objects are stored under one version and served under the requested one."""
        return (
            obj
            if obj.get("apiVersion") == info.api_version
            else {**obj, "apiVersion": info.api_version}
        )

    def _render(
        self,
        request: web.Request,
        info: ResourceInfo,
        items: list[JSON],
        *,
        single: bool = False,
        rv: str = "",
        token: str = "",
    ) -> web.Response:
        served = [self._served(obj, info) for obj in items]
        if "as=Table" in request.headers.get("Accept", ""):
            return _json(tables.table(info, served, rv=rv))
        if single:
            return _json(served[0])
        metadata: JSON = {"resourceVersion": rv}
        if token:
            metadata["continue"] = token
        return _json(
            {
                "kind": info.list_kind,
                "apiVersion": info.api_version,
                "metadata": metadata,
                "items": served,
            }
        )

    async def _watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        info, query = target.info, request.query
        fields = query.get("fieldSelector")
        if target.name is not None:  # the legacy single-object watch
            fields = ",".join(filter(None, [fields, f"metadata.name={target.name}"]))
        labels_match, fields_match = (
            label_matcher(query.get("labelSelector")),
            field_matcher(fields),
        )
        raw_rv = query.get("resourceVersion") or ""
        if raw_rv and not raw_rv.isdigit():
            raise errors.bad_request(f"invalid resourceVersion {raw_rv!r}")
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        bookmarks = query.get("allowWatchBookmarks") in _TRUE
        watcher = self.store.watch(
            info, target.namespace, labels_match, fields_match, int(raw_rv) if raw_rv else None
        )
        response = web.StreamResponse(status=200)
        response.content_type = "application/json"
        response.enable_chunked_encoding()
        try:
            await response.prepare(request)
            if query.get("sendInitialEvents") in _TRUE and bookmarks:
                watcher.queue.put_nowait(
                    bookmark(info.kind, info.api_version, self.store.rv, initial_end=True)
                )
            clock = asyncio.get_running_loop().time
            deadline = clock() + timeout if timeout else None
            next_bookmark = clock() + self.bookmark_seconds
            while True:
                now = clock()
                remaining = deadline - now if deadline else None
                wait = remaining
                if bookmarks and (wait is None or next_bookmark - now < wait):
                    wait = max(0.0, next_bookmark - now)
                try:
                    line = await asyncio.wait_for(watcher.queue.get(), wait)
                except TimeoutError:
                    if bookmarks:
                        await response.write(bookmark(info.kind, info.api_version, self.store.rv))
                        next_bookmark = clock() + self.bookmark_seconds
                    if deadline is None or clock() < deadline:
                        continue  # a periodic bookmark, not the end of the watch
                    break
                if line is END:
                    break
                await response.write(line)
        except ConnectionResetError:
            pass  # the client went away
        finally:
            self.store.unwatch(watcher)
        return response
