"""The presets of Fan et al.'s tasks: the paper's hyper-parameters (App. E /
docs/tasks.md) and a small CPU preset (parity, default recipe: 125 s on an idle 2-core machine, bench/BENCH.md).
CLI flags override fields (trainer/settings/hparams.py: the one HParams class)."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from rasp.errors import RaspError
from trainer.settings.hparams import PRESET_NAMES, RECIPE_NAMES, HParams
from trainer.tasks import Task


def fan_decay_start(max_train_n: int, interval: int) -> int:
    """Fan et al.'s code starts the cosine after step end*interval, where
    `end` = max_train_n + 1 (its curriculum counts n_points, one past the
    longest length; train.py:52,94) -- two intervals after the last length
    increase when lengths start at 1."""
    return (max_train_n + 1) * interval


# one-hot width of Fan et al.'s read-in (conf/*.yaml `n_dims`: tokens 0..5 for the
# binary tasks, of which the input uses 4); sets the read-in's init bound 1/sqrt(n_dims)
FAN_N_DIMS = {"parity": 6, "padded_parity": 6, "copy": 6, "addition": 6, "binary_sum": 6, "multiplication": 6}


# Fan et al.'s released recipe (github truongbuu/looped-tf, src/train.py and
# src/conf/*.yaml; trainer/README.md lists each item with its source line).
def _fan_recipe(task: Task) -> dict:
    return dict(weight_decay=0.01, wd_params="all", grad_clip=1.0, warmup=0, ema=0.0,
                init_scheme="gpt2", arch="fan", loss_reduction="token", padding="scored",
                read_in_dims=FAN_N_DIMS.get(task.name), read_out_dims=FAN_N_DIMS.get(task.name),
                read_in="embedding" if task.name == "unique_set" else "linear", start_n=task.min_n)


# The released configs raise the length every 500 steps for parity and binary
# sum (src/conf/parity.yaml:20, sum_reverse.yaml:20); docs/tasks.md's table says
# 1000.  We follow the released configs.
FAN_INTERVAL = {"parity": 500, "padded_parity": 500, "binary_sum": 500}


def paper(task: Task) -> HParams:
    p = task.paper
    interval = FAN_INTERVAL.get(task.name, p.interval)
    return HParams(**_fan_recipe(task), d_model=256, n_head=p.n_head, n_layer=p.n_layer, batch_size=64,
                   lr=1e-4, steps=100_000, max_train_n=p.max_train_n, interval=interval,
                   decay_start=fan_decay_start(p.max_train_n, interval),
                   ckpt_every=2000, log_every=100, eval_every=2000)


def cpu(task: Task) -> HParams:
    # The same recipe, small enough for 2 CPU cores (parity: 122 s on an idle machine); lengths stop at 10.
    p = task.paper
    # Many narrow heads matter for parity (the paper uses 64): 16 heads of width 4 reach
    # 0.99 in-distribution in 2000 steps where 4 heads stall at 0.93.  Copy did
    # better with 4 heads (1.0 at step 1800) than with 8 (0.93 at 2000).
    max_n, interval = min(p.max_train_n, 10), 100
    return HParams(**_fan_recipe(task), d_model=64, n_head=16 if p.n_head > 8 else 4,
                   n_layer=min(p.n_layer, 2), batch_size=64, lr=1e-3, steps=2000,
                   max_train_n=max_n, interval=interval, decay_start=fan_decay_start(max_n, interval),
                   baseline_depth=4, pause_tokens=4, loop_steps=10, log_every=20, ckpt_every=250,
                   eval_every=100)


PRESETS = dict(zip(PRESET_NAMES, (paper, cpu)))

# How a looped model is taught when it is done (issue 39; trainer/fan/objectives.py
# settle_loss): Fan et al.'s loss at T(n) only, or the loss at T(n) and the steps after it
# with the steps before T(n) kept uncommitted, so a confidence threshold stops each input
# where it is done.  `rasp train --recipe` picks one for a looped model trained from
# random weights; a fixed-depth model and a compiled start (whose halting clock already
# knows) always train with Fan et al.'s.
# every halting field each recipe sets (resolve.refuse_changed_run tells a run's recipe by them)
# The clock is taught "done" for 10 steps past T(n), not 2: taught for 2, one parity seed of
# seven forgot it from step T(n)+3 on and stopped late beyond the trained lengths, where the
# loop runs more steps than any trained input needed (bench/BENCH.md, "A clock of its own").
# The clock's shape and schedule (issue 56): one block 32 wide, taught on every 4th step, costs
# about a quarter of a training step; the full-width clock taught on every step cost 2-3 times the
# answering model's step (bench/BENCH.md, "A clock at a fifth of a step").  Runs recorded before these two
# settings have the full clock (their defaults), and are still told apart as the clock recipe.
# Taught on every 6th step, not every 4th, the clock costs a fifth of a step; it stopped as well on
# Fan et al.'s tasks (bench/BENCH.md, "The clock on every 6th step").  Where the loop's count
# depends on the content, the recipe's clock (`auto`) is the max clock, and where each position is
# taught its own need, it is taught on every step (trainer/settings/hparams.py clock_plan).
CLOCK_COST = dict(clock_width=32, clock_every=6, clock_reach="auto")
_FAN = dict(past_t=0, settle=0, unsure=0.0, halt=0.0, halt_target="answer", halt_past=2)
RECIPES = {"fan": _FAN, "halting": {**_FAN, "settle": 2, "unsure": 1.0},
           "marker": {**_FAN, "halt": 1.0, "halt_target": "marker"},
           "clock": {**_FAN, "halt": 1.0, "halt_target": "clock", "halt_past": 10, **CLOCK_COST}}
assert tuple(sorted(RECIPES)) == tuple(sorted(RECIPE_NAMES))
# the clock recipe's earlier versions (the fields that differed): a run recorded with one is still the
# clock recipe on --resume, and keeps the clock it was trained with (a field a run lacks reads as
# its default, which is the full clock: 0 wide, taught on every step)
EARLIER_CLOCKS = (dict(halt_past=10, clock_width=0, clock_every=1, clock_reach="window"),    # before issue 56
                  dict(halt_past=10, clock_width=32, clock_every=4, clock_reach="window"),   # before the max clock
                  dict(halt_past=10, clock_width=32, clock_every=4, clock_reach="auto"))     # before every 6th


def recipe_settings(recipe: str, spec, init: str, asked: bool = False) -> dict:
    """The halting fields a recipe sets for this model and start: Fan et al.'s
    for a model it cannot teach, refused when the recipe was `asked` for by name."""
    if recipe not in RECIPES:
        raise RaspError(f"unknown --recipe {recipe!r} (known: {', '.join(RECIPES)})")
    if spec.adaptive and init == "random":
        return RECIPES[recipe]
    if asked and recipe != "fan":
        why = "--init compiled already has its halting clock" if spec.adaptive else \
            f"--model {spec.name} runs a fixed depth"
        raise RaspError(f"--recipe {recipe}: teaches a looped model from random weights when it is done; {why}")
    return RECIPES["fan"]


COMPILED_STEPS = 500    # most fine-tuning steps for a compiled start (init_defaults)


def compiled_max_n(task: Task, max_train_n: int) -> int:
    """Longest problem size a compiled start is built for (and exact at): the
    task's paper test length, and at least 2x the training length."""
    return max(task.paper.test_n, 2 * max_train_n)


