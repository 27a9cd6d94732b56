"""What one hyper-parameter is, said once: the metadata of an `HParams`
field (trainer/settings/hparams.py), from which `HParams.validate`, the
`rasp train` flag (its argparse type: trainer/settings/validate.py), its
line of `--help` (trainer/settings/trainhelp.py) and the resume rule
(trainer/run/checkpoint.py) are all made."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

# the help groups of the recipe's flags, in --help order
GROUPS = {
    "size": "model size",
    "optimiser": "optimiser (AdamW) and schedule",
    "curriculum": "Fan et al.'s length curriculum and baselines",
    "switches": "Fan et al.'s recipe switches (trainer/README.md gives each one's source)",
    "logging": "logging, evaluation and checkpoints",
    "guard": "the descent guard (--guard; on for a compiled start)",
    "speed": "speed on a GPU (on a CPU --tf32 does nothing and --compile on is refused; --precision bf16 works "
             "on both)",
    "halting": "knowing when to stop (the defaults are Fan et al.'s recipe: the loss at T(n) only)",
}
BOTH = ("fan", "seq")
FAN, SEQ = ("fan",), ("seq",)


@dataclass(frozen=True)
class Chosen:
    """What a run (or an evaluation) is, beside the setting in question: whether that
    setting is used depends on these (`Condition`)."""
    kind: str = "fan"
    hp: Any = None                # the run's HParams, every setting resolved
    spec: Any = None              # the model's spec (trainer/models): adaptive, deep, pause, fixed_steps
    init: str = "random"
    compress: Optional[int] = None
    stop: Optional[str] = None    # an evaluation's stopping rule

    @property
    def model(self) -> str:
        return getattr(self.spec, "name", "?")


@dataclass(frozen=True)
class Condition:
    """When a setting is used at all: `test(chosen)`; else `unless` says why not (its
    {model}, {stop} filled in), and a setting given for such a run is refused."""
    test: Callable[[Chosen], bool]
    unless: str


def _hp(name: str, chosen: Chosen):
    return getattr(chosen.hp, name, None)


LOOPED = Condition(lambda c: bool(getattr(c.spec, "adaptive", True)),
                   "not used by model {model}, which runs a fixed depth, not T(n) (a looped model only)")
HALT_FROM_RANDOM = Condition(lambda c: c.init == "random",
                             "a compiled start has its halting clock; the unit is trained from random weights")
HALT_UNIT = Condition(lambda c: bool(_hp("halt", c)), "not used without a halting unit (give --halt W with "
                                                       "W > 0, or --recipe marker or clock)")
CLOCK_UNIT = Condition(lambda c: bool(_hp("halt", c)) and _hp("halt_target", c) == "clock",
                       "what a halting clock sees; it needs the clock (--recipe clock, or --halt W --halt-target "
                       "clock)")
HALTING_LOSS = Condition(lambda c: any(_hp(k, c) for k in ("settle", "unsure", "halt")),
                         "not used without --settle, --unsure or --halt, of which this run has none")
RANDOM_START = Condition(lambda c: c.init == "random", "not used by a compiled start, whose size and weights come "
                                                                  "from its program")
COMPILED_START = Condition(lambda c: c.init == "compiled",
                           "only a compiled start (--init compiled) has length-fragile tensors")
COMPRESSIBLE = Condition(lambda c: c.init == "compiled", "only a compiled start (--init compiled) is compressed")
COMPRESSED = Condition(lambda c: c.compress is not None, "not used without --compress D")
GUARDED = Condition(lambda c: bool(_hp("guard", c)), "not used without the descent guard (--guard on; auto puts "
                                                      "it on for --init compiled)")
DEEP = Condition(lambda c: bool(getattr(c.spec, "deep", False)),
                 "not used by model {model}: only the FAP/NTP baselines have a depth to set")
PAUSED = Condition(lambda c: bool(getattr(c.spec, "pause", False)),
                   "not used by model {model}: only the *-Pause baselines take pause tokens")
LOOP_COUNT = Condition(lambda c: getattr(c.spec, "fixed_steps", None) == "loop",
                       "not used by model {model}: only NTP-Loop runs a fixed number of iterations")
THRESHOLD_RULE = Condition(lambda c: c.stop == "threshold",
                           "only with --stop threshold (the rule here is {stop})")
FIRST_POSITIONS = Condition(lambda c: bool(_hp("loss_first", c)), "not used without loss_first > 0")
KIND_TEXT = {"fan": "a Fan-task option, not used by comparison tasks", "seq": "a comparison-task setting, not used by "
                                                                               "Fan-task runs"}
SET_HINT = " (set model settings with --set KEY=VALUE)"    # to a flag given to a comparison run


@dataclass(frozen=True)
class Setting:
    kinds: tuple = BOTH           # the kinds of run that record it (run.json)
    lo: Optional[float] = None    # numbers: the range, however given (flag, --set, preset, run.json)
    hi: Optional[float] = None
    lo_open: bool = False         # lo itself refused
    hi_open: bool = False
    choices: tuple = ()           # a switch: its values (the first is Fan et al.'s)
    # `rasp train --HELP-FLAG`: its line of --help ("" = no flag: presets, --set, run.json only),
    # group (GROUPS), place in the group, and the kinds of run that take it
    help: str = ""
    group: str = ""
    at: int = 0
    flag_kinds: Optional[tuple] = None   # default: `kinds`
    flag_lo_open: bool = False    # the flag refuses lo, which --set and recorded runs may hold
    none_means: str = ""          # what a value of None means (its default in --help)
    resumable: bool = False       # --resume may change it (how long a run goes on, how it is logged)
    # added after run format 2: a run.json without it had this default (its fingerprint omits it there)
    added: bool = False
    # when the run uses it at all (every one must hold): given for a run that does not, it is refused
    used_if: tuple = ()

    @property
    def takes_flag(self) -> tuple:
        return (self.flag_kinds or self.kinds) if self.help else ()

    def int_text(self) -> str:
        return f"an integer from {self.lo} to {self.hi}"

    def number_text(self, lo_open: bool) -> str:
        """'a finite number >= 0 and < 1', as both refusals word it."""
        hi = "" if self.hi is None or not math.isfinite(self.hi) else \
            f" and {'<' if self.hi_open else '<='} {self.hi:g}"
        return f"a finite number {'>' if lo_open else '>='} {self.lo:g}{hi}"

    def number_ok(self, v: float, lo_open: bool) -> bool:
        return (math.isfinite(v) and (v > self.lo if lo_open else v >= self.lo)
                and (self.hi is None or (v < self.hi if self.hi_open else v <= self.hi)))

    def unused(self, chosen: Chosen, as_flag: bool = False) -> str:
        """Why a run of `chosen` does not use this setting ("" if it does): the one
        rule of which settings may be given together, whatever gives them (`as_flag`:
        its flag, which some kinds of run that record it do not take)."""
        kinds = self.takes_flag if as_flag and self.help else self.kinds
        if chosen.kind not in kinds:
            return KIND_TEXT[kinds[0]] + (SET_HINT if as_flag and chosen.kind == "seq" else "")
        failed = next((c for c in self.used_if if not c.test(chosen)), None)
        return failed.unless.format(model=chosen.model, stop=chosen.stop) if failed else ""


# the flags of `rasp train` / `rasp eval` that are not hyper-parameters but are used only
# with others, ruled by the same `unused` as the HParams fields
RUN_FLAGS = {"compress": Setting(kinds=FAN, used_if=(COMPRESSIBLE,)),
             "compress_method": Setting(kinds=FAN, used_if=(COMPRESSED, COMPRESSIBLE)),
             "threshold": Setting(kinds=FAN, used_if=(THRESHOLD_RULE,))}
