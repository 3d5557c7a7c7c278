"""Bad input loses nothing; deletion cascades; a killed operator converges after a restart."""

from __future__ import annotations

import asyncio
import itertools
import pathlib
from typing import Any

import pytest

from emulator import Emulator
from rlhf_operator.controllers import jobs
from rlhf_operator.reconcile.decide import decide as jobs_decide

from .harness import RAYJOBS, RLHFJOBS, Cluster, ppo_manifest, start_operator_process


async def test_invalid_spec_fails_once_with_the_field_and_recovers_when_fixed(
    operator: Cluster,
) -> None:
    c = operator
    # Passes the CRD (its CEL rules do not cover it), fails the operator's own rules.
    bad = ppo_manifest(
        "ppo-bad",
        placement={"criticGpus": 2, "rewardGpus": 1, "colocateCriticReward": True},
        training={"trainBatchSize": 32},
    )
    c.create(bad)
    status = await c.phase("ppo-bad", "Failed")
    assert c.conditions("ppo-bad")["Valid"] == ("False", "SpecInvalid")
    expected = "spec.placement.colocateCriticReward: needs criticGpus == rewardGpus"
    assert expected in status["message"]
    assert c.children("ppo-bad") == {}
    await c.until(lambda: "SpecInvalid" in c.reasons("ppo-bad"), "SpecInvalid event")
    # No retry loop: after kopf recorded the permanent failure, nothing more happens.
    await asyncio.sleep(0.5)
    mark = c.k8s.requests.mark()
    await asyncio.sleep(1.5)
    assert c.k8s.requests.counts(since=mark) == {}

    c.edit_spec("ppo-bad", {"placement": {"rewardGpus": 2}})
    await c.until(lambda: c.ray_jobs("ppo-bad"), "children after the fix")
    await c.until(lambda: c.conditions("ppo-bad")["Valid"] == ("True", "SpecValid"), "Valid again")
    assert c.conditions("ppo-bad")["Failed"] == ("False", "SpecValid")
    await c.until(lambda: "SpecValid" in c.reasons("ppo-bad"), "SpecValid event")


async def test_missing_reward_configmap_waits_then_proceeds(operator: Cluster) -> None:
    c = operator
    c.create(
        ppo_manifest(
            "grpo-w",
            algorithm={"name": "grpo"},
            models={
                "rewardModels": [],
                "rewardFunction": {"configMapRef": {"name": "rf", "key": "f.py"}},
            },
            rollout={"samplesPerPrompt": 4},
        )
    )
    await c.until(
        lambda: c.conditions("grpo-w").get("Admitted") == ("False", "DependencyMissing"),
        "DependencyMissing",
    )
    assert "ConfigMap rf" in c.status("grpo-w")["message"]
    assert "RayJob" not in c.children("grpo-w")
    reward_code = {"f.py": "def reward_func(queries, prompts, labels): ..."}
    c.k8s.create("configmaps", {"metadata": {"name": "rf"}, "data": reward_code}, "default")
    await c.until(lambda: c.ray_jobs("grpo-w"), "RayJob once the ConfigMap exists", timeout=20)


async def test_deleting_the_job_removes_children_but_keeps_retained_checkpoints(
    operator: Cluster,
) -> None:
    c = operator
    c.create(ppo_manifest("ppo-x", checkpoint={"storage": {"size": "10Gi"}}))
    await c.until(lambda: c.ray_jobs("ppo-x"), "RayJob")
    assert "PersistentVolumeClaim" in c.children("ppo-x")
    c.k8s.delete(RLHFJOBS, "ppo-x", "default")
    await c.until(lambda: c.job("ppo-x") is None, "RLHFJob gone (no finalizer holds it)")
    await c.until(
        lambda: c.children("ppo-x") == {"PersistentVolumeClaim": ["ppo-x-checkpoints"]},
        f"children collected, checkpoints kept (now {c.children('ppo-x')})",
    )
    # A new job with the same name is another job: the kept PVC is not its own (it carries
    # the first job's UID), so it is left alone and the new job waits, saying how to reuse it.
    kept = c.k8s.get("persistentvolumeclaims", "ppo-x-checkpoints", "default")
    c.create(ppo_manifest("ppo-x", checkpoint={"storage": {"size": "10Gi"}}))
    await c.until(
        lambda: c.conditions("ppo-x").get("ChildrenApplied") == ("False", "ChildConflict"),
        "ChildConflict on the kept PVC",
    )
    [applied] = [x for x in c.status("ppo-x")["conditions"] if x["type"] == "ChildrenApplied"]
    assert "PersistentVolumeClaim ppo-x-checkpoints (kept from an earlier job" in applied["message"]
    assert "claimName" in applied["message"]
    assert c.k8s.get("persistentvolumeclaims", "ppo-x-checkpoints", "default") == kept
    assert not c.ray_jobs("ppo-x")
    # Named as the job's claim, the kept volume is the user's to reuse.
    claim = {"claimName": "ppo-x-checkpoints", "size": None}
    c.edit_spec("ppo-x", {"checkpoint": {"storage": claim}})
    await c.until(lambda: c.ray_jobs("ppo-x"), "RayJob of the new job on the kept claim")


