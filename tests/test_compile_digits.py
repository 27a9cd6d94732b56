"""Numeric equality of wide numbers (compiler/craft/digits.py, digit_select): both
sides are written as two small digits in one base B ~ sqrt(range) and the
head compares the digits.  Exact for every value in the range the numbers
take at the design length L = 4 x max-len (ranges up to 363^2 values);
checked exhaustively on short inputs and at random up to L, on programs whose
values exceed the quadratic score's bound (362) and, with the digit path
forced, on the library shapes and programs that normally use the quadratic
score."""
from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

import rasp
import references as R
from compiler import compile_program
from compiler.craft import Crafter

ROOT = Path(__file__).resolve().parents[1]

WIDE = """input seq: {0, 1, 2}
c = 50 * cumsum(seq == 1)
d = 50 * cumsum(seq == 2)
w = sel_width(select(c, d, eq))
m = kqv(c, d, seq, eq, default=7)
output 100 * w + 10 * m + seq
"""


def assert_same(prog, cm, batch):
    """Every position, not only the scored ones: `rasp run DIR` prints them all."""
    want = prog.run_batch(batch).outputs
    for x, g, w in zip(batch, cm.run_batch(batch), want):
        assert list(g) == list(w), (x, list(g), list(w))


def short_and_random(vocab, L, seed, exhaustive_to=5, per_length=4):
    batch = [list(x) for n in range(1, exhaustive_to + 1) for x in itertools.product(vocab, repeat=n)]
    rng = random.Random(seed)
    batch += [[rng.choice(vocab) for _ in range(n)] for n in range(exhaustive_to + 1, L + 1)
              for _ in range(per_length)]
    return batch


def test_wide_values_use_digits_and_are_exact():
    prog = rasp.loads(WIDE, "<wide>")
    cm = compile_program(prog, max_len=6)           # L = 24: values up to 1200 > 362
    assert "digit hi" in cm.report()
    assert_same(prog, cm, short_and_random([0, 1, 2], 24, 1))


@pytest.fixture
def forced_digits(monkeypatch):
    monkeypatch.setattr(Crafter, "FORCE_DIGITS", True)


SHAPES = ["shift_right(seq, 1)", "index_select(seq, seq)", "firsts(seq, seq)", "induct(seq, seq, 1)",
          "kqv(cumsum(seq == 1), cumsum(seq == 2), seq, eq)", "sel_width(select(indices(seq) + 2, indices(seq), eq))"]


@pytest.mark.parametrize("expr", SHAPES)
def test_forced_digits_library_shapes_exact(forced_digits, expr):
    prog = rasp.loads(f"input seq: {{0, 1, 2}}\noutput {expr}\n", "<shape>")
    cm = compile_program(prog, max_len=4)
    assert_same(prog, cm, short_and_random([0, 1, 2], 16, 2))


@pytest.mark.parametrize("name", ["addition", "reverse"])
def test_forced_digits_programs_exact(forced_digits, name):
    prog = rasp.load(ROOT / "programs" / f"{name}.rasp")
    cm = compile_program(prog, max_len=6)
    assert_same(prog, cm, R.sampled_inputs(prog, name, 40, 8, 24, 3))
