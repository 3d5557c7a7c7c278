"""OpenAI graders, evaluated: what the trainer's grader reward and the gateway's
`/v1/fine_tuning/alpha/graders/{run,validate}` share. No torch, Ray or vLLM: the gateway imports
it (an import-linter contract keeps it so). Import the submodules directly:

- `rlhf_trainer.grading.similarity`: text_similarity's metrics (rapidfuzz, sacrebleu, nltk,
  rouge-score).
- `rlhf_trainer.grading.python_grader`: `PythonGraderRunner`, a python grader's
  `grade(sample, item)` in the reward-function sandbox.
- `rlhf_trainer.grading.engine`: `GraderEngine(grader).grade(outputs, items)`: one `Grade` per
  sample (score, sub-scores, error).
- `rlhf_trainer.grading.api`: `validate_grader` and `run_grader`, returning OpenAI's shapes.

The grader models and their pure checks (templates, `calculate_output`) are in
`rlhf_trainer.config.graders`.
"""
