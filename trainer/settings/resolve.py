"""From parsed `rasp train` arguments to the hyper-parameters of a run:
a new run's (its preset, then the flags given), what a resume may be asked
for, and `planned_hparams` (what a train command line would give, without
training: `rasp compare` checks finished runs against it)."""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import NamedTuple, Optional

from rasp.errors import Loc, RaspError
from rasp.options import ArgumentParser
from trainer.benchmark.presets import parse_set
from trainer.fan.presets import EARLIER_CLOCKS, RECIPES, make_hparams, recipe_settings
from trainer.settings.args import add_train_args
from trainer.settings.hparams import DEFAULT_RECIPE, SETTINGS, HParams, setting_of
from trainer.settings.setting import Chosen
from trainer.tasks import TASKS, get_task

# the recipe's flags (HParams fields; None = not given, keep the preset's value) and
# those of them that mean the same for a comparison run (the others are refused there)
HP_FLAGS = tuple(name for name, s in SETTINGS.items() if s.takes_flag)
SHARED_FLAGS = tuple(name for name in HP_FLAGS if "seq" in SETTINGS[name].takes_flag)

# what names a run (run.json), and so cannot change on --resume
RUN_SETTINGS = ("task", "model", "init", "compress", "compress_method", "preset", "data")
PROGRAM_FLAGS = ("inputs", "eval_inputs", "score")        # what --program's inputs and scoring are


def refuse_changed_run(args, run: dict):
    """--resume with a run-level flag that names something else than the run is."""
    given = getattr(args, "given", frozenset())
    changed = [k for k in RUN_SETTINGS if k in given and getattr(args, k) != run.get(k)
               and not (k == "data" and run.get(k) and Path(args.data).resolve() == Path(run[k]))]
    if changed:
        raise RaspError("--resume: " + ", ".join(f"--{k.replace('_', '-')} {getattr(args, k)} (the run has "
                                                 f"{run.get(k)})" for k in changed)
                        + "; a resumed run keeps what it is: leave them out, or start a new run with another --out")
    if "recipe" in given:
        fields_of = run.get("hparams") or {}
        recorded = HParams.from_dict(fields_of)       # a field it lacks: its default
        versions = [*RECIPES.items(), *(("clock", {**RECIPES["clock"], **e}) for e in EARLIER_CLOCKS)]
        had = next((name for name, fields in versions if all(getattr(recorded, k) == v for k, v in fields.items())),
                   "its own halting settings")
        if had != args.recipe:
            raise RaspError(f"--resume: --recipe {args.recipe} (the run has {had}); a resumed run keeps its "
                            "recipe: leave it out, or start a new run with another --out")


def refuse_given(args, names, reason: str):
    """Refuse the flags among `names` that were given (None, [], False and
    "auto" are their not-given defaults): they do not apply to this run."""
    given = [("-n" if k == "n" else "--" + k.replace("_", "-")) for k in names if getattr(args, k, None)
             not in (None, [], False, "auto")]
    if given:
        raise RaspError(f"{', '.join(given)}: {reason}")


# ---- the one rule: a setting the run does not use is refused, wherever it was given ------------

# the flags besides the recipe's whose use depends on the rest of the run (their Settings say when)
RULED_FLAGS = ("guard", "freeze_fragile", "compress", "compress_method")


class Place(NamedTuple):
    """Where a setting was given, as an error shows it: its flag and value, the line of
    a settings file (`loc`, `source`), or `--set KEY=VALUE` (not as a flag)."""
    text: str
    loc: Optional[Loc] = None
    source: Optional[str] = None
    as_flag: bool = True


