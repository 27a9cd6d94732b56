"""Checking what `rasp train` / `rasp eval` are asked for before doing it:
argparse `type=` functions that give every numeric flag a range (a bad value
is argparse's one-line error, exit 2), the combinations a single flag cannot
check, the length limit of `rasp eval`, and an estimate of the memory of a
model and a training batch, refused above what the machine has available."""
from __future__ import annotations

import argparse
import math
from pathlib import Path

from rasp.errors import RaspError
from trainer.settings.setting import Chosen, Setting
from trainer.settings.hparams import MAX_SEED, MAX_SIZE, SETTINGS, HParams


def int_in(lo: int, hi: int):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be in {lo}..{hi}, got {v}")
        return v
    parse.__name__ = "integer"
    return parse


def float_in(lo: float, hi: float = math.inf, lo_open: bool = False, hi_open: bool = False):
    return _numbers(Setting(lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open), lo_open)


def _numbers(s: Setting, lo_open: bool):
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not s.number_ok(v, lo_open):
            raise argparse.ArgumentTypeError(f"must be {s.number_text(lo_open)}, got {text}")
        return v
    parse.__name__ = "number"
    return parse


def one_of(allowed: tuple):
    """An argparse type: the text, if it is one of `allowed`."""
    def parse(text: str) -> str:
        if text not in allowed:
            raise argparse.ArgumentTypeError(f"{text!r}: one of {', '.join(allowed)}")
        return text
    return parse


def flag_type(s: Setting):
    """The argparse type of a hyper-parameter's flag, from its Setting."""
    if s.choices:
        return one_of(s.choices)
    if isinstance(s.lo, int):
        return int_in(s.lo, s.hi)
    return _numbers(s, s.lo_open or s.flag_lo_open)


# `rasp train` flag -> its type (None = keep the preset's value)
HP_FLAG_TYPES = {name: flag_type(s) for name, s in SETTINGS.items() if s.takes_flag}
COMPRESS = int_in(1, MAX_SIZE)
MAX_WALL = float_in(0.0, math.inf, lo_open=True)
EVAL_SAMPLES = int_in(1, 1 << 20)
EVAL_BATCH = int_in(1, 1 << 16)
SEED = int_in(0, MAX_SEED)
THRESHOLD = float_in(0.0, math.inf, lo_open=True)
EVAL_MAX_LEN = int_in(1, 100_000)
MAX_THREADS = 1024
THREADS = int_in(1, MAX_THREADS)          # --threads
EVAL_EXAMPLES = int_in(1, 10 ** 6)        # rasp eval -n (per split of a comparison run)
DATA_EXAMPLES = int_in(1, 10 ** 7)        # rasp data -n (the largest train splits hold 8.4 million)


