"""Where progress goes: console, JSONL, TensorBoard, W&B, and the job's report on a cluster.

Import the submodules directly (this file imports nothing):

- `rlhf_trainer.reporting.reporter`: `Reporter` (`on_step`, `on_checkpoint`, `close`) and
  `build_reporter(logging_cfg, run_dir)`.
- `rlhf_trainer.reporting.kube`: `KubeReporter` (merge-patches the job's report ConfigMap,
  which the operator validates and mirrors into `status.trainer`).
- `rlhf_trainer.reporting.sinks`: console, JSONL, TensorBoard and W&B sinks.
- `rlhf_trainer.reporting.timing`: `StageTimer` (per-stage step times), `Progress` (ETA).
"""
