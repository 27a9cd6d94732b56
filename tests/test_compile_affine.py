"""Selects between two positions of the same slope, `select(indices + b1,
indices + b2, pred)`: the compiler decides at compile time whether every
earlier key is selected ("always"), none is ("never"), or a prefix ending t
back ("lag"), from the distance d = i - j alone (compiler/craft/selects.py,
select_kind).  It used to look at distances below 50 only, so `indices + 60
>= indices` compiled as "always" and gave wrong counts past position 60.
Checked against the interpreter on inputs up to the design length, every
position."""
from __future__ import annotations

import random

import pytest

import rasp
import ported_programs as P
from compiler import compile_program


def assert_same(prog, cm, batch):
    want = prog.run_batch(batch).outputs
    for x, g, w in zip(batch, cm.run_batch(batch), want):
        assert list(g) == list(w), (len(x), [i for i, (a, b) in enumerate(zip(g, w)) if a != b][:5])


def batch(seed, lengths=(61, 256)):
    rng = random.Random(seed)
    return [[rng.choice([0, 1, 2]) for _ in range(n)] for n in lengths]


def check_same_slope(pred, b1, b2):
    src = (f"input seq: {{0, 1, 2}}\nk = indices(seq) + {b1}\nq = indices(seq) + {b2}\n"
           f"w = sel_width(select(k, q, {pred}))\n"
           f"m = aggr(select(k, q, {pred}), seq, 3, max)\n"
           "output 10 * w + m\n")
    prog = rasp.loads(src, "<affine>")
    cm = compile_program(prog, max_len=64)                 # design length 256
    assert_same(prog, cm, batch(b1 * 7 + b2))


@pytest.mark.parametrize("pred", ["lt", "ge", "ne"])
@pytest.mark.parametrize("b1, b2", [(60, 0), (0, 60), (-40, -100), (1, 0)])
def test_same_slope_selects_exact_at_every_distance(pred, b1, b2):
    check_same_slope(pred, b1, b2)


@pytest.mark.slow
@pytest.mark.parametrize("pred", ["lt", "le", "gt", "ge", "ne"])
@pytest.mark.parametrize("b1, b2", [(60, 0), (0, 60), (-40, -100), (1, 0), (0, 33), (100, 0), (-7, 25)])
def test_same_slope_selects_every_predicate_and_offset(pred, b1, b2):
    check_same_slope(pred, b1, b2)


def test_a_select_nothing_ever_passes_is_no_head():
    """Tracr's sort_unique on keys 1 - indices: `keys < keys` of a later key
    never holds for a causal query, so the width is 0 and the program needs no
    sel_width head, digit code or decoder (94,446 parameters at --max-len 64
    before, 441,023 at 256)."""
    prog = rasp.loads(P.BY_NAME["tracr_sort_unique_neg_index"].source, "<sort_unique_neg_index>")
    cm = compile_program(prog, max_len=64)
    assert "sel_width" not in cm.report() and cm.model.num_params() < 2000
    assert_same(prog, cm, [[random.Random(n).choice([0, 1, 2, 3]) for _ in range(n)] for n in (1, 5, 64, 200, 256)])
