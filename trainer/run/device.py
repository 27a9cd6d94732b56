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


def check_device(name: str, what: str = "--device") -> str:
    """--device, checked: cpu, cuda[:N] (when there is one) or auto."""
    import re
    import torch
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(name, str) or not (name == "cpu" or re.fullmatch(r"cuda(:\d{1,4})?", name)):
        raise RaspError(f"unknown {what} {str(name)[:40]!r} (cpu, cuda, cuda:N or auto)")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RaspError(f"{what} {name}: no CUDA device is available")
    if ":" in name and int(name.split(":")[1]) >= torch.cuda.device_count():
        raise RaspError(f"{what} {name}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                        f"cuda:0..cuda:{torch.cuda.device_count() - 1}")
    return name


def api_device(device) -> str:
    """The `device=` of `rasp.load`, checked: None (the host), a name as --device takes
    it, a torch.device or a CUDA device's index."""
    import torch
    if device is None:
        return HOST
    if isinstance(device, torch.device):
        device = str(device)
    elif isinstance(device, int) and not isinstance(device, bool):
        device = f"cuda:{device}" if device >= 0 else str(device)
    return check_device(device, "device")


def refuse_compile_off_cuda(hp, device: str, given: bool):
    """--compile on builds kernels for the device before its first step: on a CUDA device
    that pays for itself, on a CPU it takes minutes (a 2-step width-8 run did not finish in
    5) and a small model gains nothing, so a CPU run refuses it before any work."""
    if hp.compile == "on" and not device.startswith("cuda"):
        said = "--compile on" if given else "--compile on (the run's setting)"
        raise RaspError(f"{said}: torch.compile is for CUDA devices; on this run's device, {device}, it spends "
                        "minutes compiling before the first step and does not make a small model faster; "
                        f"{'leave it out' if given else 'give --compile off'} (or train with --device cuda)")


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
