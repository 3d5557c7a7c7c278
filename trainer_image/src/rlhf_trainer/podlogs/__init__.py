"""Logs that outlive the pods: the wrapper every container of a cluster job runs in (`tee`),
the driver's structured log (`trainer_log`), and reading them back (`read`, `rlhf logs`).
The layout and the size bounds are `rlhf_trainer.config.podlogs`'. Imports no torch or Ray:
the wrapper starts before anything else in the pod."""
