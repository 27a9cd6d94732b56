"""Exactness or refusal (issue 8): compiled models equal the interpreter on the
stated input range, searched exhaustively where small, or `compile` refuses
with a located reason.  Regression programs from the issue are written here as
.rasp sources: Tracr's frac_prevs and pair_balance (numeric means), a reverse
that carries a pointer, the library's mode, the firsts(cumsum, cumsum) operand
alignment of the addition programs, order selects between numbers (sort by
value) and a one-hot loop variable with a numeric update.
"""
from __future__ import annotations

import itertools
from fractions import Fraction
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rasp
from compiler import compile_program
from compiler import mean as MEAN
from rasp.errors import RaspError


def loads(src):
    return rasp.loads(src, "<test>")


def assert_same(prog, cm, batch, scored=True):
    batch = [x for x in batch if x]
    for start in range(0, len(batch), 1000):
        chunk = batch[start:start + 1000]
        ref = prog.run_batch(chunk).outputs
        got = cm.run_batch(chunk)
        for x, r, g in zip(chunk, ref, got):
            p = prog.scored_start(x) if scored else 0
            assert r[p:] == g[p:], (prog.format_output(x), r, g)


# ---- numeric means: every (width, sum) up to the design length ------------------------

FRAC_PREVS = """input seq: {0, 1, 2}
output aggr(select(indices(seq), indices(seq), le), 1000 * (seq == 1))
"""

PAIR_BALANCE = """const LP = "("
const RP = ")"
input seq: {LP, RP, 0}
output aggr(select(indices(seq), indices(seq), le), 1000 * ((seq == LP) - (seq == RP)))
"""


def every_count(L, one, zero):
    """Inputs of length L holding, at position w-1, every count c <= w of `one`."""
    return [[one] * a + [zero] * (L - a) for a in range(L + 1)] + [[zero] * a + [one] * (L - a)
                                                                   for a in range(L + 1)]


def every_pair_of_counts(L, up, down, zero):
    """Inputs of length L holding, at position w-1, every (#up, #down) with sum <= w."""
    out = []
    for a in range(L + 1):
        for b in range(L + 1 - a):
            out.append([up] * a + [down] * b + [zero] * (L - a - b))
    return out


@pytest.mark.parametrize("max_len", [4, 12])
def test_frac_prevs_every_width_and_count(max_len):
    prog = loads(FRAC_PREVS)
    cm = compile_program(prog, max_len)
    L = 4 * max_len
    assert_same(prog, cm, every_count(L, 1, 0) + every_count(L, 1, 2), scored=False)


@pytest.mark.parametrize("max_len", [3, pytest.param(8, marks=pytest.mark.slow)])
def test_pair_balance_every_width_and_counts(max_len):
    prog = loads(PAIR_BALANCE)
    cm = compile_program(prog, max_len)
    lp, rp = prog.ir.symbols["("], prog.ir.symbols[")"]
    L = 4 * max_len
    assert_same(prog, cm, every_pair_of_counts(L, lp, rp, 0) + every_pair_of_counts(L, rp, lp, 0),
                scored=False)


@pytest.mark.slow
@pytest.mark.parametrize("src, max_len", [(FRAC_PREVS, 48), (FRAC_PREVS, 87), (PAIR_BALANCE, 48),
                                          (PAIR_BALANCE, 65)])
def test_issue_means_at_the_reported_and_largest_lengths(src, max_len):
    """The issue's --max-len 48, and the largest --max-len the float32 bounds allow."""
    prog = loads(src)
    cm = compile_program(prog, max_len)
    L = 4 * max_len
    if "LP" in src:
        lp, rp = prog.ir.symbols["("], prog.ir.symbols[")"]
        batch = every_pair_of_counts(L, lp, rp, 0)      # every (w, #up, #down) once
    else:
        batch = every_count(L, 1, 0)
    assert_same(prog, cm, batch, scored=False)


