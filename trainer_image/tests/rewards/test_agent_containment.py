"""A hostile multi-turn agent is contained like a reward function: it reads its environment
(and finds no secret), forks, allocates, loops; each is stopped by its limit, the error names
the agent, the method and the limit, and nothing of it is left running. Under
`onError: zero` only the hostile episode scores 0, and the others finish (rebuilt in the fresh
worker by replaying their turns).

Every hostile body bounds itself too (a finite loop, a sleep that ends): if a limit did not
hold the test fails, but the machine is not harmed."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from rlhf_trainer.config import FailureClass, JobConfig, RewardErrorPolicy, RewardFunctionLimits
from rlhf_trainer.loop.rollout import PromptInput, multi_turn
from rlhf_trainer.rewards.agent_runner import AgentError, AgentLimitError, ConfinedAgents
from rlhf_trainer.runner.outcome import classify, explain
from rlhf_trainer.sandbox.session import session_members

pytestmark = pytest.mark.timeout(120)

SECRETS = {
    "HF_TOKEN": "hf_secret",
    "WANDB_API_KEY": "wandb_secret",
    "AWS_SECRET_ACCESS_KEY": "aws_secret",
    "RAY_AUTH_TOKEN": "ray_secret",
    "RLHF_REMOTE_REWARD_TOKEN": "reward_secret",
    "KUBERNETES_SERVICE_HOST": "10.0.0.1",
}

HOSTILE = """
import os, time

class AgentInstance:
    def reset(self, prompt, label):
        self.prompt = prompt

    def step(self, prompt, response, label, turn):
        if prompt == "env":
            return {"reward": 0.0, "done": True, "env": dict(os.environ)}
        if prompt == "fork":
            for _ in range(40):  # bounded: children that end by themselves within 20 s
                if os.fork() == 0:
                    time.sleep(20)
                    os._exit(0)
                time.sleep(0.01)
            time.sleep(20)
        if prompt == "allocate":
            hoard = []
            for _ in range(128):  # 2 GiB at most, in 16 MiB pieces
                hoard.append(b"x" * (16 << 20))
        if prompt == "loop":
            end = time.process_time() + 60  # bounded CPU loop
            while time.process_time() < end:
                pass
        if prompt == "print":
            for _ in range(1000):
                print("x" * 65536, flush=True)
        return {"reward": 1.0, "done": turn == 1, "feedback": "."}
"""


def agents(tmp_path: Path, on_error: str = "fail", **limits: Any) -> ConfinedAgents:
    path = tmp_path / "agent.py"
    path.write_text(textwrap.dedent(HOSTILE))
    return ConfinedAgents(
        path,
        timeout_seconds=30,
        limits=RewardFunctionLimits(**limits),
        on_error=RewardErrorPolicy(on_error),
    )


def test_the_agent_sees_none_of_the_jobs_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    with agents(tmp_path) as hostile:
        episode = hostile.reset("env", None)
        seen = hostile.step(episode, "hello", 0)["env"]
    assert not set(SECRETS) & set(seen)
    assert not {v for v in seen.values()} & set(SECRETS.values())
    assert seen["CUDA_VISIBLE_DEVICES"] == ""


@pytest.mark.parametrize(
    ("prompt", "limits", "limit"),
    [
        pytest.param("fork", {"processes": 4}, "processes", id="fork"),
        pytest.param("allocate", {"memory_mib": 256}, "memoryMiB", id="allocate"),
        pytest.param("loop", {"cpu_seconds": 1}, "cpuSeconds", id="loop"),
        pytest.param("print", {"output_bytes": 65536}, "outputBytes", id="print"),
    ],
)
def test_a_hostile_agent_is_stopped_by_its_limit_and_named(
    tmp_path: Path, prompt: str, limits: dict[str, int], limit: str
) -> None:
    with agents(tmp_path, **limits) as hostile:
        hostile.start()
        worker = hostile.runner._worker
        assert worker is not None
        session = worker.pid
        episode = hostile.reset(prompt, None)
        with pytest.raises(AgentLimitError) as caught:
            hostile.step(episode, "hello", 0)
        assert [p.pid for p in session_members(session) if not p.zombie] == []
    err = caught.value
    assert err.limit == limit
    assert str(err).startswith("AgentInstance.step: agent agent.py reached its limit ")
    assert f"rollout.agent.limits.{limit}" in str(err)
    assert classify(err) is FailureClass.INVALID_SPEC  # the job's bug: no retry
    assert explain(err).startswith("AgentLimitError: AgentInstance.step: agent agent.py")


def test_an_agent_that_hangs_is_killed_at_its_timeout(tmp_path: Path) -> None:
    path = tmp_path / "agent.py"
    path.write_text(
        "import time\n"
        "class AgentInstance:\n"
        "    def step(self, prompt, response, label, turn):\n"
        "        time.sleep(30)\n"
    )
    with ConfinedAgents(path, timeout_seconds=1) as hanging:
        episode = hanging.reset("p", None)
        with pytest.raises(Exception, match=r"rollout.agent.timeoutSeconds \(1 s\)") as caught:
            hanging.step(episode, "hello", 0)
    assert classify(caught.value) is FailureClass.INFRASTRUCTURE


def multi_turn_job() -> JobConfig:
    return JobConfig.model_validate(
        {
            "algorithm": {"name": "reinforce++"},
            "models": {"actor": {"randomInit": {}}, "rewardFunction": {"builtin": "repeat-letter"}},
            "data": {"train": [{"builtin": "repeat-letter"}]},
            "rollout": {"agent": {"mode": "multi-turn", "path": "agent.py", "maxTurns": 2}},
        }
    )


class Letters:
    """A tokenizer of one id per character."""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]


def engine(contexts: list[list[int]], seeds: list[int], n: int, budget: int) -> list[Any]:
    return [[([ord("!")], "stop")] for _ in contexts]


def test_on_error_zero_scores_only_the_hostile_episode_and_replays_the_others(
    tmp_path: Path,
) -> None:
    texts = ["calm", "allocate", "quiet"]
    prompts = [PromptInput(i, t, [ord(c) for c in t], None) for i, t in enumerate(texts)]
    job = multi_turn_job()
    with agents(tmp_path, "zero", memory_mib=256) as hostile:
        samples = multi_turn(prompts, engine, Letters(), job, 0, hostile, max_context=64)
        assert hostile.errors == 1
        assert hostile.runner.restarts == 1  # the hostile call took the worker with it
    assert [s.agent_reward for s in samples] == [2.0, 0.0, 2.0]
    assert [s.turns for s in samples] == [2, 1, 2]


def test_on_error_zero_still_fails_an_agent_that_fails_every_episode(tmp_path: Path) -> None:
    prompts = [PromptInput(i, "allocate", [97], None) for i in range(2)]
    job = multi_turn_job()
    with (
        agents(tmp_path, "zero", memory_mib=256) as hostile,
        pytest.raises(AgentError, match="failed on every one of the rollout's 2 episodes"),
    ):
        multi_turn(prompts, engine, Letters(), job, 0, hostile, max_context=64)
