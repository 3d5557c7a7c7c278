"""kopf's bodies and patches without reference cycles (`handlers.kopf_views`): installed on the
kopf it was written against, the views read and write as kopf's did, and an event's objects
die by refcount (no cyclic collection needed)."""

from __future__ import annotations

import gc
import weakref

import kopf
import pytest
from kopf._cogs.structs import bodies, patches

from rlhf_operator.handlers import kopf_views
from rlhf_operator.handlers.kopf_views import unlink_kopf_views


def raw_job() -> dict[str, object]:
    return {
        "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "labels": {"x": "1"}},
        "spec": {"algorithm": {"name": "ppo"}},
        "status": {"phase": "Running"},
    }


def test_installed_on_the_pinned_kopf_and_idempotent() -> None:
    """Fails on a kopf upgrade whose classes differ (the shim would leave them, and their
    cycles)."""
    assert unlink_kopf_views()
    assert unlink_kopf_views()


def test_a_changed_kopf_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kopf_views, "_installed", False)
    monkeypatch.setitem(kopf_views._KOPF_SOURCES, "Body", "0" * 64)
    init = bodies.Body.__init__
    assert not unlink_kopf_views()
    assert bodies.Body.__init__ is init


def test_body_views_read_the_body_as_it_is_now() -> None:
    unlink_kopf_views()
    raw = raw_job()
    body = kopf.Body(raw)  # type: ignore[arg-type]
    assert body.meta.name == "a" and body.metadata.uid == "u1" and body.meta.namespace == "ns"
    assert dict(body.meta.labels) == {"x": "1"} and dict(body.meta.annotations) == {}
    assert body.spec["algorithm"] == {"name": "ppo"} and body.status.get("phase") == "Running"
    assert isinstance(body.meta, kopf.Meta) and isinstance(body.status, kopf.Status)
    body._replace_with({"metadata": {"name": "b"}})  # kopf's own replacement: views follow
    assert body.meta.name == "b" and dict(body.spec) == {} and body.status.get("phase") is None


def test_patch_views_write_into_the_patch() -> None:
    unlink_kopf_views()
    body = kopf.Body(raw_job())  # type: ignore[arg-type]
    patch = kopf.Patch(body=body)
    patch.status["phase"] = "Succeeded"
    patch.meta.labels["y"] = "2"
    patch.metadata.annotations["rlhf.dev/z"] = None
    patch.spec["k"] = 1
    assert dict(patch) == {
        "status": {"phase": "Succeeded"},
        "metadata": {"labels": {"y": "2"}, "annotations": {"rlhf.dev/z": None}},
        "spec": {"k": 1},
    }
    assert patch.as_json_patch()  # the original body is still its reference
    copied = kopf.Patch(patch, fns=[])
    assert dict(copied) == dict(patch) and copied.fns == patch.fns


def test_an_events_objects_die_without_the_cyclic_collector() -> None:
    unlink_kopf_views()
    raw = raw_job()
    body = kopf.Body(raw)  # type: ignore[arg-type]
    patch = patches.Patch(body=body)
    _ = body.meta.labels, body.spec, body.status, patch.meta.labels, patch.status
    gone = weakref.ref(body), weakref.ref(patch)
    gc.disable()
    try:
        del body, patch, _
        assert [ref() for ref in gone] == [None, None]
    finally:
        gc.enable()
