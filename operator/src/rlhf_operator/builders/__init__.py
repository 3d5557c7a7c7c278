"""Pure builders: (job, settings, ...) -> Kubernetes objects as plain dicts. No I/O here."""
