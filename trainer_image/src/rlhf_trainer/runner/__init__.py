"""`rlhf run`: one runner for the online trainers (PPO, GRPO, REINFORCE++, RLOO, ...), the
iterative ones (rejection sampling, iterative DPO) and the offline ones (SFT, reward model, DPO,
IPO, cDPO, KTO).

The runner owns everything the kinds of training share: picking the job, its directories, step
counting, the errors and exit codes, the outcome reported to the operator, SIGTERM
(preemption), teardown and the final message. Each kind is one *train function* (`loop.train`,
`iterative.train`, `offline.train`) that builds its models, data and cluster and runs its
driver loop.

It sits on top: it imports the train functions, they import only the contract below it
(`rlhf_trainer.context`: `RunContext`, `fit`, preemption). Import the submodules directly;
this file imports nothing (no torch, no Ray):

- `main`: `run_from_cli`, the `rlhf run` command: the one job of a file, its dispatch.
- `pipeline`: an RLHFPipeline's stages, one `main.run_config` after another.
- `outcome`: how a run ended: `classify` (failure class), `explain` (the message).
"""
