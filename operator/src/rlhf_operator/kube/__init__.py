"""The Kubernetes API client and applying a child with it (the only HTTP besides kopf's own)."""
