"""`rlhf-operator`: run the operator, render a job's children, or generate the CRD."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path


def _crd(args: argparse.Namespace) -> int:
    from .crd.generate import render_crd_yaml, render_pipeline_crd_yaml, write_crd

    if args.stdout:
        sys.stdout.write(render_crd_yaml() + "---\n" + render_pipeline_crd_yaml())
        return 0
    for path in write_crd(Path(args.out_dir)):
        print(f"wrote {path}")
    return 0


# Client libraries kopf imports when they are installed (the gateway, in the same image, uses
# `kubernetes`), only to recognise their model objects in its adopt/label helpers. The
# operator passes plain dicts and logs in with kopf's own helpers: without them it starts at
# ~60 MB of RSS instead of ~145 MB.
UNUSED_CLIENTS = ("kubernetes", "kubernetes_asyncio")


def _without_unused_clients() -> None:
    """Make `import kubernetes` (and kubernetes_asyncio) fail in this process, as if they were
    not installed, unless something already imported them."""
    for name in UNUSED_CLIENTS:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def _run(args: argparse.Namespace) -> int:
    # kopf and the API client are imported only here: `render` and `crd` stay light.
    _without_unused_clients()
    from .handlers.start import main as run_main
    from .settings import OperatorSettings, SettingsError

    try:
        settings = OperatorSettings.from_env()
    except SettingsError as err:
        print(f"rlhf-operator run: {err}", file=sys.stderr)
        return 2
    return run_main(settings)


def _render(args: argparse.Namespace) -> int:
    from .render import reasons_comment, render_file, to_yaml
    from .settings import OperatorSettings, SettingsError

    try:
        settings = OperatorSettings.from_env()
    except SettingsError as err:
        print(f"rlhf-operator render: {err}", file=sys.stderr)
        return 2
    if args.image:
        settings = replace(settings, default_trainer_image=args.image)
    code, documents = 0, []
    for rendered in render_file(args.file, settings, namespace=args.namespace):
        for problem in rendered.problems:
            print(f"{rendered.source} ({rendered.name}): {problem}", file=sys.stderr)
            code = 1
        for note in rendered.notes:
            print(f"{rendered.source} ({rendered.name}): note: {note}", file=sys.stderr)
        if rendered.objects:
            documents.append(reasons_comment(rendered) + to_yaml(rendered.objects))
    sys.stdout.write("---\n".join(documents))
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlhf-operator", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    crd = sub.add_parser(
        "crd", help="generate the RLHFJob and RLHFPipeline CRDs from the API models"
    )
    crd.add_argument("--out-dir", default="crds", help="directory to write into (default crds/)")
    crd.add_argument("--stdout", action="store_true", help="print instead of writing a file")
    crd.set_defaults(func=_crd)
    run = sub.add_parser(
        "run", help="run the operator (settings from RLHF_OPERATOR_* environment variables)"
    )
    run.set_defaults(func=_run)
    render = sub.add_parser(
        "render", help="print every child object of the RLHFJobs in FILE as YAML (dry run)"
    )
    render.add_argument("file", help="RLHFJob manifest(s), YAML or JSON")
    render.add_argument("--namespace", help="override the manifests' metadata.namespace")
    render.add_argument(
        "--image", help="trainer image for jobs without spec.image (default: the operator's)"
    )
    render.set_defaults(func=_render)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "render":
        return int(args.func(args))
    try:
        return int(args.func(args))
    except Exception as err:  # a bug of ours must not print a file's content as a traceback
        from rlhf_trainer.config.documents import quote

        print(
            f"rlhf-operator render: internal error ({type(err).__name__}: {quote(str(err))}); "
            "please report it with the file that caused it",
            file=sys.stderr,
        )
        return 70


if __name__ == "__main__":
    raise SystemExit(main())
