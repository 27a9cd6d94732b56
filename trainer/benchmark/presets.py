"""The presets of the comparison runs (SeqTasks), and their schedules.

A run's settings (trainer/settings/hparams.py: HParams of kind "seq") are merged in
this order, later winning:

    hparams.defaults("seq")
    < FAMILY[preset][task family]            (this file: optimiser, batch, steps)
    < EncoderSpec.defaults                    (the model's extra keys)
    < EncoderSpec.presets[preset][family]     (the model's sizes for that task)
    < CLI flags (--steps --lr --batch-size --d-model ...)
    < --set KEY=VALUE                         (any field, or an EncoderConfig.extra key)

A key that is a field of a comparison run sets it; any other key goes to `extra`
(handed to the encoder as EncoderConfig.extra).  Everything lands in
run.json and the checkpoint.
"""
from __future__ import annotations

import json
import math

from rasp.errors import RaspError
from trainer.settings.hparams import HParams, defaults

PRESET_NAMES = ("cpu", "paper")


# Per task family: what any model uses unless its EncoderSpec says otherwise.
# cpu = minutes on one core (docs/benchmarks.md §9); paper = the papers' recipes
# (docs/models.md §11: P1 App. B and JRC's configs for P1's tasks, P3's for P3's).
#
# Why flipflop / listops / logic train so few cpu steps: their suites
# (trainer/compare/suites/{flipflop,listops,logic}.toml, 8-10 models each)
# must finish in about 35 min at --seeds 1 --jobs 1 on the shared 2-core
# machine.  Measured 2026-11-23, one torch thread, load average 3-6, steps/s
# at this preset (Transformer xPos / UT / GUT / TLB / GUTLB):
#   flipflop (batch 32, T 128)  4.0 / 0.94 / 1.07 / 1.47 / 0.50  (8 models: 6.1 s per step of all)
#   listops  (batch 64, <= 50)  10.6 / 1.56 / 1.97 / 3.28 / 1.10  (10 models: 4.3 s)
#   logic    (batch 64 pairs)   9.4 / 1.25 / 1.20 / 1.71 / 0.56  (10 models: 7.7 s; beta = 0 runs deep)
# so the former 1000 / 3000 / 3000 steps took 1.7 h / 3.6 h / 6.5 h per suite
# (training alone, at load 3-6; evaluating ListOps' long splits adds minutes
# per model, hence its 100 test examples per split).  The steps below, with
# the suites' cpu eval sizes (400 / 100 / 200 per split then; ListOps now tests
# 400 on its short cpu splits), fit the 35 min: the flip-flop suite ran in 30 min
# at load 6-8.  What they learn is in bench/recurrent_transformers.md (after 200
# flip-flop steps TLB and TLB-fixed have learned the task in distribution, over
# 3 seeds; a thorough comparison is the paper preset).
FAMILY = {
    "cpu": {
        "flipflop": {"steps": 200, "batch_size": 32, "lr": 1e-3, "eval_every": 100,
                     "train_split": "train_128", "valid_split": "valid_128"},
        # words: 800 steps (was 1 500).  The words suite's cpu grid (7 models x Z60, A5
        # + the mixed task, one process at a time on the shared 2 cores) must fit ~70 min;
        # implicit Mamba2 trains ~1.7 steps/s at load 4-7 (batch 128, <= 16 + 4
        # iterations), so 1 500 steps were ~14 min a run.  800 keeps the
        # gap of docs/benchmarks.md §9: implicit Mamba2 passes 0.95 at L = 8 by ~700 steps (bench/implicit.md).
        # Constant lr, as the paper preset and the CPU probes (GRU >= 0.9 at L = 8 by
        # step 800): a cosine decay over 800 steps left the GRU at 0.01.
        "words": {"steps": 800, "batch_size": 256, "lr": 3e-3, "eval_every": 200, "weight_decay": 0.0,
                  "schedule": "constant"},
        "listops": {"steps": 200, "batch_size": 64, "lr": 1e-3, "eval_every": 100, "weight_decay": 0.1,
                    "train_split": "train_cpu", "valid_split": "valid_cpu"},
        "logic": {"steps": 150, "batch_size": 64, "lr": 1e-3, "eval_every": 75, "weight_decay": 0.1},
        # memory: 300 x 32 (was 3000 x 128).  The memory suite (28 cpu runs: 14 models x copying,
        # denoising) must finish in ~40 min on 2 shared cores; measured at load ~6, one torch
        # thread, a step of all 14 models took 4.0 s at batch 128 (2-layer Mamba 0.63 s, GRU 0.41 s)
        # and 1.2 s at 32 in-process, about twice that in the real runs, plus ~35 s of process
        # start, data and evaluation per run: 3000 x 128 was ~5 h, 600 x 32 ~70 min.  Measured with
        # 300 x 32: the whole suite in 27 min at load ~6 (/work/results/memory/TIMING.md).
        "memory": {"steps": 300, "batch_size": 32, "lr": 1e-3, "weight_decay": 0.0, "eval_every": 100,
                   "ckpt_every": 100, "train_split": "train_cpu", "valid_split": "valid_cpu"},
        # counting: P3's settings at 1/5 length (trainer/tasks/counting.py: L 40 / 120 / 200,
        # ISI 2 / 6 / 10) and 50 steps (was L 200 / 600 / 1000 and 3000 steps).  The counting
        # suite (42 cpu runs: 14 models x 3 settings) must finish in ~40 min on 2 shared cores;
        # measured at load ~6-7, one torch thread, batch 32, a step of all 14 models took 3.1 s
        # at L 200, 11.6 s at 600 and 22.6 s at 1000 (Mamba h64 1.3 / 5.1 / 8.5 s, Transformer
        # 3.5 s at 1000): 3000 steps were ~31 h.  At 1/5 length it is 1.3 + 4.6 + 8.0 s (Mamba
        # h64 alone 7.9 s) in-process, about 1.5-2x that in real runs, and each run spends ~40 s
        # starting two processes (importing torch takes ~11 s at this load) and evaluating:
        # 42 x 40 s + 50 steps x ~20 s was the estimate; measured: the whole suite in 25 min at
        # load ~7 (/work/results/counting/TIMING.md).  Few steps: expect undertrained models.
        "counting": {"steps": 50, "batch_size": 32, "lr": 1e-2, "eval_every": 25, "ckpt_every": 25,
                     "train_split": "train_cpu", "valid_split": "valid_cpu"},
    },
    "paper": {
        "flipflop": {"steps": 10_000, "batch_size": 16, "lr": 3e-4, "weight_decay": 0.1, "schedule": "linear",
                     "warmup": 50, "eval_every": 1000, "ckpt_every": 1000},
        "words": {"steps": 100_000, "batch_size": 256, "lr": 1e-4, "weight_decay": 0.01, "schedule": "constant",
                  "eval_every": 2000, "ckpt_every": 2000},
        "listops": {"steps": 100_000, "batch_size": 32, "lr": 0.05, "schedule": "root", "warmup": 1000,
                    "betas": [0.9, 0.98], "weight_decay": 0.1, "dropout": 0.1, "eval_every": 2000,
                    "ckpt_every": 2000},
        "logic": {"steps": 80_000, "batch_size": 256, "lr": 7e-4, "schedule": "constant", "warmup": 4000,
                  "betas": [0.9, 0.98], "weight_decay": 0.1, "dropout": 0.2, "eval_every": 2000,
                  "ckpt_every": 2000},
        "memory": {"steps": 150_000, "batch_size": 2048, "lr": 1e-3, "weight_decay": 0.0, "grad_clip": 1.0,
                    "eval_every": 2000, "ckpt_every": 2000},
        "counting": {"steps": 30_000, "batch_size": 32, "lr": 1e-3, "eval_every": 1000, "ckpt_every": 1000},
    },
}


