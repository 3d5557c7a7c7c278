"""The local substrate: the parts of a Kubernetes cluster with KubeRay that cannot run on this
machine, played just well enough for the real operator and the real trainer (see
e2e/README.md). Kept import-free: the container and sandbox entry points run as `python -m`
inside fresh namespaces."""
