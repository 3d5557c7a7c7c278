"""Shared fixtures for the operator's tests. Keep this file tiny: fixtures live in modules."""

from emulator.fixtures import emulator, kuberay_crds_dir

__all__ = ["emulator", "kuberay_crds_dir"]
