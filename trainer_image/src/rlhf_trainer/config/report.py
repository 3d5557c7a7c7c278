"""The trainer's report on a cluster, as both sides read it: where it goes and its keys.

The trainer may change nothing of its RLHFJob: it writes a ConfigMap of its own (`<job>-report`,
named in `REPORT_ENV`), and its Role allows exactly that object and verb (`patch`). The operator
reads the ConfigMap, validates each key against its status models (a key that does not parse
is ignored), and mirrors the result into `status.trainer`; the rest of the status is the
operator's alone. Two keys, so that the step reports and the final outcome never overwrite
each other: a JSON merge patch of `data` replaces only the keys it names.
"""

from __future__ import annotations

# The ConfigMap's name, set by the operator on every pod of the job.
REPORT_ENV = "RLHF_JOB_REPORT"
# `status.trainer` without the outcome: step, totalSteps, progress, metrics, checkpoints ...
PROGRESS_KEY = "progress.json"
# `status.trainer.outcome`: attempt, exitCode, failureClass, message.
OUTCOME_KEY = "outcome.json"
# Larger values are ignored by the operator (a sane report is a few KiB).
MAX_VALUE_BYTES = 64 * 1024

# Evaluation metrics (`training.evalEverySteps`): keys of the step's metrics, which the
# trainer's report also gathers into `status.trainer.eval`.
EVAL_PREFIX = "eval/"
EVAL_GREEDY_REWARD = "eval/greedy_reward"
EVAL_MEAN_REWARD = "eval/mean_reward"
EVAL_PASS_AT = "eval/pass@"  # + k
EVAL_PROMPTS = "eval/prompts"
EVAL_SAMPLES = "eval/samples"
