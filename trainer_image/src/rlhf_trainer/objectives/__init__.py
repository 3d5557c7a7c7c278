"""What the trained ranks minimise, and the batches they read: pure torch, below `distributed`.

The ranks in `rlhf_trainer.distributed.workers` import these; the driver loops (`loop`,
`offline`, `iterative`) import them too, never the other way round. Import the submodules
directly; this file imports nothing (no torch):

- `online`: the actor's (PPO surrogate, KL loss, entropy bonus) and the critic's losses.
- `kinds`: what differs between the offline trainers (data loader, model kind, reference or
  teacher), decided once from the job config.
- `collate`: offline samples -> right-padded `[B, K, L]` tensors.
- `offline`: sequence log-probs / scores and each offline trainer's loss and statistics.
"""
