"""What a train function is handed and how it ends: the contract between the runner above and
the trainers (`loop`, `offline`, `iterative`) below it.

Import the submodules directly; this file imports nothing (no torch, no Ray):

- `job`: the run's directories and paths, step counting, `JobError`/`RunFailed`, `RunContext`
  (the job, its directories, its reporter and checkpoints, the stop request, teardown) and
  `fit`, the one ending of every train function.
- `preemption`: SIGTERM as a request to stop at the next step boundary (`Preempted`).
"""
