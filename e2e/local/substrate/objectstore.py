"""The node's S3 store, for the gateway (`--set gateway.enabled=true`): moto's S3 server on the
node's pod-network address, where a cluster would have MinIO or a cloud bucket. On this
substrate a PVC is a directory per namespace, so the gateway's pvc:// files could not be shared
with the tenants' namespaces; the files go to `s3://rlhf-files/uploads` here instead.

The gateway's settings come from `gateway-values.yaml` beside up.sh (the tiny catalog model,
files on this store); the store's endpoint is the one value only the running substrate knows.
A tenant's jobs read the files with the keys of the Secret `rlhf-files-s3` in its namespace
(any keys: moto checks none), which adding a tenant creates (e2e/README.md).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

BUCKET = "rlhf-files"
PORT = 9000
VALUES = Path(__file__).resolve().parents[1] / "gateway-values.yaml"


def wanted(values: dict[str, str]) -> bool:
    """Whether the chart values ask for the gateway (which then needs this store)."""
    return values.get("gateway.enabled", "").lower() == "true"


class ObjectStore:
    """moto's S3 server on `host:PORT` with the files bucket made; stopped with the substrate."""

    def __init__(self, host: str) -> None:
        from moto.server import ThreadedMotoServer  # test infrastructure: the dev extra

        self.endpoint = f"http://{host}:{PORT}"
        self._server: Any = ThreadedMotoServer(ip_address=host, port=PORT, verbose=False)

    def start(self) -> None:
        import boto3

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
        self._server.start()
        s3 = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="substrate",
            aws_secret_access_key="substrate",
        )
        s3.create_bucket(Bucket=BUCKET)

    def stop(self) -> None:
        self._server.stop()

    def chart_values(self) -> dict[str, str]:
        """What the chart gets besides gateway-values.yaml: where this store answers."""
        return {"gateway.config.files.objectStore.endpointUrl": self.endpoint}
