"""The confined worker process that runs code nobody reviewed (a reward function, an OpenAI
python grader, a multi-turn agent), torch-free and importing nothing here, so that both the
trainer's rewards and the gateway's grading use it:

- `process.WorkerProcess`: the driver's handle on one worker (started in its own session with
  an allowlisted environment, output read in bounded chunks, killed whole);
- `session`: the environment allowlist, counting and killing the session's processes;
- `_confine`: inside the worker, the limits it sets and the privileges it drops;
- `_worker` (reward functions, graders) and `_agent_worker` (agents): the worker entry points.
"""
