"""Scripts run against real DeepSpeed on one gloo rank, each in its own process (a
torch.distributed world per test): the shared prelude, and the runner that returns the JSON
line a script prints last."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

# One gloo rank; `x`, a two-layer `model()` seeded the same each call, and `train(engine,
# steps, dtype)` on a squared-output loss large enough to be clipped at maxGradNorm 0.5.
PRELUDE = textwrap.dedent(
    """
    import json, os, socket, sys
    from pathlib import Path
    import torch, torch.distributed as dist

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0",
                      LOCAL_RANK="0", WORLD_SIZE="1")
    dist.init_process_group("gloo", rank=0, world_size=1)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))

    def train(engine, steps, dtype):
        for _ in range(steps):
            loss = engine(x.to(dtype)).float().square().mean() * 100
            engine.backward(loss)
            engine.step()
    """
)


def run(script: str, *args: str) -> dict[str, Any]:
    """Run `PRELUDE` + `script` (dedented) with `args`; the last line it prints, parsed."""
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result
