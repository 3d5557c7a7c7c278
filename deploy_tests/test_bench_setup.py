"""The benchmarks' setup: the TRL overlay's pins and the dtype chosen from the CPU's flags."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import common  # noqa: E402  (bench/common.py: the benchmarks are scripts, not a package)


def pins(lines: list[str]) -> dict[str, str]:
    found = (re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", x.strip()) for x in lines)
    return {m[1].lower(): m[2] for m in found if m}


def test_the_overlay_pins_the_bench_extra() -> None:
    """`make bench-deps` installs what pyproject's `bench` extra names, at the same versions."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["bench"]
    overlay = pins((ROOT / "bench" / "overlay-requirements.txt").read_text().splitlines())
    assert pins(extra).items() <= overlay.items()


def test_bf16_only_with_native_support(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\n")
    assert common.default_dtype(str(cpuinfo))[0] == "fp32"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_tile\n")
    dtype, why = common.default_dtype(str(cpuinfo))
    assert (dtype, "avx512_bf16" in why) == ("bf16", True)
    assert common.default_dtype(str(tmp_path / "missing"))[0] == "fp32"
