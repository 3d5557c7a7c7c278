"""Patch formats kube-apiserver accepts, as pure functions on JSON-like dicts.

- JSON merge patch (RFC 7386), also used for strategic-merge patches of built-in objects
  (a simplification: strategic merge would merge some lists by key instead of replacing them).
- JSON patch (RFC 6902) with `test`; any failure is an `unprocessable` (422) error, as there.
- Server-side apply, simplified: the applied configuration is merged into the live object
  (maps merged, lists replaced as a whole), and fields the same field manager applied last time
  but omits now are removed. There is no `managedFields` bookkeeping and so no conflicts
  between managers (`force` is accepted and ignored).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from . import errors

JSON = dict[str, Any]
Path = tuple[str, ...]

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


def apply_patch(
    live: Mapping[str, Any],
    content_type: str,
    body: Any,
    *,
    custom: bool,
    previously_applied: Iterable[Path] = (),
) -> Any:
    """The object a PATCH asks for, by Content-Type; `live` is never mutated.

    Custom resources have no strategic merge patch on the real server either (415).
    """
    if content_type == MERGE or (content_type == STRATEGIC and not custom):
        return merge_patch(live, body)
    if content_type == JSON_PATCH:
        return json_patch(live, body)
    if content_type == APPLY:
        if not isinstance(body, Mapping):
            raise errors.bad_request("an applied configuration must be an object")
        return server_side_apply(live, body, previously_applied)
    accepted = [JSON_PATCH, MERGE, APPLY] + ([] if custom else [STRATEGIC])
    raise errors.unsupported_media_type(content_type, accepted)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: dicts merge recursively, `null` deletes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: JSON = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- RFC 6902 -------------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise errors.unprocessable(f"invalid JSON pointer {path!r}: must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_insert: bool) -> int:
    if token == "-" and for_insert:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise errors.unprocessable(f"invalid array index {token!r}")
    index = int(token)
    limit = len(container) if for_insert else len(container) - 1
    if index > limit:
        raise errors.unprocessable(f"array index {index} out of bounds")
    return index


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, for_insert=False)]
        else:
            raise errors.unprocessable(f"doc is missing path: {path!r}")
    return node


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise errors.unprocessable(f"doc is missing path: {path!r}")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, for_insert=False)]
    raise errors.unprocessable(f"doc is missing path: {path!r}")


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise errors.unprocessable("cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, for_insert=False))
    raise errors.unprocessable(f"unable to remove nonexistent key: {path!r}")


def _add(doc: Any, path: str, value: Any, *, replace: bool) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise errors.unprocessable(f"replace operation does not apply: doc is missing {path!r}")
        parent[last] = value
    elif isinstance(parent, list):
        if replace:
            parent[_index(parent, last, for_insert=False)] = value
        else:
            parent.insert(_index(parent, last, for_insert=True), value)
    else:
        raise errors.unprocessable(f"doc is missing path: {path!r}")
    return doc


def json_patch(doc: Any, operations: Any) -> Any:
    """Apply RFC 6902 operations to a copy of `doc`; a failed `test` is a 422 like the server."""
    if not isinstance(operations, list):
        raise errors.bad_request("a JSON patch must be a list of operations")
    result = copy.deepcopy(doc)
    for op in operations:
        if not isinstance(op, Mapping) or "op" not in op or "path" not in op:
            raise errors.bad_request(f"invalid JSON patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise errors.bad_request(f"JSON patch operation {kind} needs a value: {op!r}")
        if kind == "add":
            result = _add(result, path, copy.deepcopy(op["value"]), replace=False)
        elif kind == "replace":
            result = _add(result, path, copy.deepcopy(op["value"]), replace=True)
        elif kind == "remove":
            _remove(result, path)
        elif kind == "move":
            value = _remove(result, op["from"])
            result = _add(result, path, value, replace=False)
        elif kind == "copy":
            result = _add(result, path, copy.deepcopy(_get(result, op["from"])), replace=False)
        elif kind == "test":
            actual = _get(result, path)
            if actual != op["value"]:
                raise errors.unprocessable(
                    f"the server rejected our request due to an error in our request: "
                    f"testing value {path} failed: {actual!r} != {op['value']!r}"
                )
        else:
            raise errors.bad_request(f"unknown JSON patch operation {kind!r}")
    return result


# --- simplified server-side apply -----------------------------------------------------------

# Identity fields an apply never removes, even if a later configuration omits them.
_NEVER_REMOVED: frozenset[Path] = frozenset(
    {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}
)


def leaf_paths(config: Mapping[str, Any], prefix: Path = ()) -> frozenset[Path]:
    """Paths of the non-map values in an applied configuration (lists count as leaves)."""
    paths: set[Path] = set()
    for key, value in config.items():
        path = (*prefix, key)
        if isinstance(value, Mapping) and value:
            paths |= leaf_paths(value, path)
        else:
            paths.add(path)
    return frozenset(paths)


def _merge_applied(live: Any, applied: Any) -> Any:
    if isinstance(live, Mapping) and isinstance(applied, Mapping):
        result = dict(live)
        for key, value in applied.items():
            result[key] = _merge_applied(live.get(key), value)
        return result
    return copy.deepcopy(applied)


def _remove_path(doc: JSON, path: Path) -> None:
    """Remove a path and then any map it leaves empty, like a field no manager owns anymore."""
    chain: list[JSON] = [doc]
    for key in path[:-1]:
        node = chain[-1].get(key)
        if not isinstance(node, dict):
            return
        chain.append(node)
    chain[-1].pop(path[-1], None)
    for depth in range(len(chain) - 1, 0, -1):
        if not chain[depth]:
            chain[depth - 1].pop(path[depth - 1], None)


def server_side_apply(
    live: Mapping[str, Any], applied: Mapping[str, Any], previously_applied: Iterable[Path]
) -> JSON:
    """Merge an applied configuration into the live object, dropping what the manager let go."""
    result: JSON = copy.deepcopy(_merge_applied(live, applied))
    now = leaf_paths(applied)
    for path in sorted(set(previously_applied) - now - _NEVER_REMOVED, key=len, reverse=True):
        if not any(path[: len(p)] == p for p in now):  # still covered by a newly applied leaf
            _remove_path(result, path)
    return result