@pytest.mark.parametrize("scale, max_len", [(10000, 1), (10000, 3), (7, 5)])
def test_wide_mean_output_table_steps_only_between_reachable_means(scale, max_len):
    """frac_prevs x 10000: the output (too wide for quadratic logits) is read
    through a one-hot table over the truncated means reachable at L
    (values.mean_values), not over 0..10000 (20,000 units, gigabytes of weights);
    still exact for every (width, count) up to L."""
    from compiler.values import mean_values
    prog = loads(FRAC_PREVS.replace("1000 *", f"{scale} *"))
    cm = compile_program(prog, max_len)
    L = 4 * max_len
    reach = mean_values(frozenset({0, scale}), L)
    assert reach == {int(Fraction(scale * c, w)) for w in range(1, L + 1) for c in range(w + 1)}
    assert cm.sizes()["mlp"] <= 2 * len(reach) + 400
    assert_same(prog, cm, every_count(L, 1, 0) + every_count(L, 1, 2), scored=False)


def test_one_hot_table_of_too_many_values_is_a_located_refusal():
    # Tracr's make_pair_balance: the difference of two frac_prevs (x 10000)
    prog = loads('const LP = "("\nconst RP = ")"\ninput seq: {LP, RP, 0}\n'
                 "prevs = select(indices(seq), indices(seq), le)\n"
                 "output aggr(prevs, 10000 * (seq == LP)) - aggr(prevs, 10000 * (seq == RP))\n")
    with pytest.raises(RaspError) as e:
        compile_program(prog, 5)        # 7699 reachable differences at L = 20
    assert e.value.loc is not None and "too many for a one-hot table" in e.value.message


@pytest.mark.parametrize("vals", [(0, 1000), (-1000, 0, 1000), (-3, 5, 11), (2, 3, 4, 9)])
def test_mean_values_is_a_superset_of_every_truncated_mean(vals):
    from compiler.values import mean_values
    L = 6
    got = mean_values(frozenset(vals), L)
    for w in range(1, L + 1):
        for combo in itertools.combinations_with_replacement(vals, w):
            assert int(Fraction(sum(combo), w)) in got


@pytest.mark.parametrize("src, max_len", [(FRAC_PREVS, 88), (PAIR_BALANCE, 66)])
def test_mean_beyond_float32_is_a_located_refusal(src, max_len):
    with pytest.raises(RaspError) as info:
        compile_program(loads(src), max_len)
    assert info.value.loc is not None and info.value.loc.line >= 2
    assert "cannot be compiled exactly" in info.value.message and "float32" in info.value.message


def test_mean_plan_uses_one_mlp_for_small_ranges_and_three_for_wide_ones():
    assert MEAN.plan(-4, 5, 32, False)[0] == "direct"
    how, B = MEAN.plan(0, 1000, 192, False)
    assert how == "split" and 2 <= B <= 32
    with pytest.raises(MEAN.MeanTooWide):
        MEAN.plan(0, 10 ** 6, 16, False)


# mean of a numeric / signed / offset value, every selector shape, small scales and big ones
MEAN_SHAPES = {
    "prefix": "aggr(select(indices(seq), indices(seq), le), V)",
    "strict_prefix": "aggr(select(indices(seq), indices(seq), lt), V, -3)",
    "token_eq": "kqv(seq, seq, V, eq)",
    "numeric_eq": "kqv(cumsum(seq == 1), cumsum(seq == 2), V, eq, 5)",
    "numeric_lt": "kqv(cumsum(seq == 1), cumsum(seq == 2), V, lt, 5)",
}
VALUES = {"small": "seq * 3 - 4", "thousand": "(seq - 1) * 1000", "offset": "seq * 150 + 600",
          "index": "indices(seq) * 7 - 20", "square_top": "seq * 450"}


