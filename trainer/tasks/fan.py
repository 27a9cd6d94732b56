"""Task registry: what an input looks like, where its answer comes from.

A task only knows how to *sample inputs* (docs/tasks.md: uniform bits, tokens 0..49,
n1 in {1, 2}) and how many trailing `#` the answer needs.  Targets and the
step count T(n) are never computed here: they come from running the task's
program in `programs/` through the interpreter (see `trainer/tasks/labels.py`), so
the program is the single source of truth.

Adding a task = one `register(Task(...))` call.  `target` says how outputs
are scored, so per-position tasks (flip-flop, word problems) and
per-sequence tasks (ListOps) plug in next to the full-answer (FAP) ones:

    "fap"           positions from the end-of-query symbol on (Fan et al.)
    "per_position"  every position
    "per_sequence"  only the last position
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from rasp.errors import RaspError
from trainer.registry import Registry

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = REPO / "programs"


@dataclass(frozen=True)
class PaperHParams:
    """Fan et al. Table 2 / docs/tasks.md: the block and curriculum per task."""
    n_layer: int
    n_head: int
    interval: int       # steps between curriculum increments
    max_train_n: int
    test_n: int


@dataclass(frozen=True)
class Task:
    name: str
    # sample(rng, n, sym, train) -> input tokens (ints; symbols as their codes)
    sample: Callable[[np.random.Generator, int, dict, bool], list]
    # possible values at scored positions, given the symbol codes
    output_values: Callable[[dict], list]
    paper: PaperHParams
    t_max_extra: int = 20          # confidence stopping runs up to T(n) + this
    program: str = ""              # file name in programs/ (default NAME.rasp)
    target: str = "fap"
    min_n: int = 1
    symbols: tuple = (">", "#")    # symbols the sampler needs from the program
    description: str = ""          # one line, for `rasp train --help`
    # a task made from a program file (trainer/tasks/program.py): its text, the symbol
    # where scoring starts ("fap"), a batch sampler draw(rng, lengths, sym, train) that
    # checks `require`, and the sizes a file of held-out inputs holds
    marker: str = ">"
    source: str = ""
    draw: Optional[Callable[[np.random.Generator, Sequence[int], dict, bool], list]] = None
    eval_sizes: tuple = ()
    # the problem size n of an input (the sampler's n, which depth_law reads), when it is not
    # the number of tokens before the marker
    size: Optional[Callable[[list, dict], int]] = None

    def size_of(self, tokens: list, sym: dict) -> int:
        if self.size is not None:
            return self.size(tokens, sym)
        marker = sym.get(self.marker)
        return tokens.index(marker) if marker in tokens else len(tokens)

    @property
    def program_path(self) -> Path:
        return PROGRAMS / (self.program or f"{self.name}.rasp")     # an absolute `program` stays as it is


TASKS = Registry("task")
register = TASKS.register
get_task = TASKS.lookup


# ---- samplers -----------------------------------------------------------

def _bits(rng, n):
    return [int(b) for b in rng.integers(0, 2, size=n)]


def _fap(query, sym, n_answer):
    """query `>` then one `#` per answer token plus the final `#`."""
    return list(query) + [sym[">"]] + [sym["#"]] * (n_answer + 1)


def sample_parity(rng, n, sym, train=True):
    return _fap(_bits(rng, n), sym, 1)


def sample_padded_parity(rng, n, sym, train=True):
    """n tokens before `>`: k uniform on 1..n real bits, then n - k padding `_`,
    so T = k varies between inputs of one size n (k >= 1: every input loops)."""
    k = int(rng.integers(1, n + 1))
    return _fap(_bits(rng, k) + [sym["_"]] * (n - k), sym, 1)


def sample_copy(rng, n, sym, train=True):
    return _fap(_bits(rng, n), sym, n)


def sample_addition(rng, n, sym, train=True):
    return _fap(_bits(rng, n) + [sym["+"]] + _bits(rng, n), sym, n + 1)


def sample_binary_sum(rng, n, sym, train=True):
    return _fap(_bits(rng, n), sym, int(n).bit_length())


def sample_multiplication(rng, n, sym, train=True):
    # n is n2 (the second factor's length); n1 in {1, 2} while training, 2 at test.
    n1 = int(rng.integers(1, 3)) if train else 2
    return _fap(_bits(rng, n1) + [sym["*"]] + _bits(rng, n), sym, n1 + n)


def sample_unique_set(rng, n, sym, train=True):
    return _fap([int(t) for t in rng.integers(0, 50, size=n)], sym, n)


def _binary_out(sym):
    return [0, 1, sym["#"]]


register(Task("parity", sample_parity, _binary_out, PaperHParams(1, 64, 1000, 20, 50),
              description="Fan et al.: the parity of n bits (docs/tasks.md)"))
register(Task("padded_parity", sample_padded_parity, _binary_out, PaperHParams(1, 64, 1000, 20, 50),
              symbols=(">", "#", "_"),
              description="issue 39: the parity of k bits then padding to size n (T = k varies at one n)"))
register(Task("copy", sample_copy, _binary_out, PaperHParams(2, 8, 1000, 19, 30),
              description="Fan et al.: copy n bits"))
register(Task("addition", sample_addition, _binary_out, PaperHParams(3, 8, 1600, 19, 30),
              symbols=(">", "#", "+"), description="Fan et al.: the sum of two n-bit numbers",
              size=lambda x, sym: x.index(sym["+"])))
register(Task("binary_sum", sample_binary_sum, _binary_out, PaperHParams(2, 16, 1000, 19, 24),
              description="Fan et al.: the number of ones among n bits, in binary"))
register(Task("multiplication", sample_multiplication, _binary_out,
              PaperHParams(4, 8, 500, 11, 15), t_max_extra=30, symbols=(">", "#", "*"),
              size=lambda x, sym: x.index(sym[">"]) - x.index(sym["*"]) - 1,      # n2
              description="Fan et al.: the product of two binary numbers"))
register(Task("unique_set", sample_unique_set, lambda sym: list(range(50)) + [sym["#"]],
              PaperHParams(3, 8, 1000, 19, 30), t_max_extra=30,
              description="Fan et al.: the distinct tokens of n, in order of first appearance"))


def parse_lengths(text: str) -> list:
    """`1:40` (inclusive), `5`, `1,5,10` or `1:40:3` -> sorted unique ints >= 1."""
    out = set()
    try:
        for part in str(text).split(","):
            part = part.strip()
            if ":" in part:
                bits = [int(x) for x in part.split(":")]
                if len(bits) not in (2, 3):
                    raise ValueError
                lo, hi = bits[0], bits[1]
                step = bits[2] if len(bits) == 3 else 1
                if step < 1 or hi < lo:
                    raise ValueError
                out.update(range(lo, hi + 1, step))
            else:
                out.add(int(part))
    except ValueError:
        raise RaspError(f"bad --lengths {text!r}: use LO:HI, LO:HI:STEP or a comma list, e.g. 1:40") from None
    if not out or min(out) < 1:
        raise RaspError(f"bad --lengths {text!r}: lengths must be >= 1")
    return sorted(out)
