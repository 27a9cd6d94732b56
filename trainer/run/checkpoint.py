"""Atomic checkpoints: a directory per step, written under a temporary name
and renamed into place, then `latest.json` is replaced atomically.  A run
killed at any moment leaves either the previous or the new checkpoint, never
a torn one.

    OUT/checkpoints/step_0000500/
        model.safetensors       weights
        optimizer.safetensors   optimizer tensors + torch RNG state
        state.json              step, optimizer scalars, NumPy RNG, curriculum,
                                metric accumulators, model config, a copy of run.json
        manifest.json           SHA-256 of the three files above
    OUT/latest.json             {"step": 500, "path": "checkpoints/step_0000500"}
    OUT/.lock                   held (flock) by the one `rasp train` writing OUT (removed
                                when it stops; never opened through a link: trainer/run/lockfile.py)

Reading is defensive (model/files.py checks every file): a damaged
newest checkpoint falls back to the previous intact one (two are kept), a
missing or damaged `latest.json` is rebuilt from the checkpoint folders, and
a run whose checkpoints are all gone is refused rather than restarted.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import math
import os
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import save as safetensors_bytes

from model import LoopedTransformer
from model.files import check_config, expected_shapes, load_tensors, safetensors_header, verify_manifest, write_manifest
from rasp.errors import RaspError, RaspFileError
from rasp.readfile import MAX_LOG, read_bytes, read_json
from trainer.run import lockfile
from trainer.settings import hparams
from rasp.atomic import fsync_dir, write_json_atomic, write_text_atomic  # noqa: F401 (used as checkpoint.*)

FILES = ("model.safetensors", "optimizer.safetensors", "state.json")
# run.json / summary.json "format": 2 since one training loop serves every kind
# of run (trainer/run/loop.py); a run.json without it is format 1, read and resumed
# as before.  A newer format is refused: this code cannot know what it changed.
RUN_FORMAT = 2
KIND = "rasp-checkpoint/1"
FULL_DISK = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _warn(msg: str):
    print(f"warning: {msg}", file=sys.stderr)


def check_json_target(path) -> Path:
    """An evaluation's results file (RUN/eval*.json or rasp eval --json), checked
    before the work: a file name in an existing directory, not a directory or a device
    (replaced atomically, so a link there is replaced, never written through)."""
    path = Path(path)
    if path.is_dir():
        raise RaspFileError(path, "is a directory, where the results file goes; remove it or give --json FILE")
    if path.exists() and not path.is_file():
        raise RaspFileError(path, "is not a regular file")
    if not path.parent.is_dir():
        raise RaspFileError(path, f"its directory {path.parent} does not exist")
    return path


def write_failed(e: OSError, out, what: str) -> RaspError:
    """The user-facing error for an OSError while writing the run in `out`."""
    if e.errno in FULL_DISK:
        why = "no space left on the device" if e.errno != errno.EFBIG else "a file grew past the size limit"
    else:
        why = e.strerror or str(e)
    ok = _newest_step_name(Path(out))
    kept = f"the last checkpoint ({ok}) is intact" if ok else "no checkpoint was written yet"
    return RaspFileError(out, f"cannot write {what}: {why}; {kept} (free space, then --resume)")


def _newest_step_name(out: Path):
    try:
        return read_json(out / "latest.json")["path"]
    except Exception:       # only for a message
        return None


# ---- run description --------------------------------------------------------------

# what `--resume` may change (the fields' Settings say: how long the run goes on
# and how it is logged, never what the model and its updates are)
RESUMABLE = hparams.RESUMABLE


def resumed_hparams(hp, given: dict):
    """`hp` (a resumed run's own settings) with the settings given again on
    the command line: those in RESUMABLE apply, any other that differs from
    the run's is refused (a flag never silently does nothing)."""
    def current(k):         # a field, or a comparison model's extra option
        return getattr(hp, k) if hasattr(hp, k) else getattr(hp, "extra", {}).get(k)
    changed = [k for k, v in given.items() if v is not None and k not in RESUMABLE and current(k) != v]
    if changed:
        raise RaspError(f"--resume: the run was trained with {', '.join(f'{k} {current(k)!r}' for k in changed)};"
                        f" a resumed run keeps its settings (only {', '.join(RESUMABLE)} may change): leave "
                        "them out, or start a new run with another --out")
    for k in RESUMABLE:
        if given.get(k) is not None:
            setattr(hp, k, given[k])
    return hp


def run_fingerprint(run: dict) -> str:
    """Hash of what a run.json says about the model and its training: what
    a resume keeps (everything but --steps and --device)."""
    keep = {k: run.get(k) for k in ("task", "model", "init", "compress", "compress_method", "preset", "kind",
                                    "data", "program")}
    keep["hparams"] = {k: v for k, v in (run.get("hparams") or {}).items()
                       if k not in RESUMABLE and not (k in hparams.ADDED and v == hparams.ADDED[k])}
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()


def is_seq_run(run: dict) -> bool:
    """A comparison-task run (trainer/benchmark/kind.py) rather than a Fan-task one."""
    return isinstance(run, dict) and run.get("kind") == "seq"


def is_seq_run_dir(run_dir) -> bool:
    """Quietly: does run_dir hold a comparison run?  run.json says so, or,
    when it is damaged, the newest checkpoint's config (no warnings here: the
    path chosen reports any damage itself)."""
    run_dir = Path(run_dir)
    try:
        return read_json(run_dir / "run.json").get("kind") == "seq"
    except (RaspFileError, AttributeError):
        pass
    try:
        newest = max(p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("step_"))
        return read_json(newest / "state.json")["config"].get("kind") == "seq"
    except (OSError, RaspFileError, ValueError, KeyError, AttributeError, TypeError):
        return False


def check_run(run, path):
    ok = (isinstance(run, dict) and all(isinstance(run.get(k), str) for k in ("task", "model", "init"))
          and isinstance(run.get("hparams"), dict))
    if not ok:
        raise RaspFileError(path, "not a run description (needs task, model, init and hparams)")
    fmt = run.get("format", 1)
    if not (isinstance(fmt, int) and not isinstance(fmt, bool) and 1 <= fmt <= RUN_FORMAT):
        # not damage (no falling back to the checkpoint's copy): a run this code cannot read
        raise RaspError(f"{path}: run format {json.dumps(fmt)[:20]}: this rasp reads run formats 1 to "
                        f"{RUN_FORMAT}; use the rasp version that wrote the run (or a newer one)")
    from trainer.settings.hparams import HParams
    mine = set(HParams.names("seq" if is_seq_run(run) else "fan"))
    types = {f.name: str(f.type) for f in dataclasses.fields(HParams) if f.name in mine}
    for k, v in run["hparams"].items():
        if k in types and not _fits(v, types[k]):
            raise RaspFileError(path, f"hparams.{k}: {json.dumps(v)[:40]} is not a valid {types[k]}")
    return run


def _fits(v, t: str) -> bool:
    if v is None:
        return t.startswith("Optional")
    if "bool" in t:
        return isinstance(v, bool)
    if "dict" in t or "list" in t:
        return isinstance(v, dict if "dict" in t else list)
    if "str" in t:
        return isinstance(v, str)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return isinstance(v, int) and v >= 0 if "int" in t else math.isfinite(v)


def has_run(out) -> bool:
    """OUT holds (what is left of) a training run."""
    out = Path(out)
    return any((out / name).exists() for name in ("run.json", "latest.json", "checkpoints"))


def read_run(out, ckpt=None) -> dict:
    """OUT/run.json, checked; when it is damaged or missing, the copy kept in
    the latest checkpoint (saying so)."""
    path = Path(out) / "run.json"
    try:
        return check_run(read_json(path), path)
    except RaspFileError as e:
        ckpt = ckpt or latest(out)
        copy = load_state(ckpt).get("run") if ckpt is not None else None
        if copy is None:
            raise
        _warn(f"{e.path}: {e.message}; using the copy kept in {Path(ckpt).name}")
        return check_run(copy, Path(ckpt) / "state.json")


def read_checked_run(out) -> dict:
    """read_run(), refused when it does not describe the latest checkpoint."""
    ckpt = latest(out)
    run = read_run(out, ckpt)
    if ckpt is not None:
        check_run_matches(run, ckpt, Path(out) / "run.json")
    return run


def check_run_matches(run: dict, ckpt, run_path):
    """Refuse a run.json that does not describe the model in `ckpt` (edited
    after training)."""
    state = load_state(ckpt)
    copy = state.get("run")
    if copy is not None:
        if run_fingerprint(copy) != run_fingerprint(run):
            diff = sorted(k for k in set(copy) | set(run) if k not in ("hparams", "device", "init_info",
                                                                       "world_size") and copy.get(k) != run.get(k))
            diff += sorted(f"hparams.{k}" for k in set(copy["hparams"]) | set(run["hparams"])
                           if k not in RESUMABLE and copy["hparams"].get(k) != run["hparams"].get(k))
            raise RaspFileError(run_path, f"does not describe the model in {Path(ckpt).name} (it differs in "
                                          f"{', '.join(diff[:4]) or 'its contents'}): it was edited after "
                                          "training")
        return
    for key, skey in (("task", "task"), ("model", "model_name")):      # checkpoints without a copy
        if skey in state and state[skey] != run[key]:
            raise RaspFileError(run_path, f"says {key} {run[key]!r}, but {Path(ckpt).name} holds "
                                          f"{state[skey]!r}: it was edited after training")


# ---- writing ------------------------------------------------------------------------

@contextlib.contextmanager
def run_lock(out, resume: bool, enabled: bool = True):
    """Hold an exclusive lock on the run directory for one `rasp train` (a
    second one on the same --out is refused), and clear what killed runs
    left behind."""
    out = Path(out)
    if not enabled:
        yield
        return
    if not out.exists():
        if resume:
            raise RaspError(f"--resume: {out} does not exist")
        try:
            out.mkdir(parents=True)
        except OSError as e:
            raise RaspFileError(out, f"cannot create the run directory: {e.strerror}") from None
    elif not out.is_dir():
        raise RaspFileError(out, "exists and is not a directory")
    try:
        fd = lockfile.acquire(out / ".lock")
    except lockfile.LockBusy as busy:
        raise RaspFileError(out, f"another `rasp train` (pid {busy.holder or '?'}) is writing this run directory; "
                                 "wait for it to finish or choose another --out") from None
    lockfile.write_note(fd, str(os.getpid()))
    try:
        clean_leftovers(out)
        yield
    finally:
        lockfile.release(out / ".lock", fd)          # a finished run folder keeps no lock file


def clean_leftovers(out):
    """Remove the temporary files and folders of runs killed mid-write."""
    out = Path(out)
    root = out / "checkpoints"
    junk = [p for p in root.glob(".tmp-step_*")] if root.is_dir() else []
    junk += [p for p in out.glob(".*.tmp[0-9]*")]
    for p in junk:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


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
    """state: JSON-able (RNG, curriculum, accumulators...); its "config" is
    the model's description (default: a LoopedTransformer's `cfg`).  A failed
    write (full disk) leaves the previous checkpoint as it was."""
    out = Path(out)
    root = out / "checkpoints"
    name = f"step_{step:07d}"
    tmp = root / f".tmp-{name}-{os.getpid()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        return _save(out, root, name, tmp, step, model, optimizer, state, max(keep, 2))
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise write_failed(e, out, f"checkpoint {name}") from None


def _save(out, root, name, tmp, step, model, optimizer, state, keep):
    final = root / name
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    _write_tensors(tmp / "model.safetensors", {k: v.detach().cpu().contiguous()
                                               for k, v in model.state_dict().items()})
    opt_tensors, opt_meta = _optimizer_split(optimizer)
    opt_tensors["rng.torch"] = torch.get_rng_state()
    _write_tensors(tmp / "optimizer.safetensors", opt_tensors)
    config = state["config"] if "config" in state else json.loads(model.cfg.to_json())
    full = dict(state, step=step, optimizer=opt_meta, config=config)
    try:                 # the run description travels with the weights (eval checks it)
        full["run"] = read_json(out / "run.json")
    except RaspFileError:
        pass
    with open(tmp / "state.json", "w") as f:
        json.dump(full, f, indent=2, sort_keys=True)
    write_manifest(tmp, FILES, KIND)
    for p in tmp.iterdir():
        with open(p, "rb") as f:
            os.fsync(f.fileno())
    if final.exists():           # re-saving the same step (e.g. after a resume)
        shutil.rmtree(final)
    os.rename(tmp, final)
    fsync_dir(root)
    write_json_atomic(out / "latest.json", {"step": step, "path": f"checkpoints/{name}"})
    _prune(root, keep, final)
    return final


def _write_tensors(path: Path, tensors: dict):
    # serialized in memory and written by Python, so that a full disk is an
    # OSError (safetensors' own writer reports it as a SafetensorError)
    data = safetensors_bytes(tensors)
    with open(path, "wb") as f:
        f.write(data)


def _prune(root: Path, keep: int, current: Path):
    done = sorted(p for p in root.iterdir() if p.name.startswith("step_"))
    for p in done[:-keep] if keep > 0 else []:
        if p != current:
            shutil.rmtree(p, ignore_errors=True)


# ---- reading ------------------------------------------------------------------------

def problem(ckpt: Path):
    """None if checkpoint folder `ckpt` is intact, else why not."""
    try:
        if not Path(ckpt).is_dir():
            return "missing"
        if verify_manifest(ckpt, FILES, KIND):              # exactly as save() wrote it
            return None
        safetensors_header(Path(ckpt) / "optimizer.safetensors")    # older: check the structure
        state = load_state(ckpt)
        header = safetensors_header(Path(ckpt) / "model.safetensors")
        if state["config"].get("kind") == "seq":        # a comparison model: its shapes come from its code
            return None
        shapes = expected_shapes(check_config(state["config"], Path(ckpt) / "state.json", "config"))
        if {k: v[1] for k, v in header.items()} != shapes:
            return "model.safetensors does not match the config in state.json"
    except RaspError as e:
        return e.format().replace(str(ckpt) + "/", "")
    return None


def latest(out: Path, repair: bool = False):
    """Path of the newest intact checkpoint, or None when the run has none
    yet.  Prefers the one latest.json names; a damaged one falls back to the
    previous intact folder (saying so).  With `repair` (a training process
    holding the run's lock) damaged folders are set aside as
    `checkpoints/damaged-step_*` and latest.json is rewritten.  Raises when
    the run had checkpoints but none is intact."""
    out = Path(out)
    pointer = out / "latest.json"
    root = out / "checkpoints"
    named, notes = None, []
    if pointer.exists():
        try:
            rel = read_json(pointer)["path"]
            named = out / rel
            if not (isinstance(rel, str) and named.parent == root and named.name.startswith("step_")):
                raise ValueError
        except (RaspFileError, ValueError, KeyError, TypeError):
            named = None
            notes.append("latest.json is damaged")
    folders = sorted((p for p in root.iterdir() if p.name.startswith("step_")), reverse=True) \
        if root.is_dir() else []
    if not pointer.exists() and folders:
        notes.append("latest.json is missing")
    order = ([named] if named is not None else []) + [p for p in folders if p != named]
    bad = []
    for ck in order:
        why = problem(ck)
        if why == "missing" and ck == named:
            why = "missing (latest.json names it)"
        if why is None:
            if notes or bad:
                _warn(f"{out}: " + "; ".join(notes + [f"{b.name} is damaged ({w})" for b, w in bad])
                      + f"; using {ck.name}")
                if repair:
                    _set_aside(bad)
                    write_json_atomic(pointer, {"step": load_state(ck)["step"], "path": f"checkpoints/{ck.name}"})
            return ck
        bad.append((ck, why))
    if not notes and not bad:
        return None
    raise RaspFileError(out, "no intact checkpoint: " + "; ".join(
        notes + [f"{b.name}: {w}" for b, w in bad]) + " (nothing to continue from; start again with another --out)")


def _set_aside(bad):
    for ck, _ in bad:
        if ck.is_dir():
            target = ck.with_name("damaged-" + ck.name)
            shutil.rmtree(target, ignore_errors=True)
            os.rename(ck, target)


def load_state(ckpt: Path) -> dict:
    path = Path(ckpt) / "state.json"
    state = read_json(path, finite=True)        # a NaN (learning rate, loss sums) would poison a resumed run
    if not isinstance(state, dict) or not isinstance(state.get("step"), int) or isinstance(state["step"], bool) \
            or state["step"] < 0 or not isinstance(state.get("config"), dict):
        raise RaspFileError(path, "not a checkpoint state (needs step and config)")
    return state


def load_model(ckpt: Path, device="cpu", model: torch.nn.Module = None) -> torch.nn.Module:
    """The weights of checkpoint `ckpt` in `model` (any module, built from the
    checkpoint's config by its run's kind), or, without one, in the
    LoopedTransformer that the checkpoint's config describes.  The file must
    hold exactly the model's tensors and shapes (compiler's file checks)."""
    config = None if model is not None else load_state(ckpt)["config"]
    return model_from_files(Path(ckpt) / "model.safetensors", config, Path(ckpt) / "state.json", "config",
                            device, model)


def model_from_files(weights, config, config_path, key: str, device="cpu", model: torch.nn.Module = None):
    """The weights in safetensors file `weights` in `model`, or, without one,
    in the LoopedTransformer that `config` (read from `config_path` under
    `key`) describes; the file must hold exactly the model's tensors."""
    if model is not None:
        model.load_state_dict(load_tensors(weights, {k: list(v.shape) for k, v in model.state_dict().items()},
                                           device=device))
        return model.to(device)
    cfg = check_config(config, config_path, key)
    tensors = load_tensors(weights, expected_shapes(cfg), device=device)
    with torch.device("meta"):           # every tensor comes from the file
        model = LoopedTransformer(cfg)
    model.load_state_dict(tensors, assign=True)
    return model.to(device)


def restore_optimizer(ckpt: Path, optimizer, state: dict):
    from safetensors.torch import load_file
    path = Path(ckpt) / "optimizer.safetensors"
    safetensors_header(path)
    try:
        tensors = load_file(str(path))
        torch.set_rng_state(tensors.pop("rng.torch"))
        dev = next(iter(optimizer.param_groups[0]["params"])).device
        # copies in aligned memory, as model.files.load_tensors makes the weights'
        tensors = {k: (v if k.endswith(".step") else v.to(dev, copy=True)) for k, v in tensors.items()}
        optimizer.load_state_dict(_optimizer_join(tensors, state["optimizer"]))
    except (KeyError, ValueError, RuntimeError, TypeError) as e:
        raise RaspFileError(path, f"does not fit the model's optimizer ({type(e).__name__}: {str(e)[:80]})") \
            from None


def read_jsonl(path, check=None) -> list:
    """Rows of a JSON-lines file; a line cut short (the run was killed while
    writing it), or one that `check(row)` finds a problem in (a message, or
    None), is dropped, saying so (FILE:LINE)."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    text = read_bytes(path, MAX_LOG).decode("utf-8", errors="replace")
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError
        except (ValueError, RecursionError):
            _warn(f"{path}:{i}: dropped a damaged line (cut short when the run was killed?)")
            continue
        problem = check(row) if check else None
        if problem:
            _warn(f"{path}:{i}: dropped a damaged line ({problem})")
            continue
        rows.append(row)
    return rows
