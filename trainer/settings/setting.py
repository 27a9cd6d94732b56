"""What one hyper-parameter is, said once: the metadata of an `HParams`
field (trainer/settings/hparams.py), from which `HParams.validate`, the
`rasp train` flag (its argparse type: trainer/settings/validate.py), its
line of `--help` (trainer/settings/trainhelp.py) and the resume rule
(trainer/run/checkpoint.py) are all made."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

# the help groups of the recipe's flags, in --help order
GROUPS = {
    "size": "model size",
    "optimiser": "optimiser (AdamW) and schedule",
    "curriculum": "Fan et al.'s length curriculum and baselines",
    "switches": "Fan et al.'s recipe switches (trainer/README.md gives each one's source)",
    "logging": "logging, evaluation and checkpoints",
    "guard": "the descent guard (--guard; on for a compiled start)",
    "speed": "speed on a GPU (on a CPU --tf32 does nothing and --compile on is refused; --precision bf16 works on both)",
    "halting": "knowing when to stop (the defaults are Fan et al.'s recipe: the loss at T(n) only)",
}
BOTH = ("fan", "seq")


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
