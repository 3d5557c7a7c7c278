"""Models without the distributed machinery: tiny random-init builds, loading, value models.

Import the submodules directly (this file imports nothing, so importing the package never pulls
in torch or transformers):

- `rlhf_trainer.models.tiny`: `build_tiny_model(spec, out_dir, kind=...)`, deterministic, cached.
- `rlhf_trainer.models.tokenizer`: the locally trained BPE tokenizer and its chat template.
- `rlhf_trainer.models.loading`: `resolve_model_dir`, `load_tokenizer`, `load_causal_lm`,
  `load_value_model`.
- `rlhf_trainer.models.value`: `ValueModel` (critic / reward model: backbone + scalar `score`
  head, read per token) and `score_with_model`.

No Ray, DeepSpeed or vLLM import belongs here (see `rlhf_trainer.distributed`).
"""
