"""Fan et al.'s tasks (docs/tasks.md), registered: each is its program
`programs/NAME.rasp` plus a sampler, made by `program_task` exactly as
`rasp train --program` makes a task, so a registered task and a program of
your own go through one path.  Targets and T(n) come from the program.

The sampler is the program's own `sample` statement where it draws the
task's distribution (parity, copy, addition, unique_set: its LO..HI is the
task's training sizes), else a Python sampler here, beside the program, where
the statement cannot say it:

    padded_parity   the padding count n - k follows the drawn bit count k
    binary_sum      the answer has bit_length(n) tokens (no logarithm in a length)
    multiplication  n1 is drawn in {1, 2} in training but is 2 at test, and the
                    answer length n1 + n follows the drawn n1

Adding a task: its program in programs/ (with a `sample` statement), then one
`register(fan_task(NAME, PaperHParams(...), ...))` call below.
"""
from __future__ import annotations

from rasp.errors import RaspError
from trainer.tasks.base import PROGRAMS, PaperHParams, Task, register
from trainer.tasks.program import program_task


def fan_task(name: str, paper: PaperHParams, sampler=None, **fields) -> Task:
    """The task of programs/NAME.rasp, scored from `>` on (full answer); `sampler`:
    None for the program's `sample` statement, else a Python sampler beside it."""
    fields.setdefault("output_values", _binary_out)
    return program_task(PROGRAMS / f"{name}.rasp", name=name, sampler=sampler, paper=paper, **fields)


# ---- the samplers the `sample` statement cannot express ----------------------

def _bits(rng, n):
    return [int(b) for b in rng.integers(0, 2, size=n)]


def _fap(query, sym, n_answer):
    """query `>` then one `#` per answer token plus the final `#`."""
    return list(query) + [sym[">"]] + [sym["#"]] * (n_answer + 1)


def sample_padded_parity(rng, n, sym, train=True):
    """n tokens before `>`: k uniform on 1..n real bits, then n - k padding `_`,
    so T = k varies between inputs of one size n (k >= 1: every input loops)."""
    k = int(rng.integers(1, n + 1))
    return _fap(_bits(rng, k) + [sym["_"]] * (n - k), sym, 1)


def sample_binary_sum(rng, n, sym, train=True):
    return _fap(_bits(rng, n), sym, int(n).bit_length())


def sample_multiplication(rng, n, sym, train=True):
    # n is n2 (the second factor's length); n1 in {1, 2} while training, 2 at test.
    n1 = int(rng.integers(1, 3)) if train else 2
    return _fap(_bits(rng, n1) + [sym["*"]] + _bits(rng, n), sym, n1 + n)


def _binary_out(sym):
    return [0, 1, sym["#"]]


register(fan_task("parity", PaperHParams(1, 64, 1000, 20, 50),
                  description="Fan et al.: the parity of n bits (docs/tasks.md)"))
register(fan_task("padded_parity", PaperHParams(1, 64, 1000, 20, 50), sample_padded_parity,
                  symbols=(">", "#", "_"),
                  description="issue 39: the parity of k bits then padding to size n (T = k varies at one n)"))
register(fan_task("copy", PaperHParams(2, 8, 1000, 19, 30), description="Fan et al.: copy n bits"))
register(fan_task("addition", PaperHParams(3, 8, 1600, 19, 30), symbols=(">", "#", "+"),
                  description="Fan et al.: the sum of two n-bit numbers", size=lambda x, sym: x.index(sym["+"])))
register(fan_task("binary_sum", PaperHParams(2, 16, 1000, 19, 24), sample_binary_sum,
                  description="Fan et al.: the number of ones among n bits, in binary"))
register(fan_task("multiplication", PaperHParams(4, 8, 500, 11, 15), sample_multiplication, t_max_extra=30,
                  symbols=(">", "#", "*"), size=lambda x, sym: x.index(sym[">"]) - x.index(sym["*"]) - 1,   # n2
                  description="Fan et al.: the product of two binary numbers"))
register(fan_task("unique_set", PaperHParams(3, 8, 1000, 19, 30), t_max_extra=30,
                  output_values=lambda sym: list(range(50)) + [sym["#"]],
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
