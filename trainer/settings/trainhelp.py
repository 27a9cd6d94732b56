"""What `rasp train --help` says of the recipe's flags: one line each, in
groups, with the value a run gets when the flag is not given.

The defaults shown are the `cpu` preset's (the default) for Fan et al.'s
tasks with a random start, read from trainer/fan/presets.py itself, so the help
cannot drift from what a run does; a value that differs between tasks is
shown per task.  `--preset paper`, `--init compiled` and the comparison
tasks' presets set their own values (a run writes those it used to
RUN/run.json).
"""
from __future__ import annotations

import argparse
import textwrap

# the recipe's flags (HParams fields), in groups, each with what it does
RECIPE_GROUPS = {
    "model size": {
        "d_model": "width of the residual stream",
        "n_layer": "layers (of the looped block, for the looped model)",
        "n_head": "attention heads",
    },
    "optimiser (AdamW) and schedule": {
        "steps": "optimizer steps in all",
        "batch_size": "examples per step",
        "lr": "peak learning rate",
        "weight_decay": "AdamW's weight decay",
        "wd_params": "decay all parameters, or only the weight matrices",
        "warmup": "steps of linear warm-up",
        "decay_start": "step where the cosine decay starts ((max-train-n + 1) x interval)",
        "grad_clip": "clip the gradient norm to this",
        "ema": "decay of an average of the weights kept from the decay's start (0: off)",
        "seed": "random seed of the weights and the data",
    },
    "Fan et al.'s length curriculum and baselines": {
        "max_train_n": "longest training length (the curriculum's end)",
        "start_n": "longest length at step 0",
        "interval": "steps per +1 of the longest length",
        "baseline_depth": "FAP/NTP baselines: layers, in multiples of the looped block's",
        "pause_tokens": "*-Pause baselines: pause tokens per input",
        "loop_steps": "NTP-Loop: iterations per token",
    },
    "Fan et al.'s recipe switches (trainer/README.md gives each one's source)": {
        "init_scheme": "initialisation of the weights",
        "read_in": "how input tokens enter the model",
        "read_in_dims": "fan-in of the one-hot read-in's initialisation",
        "read_out_dims": "logits of the read-out (at least the task's output tokens)",
        "arch": "block layout: Fan et al.'s, or this project's older one",
        "loss_reduction": "average the loss over tokens or over samples",
        "padding": "whether padded answer positions are scored",
    },
    "logging, evaluation and checkpoints": {
        "log_every": "steps per row of metrics.jsonl (mean loss, accuracy, learning rate)",
        "eval_every": "steps per evaluation (0: only at the end)",
        "eval_samples": "inputs per evaluation",
        "ckpt_every": "steps per checkpoint",
    },
    "the descent guard (--guard; on for a compiled start)": {
        "guard_max_n": "lengths of the guard's fixed sample: 1..this",
        "guard_every": "check the guard sample every this many kept steps",
        "flat_stop": "stop once exact and the loss gained < 5%% over this many steps (0: never)",
    },
}

# what a default of None means, per field
NONE_MEANS = {"read_in_dims": "the input's tokens", "read_out_dims": "the output's tokens",
              "guard_max_n": "--max-train-n", "decay_start": "the curriculum's end"}


def preset_defaults() -> dict:
    """field -> {task: value} of the cpu preset with a random start, per Fan task."""
    from trainer.fan.presets import make_hparams
    from trainer.tasks import TASKS
    from trainer.tasks.base import SeqTask
    hps = {name: make_hparams("cpu", task) for name, task in TASKS.items() if not isinstance(task, SeqTask)}
    fields = [f for group in RECIPE_GROUPS.values() for f in group]
    return {f: {name: getattr(hp, f) for name, hp in hps.items()} for f in fields}


def _shown(field: str, value) -> str:
    return NONE_MEANS.get(field, "none") if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def default_text(field: str, per_task: dict) -> str:
    values = {}
    for task, v in per_task.items():
        values.setdefault(_shown(field, v), []).append(task)
    common, *others = sorted(values, key=lambda v: -len(values[v]))      # the most tasks' value first
    return f"default {common}" + "".join(f"; {v} for {', '.join(values[v])}" for v in others)


def add_recipe_flags(p: argparse.ArgumentParser, flag_types: dict, shared: tuple):
    """The recipe's flags (`flag_types`: field -> argparse type), grouped;
    each left None when not given (the preset decides)."""
    defaults = preset_defaults()
    missing = set(flag_types) - set(defaults)
    if missing:                 # a flag without a line of help is a bug of this table
        raise KeyError(f"no help for {sorted(missing)}")
    for title, fields in RECIPE_GROUPS.items():
        g = p.add_argument_group(title)
        for name, what in fields.items():
            typ = flag_types[name]
            only = "" if name in shared else "; Fan tasks"
            g.add_argument("--" + name.replace("_", "-"), type=typ, default=None, metavar=_metavar(name, defaults[name]),
                           help=f"{what} ({default_text(name, defaults[name])}{only})")


def _metavar(field: str, per_task: dict) -> str:
    from trainer.settings.hparams import CHOICES
    if field in CHOICES:
        return "{" + ",".join(CHOICES[field]) + "}"
    v = next((x for x in per_task.values() if x is not None), None)
    return "X" if isinstance(v, float) else "N"


RECIPE_NOTE = textwrap.fill("The recipe: each flag's default is the cpu preset's for Fan et al.'s tasks with a random start "
               "(--preset paper, --init compiled and the comparison tasks' presets set their own; a run writes "
               "every value it used to RUN/run.json).  Comparison tasks take only the flags not marked "
               "'Fan tasks', and any setting with --set KEY=VALUE.", 100)
