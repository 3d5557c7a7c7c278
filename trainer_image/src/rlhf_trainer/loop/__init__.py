"""The driver loop: generate -> score -> experience -> update -> sync -> checkpoint -> report.

Import the submodules directly; this file imports nothing (no torch, no Ray):

- `train`: the online train function `rlhf_trainer.runner` calls (models, prompts, rewards,
  cluster, driver).
- `driver`: the loop as named stages, each about a screen long.
- `rollout`: generation requests, the token-in/token-out agent executor.
- `dynamic_sampling`: a step's prompts and samples; DAPO's rounds that drop groups whose
  rewards are all equal (the group filter and round accounting are pure).
- `evaluation`: greedy and sampled responses to `data.eval`, pass@k (the estimator is pure).
- `batch`: samples -> padded tensors in the layout every role shares (pure).
- `estimators`: scores -> token rewards, KL, advantages and returns per algorithm (pure).
- `objectives`: the actor and critic losses the ranks minimise (pure, built on `algos`).
- `state`: what a checkpoint keeps of the driver (data position, KL controller, normaliser).
"""
