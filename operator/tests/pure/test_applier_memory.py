"""The applier's memory is kept per job: one job's refusals and applied children are never
another's, even where one job's name begins with the other's and a dash."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlhf_operator.controllers.applier import Applier
from rlhf_operator.controllers.metrics import Metrics
from rlhf_operator.kube.client import ApiError
from rlhf_operator.reconcile.desired import Desired
from rlhf_operator.settings import OperatorSettings


class _Api:
    """Creates what it is sent, except the names it refuses (a quota's 403)."""

    def __init__(self, refused: set[str]) -> None:
        self.refused = refused
        self.created: list[str] = []

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        if name in self.refused:
            raise ApiError(403, "POST", f"/api/v1/configmaps/{name}", {"reason": "Forbidden"})
        self.created.append(name)
        return dict(obj)


def _config_map(name: str) -> Desired:
    meta = {"name": name, "namespace": "team"}
    return Desired({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": "1"}})


async def test_a_jobs_refusals_and_applied_children_are_its_own() -> None:
    api = _Api(refused={"a-b-config"})
    applier = Applier(api, OperatorSettings(), Metrics())  # type: ignore[arg-type]
    job_a, job_ab = ("team", "a"), ("team", "a-b")
    mine, theirs = _config_map("a-config"), _config_map("a-b-config")

    _, failures = await applier.apply_all(job_ab, [theirs], probably_new=True)
    assert [f.name for f in failures] == ["a-b-config"]
    await applier.apply_all(job_a, [mine], probably_new=True)

    # Job a-b's refused child is not job a's news (its status would say so).
    assert applier.reported_failures(job_a) == ()
    assert [r.failure.name for r in applier.refusals(job_ab)] == ["a-b-config"]
    assert applier.applied(job_a, mine) and not applier.applied(job_ab, theirs)

    # Job a goes: job a-b's refusal (and its backoff) stays, job a's memory goes.
    applier.forget(job_a)
    assert not applier.applied(job_a, mine)
    assert [r.failure.name for r in applier.refusals(job_ab)] == ["a-b-config"]

    # A refused child still in its backoff is not asked for again; a child deleted is.
    created = len(api.created)
    await applier.apply_all(job_ab, [theirs], probably_new=True)
    assert len(api.created) == created
    api.refused.clear()
    applier.forget(job_ab)
    await applier.apply_all(job_ab, [theirs], probably_new=True)
    assert applier.applied(job_ab, theirs) and applier.refusals(job_ab) == []
    applier.forget_child(job_ab, "ConfigMap", "a-b-config")
    assert not applier.applied(job_ab, theirs)


async def test_children_no_longer_desired_lose_their_refusals() -> None:
    api = _Api(refused={"a-config", "a-extra"})
    applier = Applier(api, OperatorSettings(), Metrics())  # type: ignore[arg-type]
    job = ("team", "a")
    await applier.apply_all(
        job, [_config_map("a-config"), _config_map("a-extra")], probably_new=True
    )
    assert len(applier.refusals(job)) == 2
    applier.keep_only(job, [_config_map("a-config")])
    assert [r.failure.name for r in applier.refusals(job)] == ["a-config"]
