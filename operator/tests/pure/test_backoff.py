"""The operator's one retry policy (`controllers.timers.Backoff`): a job's failed pass and a
refused child wait the same way, doubling per failure in a row, capped, reset by a success."""

from __future__ import annotations

import pytest

from rlhf_operator.controllers.timers import Backoff
from rlhf_operator.settings import OperatorSettings

SETTINGS = OperatorSettings(api_retry_seconds=5.0, retry_max_seconds=30.0)


@pytest.mark.parametrize(
    ("failures", "delays"),
    [
        (1, [5.0]),
        (3, [5.0, 10.0, 20.0]),
        (5, [5.0, 10.0, 20.0, 30.0, 30.0]),  # capped at retry_max_seconds
    ],
    ids=["first", "doubling", "capped"],
)
def test_each_failure_in_a_row_waits_twice_as_long(failures: int, delays: list[float]) -> None:
    backoff = Backoff(SETTINGS)
    assert [backoff.failed("job")[1] for _ in range(failures)] == delays


def test_a_success_starts_over_and_keys_are_apart() -> None:
    backoff = Backoff(SETTINGS)
    backoff.failed(("ns", "a"))
    assert backoff.failed(("ns", "a")) == (2, 10.0)
    assert backoff.failed(("ns", "b")) == (1, 5.0)  # another job's count is its own
    backoff.succeeded(("ns", "a"))
    assert backoff.failed(("ns", "a")) == (1, 5.0)


def test_forget_drops_the_matching_keys_only() -> None:
    backoff = Backoff(SETTINGS)
    for key in [("ns", "ConfigMap", "a-config"), ("ns", "RayJob", "a-r0"), ("ns", "Role", "b-x")]:
        backoff.failed(key)
    backoff.forget(lambda key: key[2].startswith("a-"))
    assert backoff.failed(("ns", "RayJob", "a-r0")) == (1, 5.0)
    assert backoff.failed(("ns", "Role", "b-x")) == (2, 10.0)
