"""The driver's side of containing a reward function's process: what it inherits, how its
processes are counted and killed, and how a broken limit is told.

The worker runs in its own session (`start_new_session`), so every process it starts shares
its session id unless it calls `setsid` itself. That gives the driver a handle on the whole
tree that needs no privileges and works the same as root and as any user:

- `ProcessWatch` counts the session's processes a few times a second and kills all of them
  once there are more than `limits.processes`. RLIMIT_NPROC is not used: it counts every
  process of the user on the node (the trainer's Ray workers, other pods running as the same
  uid), so a value small enough to stop a fork loop would make the function's first
  `subprocess.run` fail whenever the trainer happens to have many processes; and root ignores
  it. The watch polls, so a fork bomb gets a fraction of a second: the kernel bound on the
  pod's process count is the platform's (kubelet `podPidsLimit`), see docs/security.md.
- `kill_session` kills every process of the session (a process group kill, then each member
  that moved to another group), through pidfds, so a recycled pid is never signalled.

A process that calls `setsid` itself leaves the session and escapes both; it still carries
the per-process limits (memory, CPU, files), which it cannot raise (see `_confine`).

`worker_env` builds the worker's environment from an allowlist: the job's secrets (HF_TOKEN,
WANDB_API_KEY, AWS_*, RLHF_REMOTE_REWARD_TOKEN, Ray's token) and the pod's API server address
are not passed. An environment is not a wall, though: the ServiceAccount token file under
/var/run/secrets/kubernetes.io/serviceaccount and other processes' /proc/<pid>/environ stay
readable by a process of the same uid in the same container. docs/security.md says what the
pod must do about that.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

# Passed to the worker as they are: where things are, locale, threading; nothing secret.
ENV_ALLOWLIST = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "LD_LIBRARY_PATH",
        "VIRTUAL_ENV",
        "PYTHONHASHSEED",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONIOENCODING",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_HUB_OFFLINE",
        "HF_DATASETS_CACHE",
        "TRANSFORMERS_CACHE",
        "TRANSFORMERS_OFFLINE",
        "XDG_CACHE_HOME",
        "TORCH_HOME",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "TOKENIZERS_PARALLELISM",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
    }
)
ENV_ALLOWED_PREFIXES = ("LC_",)
# Set for the worker whatever the driver has: the function runs on CPUs (its address-space
# limit and CUDA's huge reservations do not mix; GPU scorers are `rewardModels`), and glibc's
# per-thread malloc arenas would otherwise spend the address-space limit on reservations.
ENV_FORCED = {"CUDA_VISIBLE_DEVICES": ""}
ENV_DEFAULTS = {"MALLOC_ARENA_MAX": "2"}

WATCH_INTERVAL = 0.2  # seconds between two counts of the worker's processes
_KILL_ROUNDS = 50


def worker_env(package_root: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: the allowlisted variables of `environ`, PYTHONPATH starting
    with `package_root` (the worker imports this package, from the same copy as the driver,
    even when that copy is on sys.path only: a checkout, a Ray runtime_env working_dir)."""
    environ = os.environ if environ is None else environ
    env = {
        k: v for k, v in environ.items() if k in ENV_ALLOWLIST or k.startswith(ENV_ALLOWED_PREFIXES)
    }
    paths = [str(package_root), *filter(None, environ.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    for key, value in ENV_DEFAULTS.items():
        env.setdefault(key, value)
    return env | ENV_FORCED


@dataclass(frozen=True)
class ProcStat:
    pid: int
    session: int
    zombie: bool
    cpu_seconds: float  # user + system time of the process itself


_TICKS = os.sysconf("SC_CLK_TCK")


def _read_stat(pid: int) -> ProcStat | None:
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        utime, stime = int(fields[11]), int(fields[12])
        return ProcStat(pid, int(fields[3]), fields[0] == b"Z", (utime + stime) / _TICKS)
    except (IndexError, ValueError):
        return None


def session_members(session: int) -> list[ProcStat]:
    """Every process (zombies included: they hold pids) whose session id is `session`."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _read_stat(int(name))
            if stat is not None and stat.session == session:
                found.append(stat)
    return found


def _kill_one(pid: int, session: int) -> None:
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return  # gone already
    try:
        # The pidfd pins this very process: check that it is still ours, then signal it.
        stat = _read_stat(pid)
        if stat is not None and stat.session == session:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(fd)


def kill_session(session: int) -> None:
    """SIGKILL every live process of `session` (the worker's pid), until none is left."""
    for _ in range(_KILL_ROUNDS):
        # The group kill is atomic against forks of its members (a fork racing it fails).
        with contextlib.suppress(OSError):
            os.killpg(session, signal.SIGKILL)
        live = [p for p in session_members(session) if not p.zombie]
        if not live:
            return
        for member in live:
            _kill_one(member.pid, session)
        time.sleep(0.01)


class ProcessWatch:
    """A thread counting the worker's session while it lives; past `limit` processes it
    calls `on_exceeded(count)` (which kills them) once. `cpu_seconds` is the worker's own CPU
    time at the last count, which tells a kill by the CPU hard limit from the OOM killer's."""

    def __init__(
        self,
        pid: int,
        limit: int,
        alive: Callable[[], bool],
        on_exceeded: Callable[[int], None],
        interval: float = WATCH_INTERVAL,
    ) -> None:
        self.pid, self.limit, self.interval = pid, limit, interval
        self._alive, self._on_exceeded = alive, on_exceeded
        self.cpu_seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reward-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval) and self._alive():
            members = session_members(self.pid)
            for member in members:
                if member.pid == self.pid:
                    self.cpu_seconds = member.cpu_seconds
            if len(members) > self.limit:
                self._on_exceeded(len(members))
                return

    def stop(self) -> None:
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
