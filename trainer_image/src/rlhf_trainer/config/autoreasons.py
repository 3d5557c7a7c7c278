"""The one-line reasons of a `placement.auto` choice, as `rlhf plan`, `rlhf-operator render`
and `status.allocation.reasons` show them: the model sizes and where they came from, the
layout, and per role its GPUs and the memory arithmetic behind them."""

from __future__ import annotations

from .autoplan import AutoChoice, Cluster, Mode, Sizes, engine_need, group_need, groups_of
from .memory import engine_weights_gib, host_gib
from .roles import ACTOR, CRITIC, REFERENCE, REWARD, ROLE_ORDER, ROLLOUT

PAPER = "the OpenRLHF paper's layout (arXiv:2405.11143)"
MODE_TEXT = {
    Mode.SEPARATE: "every role on its own GPUs",
    Mode.PAIRS: "actor+reference and critic+reward share GPUs (apart they do not fit)",
    Mode.HYBRID: "all models and the vLLM engines share the same GPUs (hybrid engine, vLLM "
    "asleep while training)",
}


def _model_line(sizes: Sizes, roles: tuple[str, ...]) -> str:
    """`actor, reference 7.6B (parsed from ...); critic, reward 7.0B (...)`."""
    said: dict[str, list[str]] = {}
    for role in roles:
        if role == ROLLOUT:
            continue
        for size in sizes.by_role[role]:
            said.setdefault(f"{size.label} ({size.source})", []).append(role)
    return "; ".join(f"{', '.join(who)} {what}" for what, who in said.items())


def gpus(n: int) -> str:
    return f"{n} GPU" + ("" if n == 1 else "s")


def _what(role: str, choice: AutoChoice) -> str:
    zero = choice.zero
    if role in (ACTOR, CRITIC):
        return f"{zero.label}: bf16 weights, gradients" + ("" if zero.offload else ", Adam states")
    return "frozen bf16 weights" + (", sharded by ZeRO-3" if zero.stage == 3 else ", whole")


def _role_line(
    role: str, group: tuple[str, ...], choice: AutoChoice, sizes: Sizes, c: Cluster
) -> str:
    n = choice.devices[role]
    per_gpu = group_need(group, sizes, n, choice.zero, choice.tensor_parallel)
    shared = [r for r in group if r != role]
    line = gpus(n) + (f" shared with {'+'.join(shared)}" if shared else "")
    line += f": {per_gpu:.1f} of {c.usable:.1f} usable GiB per GPU ({_what(role, choice)})"
    host = host_gib(sizes.params(role), n, choice.zero) if role in (ACTOR, CRITIC) else 0.0
    if host:
        line += f"; CPU Adam's states on the host: {host:.1f} of {c.host_usable:.1f} GiB per GPU"
    return line


def _rollout_line(choice: AutoChoice, sizes: Sizes, c: Cluster) -> str:
    tp = choice.tensor_parallel
    weights = engine_weights_gib(sizes.params(ROLLOUT), tp)
    line = (
        f"{choice.engines} engines x tensor parallel {tp}: {weights:.1f} GiB of weights per "
        "GPU and as much again at least for the KV cache"
    )
    if choice.vllm_utilization is not None:
        return line + f"; gpuMemoryUtilization {choice.vllm_utilization:g}: what the models leave"
    budget = c.vllm_utilization * c.gpu_gib
    fits = f"{engine_need(sizes, tp):.1f} of {budget:.1f} GiB"
    return line + f" ({fits}, gpuMemoryUtilization {c.vllm_utilization:g})"


def reasons(choice: AutoChoice, sizes: Sizes, c: Cluster, *, paper: str | None) -> dict[str, str]:
    """`paper`: the row of the paper's table the choice follows (e.g. `7B on 16 GPUs`)."""
    roles = tuple(r for r in ROLE_ORDER if r in choice.devices)
    used = sum(n for r, n in choice.devices.items() if choice.mode is not Mode.HYBRID or r == ACTOR)
    how = f"{PAPER} for {paper}" if paper else choice.mode.value
    out = {
        "model": _model_line(sizes, roles),
        "layout": (
            f"{how}: {MODE_TEXT[choice.mode]}; {choice.zero.label} (the fastest strategy that "
            f"fits); {used} of {c.gpus} x {c.gpu_gib:g} GiB GPUs"
        ),
    }
    groups = groups_of(choice.mode, roles) or [(r,) for r in roles]
    for group in groups:
        for role in group:
            if role == ROLLOUT:
                out[role] = _rollout_line(choice, sizes, c)
            elif role in (ACTOR, REFERENCE, CRITIC, REWARD):
                out[role] = _role_line(role, group, choice, sizes, c)
    return {k: out[k] for k in ("model", "layout", *roles) if k in out}