async def test_child_owned_by_someone_else_is_left_alone(
    operator: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = operator
    # Every pass decides once, also those whose apply finds or clears the conflict.
    decided: list[str] = []
    passes: list[int] = []
    run_pass = jobs.Controller._pass

    def deciding(*args: Any, **kwargs: Any) -> Any:
        decided.append("decide")
        return jobs_decide(*args, **kwargs)

    async def one_pass(self: jobs.Controller, key: Any, body: Any) -> Any:
        before = len(decided)
        try:
            return await run_pass(self, key, body)
        finally:
            passes.append(len(decided) - before)

    monkeypatch.setattr(jobs, "decide", deciding)
    monkeypatch.setattr(jobs.Controller, "_pass", one_pass)
    c.k8s.create(
        "configmaps",
        {
            "metadata": {
                "name": "ppo-o-config",
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "name": "other",
                        "uid": "other-uid",
                        "controller": True,
                    }
                ],
            },
            "data": {"mine": "yes"},
        },
        "default",
    )
    c.create(ppo_manifest("ppo-o"))
    await c.until(
        lambda: c.conditions("ppo-o").get("Admitted") == ("False", "ChildConflict"),
        "ChildConflict",
    )
    assert c.k8s.get("configmaps", "ppo-o-config", "default")["data"] == {"mine": "yes"}
    assert not c.ray_jobs("ppo-o")
    # Once the other owner's object is gone, the job proceeds by itself.
    c.k8s.delete("configmaps", "ppo-o-config", "default")
    await c.until(lambda: c.ray_jobs("ppo-o"), "RayJob after the conflict cleared")
    await c.until(
        lambda: c.conditions("ppo-o").get("Admitted") == ("True", "RayJobCreated"), "admitted"
    )
    assert passes and set(passes) == {1}, passes


NETWORK_POLICIES = "networkpolicies.networking.k8s.io"


def _all_children(k8s: Emulator) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for resource in (
        "serviceaccounts",
        "configmaps",
        "secrets",
        NETWORK_POLICIES,
        "roles.rbac.authorization.k8s.io",
        "rolebindings.rbac.authorization.k8s.io",
        RAYJOBS,
    ):
        for obj in k8s.list(resource, "default", label_selector="rlhf.dev/job"):
            found.setdefault(resource, []).append(obj["metadata"]["name"])
    return {k: sorted(v) for k, v in found.items()}


