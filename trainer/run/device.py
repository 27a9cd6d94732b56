"""Where a command computes: torch's CPU threads and the device, checked.
torch is imported in the functions, not above: `rasp train`'s parser reads
SMALL_CPU and is built (and a mistyped flag refused) without it."""
from __future__ import annotations

import os

from rasp.errors import RaspError

SMALL_CPU = 4   # cores; at most this many: one torch thread per process by default


def set_threads(requested) -> str:
    """Apply --threads (or the default) and say what was chosen and why."""
    import torch
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if requested is not None:                 # in 1..MAX_THREADS (its argparse type)
        n, why = requested, "--threads"
    elif os.environ.get("OMP_NUM_THREADS"):
        n, why = torch.get_num_threads(), "OMP_NUM_THREADS"
    elif cores <= SMALL_CPU:
        n, why = 1, f"the default with {cores} cores (<= {SMALL_CPU}); --threads N to change"
    else:
        n, why = torch.get_num_threads(), f"torch's default with {cores} cores; --threads N to change"
    torch.set_num_threads(n)
    return f"threads: {n} ({why})"


def check_device(name: str) -> str:
    """--device, checked: cpu, cuda[:N] (when there is one) or auto."""
    import torch
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RaspError("--device cuda: no CUDA device is available")
    if not (name == "cpu" or name.startswith("cuda")):
        raise RaspError(f"unknown --device {name!r} (cpu, cuda or auto)")
    return name


HOST = "cpu"


def on_host():
    """A context in which tensors made without `device=` are made on the host,
    whatever torch's default device: batches are built there and moved once
    (`to_device`), and weights are drawn there, so a seed gives the same start
    on every device.  tests/test_devices.py sets the default device to `meta`
    to find every tensor made without a device outside such a context."""
    import torch
    return torch.device(HOST)


def to_device(t, device):
    """A host tensor on `device`: pinned and copied without waiting on a GPU,
    so the next batch is built while the device works on this one (the copy
    is ordered before any kernel that reads it on the same stream)."""
    import torch
    device = torch.device(device)
    if device.type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def use_tf32(on: bool):
    """TF32 matrix products and convolutions on CUDA (`--tf32`); CPUs have none."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def autocast(device, precision: str):
    """The context of a training forward and loss: bfloat16 autocast on the
    device's type (`--precision bf16`), or nothing (fp32: every run before it)."""
    import contextlib
    import torch
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
