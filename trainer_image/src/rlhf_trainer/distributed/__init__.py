"""Ray placement, DeepSpeed engines, vLLM engines and weight sync.

This package is the only place that imports `ray`, `deepspeed` and `vllm`. The driver loop
(`rlhf_trainer.loop`) talks to it through `cluster.TrainingCluster`, whose methods take and
return plain tensors and dicts. Import the submodules directly: this file imports nothing.

- `plan`: which role runs where (pure: job config -> placement plan).
- `cluster`: Ray start-up, placement groups, role groups, and the facade the online loop uses;
  `offline` and `iterative`: the offline and the iterative trainers' facades beside it.
- `groups`: a group of Ray actors of one role, data-parallel over its ranks.
- `strategy`: DeepSpeed configs (pure) and engine construction.
- `workers`: the Ray actors of the trainable roles (actor, critic) and the frozen ones.
- `vllm_engine`, `vllm_extension`: vLLM engines as Ray actors and their weight-loading hooks.
- `weight_sync`: actor -> vLLM weights (object store when colocated, gloo/NCCL broadcast else).
"""
