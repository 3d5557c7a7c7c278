"""`python -m rlhf_trainer.podlogs --container NAME [--max-size 10Mi] [--max-files 5]
[--events] -- CMD...`

The command line of every container of a job's pods on a cluster (the operator renders it,
builders/podlogs.py): runs CMD with its output kept in
`$RLHF_LOGS_DIR/$RLHF_POD_NAME/NAME.log` (tee.py), and exits as CMD did; with `--events` (the
head pod's) it also keeps the job's Events in `$RLHF_LOGS_DIR/events.jsonl` while CMD runs
(events.py). Without `RLHF_LOGS_DIR` it only runs CMD.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rlhf_trainer.config.podlogs import LOG_SUFFIX, LOGS_DIR_ENV, ContainerLogsConfig

from .events import start_recording
from .tee import pod_name, run_teed, say


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rlhf_trainer.podlogs", description=__doc__)
    parser.add_argument("--container", required=True, help="The container's name.")
    default = ContainerLogsConfig()
    parser.add_argument("--max-size", default=default.max_size, help="Rotate at this size.")
    parser.add_argument("--max-files", type=int, default=default.max_files)
    parser.add_argument("--events", action="store_true", help="Keep the job's Events too.")
    parser.add_argument("command", nargs="+", help="The container's command (after --).")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        limits = ContainerLogsConfig(max_size=args.max_size, max_files=args.max_files)
    except ValueError as err:
        say(f"--max-size/--max-files: {err}; using the defaults")
        limits = ContainerLogsConfig()
    logs_dir = os.environ.get(LOGS_DIR_ENV)
    if not logs_dir:
        return run_teed(args.command, None, limits.max_bytes, limits.backups)
    path = Path(logs_dir) / pod_name() / f"{args.container}{LOG_SUFFIX}"
    recording = start_recording(os.environ, Path(logs_dir), limits) if args.events else None
    try:
        return run_teed(args.command, path, limits.max_bytes, limits.backups)
    finally:
        if recording is not None:
            stop, thread = recording
            stop.set()
            thread.join(timeout=2.0)  # a watch in flight ends with the process


if __name__ == "__main__":
    sys.exit(main())