@pytest.mark.parametrize("shape", sorted(MEAN_SHAPES))
@pytest.mark.parametrize("value", sorted(VALUES))
def test_numeric_mean_every_selector_shape(shape, value):
    line = MEAN_SHAPES[shape].replace("V", VALUES[value])
    prog = loads(f"input seq: {{0, 1, 2}}\noutput {line}\n")
    cm = compile_program(prog, 4)
    L = 16
    batch = [list(x) for n in range(1, 7) for x in itertools.product([0, 1, 2], repeat=n)]
    rng = random.Random(7)
    batch += [[rng.choice([0, 1, 2]) if rng.random() < p else 1 for _ in range(L)]
              for p in (0.1, 0.5, 0.9) for _ in range(60)]
    batch += every_count(L, 1, 0) + every_count(L, 2, 0) + every_count(L, 2, 1)
    assert_same(prog, cm, batch, scored=False)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scale=st.integers(1, 200), offset=st.integers(-600, 600), data=st.data())
def test_mean_of_random_scale_and_offset(scale, offset, data):
    prog = loads(f"input seq: {{0, 1, 2}}\noutput aggr(select(indices(seq), indices(seq), le), "
                 f"seq * {scale} + {offset})\n")
    cm = compile_program(prog, 4)
    batch = data.draw(st.lists(st.lists(st.sampled_from([0, 1, 2]), min_size=1, max_size=16),
                               min_size=1, max_size=20))
    assert_same(prog, cm, batch + every_count(16, 2, 0), scored=False)


# ---- the issue's other programs ---------------------------------------------------------

POINTER_REVERSE = """const EOQ = ">"
const EOS = "#"
input seq: {0..9, EOQ, EOS}
param n = count_before(seq, EOQ)
prompt = 1 - has_seen(seq, EOQ)
ptr = where(prompt, -1, indices(seq))
ans = full(seq, EOS)
loop n:
    ptr = where(prompt, -1, shift_right(ptr, 1, -1) - 1)
    ans = where(prompt, 0, index_select(seq, ptr, EOS))
output ans
"""

POINTER_REVERSE_AFTER = """const EOQ = ">"
const EOS = "#"
input seq: {0..9, EOQ, EOS}
param n = count_before(seq, EOQ)
prompt = 1 - has_seen(seq, EOQ)
is_eoq = seq == EOQ
ptr = where(is_eoq, indices(seq) - 1, -1)
loop n:
    ptr = where(prompt | is_eoq, ptr, shift_right(ptr, 1, -1) - 1)
output where(prompt, 0, index_select(seq, ptr, EOS))
"""


def fap_inputs(prog, max_len, count=120, seed=0):
    rng = random.Random(seed)
    eoq, eos = prog.ir.symbols[">"], prog.ir.symbols["#"]
    out = []
    for _ in range(count):
        n = rng.randint(1, 2 * max_len)
        k = rng.randint(0, 4 * max_len - n - 1)
        out.append([rng.randint(0, 9) for _ in range(n)] + [eoq] + [eos] * k)
    return out


@pytest.mark.parametrize("src", [POINTER_REVERSE, POINTER_REVERSE_AFTER], ids=["in_loop", "after_loop"])
def test_pointer_reverse(src):
    prog = loads(src)
    cm = compile_program(prog, 6)
    assert_same(prog, cm, fap_inputs(prog, 6))