def task_family(task) -> str:
    """The preset key of a task: its module (`SeqTask.family`: flipflop, words,
    listops, logic, memory = copying and denoising, counting), else its name
    up to the first underscore (words_z60 -> words)."""
    return task.family.rsplit(".", 1)[-1] if task.family else task.name.split("_")[0]


def parse_set(items) -> dict:
    """--set KEY=VALUE ... -> {key: value}; VALUE is read as JSON when it can
    be (numbers, true/false, lists), else kept as a string."""
    out = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key.isidentifier():
            raise RaspError(f"--set {item!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


def apply(hp: HParams, values: dict) -> HParams:
    """Set each key: a field of a comparison run (its type kept: an int field
    given 2.0 stays 2) or, otherwise, an `extra` key."""
    names = set(HParams.names("seq")) - {"extra"}
    for k, v in values.items():
        if k in names:
            old = getattr(hp, k)
            if isinstance(old, bool) or old is None:
                pass
            elif isinstance(old, int) and isinstance(v, float) and v.is_integer():
                v = int(v)
            elif isinstance(old, float) and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            setattr(hp, k, v)
        else:
            hp.extra[k] = v
    return hp


# `--init compiled` (trainer/benchmark/compiled.py): the compiled program is exact as
# compiled, so by default it is not trained (--steps 0); given steps, it is
# fine-tuned as a compiled Fan-task start is (trainer/presets.init_defaults):
# under the descent guard (one unguarded AdamW step at lr 1e-4 took words_z60's
# token accuracy from 1.0 to 0.19), its zero weights kept, no weight decay,
# ending once exact and flat; the guard checks examples up to twice the longest
# training input after its steps and the longer ones (a few of each split: their
# cost grows with the square of the length) before a checkpoint and at the end.
# The random encoder's own defaults and sizes do not apply to it.
INIT_DEFAULTS = {"compiled": {"steps": 0, "guard": True, "keep_zeros": True, "guard_every": 10, "flat_stop": 60,
                              "weight_decay": 0.0, "guard_short_factor": 2,
                              "freeze_fragile": True}}


def make_seq_hparams(preset: str, task, spec, flags: dict, sets: dict, init: str = "random") -> HParams:
    if preset not in PRESET_NAMES:
        raise RaspError(f"unknown preset {preset!r} (known: {', '.join(PRESET_NAMES)})")
    fam = task_family(task)
    hp = defaults("seq")
    apply(hp, FAMILY[preset].get(fam, {}))
    if init == "random":
        apply(hp, dict(spec.defaults))
        apply(hp, dict((spec.presets.get(preset) or {}).get(fam, {})))
        if hp.loss_first:
            # a family preset's curriculum over positions (implicit Llama's words) is for the words
            # it finishes within the preset's steps; on a task of longer words (the mixed task at
            # L 256) the preset trains every position from the start.  Flags and --set come after.
            from trainer.benchmark.data import position_curriculum_gap     # torch: only where a preset has a curriculum
            if position_curriculum_gap(task, hp):
                hp.loss_first = hp.loss_grow_every = 0
    else:
        apply(hp, dict(INIT_DEFAULTS[init]))
    apply(hp, {k: v for k, v in flags.items() if v is not None})
    apply(hp, sets)
    return hp.validate()


def lr_at(step: int, hp: HParams) -> float:
    """Warm-up (linear, `warmup` steps), then: cosine to 0 at the last step,
    constant, linear to 0 (OneCycleLR with linear annealing), or JRC's
    rootwarmup lr * min(1, t/W) / sqrt(max(t, W))."""
    t = step + 1
    if hp.schedule == "root":
        w = max(1, hp.warmup)
        return hp.lr * min(1.0, t / w) / math.sqrt(max(t, w))
    if hp.warmup and step < hp.warmup:
        return hp.lr * t / hp.warmup
    if hp.schedule == "constant":
        return hp.lr
    frac = min(1.0, (step - hp.warmup) / max(1, hp.steps - hp.warmup))
    if hp.schedule == "linear":
        return hp.lr * (1.0 - frac)
    return hp.lr * 0.5 * (1.0 + math.cos(math.pi * frac))
