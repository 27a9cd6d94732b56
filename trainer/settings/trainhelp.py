"""What `rasp train --help` says of the recipe's flags: one line each, in
groups, with the value a run gets when the flag is not given.  The lines,
groups and what None means are the fields' Settings (trainer/settings/hparams.py).

The defaults shown are the `cpu` preset's (the default) for Fan et al.'s
tasks with a random start, read from trainer/fan/presets.py itself, so the help
cannot drift from what a run does; a value that differs between tasks is
shown per task.  `--preset paper`, `--init compiled` and the comparison
tasks' presets set their own values (a run writes those it used to
RUN/run.json).
"""
from __future__ import annotations

import argparse
import functools
import textwrap

from trainer.settings.hparams import CHOICES, SETTINGS, HParams
from trainer.settings.setting import GROUPS
from trainer.settings.validate import HP_FLAG_TYPES



def recipe_groups() -> dict:
    """group title -> [field], in --help order: each Setting says its group and place in it."""
    return {title: sorted((name for name, s in SETTINGS.items() if s.takes_flag and s.group == key),
                          key=lambda name: SETTINGS[name].at)
            for key, title in GROUPS.items()}


@functools.cache
def preset_defaults() -> dict:
    """field -> {task: value} of the cpu preset with a random start, per Fan task."""
    from trainer.fan.presets import make_hparams
    from trainer.tasks import TASKS
    from trainer.tasks.base import SeqTask
    hps = {name: make_hparams("cpu", task) for name, task in TASKS.items() if not isinstance(task, SeqTask)}
    fields = [name for name, s in SETTINGS.items() if s.takes_flag]
    return {f: {name: getattr(hp, f) for name, hp in hps.items()} for f in fields}


def _shown(field: str, value) -> str:
    if value is None:
        return SETTINGS[field].none_means or "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


def default_text(field: str, per_task: dict) -> str:
    values = {}
    for task, v in per_task.items():
        values.setdefault(_shown(field, v), []).append(task)
    common, *others = sorted(values, key=lambda v: -len(values[v]))      # the most tasks' value first
    return f"default {common}" + "".join(f"; {v} for {', '.join(values[v])}" for v in others)


def add_recipe_flags(p: argparse.ArgumentParser):
    """The recipe's flags, grouped; each left None when not given (the preset decides).
    Each help line is a function (rasp/options.py calls it for --help only): the
    defaults it shows come from every task's preset, which parsing never needs."""
    for title, fields in recipe_groups().items():
        g = p.add_argument_group(title)
        for name in fields:
            g.add_argument("--" + name.replace("_", "-"), type=HP_FLAG_TYPES[name], default=None,
                           metavar=_metavar(name), help=functools.partial(_help_line, name))


def _help_line(name: str) -> str:
    s = SETTINGS[name]
    only = "" if "seq" in s.takes_flag else "; Fan tasks"
    return f"{s.help} ({default_text(name, preset_defaults()[name])}{only})"


def _metavar(field: str) -> str:
    if CHOICES.get(field):
        return "{" + ",".join(CHOICES[field]) + "}"
    return "X" if isinstance(getattr(HParams(), field), float) else "N"


RECIPE_NOTE = textwrap.fill("The recipe: each flag's default is the cpu preset's for Fan et al.'s tasks with a random start "
               "(--preset paper, --init compiled and the comparison tasks' presets set their own; a run writes "
               "every value it used to RUN/run.json).  Comparison tasks take only the flags not marked "
               "'Fan tasks', and any setting with --set KEY=VALUE.", 100)