LIBRARY_SHAPES = {
    "mode": "input seq: {0..5}\noutput mode(seq)\n",
    "argmax_of_counts": "input seq: {0..4}\noutput argmax(num_prev(seq, seq))\n",
    "firsts_cumsum": "input seq: {0, 1, 2}\noutput firsts(cumsum(seq == 1), cumsum(seq == 2))\n",
    "lasts_cumsum": "input seq: {0, 1, 2}\noutput lasts(cumsum(seq == 1), cumsum(seq == 2), 99)\n",
    "align_operands": "input seq: {0, 1, 2, 3}\n"
                      "output index_select(seq, firsts(cumsum(seq == 1), cumsum(seq == 2)), 7)\n",
    "numeric_max_lt": "input seq: {0, 1, 2}\noutput kqv(cumsum(seq == 1), cumsum(seq == 2), seq, lt, 7, max)\n",
    "numeric_width_gt": "input seq: {0, 1, 2}\noutput sel_width(select(cumsum(seq), indices(seq), gt))\n",
    "numeric_ge_mean": "input seq: {0, 1, 2}\noutput kqv(indices(seq), cumsum(seq == 1), seq * 5, ge)\n",
    "numeric_ne_min": "input seq: {0, 1, 2}\noutput kqv(cumsum(seq == 1), cumsum(seq == 2), indices(seq), ne, -1, min)\n",
    "sort_by_value": "input seq: {0..5}\nkey = seq * 40 + indices(seq)\n"
                     "smaller = sel_width(select(key, key, lt))\n"
                     "output kqv(smaller, indices(seq), seq, eq, 9)\n",
    "window_gt": "input seq: {0..3}\noutput kqv(indices(seq), indices(seq) - 3, seq, gt, 0, max)\n",
    "cat_var_numeric_update": "input seq: {0, 1}\nx = seq\nloop 3:\n    x = min(cumsum(seq), 2) - x\n"
                              "output x\n",
}


@pytest.mark.parametrize("name", sorted(LIBRARY_SHAPES))
def test_library_shapes_compile_exactly(name):
    prog = loads(LIBRARY_SHAPES[name])
    cm = compile_program(prog, 4)
    vocab = list(prog.ir.vocab)
    batch = [list(x) for n in range(1, 6) for x in itertools.product(vocab, repeat=n) if len(vocab) ** n <= 4000]
    rng = random.Random(5)
    batch += [[rng.choice(vocab[:k]) for _ in range(rng.randint(1, 16))] for k in (2, len(vocab))
              for _ in range(150)]
    assert_same(prog, cm, batch, scored=False)


def test_mode_program_and_library_mode_agree_at_max_len_16():
    prog = loads("input seq: {0..9}\noutput mode(seq)\n")
    cm = compile_program(prog, 16)
    rng = random.Random(9)
    assert_same(prog, cm, [[rng.choice(range(rng.randint(1, 10))) for _ in range(rng.randint(1, 64))]
                           for _ in range(200)], scored=False)


# ---- sequential loops: merged into one looped block -------------------------------------

SEQUENTIAL = {
    "constant_then_count": """const EOQ = ">"
const EOS = "#"
input seq: {0, 1, 2, EOQ, EOS}
param n = count_before(seq, EOQ)
x = seq
loop 2:
    x = shift_right(x, 1, EOS)
y = where(x == 1, 2, x)
loop n:
    y = where(shift_right(y, 1, 0) == 2, 1, y)
output y
""",
    "reads_first_loop_inside_second": """input seq: {0, 1}
c = full(seq, 0)
loop 3:
    c = c + seq
d = c * 2
loop len(seq):
    d = shift_right(d, 1, 5) + c
output d - c
""",
    "three_loops_zero_middle": """input seq: {0, 1, 2}
x = seq
loop 1:
    x = (x + 1) % 3
loop 0:
    x = x * 0
z = x
loop len(seq) - 1:
    z = max(z, shift_right(z, 1))
output z * 3 + x
""",
}


def assert_loops_compile_exactly(source: str, seed: int, n_inputs: int):
    """Compiled at --max-len 4, equal to the interpreter on random inputs up to
    length 16 (4x) that the program runs without a runtime error."""
    prog = loads(source)
    cm = compile_program(prog, 4)
    vocab = list(prog.ir.vocab)
    rng = random.Random(seed)
    batch = [[rng.choice(vocab) for _ in range(rng.randint(1, 16))] for _ in range(n_inputs)]
    assert_same(prog, cm, [x for x in batch if _runs(prog, x)], scored=False)


@pytest.mark.parametrize("name", sorted(SEQUENTIAL))
def test_sequential_loops_compile_exactly(name):
    assert_loops_compile_exactly(SEQUENTIAL[name], 11, 150)


def _runs(prog, x):
    try:
        prog.run(x)
        return True
    except RaspError:
        return False


