"""Every estimator (and the main options) runs end to end for a few steps: real Ray, DeepSpeed,
vLLM, the tiny model and the example's reward function. Each case checks that the run
finishes and reports the metrics its options produce."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import QUICK, JobFile, read_metrics

AGENT = '''
class AgentInstance:
    """Two turns: after the first answer the environment says "again"; reward on the end."""

    def reset(self, prompt, label):
        self.label = label

    def step(self, prompt, response, label, turn):
        if turn == 0:
            return {"reward": None, "feedback": " again:", "done": False}
        hits = sum(c == self.label for c in response)
        return {"reward": hits / max(8, len(response)), "feedback": "", "done": True}
'''

GROUP = {"samplesPerPrompt": 2, "maxNewTokens": 8}
CASES: list[Any] = [
    pytest.param(
        {
            "algorithm": {"name": "ppo", "klTarget": 0.05, "klEstimator": "k3", "dualClip": 3.0},
            "training": {"gradientCheckpointing": True},
        },
        {"value_loss", "policy_loss", "kl_coef", "values"},
        id="ppo-adaptive-kl-k3-dual-clip-grad-ckpt",
    ),
    pytest.param(
        {
            "algorithm": {
                "name": "grpo",
                "useKlLoss": True,
                "klEstimator": "k3",
                "klCoef": 0.01,
                "clipHigh": 0.28,
                "entropyCoef": 0.001,
            },
        },
        {"kl_loss", "entropy", "policy_loss"},
        id="grpo-kl-loss-clip-higher-entropy-bonus",
    ),
    pytest.param(
        {"algorithm": {"name": "dr-grpo", "lossAggregation": "seq-mean-token-sum-norm"}},
        {"policy_loss"},
        id="dr-grpo-token-sum-norm",
    ),
    pytest.param(
        {"algorithm": {"name": "reinforce++", "klEstimator": "k2", "normalizeReward": True}},
        {"policy_loss", "kl"},
        id="reinforce++-k2-normalised-rewards",
    ),
    pytest.param(
        {"algorithm": {"name": "reinforce++-baseline", "overlongBuffer": 4}},
        {"policy_loss"},
        id="reinforce++-baseline-overlong-penalty",
    ),
    pytest.param(
        {
            "algorithm": {"name": "rloo"},
            "training": {"lora": {"rank": 8, "alpha": 16}, "bf16": True},
        },
        {"policy_loss"},
        id="rloo-lora-bf16",
    ),
    pytest.param(
        {
            "algorithm": {"name": "ppo"},
            "models": {"rewardModels": [{"randomInit": {}, "weight": 0.5}]},
            "placement": {"colocateActorReference": True, "colocateCriticReward": True},
        },
        {"value_loss", "reward/model_0", "reward/function"},
        id="ppo-reward-model-plus-function-colocated",
    ),
    pytest.param(
        {
            "algorithm": {"name": "grpo"},
            "rollout": {"engine": "hf"},
            "training": {"zeroStage": 3, "microTrainBatchSize": 2},
            "placement": {"actorGpus": 2, "referenceGpus": 2},
        },
        {"policy_loss"},
        id="grpo-hf-engine-zero3-two-actor-ranks",
    ),
    pytest.param(
        {"algorithm": {"name": "grpo"}, "rollout": {"agent": "multi-turn"}},
        {"reward/agent", "policy_loss"},
        id="grpo-multi-turn-agent",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("changes", "expected_metrics"), CASES)
def test_runs_end_to_end(
    changes: dict[str, Any], expected_metrics: set[str], job_file: JobFile, tmp_path: Path
) -> None:
    changes = dict(changes)
    rollout = {**QUICK["rollout"], **GROUP, **changes.pop("rollout", {})}
    if rollout.get("agent") == "multi-turn":
        agent = tmp_path / "agent.py"
        agent.write_text(AGENT)
        rollout["agent"] = {"mode": "multi-turn", "path": str(agent), "maxTurns": 2}
    training = {**QUICK["training"], "maxSteps": 3, **changes.pop("training", {})}
    path = job_file(rollout=rollout, training=training, checkpoint=QUICK["checkpoint"], **changes)
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "rlhf_trainer", "run", str(path), "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_metrics(run_dir)
    assert [r["step"] for r in records] == [1, 2, 3]
    metrics = records[-1]["metrics"]
    assert expected_metrics <= set(metrics), sorted(metrics)
    assert all(math.isfinite(v) for v in metrics.values())
    assert (run_dir / "final" / "actor" / "config.json").is_file()
