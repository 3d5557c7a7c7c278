"""Data files shipped with the trainer: the tokenizer corpus (read with importlib.resources)."""