def test_sequential_loop_after_an_input_dependent_count_is_a_located_refusal():
    prog = loads("const EOQ = \">\"\ninput seq: {0, 1, EOQ}\nparam n = count_before(seq, EOQ)\nx = seq\n"
                 "loop n:\n    x = 1 - x\nloop 2:\n    x = shift_right(x, 1)\noutput x\n")
    with pytest.raises(RaspError) as info:
        compile_program(prog, 4)
    assert info.value.loc.line == 5 and "causal" in info.value.message


# ---- nested loops: flattened into one looped block ----------------------------------------

NESTED = {
    "inner_reads_outer": """input seq: {0, 1, 2}
x = seq
s = full(seq, 0)
loop len(seq):
    y = x
    loop 2:
        y = shift_right(y, 1, 0) + (y == 1)
    s = (s + y) % 5
    x = where(x == 2, 0, x + 1)
output s * 10 + x
""",
    "single_inner_step": """input seq: {0, 1}
c = full(seq, 0)
loop 3:
    d = c
    loop 1:
        d = 1 - d
    c = d | seq
output c
""",
    "inner_loop_zero": """input seq: {0, 1, 2}
x = seq
s = full(seq, 0)
loop len(seq):
    y = x
    loop 0:
        y = shift_right(y, 1, 0) + (y == 1)
    s = (s + y) % 5
    x = where(x == 2, 0, x + 1)
output s * 10 + x
""",
    "inner_loop_zero_updates_outer_variable": """input seq: {0, 1}
c = full(seq, 0)
loop 3:
    loop 1 - 1:
        c = c + 5
    c = (c + seq) % 3
output c
""",
    "outer_loop_zero_then_nested": """input seq: {0, 1}
c = seq
loop 0:
    loop 2:
        c = 1 - c
d = c
loop 2:
    loop 0:
        d = d * 0
    loop 0:
        d = d + 7
    d = shift_right(d, 1, 1)
output d * 2 + c
""",
    "nested_then_sequential": """input seq: {0, 1}
c = full(seq, 0)
loop 2:
    d = c
    loop 3:
        d = (d + seq) % 4
    c = d
e = c
loop len(seq):
    e = max(e, shift_right(e, 1))
output e
""",
}


@pytest.mark.parametrize("name", sorted(NESTED))
def test_nested_loops_compile_exactly(name):
    assert_loops_compile_exactly(NESTED[name], 13, 120)


def test_variable_first_defined_in_an_inner_loop_zero_is_a_located_refusal():
    prog = loads("input seq: {0, 1}\nc = seq\nloop 2:\n    loop 0:\n        d = c\n    c = d\noutput c\n")
    with pytest.raises(RaspError) as info:
        compile_program(prog, 4)
    assert info.value.loc.line == 4 and "runs 0 times" in info.value.message


def test_inner_loop_with_input_dependent_count_is_a_located_refusal():
    prog = loads("input seq: {0, 1}\nx = seq\nloop 2:\n    loop len(seq):\n        x = 1 - x\noutput x\n")
    with pytest.raises(RaspError) as info:
        compile_program(prog, 4)
    assert info.value.loc.line == 4 and "constant" in info.value.message


# ---- loop updates that do not read the loop state ---------------------------------------
# (the fuzzer's loop_invariant_update_doubles / loop_defined_numeric_doubles: the update
# read a prelude value in the postlude's dim + carry form, doubled from the 2nd iteration)

INVARIANT_UPDATES = {
    "numeric_defined_in_body": "loop {T}:\n    v = indices(seq)\noutput v\n",
    "numeric_init_onehot_update": "v = cumsum(seq)\nloop {T}:\n    v = seq\noutput v\n",
    "numeric_init_numeric_update": "v = indices(seq)\nloop {T}:\n    v = cumsum(seq) + 1\noutput v\n",
    "onehot_init_onehot_update": "v = seq\nloop {T}:\n    v = 1 - seq\noutput v\n",
    "constant_update": "v = seq\nloop {T}:\n    v = full(seq, 3)\noutput v + indices(seq)\n",
    "prelude_also_read_after": "c = cumsum(seq)\nv = c * 2\nloop {T}:\n    v = c\noutput v + c\n",
    "beside_a_carried_variable": "w = seq\nv = indices(seq)\nloop {T}:\n    v = indices(seq) * 2\n"
                                 "    w = (shift_right(w, 1, 0) + seq) % 3\noutput v + w\n",
    "param_count": "param n = len(seq) % 4\nv = cumsum(seq)\nloop n:\n    v = seq * 2\noutput v\n",
}


