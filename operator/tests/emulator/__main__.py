"""Run the emulator as a process, e.g. for a benchmark that measures the operator's RSS alone:

    PYTHONPATH=operator/tests python -m emulator --crd crds/rlhf.dev_rlhfjobs.yaml \
        --crd ../shared/kuberay-crds --kubeconfig /tmp/kubeconfig --port 0

Prints one JSON line (`{"url": ..., "kubeconfig": ...}`) once it serves, then runs until
SIGINT/SIGTERM. Request counts: `GET <url>/_emulator/requests[?since=<mark>]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from .harness import project_crds, run_emulator


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m emulator", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--crd", action="append", default=[], help="CRD YAML file or folder")
    parser.add_argument(
        "--project-crds", action="store_true", help="also register ours and KubeRay's"
    )
    parser.add_argument("--namespace", action="append", default=None, help="default: default")
    parser.add_argument("--kubeconfig", default=None, help="write a kubeconfig here")
    return parser.parse_args(argv)


async def _serve(args: argparse.Namespace) -> None:
    crds = [*args.crd, *(project_crds() if args.project_crds else [])]
    namespaces = args.namespace or ["default"]
    async with run_emulator(
        crds=crds,
        namespaces=namespaces,
        kubeconfig=args.kubeconfig,
        host=args.host,
        port=args.port,
    ) as emulator:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        print(json.dumps({"url": emulator.url, "kubeconfig": args.kubeconfig}), flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    asyncio.run(_serve(_arguments(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    main()
