"""`rlhf-gateway`: serve the gateway (uvicorn), or print its OpenAPI document."""

from __future__ import annotations

import argparse
import json
import sys

from .app import create_app
from .deps import Gateway
from .filestore import open_store
from .kube import Kube, load_configuration
from .settings import CONFIG_ENV, SettingsError, load_settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlhf-gateway", description="OpenAI's fine-tuning API over RLHFJobs."
    )
    parser.add_argument("--config", help=f"the gateway's YAML settings (default: ${CONFIG_ENV})")
    parser.add_argument("--kubeconfig", help="default: in-cluster, else KUBECONFIG")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--certfile", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--keyfile", help="the certificate's key (PEM)")
    parser.add_argument(
        "--openapi", action="store_true", help="print the OpenAPI document and exit"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = load_settings(args.config)
    except SettingsError as err:
        print(f"rlhf-gateway: {err}", file=sys.stderr)
        return 2
    if args.openapi:
        from kubernetes import client as k8s_client

        app = create_app(
            Gateway(settings, Kube(k8s_client.Configuration()), open_store(settings.files))
        )
        print(json.dumps(app.openapi(), indent=2))
        return 0
    import uvicorn

    parts = Gateway(settings, Kube(load_configuration(args.kubeconfig)), open_store(settings.files))
    uvicorn.run(
        create_app(parts),
        host=args.host,
        port=args.port,
        ssl_certfile=args.certfile,
        ssl_keyfile=args.keyfile,
        log_level="info",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
