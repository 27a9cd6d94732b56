"""Atomic checkpoints: a directory per step, written under a temporary name
and renamed into place, then `latest.json` is replaced atomically.  A run
killed at any moment leaves either the previous or the new checkpoint, never
a torn one.

    OUT/checkpoints/step_0000500/
        model.safetensors       weights
        optimizer.safetensors   optimizer tensors + torch RNG state
        state.json              step, optimizer scalars, NumPy RNG, curriculum,
                                metric accumulators, model config
    OUT/latest.json             {"step": 500, "path": "checkpoints/step_0000500"}
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from rasp.errors import RaspError
from trainer.model import LoopedConfig, LoopedTransformer


def _fsync_dir(path: Path):
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def write_json_atomic(path: Path, obj):
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _optimizer_split(opt: torch.optim.Optimizer):
    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for idx, st in sd["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v):
                tensors[f"state.{idx}.{k}"] = v.detach().cpu().contiguous()
            else:
                scalars[f"{idx}.{k}"] = v
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def _optimizer_join(tensors: dict, meta: dict) -> dict:
    state: dict = {}
    for key, v in tensors.items():
        if key.startswith("state."):
            _, idx, k = key.split(".", 2)
            state.setdefault(int(idx), {})[k] = v
    for key, v in meta["scalars"].items():
        idx, k = key.split(".", 1)
        state.setdefault(int(idx), {})[k] = v
    return {"state": state, "param_groups": meta["param_groups"]}


def save(out: Path, step: int, model, optimizer, state: dict, keep: int = 2) -> Path:
    """state: JSON-able (RNG, curriculum, accumulators...)."""
    out = Path(out)
    root = out / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:07d}"
    final = root / name
    tmp = root / f".tmp-{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
              str(tmp / "model.safetensors"))
    opt_tensors, opt_meta = _optimizer_split(optimizer)
    opt_tensors["rng.torch"] = torch.get_rng_state()
    save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
    full = dict(state, step=step, optimizer=opt_meta, config=json.loads(model.cfg.to_json()))
    with open(tmp / "state.json", "w") as f:
        json.dump(full, f, indent=2, sort_keys=True)
    for p in tmp.iterdir():
        with open(p, "rb") as f:
            os.fsync(f.fileno())
    if final.exists():           # re-saving the same step (e.g. after a resume)
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    write_json_atomic(out / "latest.json", {"step": step, "path": f"checkpoints/{name}"})
    _prune(root, keep, final)
    return final


def _prune(root: Path, keep: int, current: Path):
    done = sorted(p for p in root.iterdir() if p.name.startswith("step_"))
    for p in done[:-keep] if keep > 0 else []:
        if p != current:
            shutil.rmtree(p, ignore_errors=True)


def latest(out: Path):
    """Path of the newest complete checkpoint, or None."""
    f = Path(out) / "latest.json"
    if not f.exists():
        return None
    try:
        rel = json.loads(f.read_text())["path"]
    except (ValueError, KeyError):
        raise RaspError(f"{f} is not a checkpoint pointer")
    return Path(out) / rel


def load_state(ckpt: Path) -> dict:
    return json.loads((Path(ckpt) / "state.json").read_text())


def load_model(ckpt: Path, device="cpu") -> LoopedTransformer:
    state = load_state(ckpt)
    model = LoopedTransformer(LoopedConfig.from_dict(state["config"]))
    model.load_state_dict(load_file(str(Path(ckpt) / "model.safetensors"), device=str(device)))
    return model.to(device)


def restore_optimizer(ckpt: Path, optimizer, state: dict):
    tensors = load_file(str(Path(ckpt) / "optimizer.safetensors"))
    torch.set_rng_state(tensors.pop("rng.torch"))
    dev = next(iter(optimizer.param_groups[0]["params"])).device
    tensors = {k: (v if k.endswith(".step") else v.to(dev)) for k, v in tensors.items()}
    optimizer.load_state_dict(_optimizer_join(tensors, state["optimizer"]))