def _shown(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def given_places(args, names, sets: Optional[dict] = None) -> dict:
    """{name: Place} of the settings among `names` given by a flag or a settings file
    (None and "auto" are the not-given defaults), and of the hyper-parameters in `sets`."""
    files = getattr(args, "config_where", None) or {}
    places = {}
    for name in names:
        value = getattr(args, name, None)
        if value in (None, "auto"):
            continue
        if name in files:               # from a settings file, not overridden on the command line
            path, line, source, key, raw = files[name]
            places[name] = Place(f"{key} = {json.dumps(raw)}", Loc(path, line, 1), source)
        else:
            places[name] = Place(f"--{name.replace('_', '-')} {_shown(value)}")
    for key, value in (sets or {}).items():
        if key in SETTINGS:
            places[key] = Place(f"--set {key}={value if isinstance(value, str) else json.dumps(value)}",
                                as_flag=False)
    return places


def refuse_unused(places: dict, chosen: Chosen):
    """Refuse the first given setting that a run of `chosen` does not use (its Setting's
    kinds and `used_if`: trainer/settings/setting.py), located where it was given."""
    for name, place in places.items():
        why = setting_of(name).unused(chosen, place.as_flag)
        if why:
            raise RaspError(f"{place.text}: {why}", place.loc, place.source)


@functools.cache
def _train_dests() -> frozenset:
    parser = ArgumentParser(prog="rasp train", add_help=False)
    add_train_args(parser)
    return frozenset(a.dest for a in parser._actions if a.option_strings)


def refuse_flag_sets(sets: dict):
    """--set KEY=VALUE whose KEY is a flag of `rasp train` that is not a hyper-parameter
    (--set out=...): it would be kept as a model option that nothing reads."""
    for key, value in sets.items():
        if key in _train_dests() and key not in SETTINGS:
            raise RaspError(f"--set {key}={value}: {key} is the flag --{key.replace('_', '-')} of rasp train, not a "
                            "model option or hyper-parameter; give it as that flag")


def on_off(value: str):
    """--guard / --freeze-fragile: on, off, or auto (None: the preset decides)."""
    return {"on": True, "off": False}.get(value)


def is_seq_train(args) -> bool:
    """Does this `rasp train` run a comparison task (trainer/benchmark/kind.py)?"""
    from trainer.run import checkpoint
    from trainer.tasks.base import SeqTask
    if args.resume and checkpoint.is_seq_run_dir(args.out):
        return True
    return bool(args.task) and isinstance(TASKS.get(args.task), SeqTask)


# ---- Fan-task runs ---------------------------------------------------------------------

def fan_flags(args) -> dict:
    """The hyper-parameters given as flags (None: not given)."""
    given = {k: getattr(args, k, None) for k in HP_FLAGS}
    # the descent guard keeps a compiled start exact (trainer/run/guard.py)
    given["guard"] = on_off(args.guard)
    given["freeze_fragile"] = on_off(args.freeze_fragile)
    return given


def fresh_hparams(args, task=None) -> HParams:
    """The hyper-parameters a new Fan-task run of these arguments trains with
    (`task`: a Task made from --program, else --task's)."""
    from trainer.models import get_model_spec
    if task is None and not args.task:
        raise RaspError("--task or --program is required (tasks: " + ", ".join(TASKS) + ")")
    task = task or get_task(args.task)
    spec = get_model_spec(args.model)
    recipe = recipe_settings(getattr(args, "recipe", None) or DEFAULT_RECIPE, spec, args.init,
                             asked="recipe" in getattr(args, "given", ()))
    given = {k: v for k, v in fan_flags(args).items() if v is not None}
    hp = make_hparams(args.preset, task, args.init, **{**recipe, **given})
    refuse_unused(given_places(args, HP_FLAGS + RULED_FLAGS),
                  Chosen("fan", hp, spec, args.init, getattr(args, "compress", None)))
    return hp


# ---- comparison-task runs -------------------------------------------------------------

def refuse_fan_only(args):
    """A comparison run's flags, before its settings are resolved (a resume has none to resolve)."""
    refuse_unused(given_places(args, [k for k in HP_FLAGS if k not in SHARED_FLAGS] + ["compress"]), Chosen("seq"))


def seq_flags(args, sets=None) -> dict:
    """The hyper-parameters given as flags (None: not given), and --set's."""
    return {k: getattr(args, k, None) for k in SHARED_FLAGS} | {"guard": on_off(getattr(args, "guard", "auto")),
                                                                "freeze_fragile": on_off(getattr(args, "freeze_fragile", "auto"))} \
        | (sets or {})


def seq_hparams(args):
    """The hyper-parameters a new comparison run of these arguments trains with."""
    from trainer.models import get_encoder_spec
    from trainer.benchmark.presets import make_seq_hparams
    from trainer.benchmark.kind import seq_task
    refuse_fan_only(args)
    task, init = seq_task(args.task), getattr(args, "init", "random")
    if init == "compiled" and args.model != "looped":
        raise RaspError(f"--init compiled builds the looped model; --model {args.model} has no compiled form")
    spec = get_encoder_spec(args.model)
    sets = parse_set(args.set)
    refuse_flag_sets(sets)
    hp = make_seq_hparams(args.preset, task, spec, seq_flags(args), sets, init)
    refuse_unused(given_places(args, SHARED_FLAGS + RULED_FLAGS, sets), Chosen("seq", hp, spec, init))
    if init == "compiled":
        from trainer.benchmark.compiled import resolve_hparams
        resolve_hparams(task, hp)
    return hp


def planned_hparams(train_argv: list) -> dict:
    """The hyper-parameters `python -m trainer train TRAIN_ARGV` would give a
    new run, without training (`rasp compare` checks a finished run against
    them: a preset edited since the run makes it stale).  RaspError if the
    arguments are wrong."""
    parser = ArgumentParser(prog="python -m trainer train", add_help=False)
    add_train_args(parser)
    try:
        args = parser.parse_args(train_argv)
    except SystemExit:
        raise RaspError(f"cannot parse the train arguments {' '.join(train_argv)}") from None
    args.resume = False
    if is_seq_train(args):
        return seq_hparams(args).to_dict()
    return fresh_hparams(args).to_dict()
