"""The real kopf operator (in this process, real HTTP) against the Kubernetes API emulator.
Tests play KubeRay's part by writing RayJob status, and the trainer's by patching
status.trainer."""