def out_file(text: str) -> str:
    """An argparse type: a file path to write (not empty)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a file name, got an empty one")
    return text


def out_dir(text: str) -> str:
    """An argparse type: the folder a run is written into (not empty or blank, which would
    put the run's files into the current folder, or into a folder whose name cannot be seen)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a folder name, got an empty one")
    return text


def check_hparams(hp, task):
    """Combinations no single flag can check."""
    if hp.d_model % hp.n_head:
        raise RaspError(f"--d-model {hp.d_model} is not divisible by --n-head {hp.n_head}")
    if hp.start_n > hp.max_train_n:
        raise RaspError(f"--start-n {hp.start_n} is above --max-train-n {hp.max_train_n}")
    if hp.max_train_n < task.min_n:
        raise RaspError(f"--max-train-n {hp.max_train_n}: task {task.name} starts at n = {task.min_n}")
    if getattr(hp, "clock_mlp", 0) and not getattr(hp, "clock_width", 0) and getattr(hp, "clock_reach", "window") in ("window", "auto"):
        raise RaspError(f"--clock-mlp {hp.clock_mlp}: sets a narrow clock's MLP; with --clock-width 0 the clock is a "
                        "copy of the answering model's shape: give --clock-width too")


# ---- eval lengths ---------------------------------------------------------------------

def eval_length_limit(task, train_max_n: int) -> int:
    """Default longest `rasp eval` length: 4x the training range, at least the
    paper's test length for the task (work grows like n^3: n^2 attention, T(n) ~ n steps)."""
    return max(4 * train_max_n, task.paper.test_n)


def check_eval_lengths(text: str, limit: int, train_max_n: int):
    """Refuse a --lengths that reaches past `limit`, before it is expanded."""
    for part in str(text).split(","):
        for bound in part.split(":")[:2]:
            try:
                n = int(bound)
            except ValueError:
                continue          # parse_lengths reports the syntax
            if n > limit:
                raise RaspError(f"--lengths {text}: n = {n} is above the limit of {limit} (4x the training "
                                f"range n <= {train_max_n}, or the task's test length); raise it with --max-len")


# ---- memory ---------------------------------------------------------------------------

def available_memory(device) -> int:
    """Bytes that can be allocated on `device` now."""
    import torch
    dev = torch.device(device)
    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def training_memory(cfg, batch: int, n_tokens: int, applications: int, clock_applications: int = 0) -> tuple:
    """(parameters, bytes) for training a LoopedConfig: float32 weights,
    gradients, two AdamW moments and the guard's copy, plus the activations
    kept for backpropagation through every block application: `applications`
    of the answering trunk and, for a model with a clock, `clock_applications`
    of the clock, which runs a loop of its own (model/looped.py `clock_config`)."""
    import torch
    from model import LoopedTransformer
    from model.looped import clock_config
    with torch.device("meta"):              # the exact count, clock included, without allocating the weights
        params = LoopedTransformer(cfg).num_params()
    acts = activation_floats(cfg, batch, n_tokens, applications)
    if cfg.halt_unit and cfg.halt_clock:
        acts += activation_floats(clock_config(cfg), batch, n_tokens + 1, clock_applications)   # + its BOS
    return params, 4 * (6 * params + acts)


def activation_floats(cfg, batch: int, n_tokens: int, applications: int) -> int:
    """The floats one network keeps for backpropagation through `applications` block applications."""
    inner, d, m = cfg.n_head * cfg.d_head, cfg.d_model, cfg.d_mlp
    per_token = 6 * d + 4 * inner + 2 * m + 2 * cfg.n_head * n_tokens
    return batch * n_tokens * applications * (per_token + cfg.out_vocab_size)


def marker_check_sizes(lo: int, hi: int, dense_to: int = 64) -> list:
    """lo..min(hi, dense_to), then the doublings of `dense_to` below hi, and hi."""
    sizes = list(range(lo, min(hi, dense_to) + 1))
    n = dense_to * 2
    while n < hi:
        sizes.append(n)
        n *= 2
    return sizes + ([hi] if hi > dense_to else [])


def check_marker_fits(data, hp):
    """--halt-target marker or clock: the unit's marker passes one position per step, so
    every training input's T(n) must fit in its positions.  Every size up to 64, then doubling
    sizes and the largest: the program runs each input's loop, so checking every size of a long
    range (--max-train-n 2000) would take minutes."""
    import numpy as np
    for n in marker_check_sizes(data.task.min_n, hp.max_train_n):
        b = data.batch(np.random.default_rng([0, n]), [n] * 8, train=True)
        if bool((b.steps > b.tokens.shape[1]).any()):
            program = getattr(data.labeler, "program", None)        # located at the loop of a program
            loop = program.ir.loops[0] if program is not None and program.ir.loops else None
            raise RaspError(f"--halt-target {hp.halt_target}: task {data.task.name}'s loop count T(n) = {int(b.steps.max())} "
                            f"at n = {n} exceeds its {b.tokens.shape[1]} positions, so a marker moved one position "
                            "per step cannot count it; use --halt-target answer (or --recipe halting)",
                            loop.loc if loop is not None else None, program.ir.source if loop is not None else None)


def check_memory(spec, hp, data, device):
    """Refuse a model and batch that would not fit, before allocating them."""
    import numpy as np
    from trainer.models import looped_config
    from trainer.fan.objectives import steps_after_t
    sample = data.batch(np.random.default_rng(0), [hp.max_train_n], train=True)
    n_tokens = int(sample.tokens.shape[1]) + 1
    cfg = looped_config(spec, hp, data)
    # a training input runs to T(n) + k (k <= past_t), then its answer `settle` steps on and
    # its halting unit `halt_past` steps on: on a clock's loop where there is one
    scored = int(sample.steps.max()) + hp.past_t
    clock = bool(cfg.halt_unit and cfg.halt_clock)
    steps = spec.iterations(hp) or scored + (hp.settle if clock else steps_after_t(hp.settle, hp.halt, hp.halt_past))
    clock_steps = scored + hp.halt_past if clock else 0
    params, need = training_memory(cfg, hp.batch_size, n_tokens, cfg.n_body * steps, cfg.n_body * clock_steps)
    have = available_memory(device)
    if need > have:
        raise RaspError(f"this model ({params:,} parameters) and a batch of {hp.batch_size} inputs of "
                        f"{n_tokens} tokens through {cfg.n_body * steps} block applications"
                        f"{f' (and {cfg.n_body * clock_steps} of its clock)' if clock else ''} need about "
                        f"{need / 2 ** 30:.1f} GiB to train; {device} has {have / 2 ** 30:.1f} GiB available "
                        "(use a smaller --d-model, --n-layer, --batch-size or --max-train-n)")
    return need


# the settings whose working value (anything but the field's default) changes how a run is taught:
# the halting fields that a recipe, a flag, a settings file or a comparison suite sets
TEACHING = ("past_t", "settle", "unsure", "halt", "halt_target", "clock_reach")


def refuse_inert_teaching(hp, chosen: Chosen):
    """The one rule of which settings go together (Setting.unused), held on the resolved
    hyper-parameters of a run however they were assembled (a command line is checked
    where each setting was given: resolve.refuse_unused; a run built in Python, a
    suite or an edited run.json reaches here): a teaching setting a run would ignore
    is refused."""
    defaults = HParams.__dataclass_fields__
    for name in TEACHING:
        value = getattr(hp, name)
        if value == defaults[name].default:
            continue
        why = SETTINGS[name].unused(chosen)
        if why:
            shown = f"{value:g}" if isinstance(value, float) else value
            raise RaspError(f"--{name.replace('_', '-')} {shown}: {why}")
