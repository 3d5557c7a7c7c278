"""Pure torch functions for RL and preference training (no Ray, DeepSpeed or vLLM here).

Import the submodules directly; this package file stays free of imports so that importing
`rlhf_trainer.algos` never pulls in torch:

- `rlhf_trainer.algos.masking`: masked reductions over `[B, T]` per-token tensors.
- `rlhf_trainer.algos.advantages`: GAE, discounted returns, group baselines, whitening.
- `rlhf_trainer.algos.kl`: KL estimators k1/k2/k3 and the fixed/adaptive KL controllers.
- `rlhf_trainer.algos.rewards`: reward shaping, normalisation, clipping, overlong penalty,
  rollout-correction weights (TIS, MIS, IcePop).
- `rlhf_trainer.algos.losses`: PPO, GSPO and CISPO policy losses, value, entropy, SFT,
  reward-model, DPO/IPO, KTO.
- `rlhf_trainer.algos.distillation`: token-level forward / reverse KL to a teacher.
- `rlhf_trainer.algos.prm`: process reward model loss and step-score aggregation.

Conventions: `[B, T]` tensors are per token over the response, with an action mask (1 or True
for real response tokens, 0 for padding, which may sit anywhere); `[B]` tensors are per
sequence. Functions never modify their inputs and never call `.item()`.
"""
