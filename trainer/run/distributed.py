"""Data-parallel helpers.  Launched by `torchrun`, every process samples the
same global batch from the same RNG and trains on its own slice, so the RNG
state is identical on all ranks and rank 0's checkpoint is enough to resume."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: str = "cpu"

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def on(self) -> bool:
        return self.world > 1

    def slice(self, n: int) -> slice:
        per = n // self.world
        return slice(self.rank * per, (self.rank + 1) * per)

    def mean(self, x: float) -> float:
        if not self.on:
            return x
        t = torch.tensor([x], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return float(t.item()) / self.world

    def barrier(self):
        if self.on:
            dist.barrier()


def setup(device: str) -> Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return Dist(dist.get_rank(), world, local, f"cuda:{local}" if device.startswith("cuda") else "cpu")


def teardown(d: Dist):
    if d.on and dist.is_initialized():
        dist.destroy_process_group()
