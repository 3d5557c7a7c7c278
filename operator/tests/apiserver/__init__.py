"""Test tier against the real k8s.io/apiextensions-apiserver (see conftest.py)."""
