"""The iterative trainers: rejection sampling (best-of-n) and iterative DPO.

Each round (one runner step) generates `samplesPerPrompt` responses for `rolloutBatchSize`
prompts with the current policy on the vLLM engines, scores them with the job's reward
sources, selects a data set from them, and trains the actor on it with an offline objective
for `training.epochs` passes; the new weights go to the engines before the next round.

- rejection sampling: the best sample of each prompt (or every sample whose reward reaches
  `algorithm.rewardThreshold`), trained with the SFT loss;
- iterative DPO: the best (chosen) and worst (rejected) sample of each prompt, prompts whose
  samples all score the same skipped, trained with the DPO loss against a fixed reference or
  (`algorithm.refreshReference`) the policy of the round's start.

Import the submodules directly; this file imports nothing (no torch, no Ray):

- `selection`: which samples a round trains on, and in which order (pure).
- `driver`: the round as the online loop's stages, with selection and offline updates.
- `train`: the train function `rlhf_trainer.runner` calls.
"""
