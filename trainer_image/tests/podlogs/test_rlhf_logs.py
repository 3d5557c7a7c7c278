"""`rlhf logs` reads a job's kept logs back: from a directory (the job's volume, mounted or
copied), from the bucket of `output.uri` (moto's S3 server), choosing attempts, pods and
containers; and the trainer driver's own records (trainer.jsonl)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml

from rlhf_trainer.cli import main
from rlhf_trainer.config import JobConfig
from rlhf_trainer.config.output import ObjectStoreConfig
from rlhf_trainer.config.podlogs import ContainerLogsConfig
from rlhf_trainer.objectstore import upload_logs
from rlhf_trainer.podlogs.command import LogsError, LogsRequest, run
from rlhf_trainer.podlogs.read import event_line, select
from rlhf_trainer.podlogs.trainer_log import trainer_log

BUCKET = "rlhf-test"  # conftest.S3_BUCKET
T = "2026-12-02T01:00:00.000Z"
EVENT = {
    "type": "Warning",
    "reason": "BackOff",
    "message": "Back-off restarting\n failed container",
    "count": 3,
    "lastTimestamp": "2026-12-02T01:00:05Z",
    "involvedObject": {"kind": "Pod", "name": "job-r0-worker-x"},
}


def _volume(root: Path) -> Path:
    """A storage volume holding job `tiny`'s logs of two attempts, as the pods leave them."""
    logs = root / "tiny" / "logs"
    files = {
        "attempt-0/events.jsonl": json.dumps(EVENT) + "\n",
        "attempt-0/tiny-r0-head-a/ray-head.log": f"{T} head 0\n",
        "attempt-0/tiny-r0-g-worker-b/ray-worker.log.1": f"{T} worker 0 old\n",
        "attempt-0/tiny-r0-g-worker-b/ray-worker.log": f"{T} worker 0 new\n",
        "attempt-0/trainer.jsonl": json.dumps(
            {"time": T, "level": "INFO", "logger": "rlhf_trainer.loop", "message": "step 1"}
        )
        + "\n{cut by a kill",
        "attempt-1/tiny-r1-head-c/ray-head.log": f"{T} head 1\n",
        "attempt-1/tiny-r1-xyz/ray-job-submitter.log": f"{T} submitted\n",
    }
    for name, text in files.items():
        (logs / name).parent.mkdir(parents=True, exist_ok=True)
        (logs / name).write_text(text)
    return logs


def _lines(request: LogsRequest) -> list[str]:
    out: list[str] = []
    assert run(request, out.append) == 0
    return out


def test_every_attempt_is_printed_from_the_volume_file_by_file(tmp_path: Path) -> None:
    _volume(tmp_path)
    assert _lines(LogsRequest(job="tiny", source=str(tmp_path))) == [
        "==> attempt-0/events.jsonl <==",
        "2026-12-02T01:00:05Z Warning BackOff pod/job-r0-worker-x: Back-off restarting "
        "failed container (x3)",
        "==> attempt-0/tiny-r0-g-worker-b/ray-worker.log <==",
        "worker 0 old",
        "worker 0 new",
        "==> attempt-0/tiny-r0-head-a/ray-head.log <==",
        "head 0",
        "==> attempt-0/trainer.jsonl <==",
        f"{T} INFO rlhf_trainer.loop: step 1",
        "{cut by a kill",
        "==> attempt-1/tiny-r1-head-c/ray-head.log <==",
        "head 1",
        "==> attempt-1/tiny-r1-xyz/ray-job-submitter.log <==",
        "submitted",
    ]


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (
            LogsRequest(job="tiny", attempt=1, list_only=True),
            [
                "attempt-1/tiny-r1-head-c/ray-head.log",
                "attempt-1/tiny-r1-xyz/ray-job-submitter.log",
            ],
        ),
        (
            LogsRequest(job="tiny", pods=("head",), list_only=True),
            ["attempt-0/tiny-r0-head-a/ray-head.log", "attempt-1/tiny-r1-head-c/ray-head.log"],
        ),
        (
            LogsRequest(job="tiny", containers=("ray-job-submitter",)),
            ["==> attempt-1/tiny-r1-xyz/ray-job-submitter.log <==", "submitted"],
        ),
        (
            LogsRequest(job="tiny", attempt=0, pods=("worker",), timestamps=True),
            [
                "==> attempt-0/tiny-r0-g-worker-b/ray-worker.log <==",
                f"{T} worker 0 old",
                f"{T} worker 0 new",
            ],
        ),
    ],
    ids=["attempt", "pod", "container", "timestamps"],
)
def test_choosing_attempts_pods_and_containers(
    tmp_path: Path, request_: LogsRequest, expected: list[str]
) -> None:
    _volume(tmp_path)
    for where in (tmp_path, tmp_path / "tiny", tmp_path / "tiny" / "logs"):
        request = LogsRequest(**{**request_.__dict__, "source": str(where)})
        assert _lines(request) == expected, where


