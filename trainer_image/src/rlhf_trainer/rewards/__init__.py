"""Reward sources other than reward models (which run on Ray actors), and how they combine.

Import the submodules directly (this file imports nothing):

- `rlhf_trainer.rewards.function_runner`: `RewardFunctionRunner(path, timeout_seconds,
  limits=...)`: a user's `reward_func(queries, prompts, labels)` in its own confined process
  (`rlhf_trainer.sandbox`); `on_error.ZeroOnError` scores the
  samples it fails on 0 (`models.rewardFunction.onError: zero`).
- `rlhf_trainer.rewards.builtin`: builtin reward functions (`BuiltinRewardFunction(name)`).
- `rlhf_trainer.rewards.remote`: `RemoteRewardClient`: an HTTP reward service with retries.
- `rlhf_trainer.rewards.grader`: `GraderRewardSource`: `models.graderReward`, an OpenAI grader
  (`rlhf_trainer.grading`) scoring each response against its training row.
- `rlhf_trainer.rewards.output`: `RewardResult`, `parse_reward_output`, `combine_rewards`.
- `rlhf_trainer.rewards.sources`: `RewardSources(models_cfg, base_dir).score(...)`: all of a
  job's sources, weighted and summed; `build_reward_function`.

Scoring with a reward model: `rlhf_trainer.models.value.score_with_model`.
"""
