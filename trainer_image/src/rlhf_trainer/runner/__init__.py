"""`rlhf run`: one runner for the online trainers (PPO, GRPO, REINFORCE++, RLOO, ...), the
iterative ones (rejection sampling, iterative DPO) and the offline ones (SFT, reward model, DPO,
IPO, cDPO, KTO).

The runner owns everything the kinds of training share: picking the job, its directories, step
counting, the errors and exit codes, the outcome reported to the operator, SIGTERM
(preemption), teardown and the final message. Each kind is one *train function* (`loop.train`,
`iterative.train`, `offline.train`) that builds its models, data and cluster and runs its
driver loop.

Import the submodules directly; this file imports nothing (no torch, no Ray):

- `job`: the job of a file, its directories and paths, step counting, `JobError`/`RunFailed`,
  and `RunContext`, what the runner hands a train function.
- `preemption`: SIGTERM as a request to stop at the next step boundary (`Preempted`).
- `outcome`: how a run ended: `classify` (failure class), `explain` (the message).
- `main`: `run_from_cli`, the `rlhf run` command.
"""
