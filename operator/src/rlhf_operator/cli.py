"""`rlhf-operator`: run the operator, render a job's children, or generate the CRD."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _crd(args: argparse.Namespace) -> int:
    from .crdgen import render_crd_yaml, write_crd

    if args.stdout:
        sys.stdout.write(render_crd_yaml())
        return 0
    path = write_crd(Path(args.out_dir))
    print(f"wrote {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlhf-operator", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    crd = sub.add_parser("crd", help="generate the RLHFJob CRD from the API models")
    crd.add_argument("--out-dir", default="crds", help="directory to write into (default crds/)")
    crd.add_argument("--stdout", action="store_true", help="print instead of writing a file")
    crd.set_defaults(func=_crd)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
