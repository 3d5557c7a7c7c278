"""CRD generation: the API models' JSON schema as a structural OpenAPI v3 CRD (crds/ is
generated from it)."""
