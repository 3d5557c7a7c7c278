"""rlhf_trainer: the RLHF trainer that runs an RLHFJob, on a cluster or with `rlhf run`."""
