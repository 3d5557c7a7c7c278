"""Data sets: prompts for the online algorithms, SFT / preference / KTO samples for the offline
trainers, from local JSON/JSONL/Parquet files, Hugging Face datasets, or builtin synthetic tasks.

Import the submodules directly (this file imports nothing):

- `rlhf_trainer.data.prompts`: `load_prompts(cfg, tokenizer, base_dir, seed) -> PromptDataset`
  of `PromptItem(prompt_text, label, prompt_ids)`.
- `rlhf_trainer.data.offline`: `load_sft`, `load_preferences`, `load_kto`.
- `rlhf_trainer.data.dataset`: `OrderedDataset.batches(size, start=position)`, resumable.
- `rlhf_trainer.data.builtin`: the builtin tasks (`repeat-letter`) and their verifiers.
- `rlhf_trainer.data.sources`: reading rows, mixing sources, `DataLoadError`.
"""
