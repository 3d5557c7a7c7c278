"""A job's parse taken over by its next passes (`controllers.parse_memo`, `reparse`): the same
result as parsing again, for the same spec; a new parse for anything the key names."""

from __future__ import annotations

import copy
from typing import Any

from rlhf_operator.builders.encoding import canonical
from rlhf_operator.controllers.parse_memo import ParseMemo
from rlhf_operator.reconcile.parse import Parsed, parse
from rlhf_operator.settings import OperatorSettings

from .factories import job_body

SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test")
RUNNING = {
    "phase": "Running",
    "observedGeneration": 1,
    "restarts": 0,
    "conditions": [],
}


def as_compared(parsed: Parsed) -> Any:
    """Everything a pass reads of a parse, as JSON (`children` rendered, the job and its
    previous status dumped)."""
    children = parsed.children
    return canonical(
        {
            "body": dict(parsed.body),
            "generation": parsed.generation,
            "previous": parsed.previous and parsed.previous.model_dump(mode="json"),
            "mirrored": parsed.mirrored and parsed.mirrored.model_dump(mode="json"),
            "job": parsed.job and parsed.job.model_dump(mode="json"),
            "allocation": parsed.allocation and parsed.allocation.model_dump(mode="json"),
            "children": children and [*children.support, children.ray_job],
            "refusal": parsed.refusal and [parsed.refusal.reason, parsed.refusal.problems],
            "problems": parsed.problems,
        }
    )


def later(body: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    """The same job after our status patch: a new resourceVersion, a status."""
    newer = copy.deepcopy(body)
    newer["metadata"].update(resourceVersion="7", **metadata)
    newer["status"] = RUNNING
    return newer


def test_a_later_pass_on_the_same_spec_gets_what_parsing_again_gives() -> None:
    memo = ParseMemo(SETTINGS)
    first = job_body()
    assert as_compared(memo.parse(first)) == as_compared(parse(first, SETTINGS))
    second = later(first, labels={"team": "a"})
    taken_over = memo.parse(second)
    assert as_compared(taken_over) == as_compared(parse(second, SETTINGS))
    assert taken_over.children is memo.parse(first).children  # not rendered again
    assert taken_over.previous is not None and taken_over.job is not None
    assert taken_over.job.status == taken_over.previous
    assert taken_over.job.metadata["resourceVersion"] == "7"


def test_a_refused_spec_is_refused_again_with_the_same_problems() -> None:
    memo = ParseMemo(SETTINGS)
    bad = job_body(spec={"algorithm": {"name": "nope"}})
    refused = memo.parse(bad)
    assert refused.refusal is not None
    again = memo.parse(later(bad))
    assert again.refusal == refused.refusal and again.job is None
    assert as_compared(again) == as_compared(parse(later(bad), SETTINGS))


def test_what_the_key_names_parses_anew() -> None:
    memo = ParseMemo(SETTINGS)
    body = job_body()
    original = memo.parse(body)
    edited = copy.deepcopy(body)
    edited["spec"]["rollout"] = {"numEngines": 1}  # the same generation: the spec still counts
    renamed, new_uid, new_generation = (
        job_body(name="other"),
        job_body(uid="u-2"),
        job_body(generation=2),
    )
    for changed in (edited, renamed, new_uid, new_generation):
        parsed = memo.parse(changed)
        assert parsed.children is not original.children
        assert as_compared(parsed) == as_compared(parse(changed, SETTINGS))


def test_bounded_and_forgotten_with_the_job() -> None:
    memo = ParseMemo(SETTINGS, size=2)
    for name in ("a", "b", "c"):
        memo.parse(job_body(name=name))
    assert len(memo) == 2
    memo.forget("team-a", "c")
    assert len(memo) == 1
    first = memo.parse(job_body(name="b"))
    assert memo.parse(later(job_body(name="b"))).children is first.children


def test_a_pass_leaves_the_kept_children_as_they_were() -> None:
    """The children are shared by the passes that take the parse over: nothing downstream
    may change them in place."""
    from datetime import UTC, datetime

    from rlhf_operator.reconcile.decide import decide
    from rlhf_operator.reconcile.observed import Observed

    memo = ParseMemo(SETTINGS)
    parsed = memo.parse(job_body())
    assert parsed.children is not None
    before = canonical([*parsed.children.support, parsed.children.ray_job])
    decision = decide(parsed, Observed(), SETTINGS, datetime.now(UTC))
    assert decision.apply
    assert canonical([*parsed.children.support, parsed.children.ray_job]) == before
