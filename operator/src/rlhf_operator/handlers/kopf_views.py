"""kopf's bodies and patches without reference cycles, so that each event's dies by refcount.

kopf wraps every watch event it processes in a `Body` and a `Patch`, and each keeps views of
itself: `body.meta` is a `Meta` whose source is the body, `meta.labels` a view whose source
is the `Meta`, and the same for the patch's `MetaPatch`, `SpecPatch` and `StatusPatch`. Each
is a reference cycle, so an event's whole decoded object (a RayJob's pod templates and all)
outlives it until Python's cyclic collector finds it: at 5,000 jobs a young collection of
20,000-45,000 such objects, 80-130 ms, about once a second, ~9.5 % of the operator's CPU
(`bench/operator_scale.py` with a `gc.callbacks` probe).

The views are cheap, lazy windows onto their source, and a fresh one reads and writes what
the kept one did: here each access builds its own (~1 us), and nothing refers back. kopf's
classes are changed only where their source is what this module was written against
(`_KOPF_SOURCES`); any other kopf keeps its own (a test fails on such an upgrade, and the
operator logs it). kopf is pinned.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from typing import Any

from kopf._cogs.structs import bodies, dicts, patches

logger = logging.getLogger(__name__)

# sha256 of kopf 1.45.2's classes, by name.
_KOPF_SOURCES = {
    "Meta": "4c9af95d60f652ac95ff0f6c11a5d9bff07f4fde979d97fd0977517053682f6c",
    "Body": "7b5649d2a13af1095a2b106d7ed39ad0d5972677c7c68d51b4c72c844194116c",
    "MetaPatch": "9663e084f60dbfd36f0b0cc03e7e473421482bf2413979e29dc8313d80e1f719",
    "Patch": "8438a9dbece5c31ce6970937fc2b029b7ec4006c5a1f4fcea78dca33a238b5bf",
}
_CLASSES: dict[str, type] = {
    "Meta": bodies.Meta,
    "Body": bodies.Body,
    "MetaPatch": patches.MetaPatch,
    "Patch": patches.Patch,
}
_installed = False


def _source_digest(cls: type) -> str:
    return hashlib.sha256(inspect.getsource(cls).encode()).hexdigest()


def _meta_init(self: bodies.Meta, __src: bodies.Body) -> None:
    dicts.MappingView.__init__(self, __src, "metadata")


def _body_init(self: bodies.Body, __src: Any) -> None:
    dicts.ReplaceableMappingView.__init__(self, __src)


def _meta_patch_init(self: patches.MetaPatch, __src: patches.Patch) -> None:
    dicts.MutableMappingView.__init__(self, __src, "metadata")


def _patch_init(
    self: patches.Patch,
    src: dict[str, Any] | None = None,
    /,
    body: bodies.Body | None = None,
    fns: Any = (),
) -> None:
    dict.__init__(self, src or {})
    self._original = body
    self._fns = (src.fns if isinstance(src, patches.Patch) else []) + list(fns)


def _view(factory: Any, *path: str) -> property:
    """A property whose every read is a fresh view of `factory` onto the object."""
    return property(lambda self: factory(self, *path))


def unlink_kopf_views() -> bool:
    """Installs the cycle-free views (idempotent); False where kopf's classes are not the ones
    this was written against."""
    global _installed
    if _installed:
        return True
    changed = [name for name, cls in _CLASSES.items() if _source_digest(cls) != _KOPF_SOURCES[name]]
    if changed:
        logger.warning("kopf's %s changed: its bodies keep their views", ", ".join(changed))
        return False
    bodies.Meta.__init__ = _meta_init  # type: ignore[method-assign]
    bodies.Meta.labels = _view(dicts.MappingView, "labels")  # type: ignore[assignment,method-assign]
    bodies.Meta.annotations = _view(dicts.MappingView, "annotations")  # type: ignore[assignment,method-assign]
    bodies.Body.__init__ = _body_init  # type: ignore[method-assign]
    bodies.Body.metadata = bodies.Body.meta = _view(bodies.Meta)  # type: ignore[assignment,method-assign]
    bodies.Body.spec = _view(bodies.Spec)  # type: ignore[assignment,method-assign]
    bodies.Body.status = _view(bodies.Status)  # type: ignore[assignment,method-assign]
    patches.MetaPatch.__init__ = _meta_patch_init  # type: ignore[method-assign]
    patches.MetaPatch.labels = _view(dicts.MutableMappingView, "labels")  # type: ignore[assignment,method-assign]
    patches.MetaPatch.annotations = _view(dicts.MutableMappingView, "annotations")  # type: ignore[assignment,method-assign]
    patches.Patch.__init__ = _patch_init  # type: ignore[method-assign]
    patches.Patch.metadata = patches.Patch.meta = _view(patches.MetaPatch)  # type: ignore[assignment,method-assign]
    patches.Patch.spec = _view(patches.SpecPatch)  # type: ignore[assignment,method-assign]
    patches.Patch.status = _view(patches.StatusPatch)  # type: ignore[assignment,method-assign]
    _installed = True
    return True