@pytest.mark.parametrize("count", [0, 1, 2, 5])
@pytest.mark.parametrize("name", sorted(INVARIANT_UPDATES))
def test_loop_update_not_reading_the_state(name, count):
    src = INVARIANT_UPDATES[name]
    if "{T}" not in src and count:
        pytest.skip("the count comes from the input")
    prog = loads("input seq: {0, 1}\n" + src.replace("{T}", str(count)))
    if count == 0 and name == "numeric_defined_in_body":
        with pytest.raises(RaspError, match="runs 0 times") as e:     # the interpreter has no value either
            compile_program(prog, 4)
        assert e.value.loc is not None
        return
    cm = compile_program(prog, 4)
    rng = random.Random(count)
    batch = [[rng.choice([0, 1]) for _ in range(n)] for n in range(1, 17) for _ in range(4)]
    assert_same(prog, cm, batch, scored=False)


# ---- params used as values: the causal s-op where every scored position knows it -------------

PARAM_HEAD = "const EOQ = \">\"\ninput seq: {0, 1, 2, EOQ}\n"
PARAM_REQ = "require count(seq, EOQ) >= 1, \"needs a >\"\n"
PARAM_VALUES = {
    "elementwise": PARAM_REQ + "param n = count_before(seq, EOQ)\noutput seq + n\n",
    "in_a_loop": PARAM_REQ + "param n = count_before(seq, EOQ)\nx = seq + n\nloop 2:\n"
                 "    x = where(x == 1, x + 2 * n - 1, x)\noutput x\n",
    "derived_param": "require count(seq, EOQ) == 1, \"one >\"\nparam n = count_before(seq, EOQ)\n"
                     "param m = 3 * n - 2\noutput where(seq == 1, m, seq)\n",
}


@pytest.mark.parametrize("name", sorted(PARAM_VALUES))
def test_param_used_as_a_value_compiles_exactly_at_scored_positions(name):
    prog = loads(PARAM_HEAD + PARAM_VALUES[name])
    cm = compile_program(prog, 4)
    rng = random.Random(5)
    batch = [[rng.choice([0, 1, 2, -1]) for _ in range(rng.randint(1, 16))] for _ in range(400)]
    batch = [x for x in batch if _runs(prog, x)]        # the require: a '>' (one, for derived_param)
    assert len(batch) > 50
    assert_same(prog, cm, batch)
    with pytest.raises(RaspError):
        cm.run_batch(batch[:1], {"n": 3})        # the model computes n itself


PARAM_REFUSED = {
    "len": ("param n = len(seq)\noutput seq + n\n", 4, "last position"),
    "count": ("param n = count(seq, 1)\noutput seq + n\n", 4, "last position"),
    "no_require": ("param n = count_before(seq, EOQ)\noutput seq + n\n", 4, "require"),
    "read_by_attention": (PARAM_REQ + "param n = count_before(seq, EOQ)\noutput shift_right(seq + n, 1)\n",
                          5, "before it"),
}


@pytest.mark.parametrize("name", sorted(PARAM_REFUSED))
def test_param_value_a_causal_model_cannot_know_is_a_located_refusal(name):
    src, line, why = PARAM_REFUSED[name]
    with pytest.raises(RaspError) as info:
        compile_program(loads(PARAM_HEAD + src), 4)
    assert info.value.loc is not None and info.value.loc.line == line and why in info.value.message, \
        (info.value.loc, info.value.message)
