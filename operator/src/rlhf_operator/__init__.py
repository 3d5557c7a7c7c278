"""rlhf_operator: the Kubernetes operator that runs RLHFJobs on KubeRay."""
