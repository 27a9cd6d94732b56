"""The limits of one run (`--max-len`, `--max-steps`, `--max-work`).

A leaf module: the program (which checks lengths), the interpreter (which
counts loop steps) and its budget (which counts work, rasp/budget.py) all
read the one `RunLimits`, and loading a program needs no NumPy.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import RaspError

DEFAULT_MAX_LEN = 8192
DEFAULT_MAX_STEPS = 10_000
DEFAULT_MAX_WORK = 10 ** 10     # element operations per input; rasp.budget enforces it


@dataclass
class RunLimits:
    max_len: int = DEFAULT_MAX_LEN     # tokens per input
    max_steps: int = DEFAULT_MAX_STEPS  # iterations per loop per input
    max_work: int = DEFAULT_MAX_WORK   # element operations per input, all loops together
    # what an error about a limit advises: its flag, or (a command that has no such flags,
    # e.g. `rasp train`, which labels its inputs with the defaults) this text instead
    fixed: str = ""

    def advice(self, flag: str) -> str:
        """How to get past the limit that `flag` sets, as an error about it says."""
        return self.fixed or f"raise it with {flag}"

    def check(self):
        for flag, value, least in (("--max-len", self.max_len, 1), ("--max-steps", self.max_steps, 0),
                                   ("--max-work", self.max_work, 1)):
            if value < least:
                raise RaspError(f"{flag} must be at least {least}, got {value}")
