"""The remote reward client against a local HTTP service stand-in."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from reward_server import Script, reward_server

from rlhf_trainer.rewards.remote import RemoteRewardClient, RemoteRewardError

Q, P, L = ["p a", "p b"], ["p", "p"], ["a", None]
OK = (200, {"rewards": [1.0, 0.5]})


def client(url: str, **kwargs: Any) -> tuple[RemoteRewardClient, list[float]]:
    sleeps: list[float] = []
    kwargs.setdefault("retries", 3)
    return RemoteRewardClient(url, sleep=sleeps.append, **kwargs), sleeps


def test_posts_query_prompts_labels_and_reads_rewards() -> None:
    script = Script([OK])
    with reward_server(script) as url:
        remote, _ = client(url)
        result = remote(Q, P, L)
    assert result.rewards.tolist() == [1.0, 0.5]
    assert script.requests == [{"query": Q, "prompts": P, "labels": L}]


def test_transient_failures_are_retried_with_backoff() -> None:
    script = Script([(503, {"error": "busy"}), (429, b"slow down"), OK])
    with reward_server(script) as url:
        remote, sleeps = client(url, backoff_seconds=0.5)
        assert remote(Q, P, L).rewards.tolist() == [1.0, 0.5]
    assert len(script.requests) == 3
    assert sleeps == [0.5, 1.0]


def test_persistent_failure_names_the_url_and_the_last_failure() -> None:
    with reward_server(Script([(500, b"model crashed")])) as url:
        remote, sleeps = client(url, retries=2)
        with pytest.raises(RemoteRewardError) as info:
            remote(Q, P, L)
    message = str(info.value)
    assert url in message and "after 3 attempt(s)" in message
    assert "HTTP 500" in message and "model crashed" in message
    assert len(sleeps) == 2


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ((400, b"bad request body"), "HTTP 400 Bad Request: bad request body"),
        ((200, b"<html>"), "the reply is not JSON"),
        ((200, {"scores": [1, 2]}), "must be a JSON object with 'rewards'"),
        ((200, {"rewards": [1]}), "has 1 values for 2 queries"),
    ],
    ids=["client-error", "not-json", "no-rewards", "wrong-length"],
)
def test_bad_answers_fail_at_once(reply: tuple[int, Any], message: str) -> None:
    script = Script([reply])
    with reward_server(script) as url:
        remote, _ = client(url)
        with pytest.raises(RemoteRewardError, match=message):
            remote(Q, P, L)
    assert len(script.requests) == 1  # not retried


def test_timeout_is_retried_then_reported() -> None:
    with reward_server(Script([("sleep", 2.0)])) as url:
        remote, _ = client(url, timeout_seconds=0.3, retries=1)
        with pytest.raises(RemoteRewardError, match=r"timed out after 0.3 s"):
            remote(Q, P, L)


def test_unreachable_service() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free now, nobody listens after the with
    remote, _ = client(f"http://127.0.0.1:{port}/r", retries=1)
    with pytest.raises(RemoteRewardError, match=f"127.0.0.1:{port}.*cannot connect"):
        remote(Q, P, L)


def test_the_token_goes_as_a_bearer_header(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlhf_trainer.config import RemoteReward
    from rlhf_trainer.config.models import REMOTE_REWARD_TOKEN_ENV

    script = Script([OK])
    with reward_server(script) as url:
        cfg = RemoteReward.model_validate(
            {"url": url, "allowInsecureHttp": True, "authSecret": {"name": "rm", "key": "token"}}
        )
        monkeypatch.delenv(REMOTE_REWARD_TOKEN_ENV, raising=False)
        with pytest.raises(RemoteRewardError, match=f"{REMOTE_REWARD_TOKEN_ENV} is empty"):
            RemoteRewardClient.from_config(cfg)
        monkeypatch.setenv(REMOTE_REWARD_TOKEN_ENV, "s3cret")
        RemoteRewardClient.from_config(cfg)(Q, P, L)
    assert script.authorizations == ["Bearer s3cret"]


def test_a_reply_over_the_size_cap_is_refused_without_retries() -> None:
    big = {"rewards": [1.0, 0.5], "pad": "x" * 10_000}
    script = Script([(200, big)])
    with reward_server(script) as url:
        remote, sleeps = client(url, max_response_bytes=1000)
        with pytest.raises(RemoteRewardError, match=r"larger than remoteReward.maxResponseBytes"):
            remote(Q, P, L)
    assert len(script.requests) == 1 and sleeps == []


def test_plain_http_needs_an_explicit_opt_in() -> None:
    from pydantic import ValidationError

    from rlhf_trainer.config import JobConfig

    doc = {
        "algorithm": {"name": "grpo"},
        "models": {"actor": {"randomInit": {}}, "remoteReward": {"url": "http://rm:8000/score"}},
        "data": {"train": [{"builtin": "repeat-letter"}]},
        "rollout": {"samplesPerPrompt": 4},
    }
    with pytest.raises(ValidationError, match=r"models\.remoteReward\.url: http:// sends"):
        JobConfig.model_validate(doc)
    doc["models"]["remoteReward"]["allowInsecureHttp"] = True  # type: ignore[index]
    assert JobConfig.model_validate(doc).models.remote_reward is not None
