"""The driver loop: generate -> score -> experience -> update -> sync -> checkpoint -> report.

Import the submodules directly; this file imports nothing (no torch, no Ray):

- `train`: the online train function `rlhf_trainer.runner` calls (models, prompts, rewards,
  cluster, driver).
- `driver`: the loop as named stages, each about a screen long.
- `rollout`: generation requests, the token-in/token-out agent executor.
- `pipeline`: where each step's batch comes from: generated on the spot, or ahead by a
  background producer (`rollout.async`); `schedule`: which batch starts when, staleness,
  the batches a checkpoint keeps (pure).
- `dynamic_sampling`: DAPO's rounds that drop groups whose rewards are all equal, sync or in
  the async producer (the group filter and round accounting are pure).
- `evaluation`: greedy and sampled responses to `data.eval`, pass@k (the estimator is pure).
- `batch`: samples -> padded tensors in the layout every role shares (pure).
- `estimators`: scores -> token rewards, KL, advantages and returns per algorithm (pure).
- `state`: what a checkpoint keeps of the driver (data position, KL controller, normaliser).
"""
