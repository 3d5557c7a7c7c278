"""Files on an s3:// prefix (moto's S3 server on loopback): stored under the tenant's
namespace, read back, deleted; jobs on them get the platform's object store settings."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import boto3
import pytest

from .harness import gateway_service
from .test_gateway_files import SFT_ROWS, jsonl

BUCKET = "gateway-files"


@pytest.fixture
def moto_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    url = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=url, region_name="us-east-1").create_bucket(Bucket=BUCKET)
    yield url
    server.stop()


async def test_files_on_s3(tmp_path: pathlib.Path, moto_url: str) -> None:
    store = {
        "endpointUrl": moto_url,
        "region": "us-east-1",
        "credentialsSecret": {"name": "rlhf-files-s3"},
    }
    files = {"uri": f"s3://{BUCKET}/uploads", "objectStore": store}
    async with gateway_service(tmp_path, files=files) as service:
        client = service.client("team-a")
        made = await client.files.create(file=("t.jsonl", jsonl(SFT_ROWS)), purpose="fine-tune")
        s3 = boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1")
        key = f"uploads/team-a/{made.id}.jsonl"
        assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == jsonl(SFT_ROWS)
        assert (await client.files.content(made.id)).content == jsonl(SFT_ROWS)

        job = await client.fine_tuning.jobs.create(model="tiny-llama-random", training_file=made.id)
        spec = service.emulator.get("rlhfjobs.rlhf.dev", job.id, "team-a")["spec"]
        assert spec["data"]["train"][0]["path"] == f"s3://{BUCKET}/{key}"
        assert spec["objectStore"]["endpointUrl"] == moto_url
        assert spec["objectStore"]["credentialsSecret"]["name"] == "rlhf-files-s3"

        await client.files.delete(made.id)
        assert s3.list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0
