"""The logs' layout and size bounds (pure), and the wrapper every container of a cluster job
runs in: output passed through and kept, rotated at the bound, signals passed on, the exit
status kept, and a volume that cannot be written never stopping the command."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlhf_trainer.config import JobConfig, validation_messages
from rlhf_trainer.config.podlogs import (
    ContainerLogsConfig,
    LogFile,
    LogKind,
    attempt_of,
    container_log,
    parse_log_path,
    reading_order,
)
from rlhf_trainer.podlogs.tee import exit_status, run_teed, timestamp

MINIMAL = {
    "algorithm": {"name": "sft"},
    "models": {"actor": {"randomInit": {}}},
    "data": {"train": [{"builtin": "repeat-letter"}]},
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("attempt-0/events.jsonl", LogFile(0, LogKind.EVENTS)),
        ("attempt-3/trainer.jsonl", LogFile(3, LogKind.TRAINER)),
        (
            "attempt-1/job-r1-head-x2/ray-head.log",
            LogFile(1, LogKind.CONTAINER, "job-r1-head-x2", "ray-head"),
        ),
        (
            "attempt-1/job-r1-head-x2/ray-head.log.4",
            LogFile(1, LogKind.CONTAINER, "job-r1-head-x2", "ray-head", 4),
        ),
        ("attempt-01/p/c.log", None),  # not how an attempt is named
        ("attempt-1/p/c.txt", None),
        ("attempt-1/p/q/c.log", None),
        ("checkpoints/x.log", None),
        ("attempt-1/other.json", None),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_path_names_its_log_file_and_back(path: str, expected: LogFile | None) -> None:
    assert parse_log_path(path) == expected
    if expected is not None:
        assert expected.path == path


def test_names_of_attempts_and_container_logs() -> None:
    assert container_log(2, "pod-a", "ray-worker") == "attempt-2/pod-a/ray-worker.log"
    assert attempt_of("attempt-12") == 12
    assert attempt_of("attempt-x") is None
    with pytest.raises(ValueError, match="attempt must be >= 0"):
        container_log(-1, "p", "c")


def test_files_are_read_attempt_by_attempt_and_oldest_part_first() -> None:
    paths = [
        "attempt-1/trainer.jsonl",
        "attempt-0/p/c.log",
        "attempt-0/p/c.log.2",
        "attempt-0/events.jsonl",
        "attempt-0/p/c.log.1",
        "attempt-0/a/c.log",
    ]
    files = [f for f in map(parse_log_path, paths) if f is not None]
    assert [f.path for f in reading_order(files)] == [
        "attempt-0/events.jsonl",
        "attempt-0/a/c.log",
        "attempt-0/p/c.log.2",
        "attempt-0/p/c.log.1",
        "attempt-0/p/c.log",
        "attempt-1/trainer.jsonl",
    ]


def test_the_default_bound_is_the_kubelets() -> None:
    limits = JobConfig.model_validate(MINIMAL).logging.container_logs
    assert (limits.max_size, limits.max_files) == ("10Mi", 5)
    assert (limits.max_bytes, limits.backups) == (10 * 2**20, 4)


@pytest.mark.parametrize(
    ("logs", "field"),
    [
        ({"maxSize": "0"}, "logging.containerLogs.maxSize"),
        ({"maxSize": "10MB"}, "logging.containerLogs.maxSize"),
        ({"maxFiles": 0}, "logging.containerLogs.maxFiles"),
    ],
)
def test_a_bad_bound_is_refused_naming_the_field(logs: dict[str, object], field: str) -> None:
    doc = {**MINIMAL, "logging": {"containerLogs": logs}}
    with pytest.raises(ValueError) as err:
        JobConfig.model_validate(doc)
    assert any(m.startswith(field) for m in validation_messages(err.value)), err.value


def test_output_passes_through_and_is_kept_with_its_time(tmp_path: Path) -> None:
    out = io.BytesIO()
    log = tmp_path / "pod" / "c.log"
    code = run_teed(
        [sys.executable, "-c", "import sys; print('to out'); print('to err', file=sys.stderr)"],
        log,
        1 << 20,
        4,
        out=out,
        clock=lambda: "2026-12-02T00:00:00.000Z",
    )
    assert code == 0
    assert out.getvalue().decode().splitlines() == ["to out", "to err"]
    assert log.read_text().splitlines() == [
        "2026-12-02T00:00:00.000Z to out",
        "2026-12-02T00:00:00.000Z to err",
    ]


def test_the_log_rotates_at_its_bound_and_keeps_max_files(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    limits = ContainerLogsConfig(max_size="1Ki", max_files=3)
    script = "for i in range(400): print(f'line {i:04d}')"
    code = run_teed(
        [sys.executable, "-c", script], log, limits.max_bytes, limits.backups, out=io.BytesIO()
    )
    assert code == 0
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == ["c.log", "c.log.1", "c.log.2"]  # the oldest parts were dropped
    assert all(p.stat().st_size <= limits.max_bytes for p in tmp_path.iterdir())
    lines = [
        line.split(" ", 1)[1]
        for name in ("c.log.2", "c.log.1", "c.log")
        for line in (tmp_path / name).read_text().splitlines()
    ]
    # The newest lines, in order, with nothing missing between the parts.
    assert lines[-1] == "line 0399"
    first = int(lines[0].split()[1])
    assert lines == [f"line {i:04d}" for i in range(first, 400)]


def test_the_exit_status_is_the_commands() -> None:
    assert (
        run_teed([sys.executable, "-c", "raise SystemExit(7)"], None, 1, 1, out=io.BytesIO()) == 7
    )
    assert exit_status(-signal.SIGTERM) == 128 + signal.SIGTERM
    assert timestamp().endswith("Z") and len(timestamp()) == len("2026-12-02T00:00:00.000Z")


def test_an_unwritable_volume_never_stops_the_command(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the pod's directory should be
    out = io.BytesIO()
    code = run_teed([sys.executable, "-c", "print('still here')"], blocked / "c.log", 1, 1, out=out)
    assert code == 0
    assert out.getvalue() == b"still here\n"


def _wrapper(logs: Path, script: str) -> subprocess.Popen[bytes]:
    """`python -m rlhf_trainer.podlogs` running a Python script, as a container's main
    process (its own session, as a container's PID namespace)."""
    env = {**os.environ, "RLHF_LOGS_DIR": str(logs), "RLHF_POD_NAME": "pod-0"}
    command = [sys.executable, "-m", "rlhf_trainer.podlogs", "--container", "c", "--"]
    return subprocess.Popen(
        [*command, sys.executable, "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )


def test_a_sigterm_reaches_the_command_and_what_it_wrote_is_kept(tmp_path: Path) -> None:
    """The container's main process is the wrapper: the kubelet's SIGTERM must reach the
    command (the trainer checkpoints on it), and its last words must be kept."""
    child = (
        "import signal, sys, time\n"
        "def stop(*_):\n"
        "    print('checkpointing', flush=True); sys.exit(75)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    wrapper = _wrapper(tmp_path, child)
    assert wrapper.stdout is not None
    assert wrapper.stdout.readline() == b"ready\n"
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(timeout=30) == 75
    kept = (tmp_path / "pod-0" / "c.log").read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in kept] == ["ready", "checkpointing"]


def test_a_killed_container_keeps_every_line_written_before(tmp_path: Path) -> None:
    """SIGKILL (the end of a grace period, an OOM kill): nothing is buffered in the wrapper."""
    script = "import time\nfor i in range(3): print(f'step {i}', flush=True)\ntime.sleep(60)"
    wrapper = _wrapper(tmp_path, script)
    assert wrapper.stdout is not None
    for _ in range(3):
        wrapper.stdout.readline()
    time.sleep(0.2)
    os.killpg(wrapper.pid, signal.SIGKILL)
    wrapper.wait(timeout=30)
    kept = (tmp_path / "pod-0" / "c.log").read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in kept] == ["step 0", "step 1", "step 2"]
