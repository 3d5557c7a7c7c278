"""The offline trainers: SFT, reward model (pairwise), DPO, IPO, cDPO and KTO on a fixed data set.

One loop serves every kind: read `trainBatchSize` samples, collate them into padded tensors,
(for DPO/IPO/cDPO/KTO) get their reference log-probs from the frozen reference ranks, and take
one optimiser step on the trained ranks (data-parallel, DeepSpeed). Import the submodules
directly; this file imports nothing (no torch, no Ray):

- `kinds`: what differs between the trainers (data loader, model kind, reference or not).
- `collate`: samples -> right-padded `[B, K, L]` tensors (pure).
- `objectives`: sequence log-probs / scores and each trainer's loss and statistics (pure torch).
- `driver`: the loop (reference log-probs one step ahead, update, checkpoint, report, export).
- `train`: the offline train function `rlhf_trainer.runner` calls (model, data, ranks, driver).
"""
