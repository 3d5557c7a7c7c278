"""rlhf_trainer: the RLHF trainer that runs an RLHFJob, on a cluster or with `rlhf run`.

Its packages, top to bottom; each imports only from those below it (pyproject.toml's
import-linter layers contract fails CI on an arrow back up):

- `cli`: `rlhf run | validate | plan`.
- `runner/`: `rlhf run`'s dispatch: the job of a file, the train function of its algorithm,
  exit codes and the outcome on the RLHFJob; RLHFPipelines stage by stage.
- `iterative/`: rejection sampling and iterative DPO, the online loop with two stages of its own.
- `loop/` | `offline/`: the online trainers (PPO, GRPO, ...: rollouts, rewards, advantages)
  and the offline ones (SFT, reward model, DPO, KTO, ...): each a train function and a driver
  that plugs its stages into the one step loop.
- `context/`: what a train function is handed (`RunContext`), the step loop (`steploop`) and
  its protocols, preemption and the guardrails.
- `distributed/`: Ray, DeepSpeed and vLLM: placement, the online and offline clusters, the
  ranks (`workers/`), weight sync. The only place these are imported.
- `objectives/`: what the ranks minimise and the batches they read (pure torch).
- `rewards/` | `reporting/` | `checkpoint` | `objectstore`: reward sources, metrics and
  status reports, checkpoints, s3:// inputs and outputs.
- `data/` | `checkpoint_store`; `models/` | `algos/` | `checkpoint_manifest`: data sets,
  models and tokenizers, the pure RL algorithms, checkpoint files.
- `config/`: the job's pydantic models and rules, shared with the operator (no torch).
"""
