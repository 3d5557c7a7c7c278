"""rlhf-gateway: OpenAI's fine-tuning API (files, jobs, models, graders) over RLHFJobs.

Stateless: tokens are reviewed by the API server, every Kubernetes call impersonates the
tenant, RLHFJobs and file records in the tenant's namespace are the only database. Never
imports the ML stack; reads specs with `rlhf_trainer.config` as the operator does.
"""
