"""Fast tests of the operator's pure modules: placement, builders, status, settings."""
