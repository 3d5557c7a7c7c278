"""Inside the reward-function worker, before the user's file is imported: the limits it runs
under, the privileges it gives up, and which limit an exception says was broken.

Standard library only: the worker starts in a fraction of a second.

The limits are kernel rlimits, inherited by every process the function starts and counted
per process: address space (RLIMIT_AS: an allocation beyond it fails with MemoryError), file
size (RLIMIT_FSIZE: a write beyond it fails with EFBIG; Python ignores SIGXFSZ), open files
(RLIMIT_NOFILE), no core files, and CPU time (RLIMIT_CPU, below). A process may lower its
limits but not raise a hard limit, unless it holds CAP_SYS_RESOURCE: a worker started as
root therefore drops every capability first (and sets no_new_privs, so no exec gives any
back), which leaves root's file ownership but not its power over the limits.

CPU time: RLIMIT_CPU counts a process's whole life, and the worker serves many calls. The
soft limit (SIGXCPU, which kills) is moved before each call to the time used so far plus
`cpuSeconds`; the hard limit (SIGKILL), fixed at about twice `cpuSeconds`, is what code that
lifts its own soft limit still meets. The driver replaces a worker that has used more than
`cpuSeconds` in all, so every call has its whole budget (`function_runner`).
"""

from __future__ import annotations

import ctypes
import errno
import json
import math
import resource
from collections.abc import Iterator
from dataclasses import dataclass

MIB = 1024 * 1024

# prctl(2) options and capset(2)'s header version, from <linux/prctl.h>/<linux/capability.h>.
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPABILITY_VERSION_3 = 0x20080522
_LAST_CAP_GUESS = 63  # dropping a capability the kernel does not know fails harmlessly


@dataclass(frozen=True)
class Limits:
    """`models.rewardFunction.limits`, as the worker receives it (snake_case JSON)."""

    memory_mib: int
    cpu_seconds: int
    open_files: int
    processes: int
    file_size_mib: int
    output_bytes: int

    @classmethod
    def from_json(cls, text: str) -> Limits:
        data = json.loads(text)
        return cls(**{k: int(data[k]) for k in cls.__dataclass_fields__})


def cpu_hard_limit(cpu_seconds: int) -> int:
    """The worker's hard RLIMIT_CPU for its life: two calls' worth (the driver replaces it
    past one), and 2 s for the rounding of a limit counted in whole seconds."""
    return 2 * cpu_seconds + 2


def _lower(which: int, soft: int, hard: int | None = None) -> None:
    """Set a limit, never above what the platform already set (a lower hard limit stays)."""
    _, current_hard = resource.getrlimit(which)
    hard = soft if hard is None else hard
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)
    resource.setrlimit(which, (min(soft, hard), hard))


def apply_limits(limits: Limits) -> None:
    _lower(resource.RLIMIT_AS, limits.memory_mib * MIB)
    _lower(resource.RLIMIT_FSIZE, limits.file_size_mib * MIB)
    _lower(resource.RLIMIT_NOFILE, limits.open_files)
    _lower(resource.RLIMIT_CORE, 0)  # a SIGXCPU would otherwise dump a core of the worker
    _lower(resource.RLIMIT_CPU, limits.cpu_seconds, cpu_hard_limit(limits.cpu_seconds))


def cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def start_call_budget(limits: Limits) -> None:
    """Give the next call `cpuSeconds` of CPU from now (a soft limit, under the hard one)."""
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = math.ceil(cpu_used()) + limits.cpu_seconds
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


def _capabilities() -> int:
    """The effective and permitted capability sets, or-ed (0: an unprivileged process)."""
    with open("/proc/self/status", encoding="ascii") as status:
        caps = dict(line.split(":", 1) for line in status if line.startswith("Cap"))
    return int(caps["CapEff"], 16) | int(caps["CapPrm"], 16)


def drop_privileges() -> None:
    """no_new_privs always; every capability dropped when the worker has any (root).
    Raises OSError if they cannot be dropped: limits a root process could lift are none."""
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    if prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if not _capabilities():
        return
    # The bounding set (needs CAP_SETPCAP, so first) and ambient set: nothing an exec could
    # regain; then the process's own sets, which lowering needs no privilege for.
    for cap in range(_LAST_CAP_GUESS + 1):
        prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two (effective, permitted, inheritable) triples, zero
    if libc.capset(ctypes.byref(header), ctypes.byref(data)) != 0:
        raise OSError(ctypes.get_errno(), "capset() could not drop the capabilities")
    if _capabilities():
        raise OSError(errno.EPERM, "capabilities are still held after capset()")


def confine(limits: Limits) -> None:
    """What the worker does before it imports the user's file."""
    drop_privileges()
    apply_limits(limits)


def _chain(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def broken_limit(err: BaseException) -> str | None:
    """The `limits` field (camelCase) an exception shows was reached, if any. The whole
    cause chain counts: user code that turns a MemoryError into its own error still hit it."""
    for e in _chain(err):
        if isinstance(e, MemoryError):
            return "memoryMiB"
        if isinstance(e, OSError) and e.errno == errno.EMFILE:
            return "openFiles"
        if isinstance(e, OSError) and e.errno == errno.EFBIG:
            return "fileSizeMiB"
    return None