def test_what_to_give_instead_is_said(tmp_path: Path) -> None:
    _volume(tmp_path)
    with pytest.raises(LogsError, match=r"no log in .* matches \(attempts kept: 0, 1\)"):
        run(LogsRequest(job="tiny", source=str(tmp_path), attempt=5), print)
    with pytest.raises(LogsError, match="no logs of other there"):
        run(LogsRequest(job="other", source=str(tmp_path)), print)
    with pytest.raises(LogsError, match=r"give --from DIR .* or --from s3://"):
        run(LogsRequest(job="tiny"), print)
    with pytest.raises(LogsError, match="give a FILE"):
        run(LogsRequest(), print)
    pipeline = Path(__file__).parents[3] / "manifests" / "examples" / "tiny-pipeline-cpu.yaml"
    with pytest.raises(LogsError, match=r"is a pipeline: give --job tiny-pipeline-<stage>"):
        run(LogsRequest(file=str(pipeline)), print)


def test_select_shows_events_and_records_only_without_a_pod_or_container_filter() -> None:
    paths = ["attempt-0/events.jsonl", "attempt-0/trainer.jsonl", "attempt-0/p/c.log"]
    assert [f.path for f in select(paths)] == paths[:1] + paths[2:] + paths[1:2]
    assert [f.path for f in select(paths, containers=("c",))] == ["attempt-0/p/c.log"]


def test_an_event_line_falls_back_to_the_times_it_has() -> None:
    event = {**EVENT, "lastTimestamp": None, "eventTime": "2026-12-02T01:00:06.000000Z"}
    assert event_line(event).startswith("2026-12-02T01:00:06.000000Z Warning BackOff")


def _manifest(tmp_path: Path, store: ObjectStoreConfig) -> Path:
    doc = {
        "apiVersion": "rlhf.dev/v1alpha1",
        "kind": "RLHFJob",
        "metadata": {"name": "tiny"},
        "spec": {
            "algorithm": {"name": "sft"},
            "models": {"actor": {"randomInit": {}}},
            "data": {"train": [{"builtin": "repeat-letter"}]},
            "objectStore": store.to_manifest(),
            "output": {"uri": f"s3://{BUCKET}/team-a/tiny"},
        },
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_bucket_copy_reads_the_same_as_the_volume(
    s3_store: ObjectStoreConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The driver copies the logs directory to <output.uri>/logs; `rlhf logs FILE` reads the
    manifest's output.uri after the volume is gone."""
    volume = tmp_path / "volume"
    logs = _volume(volume)
    manifest = _manifest(tmp_path, s3_store)
    job = yaml.safe_load(manifest.read_text())["spec"]
    written = upload_logs(logs, JobConfig.model_validate(job))
    assert "team-a/tiny/logs/attempt-1/tiny-r1-head-c/ray-head.log" in written
    from_volume = _lines(LogsRequest(job="tiny", source=str(volume)))
    assert main(["logs", str(manifest)]) == 0
    assert capsys.readouterr().out.splitlines() == from_volume
    assert main(["logs", str(manifest), "--attempt", "1", "--pod", "r1-head"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "==> attempt-1/tiny-r1-head-c/ray-head.log <==",
        "head 1",
    ]
    assert main(["logs", str(manifest), "--from", f"s3://{BUCKET}/nothing"]) == 1
    assert "no logs in s3://rlhf-test/nothing/logs" in capsys.readouterr().err


def test_the_trainers_records_are_kept_as_json_lines(tmp_path: Path) -> None:
    log = logging.getLogger("rlhf_trainer.test_podlogs")
    env = {"RLHF_LOGS_DIR": str(tmp_path / "attempt-2")}
    with trainer_log(env, ContainerLogsConfig()) as path:
        log.info("step %d done", 3)
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            log.exception("failed")
        logging.getLogger("some.library").info("not ours, not a warning: not kept")
    assert path == tmp_path / "attempt-2" / "trainer.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["level"], r["logger"], r["message"]) for r in records] == [
        ("INFO", "rlhf_trainer.test_podlogs", "step 3 done"),
        ("ERROR", "rlhf_trainer.test_podlogs", "failed"),
    ]
    assert "RuntimeError: boom" in records[1]["exception"]
    assert records[0]["time"].endswith("Z")
    log.info("after the block")  # the handler is gone again
    assert len(path.read_text().splitlines()) == 2
    with trainer_log({}, ContainerLogsConfig()) as nothing:
        assert nothing is None
