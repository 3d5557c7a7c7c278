"""Fixtures of the training-mode tests: the offline tests' local Ray (room for 4 ranks)."""

from offline.test_offline_training import ray_module, ray_up

__all__ = ["ray_module", "ray_up"]