@pytest.mark.parametrize("jobs", [4])
async def test_operator_killed_mid_reconcile_converges_after_restart_without_duplicates(
    cluster: Cluster, tmp_path: pathlib.Path, jobs: int
) -> None:
    c, k8s = cluster, cluster.k8s
    assert k8s.kubeconfig is not None
    names = [f"job-{i}" for i in range(jobs)]
    log = tmp_path / "operator.log"

    # 1. RayJob creation (a new job's children are POSTed; later tries are server-side
    #    applied) fails: the operator has made the other children, and keeps retrying.
    for verb in ("create", "patch"):
        k8s.faults.add(verb, RAYJOBS, code=500, times=None)
    first = start_operator_process(k8s.kubeconfig, log)
    try:
        for name in names:
            c.create(ppo_manifest(name, runPolicy={"backoffLimit": 2}))
        await c.until(
            lambda: (
                len([n for n in _all_children(k8s).get("configmaps", []) if n.endswith("-config")])
                == jobs
                and k8s.requests.count("create", RAYJOBS) + k8s.requests.count("patch", RAYJOBS)
                >= jobs
            ),
            "children but no RayJobs yet",
            timeout=60,
        )
    finally:
        first.kill()  # SIGKILL: no cleanup, no goodbye
    k8s.faults.clear()
    assert RAYJOBS not in _all_children(k8s)

    # 2. A new operator finishes the job: every RayJob exists once, nothing twice.
    second = start_operator_process(k8s.kubeconfig, log)
    try:
        await c.until(lambda: all(c.ray_jobs(n) for n in names), "RayJobs created", timeout=60)
        # 3. Attempt 0 fails everywhere; the status write of the retry fails, so the
        #    operator dies having created attempt 1 but not having recorded restarts=1.
        k8s.faults.add("patch", f"{RLHFJOBS}/status", code=500, times=None)
        for name in names:
            c.kuberay(f"{name}-r0", jobDeploymentStatus="Failed", jobStatus="FAILED")
        await c.until(
            lambda: all(c.k8s.find(RAYJOBS, f"{n}-r1", "default") for n in names),
            "attempt 1 created",
            timeout=60,
        )
    finally:
        second.kill()
    k8s.faults.clear()
    assert all(c.status(n).get("restarts", 0) == 0 for n in names)  # never written

    third = start_operator_process(k8s.kubeconfig, log)
    try:
        await c.until(
            lambda: all(
                (c.status(n).get("restarts"), c.status(n).get("phase")) == (1, "Provisioning")
                for n in names
            ),
            "status converged",
            timeout=60,
        )
        await asyncio.sleep(1.0)  # give a wrong decision time to show up
        children = _all_children(k8s)
        expected: dict[str, Any] = {
            "serviceaccounts": sorted(f"{n}-trainer" for n in names),
            "configmaps": sorted([f"{n}-config" for n in names] + [f"{n}-report" for n in names]),
            "secrets": sorted(f"{n}-ray-token" for n in names),
            NETWORK_POLICIES: sorted(f"{n}-ray" for n in names),
            "roles.rbac.authorization.k8s.io": sorted(f"{n}-trainer" for n in names),
            "rolebindings.rbac.authorization.k8s.io": sorted(f"{n}-trainer" for n in names),
            RAYJOBS: sorted(f"{n}-r1" for n in names),
        }
        assert children == expected
        assert (
            sum(
                1
                for r in k8s.requests.records
                if r.verb in {"create", "patch"} and r.code == 201 and r.resource == RAYJOBS
            )
            == 2 * jobs
        )  # r0 and r1 created once each
    finally:
        third.stop()


async def test_a_rejected_update_backs_off_exponentially_and_says_why(operator: Cluster) -> None:
    c = operator
    c.create(ppo_manifest("ppo-rej"))
    await c.until(lambda: c.ray_jobs("ppo-rej"), "RayJob")
    c.k8s.faults.add(
        "patch", RAYJOBS, code=422, reason="Invalid", message="webhook says no", times=None
    )
    mark = c.k8s.requests.mark()
    c.edit_spec("ppo-rej", {"placement": {"priorityClassName": "other"}})
    await c.until(
        lambda: c.conditions("ppo-rej").get("ChildrenApplied") == ("False", "ChildApplyFailed"),
        "ChildrenApplied=False",
    )

    def tries() -> list[float]:
        records = c.k8s.requests.records[mark:]
        return [r.at for r in records if (r.verb, r.resource) == ("patch", RAYJOBS)]

    # Test settings: the first retry after 0.5 s, then 1 s, 2 s, 4 s (production: 5 s ... 5 min).
    await c.until(lambda: len(tries()) >= 4, "four tries", timeout=10)
    await asyncio.sleep(2.0)
    gaps = [later - earlier for earlier, later in itertools.pairwise(tries())]
    assert len(gaps) == 3, gaps
    assert all(later > 1.6 * earlier for earlier, later in itertools.pairwise(gaps)), gaps
    [event] = [
        e for e in c.k8s.events("default", about="ppo-rej") if e.reason == "ChildApplyFailed"
    ]
    assert "RayJob ppo-rej-r0: HTTP 422 Invalid: webhook says no" in event.message
    c.k8s.faults.clear()
    # The next try succeeds: the condition recovers, the backoff starts over.
    await c.until(
        lambda: c.conditions("ppo-rej").get("ChildrenApplied") == ("True", "ChildrenApplied"),
        "ChildrenApplied=True",
        timeout=10,
    )
