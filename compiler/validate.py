"""Reading a compiled-model directory (`rasp compile -o DIR`), checked before use.

The files are read as JSON, safetensors and program text only; nothing in
them is ever executed.  The generic checks (safetensors header, JSON, the
SHA-256 manifest, the model config) are model/files.py's; this module adds
what only a compiled model has: the compiler's keys in `config.extra`, and a
program copy whose vocabulary and loop match the config.  Any failure is a
`RaspFileError` naming the file (`DIR/FILE: error: ...`, exit status 2),
never a traceback from a loader.

Directories written before manifests existed are accepted with a warning:
their structure is still checked in full, only edits that keep the structure
valid (a changed weight, a different program of the same vocabulary) go
unnoticed.  Recompiling writes the manifest.
"""
from __future__ import annotations

import sys
from pathlib import Path

from model.files import (MANIFEST, all_ints, check_config, check_value, expected_shapes, is_int, load_tensors,
                         verify_manifest)
from rasp.errors import RaspError, RaspFileError
from rasp.readfile import read_json, read_text

from .loops import one_loop

COMPILED_FILES = ("config.json", "model.safetensors", "program.rasp")


def _check_compiled_extra(cfg, path):
    ex, d = cfg.extra, cfg.d_model
    check_value(path, all(k in ex for k in ("input_tokens", "output_tokens", "state_dims", "compiler")),
                "extra", "input_tokens, output_tokens, state_dims and compiler", sorted(ex))
    toks = ex["input_tokens"]
    check_value(path, isinstance(toks, list) and len(toks) == cfg.vocab_size and all_ints(toks, -(1 << 62))
                and len(set(toks)) == len(toks), "extra.input_tokens",
                f"{cfg.vocab_size} distinct integers (vocab_size)", toks)
    out = ex["output_tokens"]
    check_value(path, isinstance(out, list) and len(out) == cfg.out_vocab_size and all_ints(out, -(1 << 62)),
                "extra.output_tokens", f"{cfg.out_vocab_size} integers (out_vocab_size)", out)
    sd = ex["state_dims"]
    check_value(path, isinstance(sd, list) and all(is_int(x, 0, d - 1) for x in sd), "extra.state_dims",
                f"residual dims in 0..{d - 1}", sd)
    info = ex["compiler"]
    check_value(path, isinstance(info, dict), "extra.compiler", "an object", info)
    for key in ("has_loop", "until_stable"):
        check_value(path, isinstance(info.get(key), bool), f"extra.compiler.{key}", "true or false", info.get(key))
    for key in ("max_len", "design_length"):
        check_value(path, is_int(info.get(key), 1, 1 << 40), f"extra.compiler.{key}", "a positive integer",
                    info.get(key))
    steps = info.get("steps")
    check_value(path, steps is None or is_int(steps, 0, 1 << 62), "extra.compiler.steps",
                "null or a non-negative integer", steps)
    lv = ex.get("loop_vars", [])
    ok = isinstance(lv, list) and all(
        isinstance(v, dict) and isinstance(v.get("name"), str) and v.get("kind") in ("cat", "num")
        and isinstance(v.get("forms"), list) and isinstance(v.get("values"), list)
        and all(isinstance(f, dict) and all(k.isdigit() and int(k) < d and isinstance(c, (int, float))
                                            for k, c in f.items()) for f in v["forms"])
        for v in lv)
    check_value(path, ok, "extra.loop_vars", "a list of loop-variable forms over residual dims", lv)


def requires_record(requires) -> list:
    """What config.json keeps of a program's `require` lines (the runner checks
    them on program.rasp, so the two copies must agree)."""
    return [{"condition": r.text, "message": r.message, "line": r.loc.line if r.loc else None}
            for r in requires]


def _check_requires(program, info, d: Path):
    """program.rasp's `require` lines must be the ones compiled (config.json's
    extra.compiler.requires): a program copy with a require removed, added or
    changed would let the model answer inputs the program rejects, or the
    reverse.  Directories from before the record existed have no key."""
    if "requires" not in info:
        return
    recorded = info["requires"]
    check_value(d / "config.json", isinstance(recorded, list) and all(
        isinstance(r, dict) and set(r) == {"condition", "message", "line"} for r in recorded),
        "extra.compiler.requires", "a list of {condition, message, line}", recorded)
    if requires_record(program.ir.requires) != recorded:
        raise RaspFileError(d / "program.rasp", "its `require` lines do not match config.json's "
                                                "extra.compiler.requires (the program was edited after "
                                                "compiling; recompile it)")


# ---- compiled-model directories -------------------------------------------------

def load_compiled_parts(directory):
    """(LoopedConfig, state dict, program, source) from a `rasp compile`
    directory, every file checked (see the module docstring)."""
    import rasp
    d = Path(directory)
    if not d.is_dir():
        raise RaspFileError(d, "not a directory")
    missing = [n for n in COMPILED_FILES if not (d / n).is_file()]
    if missing:
        raise RaspFileError(d, f"not a compiled model directory (missing {', '.join(missing)})")
    if not verify_manifest(d, COMPILED_FILES, "rasp-compiled/1"):
        print(f"{d}: warning: no {MANIFEST} (compiled by an older rasp): the files are checked for "
              "structure only, not for edits; recompile to add checksums", file=sys.stderr)
    cfg_path = d / "config.json"
    cfg = check_config(read_json(cfg_path), cfg_path)
    _check_compiled_extra(cfg, cfg_path)
    source = read_text(d / "program.rasp")
    program = rasp.loads(source, str(d / "program.rasp"))
    if sorted(set(program.ir.vocab)) != sorted(cfg.extra["input_tokens"]):
        raise RaspFileError(d / "program.rasp", "its input vocabulary does not match config.json "
                                                "(the program was replaced after compiling)")
    try:
        has_loop = bool(one_loop(program.ir).loops)      # (a `loop 0` is compiled away)
    except RaspError:
        has_loop = bool(program.ir.loops)
    if has_loop != cfg.extra["compiler"]["has_loop"]:
        raise RaspFileError(d / "program.rasp", "its loop does not match config.json "
                                                "(the program was replaced after compiling)")
    _check_requires(program, cfg.extra["compiler"], d)
    state = load_tensors(d / "model.safetensors", expected_shapes(cfg))
    return cfg, state, program, source