def init_defaults(init: str, hp: HParams, task: Optional[Task] = None) -> dict:
    """A compiled start is already exact at every length: no curriculum, no
    warm-up, a small step size, the descent guard on with its fixed sample
    spanning every length the model was compiled for, and the length-fragile
    tensors frozen (so fine-tuning on short inputs cannot trade away the long
    ones; see trainer/README.md)."""
    if init == "compiled":
        # a fine-tune of an exact start is a polish: a budget of minutes, the guard
        # checked every 10 steps, an end as soon as nothing improves, and no weight
        # decay or EMA (they would shrink or blur the exact weights)
        d = dict(lr=1e-4, warmup=0, start_n=hp.max_train_n, guard=True, keep_zeros=True,
                 freeze_fragile=True, steps=min(hp.steps, COMPILED_STEPS), guard_every=10, flat_stop=60,
                 weight_decay=0.0, ema=0.0, decay_start=None, padding="ignored", read_out_dims=None)
        if task is not None:
            d["guard_max_n"] = compiled_max_n(task, hp.max_train_n)
        return d
    return {}


def make_hparams(preset: str, task: Task, init: str = "random", **overrides) -> HParams:
    if preset not in PRESETS:
        raise RaspError(f"unknown preset {preset!r} (known: {', '.join(PRESETS)})")
    hp = PRESETS[preset](task)
    given = {k: v for k, v in overrides.items() if v is not None}
    hp = replace(hp, **{k: v for k, v in given.items() if k in ("max_train_n", "interval")})
    if preset in ("paper", "cpu") and "decay_start" not in given:
        hp = replace(hp, decay_start=fan_decay_start(hp.max_train_n, hp.interval))
    return replace(hp, **{**init_defaults(init, hp, task), **given}).validate()
