"""The RLHFJob API. Imports pydantic and rlhf_trainer.config only."""
