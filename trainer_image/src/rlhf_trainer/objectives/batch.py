"""The one data contract between the drivers and the ranks: a batch is a dict of tensors, rows
first, under these keys, the same in every loop.

- `input_ids`, `attention_mask`: online `[B, P+R]` (`loop.batch.to_batch`), offline
  `[B, K, L]` (`collate`); every rank reads them.
- `action_mask` (online): `[B, R]`, 1 on the response tokens the policy generated.
- `loss_mask` (offline): `[B, K, L]`, 1 on response tokens.
- `advantages`, `returns`: `[B, R]`, from the online driver; the actor and the critic train on
  them.
- `old_logps`, `old_values`: `[B, R]`, the behaviour policy's log-probs and the values before
  the update (the importance ratio; value clipping). With `algorithm.rolloutCorrection` the
  trainer's, recomputed before the update: under the weights that sampled (sync rollout) or
  the current ones (async), the ratio's denominator and the correction's numerator.
- `rollout_logps` (online, with `algorithm.rolloutCorrection`): `[B, R]`, the engines' own
  sampling log-probs of the response tokens (vLLM's `processed_logprobs`: after temperature,
  top-k, top-p), each from the weight version that sampled it (partial rollout: a sample's
  segments from different versions); 0 where the policy did not generate. Their gap to
  `old_logps` is what the correction weighs.
- `ref_logps`: the reference's log-probs: online `[B, R]` per token (the actor's KL loss),
  offline `[B, K]` per sequence (DPO, IPO, cDPO, KTO).
- `teacher_logps`: `[B, 1, L, V]`, the teacher's distributions (distillation).
- `step_labels`: `[B, 1, L]`, 1 / 0 at a step's separator token, -1 elsewhere (PRM).
- `desirable`: `[B]` bool (KTO).

Rows are samples: `distributed.groups.split_rows` shards a batch over ranks without
separating a sample's sequences.
"""

from __future__ import annotations

from torch import Tensor

Batch = dict[str, Tensor]
