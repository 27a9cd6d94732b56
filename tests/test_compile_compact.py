"""Compact compiled models (issue 27): the constructions that replaced one-hot
codes of wide value sets, each checked exact against the interpreter
(exhaustive on short inputs, random up to the design length 4 x max-len) and
checked to be in use, so that a test fails if the compiler silently falls
back to the wide construction:

* wide value sets of small ints encoded as numbers (craft.dense_small);
* numeric equality selects narrowed to the range where both sides meet
  (craft.selects.narrowed), and many-match max/min over them by digits;
* max/min over an order select of wide numbers by two digit heads
  (craft.aggregates.build_order_digits);
* the one-hot build a program falls back to when an op needs one-hot codes
  (a lookup table of two wide values);
* blocks only as wide as their own ops (LoopedConfig.block_shapes; layers.schedule_compact
  picks head caps by those weights): fewer weights, same outputs.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

import rasp
import references as R
from compiler import compile_program
from compiler.craft import Crafter
from test_compile_digits import assert_same, short_and_random

ROOT = Path(__file__).resolve().parents[1]


def params(cm) -> int:
    return sum(p.numel() for p in cm.model.parameters())


ORDER = """input seq: {0..99}
k = where(indices(seq) % 3 == 0, seq, 50)
output kqv(k, seq, k, PRED, -1, RED)
"""


@pytest.mark.parametrize("pred, red", [("gt", "min"), ("ge", "min"), ("lt", "max"), ("le", "max"),
                                       ("gt", "max"), ("lt", "min")])
def test_max_min_over_an_order_select_by_digit_heads(pred, red):
    prog = rasp.loads(ORDER.replace("PRED", pred).replace("RED", red), "<order>")
    cm = compile_program(prog, max_len=4)
    report = cm.report()
    assert "(digit_same)" in report and "(digit_beyond)" in report
    vocab = [0, 1, 9, 10, 11, 49, 50, 51, 89, 98, 99]
    assert_same(prog, cm, short_and_random(vocab, 16, 1, 3, 3) + short_and_random(list(range(100)), 16, 2, 1, 3))


@pytest.mark.parametrize("red", ["min", "max"])
def test_order_digit_heads_with_one_hot_values(monkeypatch, red):
    monkeypatch.setattr(Crafter, "FORCE_DIGITS", True)
    src = f"input seq: {{0..5}}\nc = cumsum(seq == 1)\noutput kqv(c, c - 1, seq, gt, 7, {red})\n"
    prog = rasp.loads(src, "<small>")
    cm = compile_program(prog, max_len=4)
    assert "(digit_same)" in cm.report()
    assert_same(prog, cm, short_and_random(list(range(6)), 16, 3, exhaustive_to=4))


NARROW = """input seq: {0..9, -103..-100}
q = firsts(seq, seq + 1, -999) + 1
output index_select(seq, q, 7) + 10 * firsts(seq, seq, -999) % 100
"""


def test_equality_select_narrowed_to_where_both_sides_meet():
    prog = rasp.loads(NARROW, "<narrow>")
    cm = compile_program(prog, max_len=8)            # -999 is beyond the quadratic score's range
    # q is a min aggregate plus 1: its own head returns it narrowed, with its
    # square (craft.selects.clamped_by_head): no clamp units, no square table
    assert "clamp" not in cm.report() and "square" not in cm.report()
    vocab = [0, 1, 2, 5, 8, 9, -103, -100]
    assert_same(prog, cm, short_and_random(vocab, 32, 4, 3, 3))


def test_narrowing_head_rows_of_a_one_hot_value_that_clamps_alike():
    # q's value is seq (one-hot, 170 values; q itself is a number): q + 1 is
    # narrowed to [-1, 32] by rows of q's head, and every token from 31 up
    # clamps to 32 -- each must keep its weight in the row (a dict keyed by the
    # clamped value kept one of them and sent the others to 0: 7 31 for 0 31)
    src = "input seq: {0..169}\nq = kqv(indices(seq), indices(seq), seq, eq, -999)\n" \
          "output index_select(seq, q + 1, 7)\n"
    prog = rasp.loads(src, "<narrow one-hot>")
    cm = compile_program(prog, max_len=8)
    assert "clamp" not in cm.report() and "square" not in cm.report()
    assert_same(prog, cm, [[0, 31], [0, 40, 2], [169, 0, 31, 33]] + short_and_random(
        list(range(0, 36)) + [100, 169], 32, 8, 2, 4))


def test_equality_select_narrowed_by_relus_where_no_head_returns_the_value():
    src = "input seq: {0..9}\nq = where(seq > 5, indices(seq) - seq, -999)\noutput index_select(seq, q, 7)\n"
    prog = rasp.loads(src, "<narrow where>")
    cm = compile_program(prog, max_len=8)
    assert "clamp" in cm.report()
    assert_same(prog, cm, short_and_random(list(range(10)), 32, 5, 3, 3))


SORT_KEYS = """input seq: {1..4}
keys = seq * 16 + indices(seq)
target = sel_width(select(keys, keys, PRED))
output aggr(select(target, indices(seq), eq), seq)
"""


@pytest.mark.parametrize("pred", ["lt", "le", "gt", "ge"])
def test_sel_width_of_an_order_select_by_digit_heads(pred):
    # Tracr's sort: keys range over 16..95 at L = 32, counted by two digit
    # heads (disjoint key sets) instead of a one-hot code of the range
    prog = rasp.loads(SORT_KEYS.replace("PRED", pred), "<sort keys>")
    cm = compile_program(prog, max_len=8)
    report = cm.report()
    assert "sel_width target @3 (digit_same)" in report and "(digit_beyond)" in report
    assert_same(prog, cm, short_and_random([1, 2, 3, 4], 32, 6, 4, 3))


WIDTHS = """input seq: {0, 1, 2}
u = sel_width(select(seq, seq, eq))
t = sel_width(select(seq == 1, full(seq, 1), eq))
output (u PRED t) + 2 * (t PRED u)EXTRA
"""


@pytest.mark.parametrize("pred", ["lt", "le", "gt", "ge"])
@pytest.mark.parametrize("extra", ["", " + 4 * u"])
def test_sel_widths_compared_by_their_heads_shares(pred, extra):
    # sort.rasp's `used < total`: one step on the two heads' 1/(w+1), no
    # decoder (L units each) unless the width itself is used (extra)
    op = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}[pred]
    prog = rasp.loads(WIDTHS.replace("PRED", op).replace("EXTRA", extra), "<widths>")
    cm = compile_program(prog, max_len=8)
    report = cm.report()
    assert f"{pred} of widths" in report
    assert report.count("decode sel_width") == (1 if extra else 0)
    assert_same(prog, cm, short_and_random([0, 1, 2], 32, 9, 5, 4))


def test_positions_beyond_the_quadratic_range_compare_number_digits(monkeypatch):
    # --max-len 96: positions up to 383 > 362, so shift_right and index_select
    # compare two digits held as numbers (craft.digits.number_digit_select):
    # tens of thousands of weights, where one-hot digits took 336,834.  (Rotary
    # codes, tests/test_compile_rot.py, take these first; without them, digits.)
    monkeypatch.setattr(Crafter, "rot_wanted", lambda self: False)
    prog = rasp.load(ROOT / "programs" / "flip_flop.rasp")
    cm = compile_program(prog, max_len=96)
    assert "digit hi" in cm.report() and params(cm) < 40_000
    rng = random.Random(7)
    batch = [R.SAMPLERS["flip_flop"](rng, n) for n in (1, 2, 100, 181, 191, 192)]
    assert_same(prog, cm, [prog.parse_input(" ".join(map(str, x))) for x in batch])


def test_wide_token_programs_are_compact_and_exact():
    prog = rasp.load(ROOT / "programs" / "count.rasp")
    assert params(compile_program(prog, max_len=64)) <= 2_000_000
    cm = compile_program(prog, max_len=8)
    rng = random.Random(5)
    batch = []
    while len(batch) < 30:
        x = prog.parse_input(" ".join(map(str, R.SAMPLERS["count"](rng, rng.randint(1, 12)))))
        if len(x) <= 32:
            batch.append(x)
    assert_same(prog, cm, batch)


def test_an_op_that_needs_one_hot_codes_falls_back_to_them():
    rows = [[(3 * a + 7 * b) % 30 for b in range(30)] for a in range(30)]
    src = (f"const T = {rows}\ninput seq: {{0..29}}\n"
           "output seq_map(seq, shift_right(seq, 1), T)\n")
    prog = rasp.loads(src, "<table>")
    cm = compile_program(prog, max_len=4)
    assert_same(prog, cm, short_and_random(list(range(30)), 16, 6, exhaustive_to=2))


def test_each_block_is_only_as_wide_as_its_own_ops(monkeypatch):
    """Blocks have their own widths (LoopedConfig.block_shapes): no head, head
    row or MLP unit of a block is all zero, the model is smaller than one whose
    blocks all have the widest block's widths, and the planner's head caps
    cost no more than the ASAP schedule."""
    from model import LoopedConfig, LoopedTransformer
    prog = rasp.load(ROOT / "programs" / "sort.rasp")
    cm = compile_program(prog, max_len=16)
    m = cm.model
    for blk, (h, w, u) in zip(m.blocks(), m.cfg.shapes()):
        if h:
            qkv = torch.cat([blk.attn.q.weight, blk.attn.k.weight, blk.attn.v.weight], 1).reshape(h, w, -1)
            assert bool((qkv != 0).flatten(1).any(1).all())                 # every head is used
            assert bool((qkv != 0).any(2).any(0).all())                     # its widest row too
        if u:
            assert bool(((blk.mlp.up.weight != 0).any(1) | (blk.mlp.up.bias != 0)).all())
    assert len(set(m.cfg.shapes())) > 1
    with torch.device("meta"):
        uniform = LoopedTransformer(LoopedConfig.from_dict({**vars(m.cfg), "block_shapes": []})).num_params()
    assert m.num_params() < uniform / 2
    import compiler.compiled as C
    monkeypatch.setattr(C, "caps", lambda *a, **k: [(None, None)])
    monkeypatch.setattr(C, "schedule_compact", lambda stages, fixed, d: (0, {
        s: C.schedule(ops) for s, ops in stages.items()}))
    assert params(cm) <= params(compile_program(prog, max_len=16))


@pytest.mark.parametrize("wide", [False, True])
def test_a_numeric_output_keeps_the_halting_clock(monkeypatch, wide):
    """A wide output becomes a number (dense_small); its halting clock
    (compiler/clock.py: where(done, out, out + offset)) used to be a number
    too, which the unembedding read as itself: every position the clock had
    not marked done (those before `>`, where T is not known yet) printed
    out + offset (unique_set, --max-len 12: '52 14 # #' for '0 14 # #'), and
    every position once the loop ran other than T times (`--param n=7`: the
    scored ones too).  Every position is compared.  `wide`: as if the
    output were beyond the quadratic unembedding at the clock's margins (the
    clocked output is then read through a one-hot code)."""
    import compiler.craft.readout as K
    if wide:
        monkeypatch.setattr(K, "quadratic_unembed_exact", lambda lo, hi, scale=1.0: scale == 1.0)
    prog = rasp.load(ROOT / "programs" / "unique_set.rasp")
    cm = compile_program(prog, max_len=12)
    assert "count" in cm.config.extra["compiler"]["clock"]
    assert cm.config.extra["output_tokens"] == list(range(-2, 50))
    rng = random.Random(11)
    batch = [prog.parse_input("14 > # #")]
    batch += [prog.parse_input(" ".join(map(str, R.SAMPLERS["unique_set"](rng, rng.randint(1, 6)))))
              for _ in range(40)]
    assert_same(prog, cm, batch)
    longer = {"n": 7}                     # past T: unique_set's answer stays (test_programs.STABLE)
    assert cm.run_batch(batch, longer) == prog.run_batch(batch, params=longer).outputs
    # the number and done * number: one unit; a one-hot code: a table
    loop_line = prog.ir.source.splitlines().index("loop n:") + 1
    assert (f"where output(clock) @{loop_line} (1 units)" in cm.report()) == (not wide)


TOKEN_MAPS = """input seq: {0..29}
m = tok_map(seq, lambda a: a % 3)
h = tok_map(seq, lambda a: a // 10)
acc = m
loop 3:
    acc = (acc + h * shift_right(acc, 1, 0)) % 3
output acc
"""


def test_token_maps_in_embedding_dims_are_carried_instead_of_the_input():
    # words_mixed's shape: the input (30 tokens) is read only through token
    # maps (3 + 3 values), so the embedding writes the maps' dims, and the
    # loop carries those to the postlude instead of the input's one-hot dims
    prog = rasp.loads(TOKEN_MAPS, "<token maps>")
    cm = compile_program(prog, max_len=8)
    names = cm.config.extra["dim_names"]
    assert not [n for n in names if n.startswith("carry:seq=")] and "seq->2" in names
    assert_same(prog, cm, short_and_random(list(range(30)), 32, 7, exhaustive_to=1, per_length=3))
