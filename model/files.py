"""Checks of the files a model is read from, before anything is built from them.

A compiled-model directory (`rasp compile -o DIR`, compiler/validate.py) and
a training checkpoint folder (trainer/run/checkpoint.py) are read as JSON and
safetensors only; nothing in them is ever executed.  Each file is checked
against a schema before anything is built from it: a safetensors file's
header (dtypes, shapes, offsets that tile the file exactly), a model config's
keys, types and ranges, and the SHA-256 of every file recorded in
`manifest.json` when the directory was written.  Any failure is a
`RaspFileError` naming the file (`DIR/FILE: error: ...`, exit status 2),
never a traceback from a loader.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import fields
from pathlib import Path

from rasp.atomic import write_text_atomic
from rasp.errors import RaspFileError
from rasp.readfile import open_regular, read_json

from .looped import ACTIVATIONS, ROTARY_FEATURE, LoopedConfig, LoopedTransformer

MANIFEST = "manifest.json"
MAX_DIM = 1 << 20            # any single width or vocabulary
MAX_LAYERS = 4096            # prelude + body + postlude blocks
MAX_WINDOW = 64              # positions back a local attention reads (LoopedConfig.attn_window)
MAX_HEADER = 100 << 20       # a safetensors JSON header
DTYPE_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
              "U8": 1, "BOOL": 1}


# ---- checksums ------------------------------------------------------------------

def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open_regular(path) as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def manifest_data(directory, names, kind: str) -> dict:
    d = Path(directory)
    return {"format": kind, "sha256": {name: sha256_file(d / name) for name in names}}


def write_manifest(directory, names, kind: str):
    """Record the SHA-256 of `names` in DIR/manifest.json (atomically)."""
    d = Path(directory)
    write_text_atomic(d / MANIFEST, json.dumps(manifest_data(d, names, kind), indent=2, sort_keys=True))


def verify_manifest(directory, names, kind: str) -> bool:
    """True when DIR/manifest.json lists exactly `names` and every checksum
    matches; False when there is no manifest (an older directory); raises
    RaspFileError when the manifest or a file does not match."""
    d = Path(directory)
    path = d / MANIFEST
    if not path.exists():
        return False
    man = read_json(path)
    if not isinstance(man, dict) or man.get("format") != kind or not isinstance(man.get("sha256"), dict):
        raise RaspFileError(path, f"not a {kind} manifest")
    listed = man["sha256"]
    if set(listed) != set(names):
        raise RaspFileError(path, f"lists {sorted(listed)}, expected {sorted(names)}")
    for name in names:
        f = d / name
        if sha256_file(f) != listed[name]:
            raise RaspFileError(f, "checksum mismatch: the file changed after it was written "
                                   "(damaged or edited)")
    return True


# ---- safetensors ----------------------------------------------------------------

def safetensors_header(path) -> dict:
    """{name: (dtype, shape)} from a safetensors file, after checking that its
    header is well formed and its tensors tile the data exactly (a truncated
    or padded file fails here, before any loader sees it)."""
    path = Path(path)
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        try:
            head = f.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if n < 2 or n > min(size - 8, MAX_HEADER):
                raise RaspFileError(path, f"not a safetensors file, or cut short ({size} bytes)")
            raw = f.read(n)
        except OSError as e:
            raise RaspFileError(path, f"cannot read: {e.strerror}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise RaspFileError(path, "damaged safetensors header (not JSON)") from None
    if not isinstance(header, dict):
        raise RaspFileError(path, "damaged safetensors header")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise RaspFileError(path, "damaged safetensors metadata")
    out, spans = {}, []
    for name, entry in header.items():
        ok = (isinstance(entry, dict) and entry.get("dtype") in DTYPE_SIZE
              and isinstance(entry.get("shape"), list) and all_ints(entry["shape"], 0)
              and isinstance(entry.get("data_offsets"), list) and len(entry["data_offsets"]) == 2
              and all_ints(entry["data_offsets"], 0))
        if not ok:
            raise RaspFileError(path, f"damaged safetensors entry for {name!r}")
        begin, end = entry["data_offsets"]
        if end - begin != math.prod(entry["shape"]) * DTYPE_SIZE[entry["dtype"]]:
            raise RaspFileError(path, f"tensor {name!r}: its offsets do not match its shape")
        spans.append((begin, end))
        out[name] = (entry["dtype"], tuple(entry["shape"]))
    spans.sort()
    pos = 0
    for begin, end in spans:
        if begin != pos:
            raise RaspFileError(path, "damaged safetensors layout (tensors overlap or leave gaps)")
        pos = end
    if pos != size - 8 - n:
        raise RaspFileError(path, f"cut short or padded: the header describes {pos} bytes of data, "
                                  f"the file holds {size - 8 - n}")
    return out


def all_ints(xs, lo) -> bool:
    return all(isinstance(x, int) and not isinstance(x, bool) and x >= lo for x in xs)


def load_tensors(path, expected: dict, dtype: str = "F32", device="cpu") -> dict:
    """Load a safetensors file whose tensors must be exactly `expected`
    ({name: shape}), each of `dtype`, all finite."""
    import torch
    from safetensors.torch import load_file
    path = Path(path)
    header = safetensors_header(path)
    missing = sorted(set(expected) - set(header))
    unknown = sorted(set(header) - set(expected))
    if missing or unknown:
        raise RaspFileError(path, "tensors do not match the config: "
                            + (f"missing {missing[:3]}" if missing else "")
                            + (" " if missing and unknown else "") + (f"unexpected {unknown[:3]}" if unknown else ""))
    for name, shape in expected.items():
        got_dtype, got_shape = header[name]
        if got_dtype != dtype or got_shape != tuple(shape):
            raise RaspFileError(path, f"tensor {name!r} is {got_dtype}{list(got_shape)}; the config needs "
                                      f"{dtype}{list(shape)}")
    try:
        tensors = load_file(str(path), device=str(device))
    except Exception as e:           # the header was checked; anything left is a damaged file
        raise RaspFileError(path, f"cannot load ({type(e).__name__}: {str(e)[:80]})") from None
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise RaspFileError(path, f"tensor {name!r} holds NaN or infinite values (damaged)")
    # in memory of torch's own (aligned): a tensor read from the file may start at any byte, and
    # a CPU matrix product's rounding can depend on where its operands start, so a resumed run
    # would drift from the uninterrupted one in the last bits
    return {name: t.clone() for name, t in tensors.items()}


# ---- model configs --------------------------------------------------------------

def check_value(path, ok: bool, key: str, want: str, value):
    if not ok:
        shown = json.dumps(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise RaspFileError(path, f"{key}: expected {want}, got {shown}")


def is_int(x, lo, hi) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and lo <= x <= hi


# a clock's sizes: integers 0..MAX_DIM, 0 where a file written before them lacks them
CLOCK_SIZES = ("clock_d_model", "clock_n_head", "clock_global_heads", "global_heads", "clock_wide_heads", "clock_d_mlp",
               "clock_max_heads", "max_heads")
OPTIONAL_KEYS = {"block_shapes", "halt_unit", "halt_marker", "attn_window", "halt_clock",
                 *CLOCK_SIZES}     # fields added later: files written before them still load


def check_config(cfg: dict, path, where: str = ""):
    """A LoopedConfig from a dict read from `path` (`where`: the key it sits
    under, for messages), after checking every key, type and range."""
    p = where + "." if where else ""
    check_value(path, isinstance(cfg, dict), where or "config", "an object", cfg)
    names = {f.name for f in fields(LoopedConfig)}
    unknown = sorted(set(cfg) - names)
    if unknown:
        raise RaspFileError(path, f"unknown key {p}{unknown[0]!r} (not a model config field)")
    missing = sorted(names - set(cfg) - OPTIONAL_KEYS)
    if missing:
        raise RaspFileError(path, f"missing key {p}{missing[0]!r}")
    sizes = {"vocab_size": 1, "out_vocab_size": 1, "d_model": 1, "n_head": 1, "d_head": 1, "d_mlp": 1,
             "n_prelude": 0, "n_body": 0, "n_postlude": 0}
    for key, lo in sizes.items():
        check_value(path, is_int(cfg[key], lo, MAX_DIM), p + key, f"an integer in {lo}..{MAX_DIM}", cfg[key])
    layers = cfg["n_prelude"] + cfg["n_body"] + cfg["n_postlude"]
    check_value(path, layers <= MAX_LAYERS, p + "n_prelude + n_body + n_postlude", f"at most {MAX_LAYERS}", layers)
    check_value(path, cfg["n_head"] * cfg["d_head"] <= MAX_DIM, p + "n_head * d_head", f"at most {MAX_DIM}",
                cfg["n_head"] * cfg["d_head"])
    shapes = cfg.get("block_shapes", [])
    ok = isinstance(shapes, list) and (not shapes or len(shapes) == layers) and all(
        isinstance(b, list) and len(b) == 3 and all_ints(b, 0) and max(b) <= MAX_DIM and b[0] * b[1] <= MAX_DIM
        for b in shapes)
    check_value(path, ok, p + "block_shapes", f"[] or one [n_head, d_head, d_mlp] per block (each 0..{MAX_DIM})",
                shapes)
    check_value(path, cfg["norm"] in ("layernorm", "none"), p + "norm", '"layernorm" or "none"', cfg["norm"])
    check_value(path, cfg["activation"] in ACTIVATIONS, p + "activation", " or ".join(map(json.dumps, ACTIVATIONS)),
                cfg["activation"])
    for key in ("input_injection", "body_final_norm", "bias", "bos", "halt_unit", "halt_marker"):
        check_value(path, isinstance(cfg.get(key, False), bool), p + key, "true or false", cfg.get(key))
    for key in ("attn_window", "halt_clock"):
        check_value(path, is_int(cfg.get(key, 0), 0, MAX_WINDOW), p + key, f"an integer in 0..{MAX_WINDOW}",
                    cfg.get(key))
    check_value(path, not cfg.get("halt_clock") or cfg.get("halt_unit") is True, p + "halt_clock",
                "0 unless halt_unit is true (the clock holds the halting unit)", cfg.get("halt_clock"))
    for key in CLOCK_SIZES:
        check_value(path, is_int(cfg.get(key, 0), 0, MAX_DIM), p + key, f"an integer in 0..{MAX_DIM}", cfg.get(key))
    check_value(path, not cfg.get("clock_d_model") or bool(cfg.get("halt_clock")), p + "clock_d_model",
                "0 unless halt_clock is set (the shape of the clock)", cfg.get("clock_d_model"))
    for key in ("clock_global_heads", "clock_wide_heads", "clock_max_heads"):
        check_value(path, cfg.get(key, 0) <= cfg.get("clock_n_head", 0), p + key, "at most clock_n_head", cfg.get(key))
    check_value(path, cfg.get("max_heads", 0) <= cfg["n_head"], p + "max_heads", "at most n_head", cfg.get("max_heads"))
    a = cfg["attn_scale"]
    check_value(path, a is None or (isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a)),
                p + "attn_scale", "null or a finite number", a)
    feats = cfg["position_features"]
    ok = isinstance(feats, list) and all(
        isinstance(f, list) and len(f) == 2 and isinstance(f[0], str)
        and (f[0] in ("one", "index", "index_sq") or ROTARY_FEATURE.fullmatch(f[0]))
        and is_int(f[1], 0, cfg["d_model"] - 1) for f in feats)
    check_value(path, ok, p + "position_features",
                "[[one|index|index_sq|index_cos:P|index_sin:P, residual dim], ...]", feats)
    check_value(path, isinstance(cfg["extra"], dict), p + "extra", "an object", cfg["extra"])
    try:
        return LoopedConfig.from_dict(cfg)
    except (TypeError, ValueError) as e:
        raise RaspFileError(path, f"not a model config ({e})") from None


def expected_shapes(cfg) -> dict:
    """{parameter name: shape} of LoopedTransformer(cfg), built on the meta
    device (nothing is allocated, however large the config claims to be)."""
    import torch
    with torch.device("meta"):
        model = LoopedTransformer(cfg)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}
