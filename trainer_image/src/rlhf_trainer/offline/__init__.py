"""The offline trainers: SFT, reward model (pairwise), DPO, IPO, cDPO and KTO on a fixed data set.

One loop serves every kind: read `trainBatchSize` samples, collate them into padded tensors,
(for DPO/IPO/cDPO/KTO) get their reference log-probs from the frozen reference ranks, and take
one optimiser step on the trained ranks (data-parallel, DeepSpeed). What differs between the
trainers (`kinds`), their batches (`collate`) and their losses (`offline`) live in
`rlhf_trainer.objectives`, which the ranks import too; the cluster is
`rlhf_trainer.distributed.offline`. Import the submodules directly; this file imports nothing
(no torch, no Ray):

- `driver`: the loop (reference log-probs one step ahead, update, checkpoint, report, export).
- `train`: the offline train function `rlhf_trainer.runner` calls (model, data, ranks, driver).
"""
