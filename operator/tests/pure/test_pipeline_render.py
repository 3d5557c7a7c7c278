"""`rlhf-operator render` of an RLHFPipeline: each stage's RLHFJob (owned by the pipeline,
fromStage as fromJob) followed by its children, fromJob resolved to the earlier stage's
output location."""

from __future__ import annotations

from pathlib import Path

import yaml

from rlhf_operator.render import render_file
from rlhf_operator.settings import OperatorSettings

SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test")

PIPELINE = """
apiVersion: rlhf.dev/v1alpha1
kind: RLHFPipeline
metadata: {name: ig, namespace: team-a}
spec:
  stages:
    - name: ppo
      spec:
        algorithm: {name: ppo}
        models: {actor: {fromStage: sft}, rewardModels: [{fromStage: rm}]}
        data: {train: [{hfId: org/prompts}]}
        training: {rolloutBatchSize: 64, trainBatchSize: 32, microTrainBatchSize: 1}
    - name: sft
      spec:
        algorithm: {name: sft}
        models: {actor: {pretrained: org/base}}
        data: {train: [{hfId: org/sft}]}
    - name: rm
      spec:
        algorithm: {name: reward-model}
        models: {actor: {fromStage: sft}}
        data: {train: [{hfId: org/prefs}]}
"""


def test_render_a_pipeline(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE)
    [rendered] = render_file(path, SETTINGS)
    assert rendered.problems == [] and rendered.notes == []
    jobs = [o for o in rendered.objects if o["kind"] == "RLHFJob"]
    assert [j["metadata"]["name"] for j in jobs] == ["ig-sft", "ig-rm", "ig-ppo"]
    assert jobs[2]["spec"]["models"]["rewardModels"][0]["fromJob"] == "ig-rm"
    assert jobs[2]["metadata"]["ownerReferences"][0]["kind"] == "RLHFPipeline"
    config = next(o for o in rendered.objects if o["metadata"]["name"] == "ig-ppo-config")
    models = yaml.safe_load(config["data"]["job.yaml"])["models"]
    assert models["actor"]["pretrained"] == "/inputs/pvc/ig-sft-checkpoints/ig-sft/output/final"
    assert models["rewardModels"][0]["pretrained"] == (
        "/inputs/pvc/ig-rm-checkpoints/ig-rm/output/final"
    )
