"""The batched interpreter against plain-Python definitions of docs/language.md.

Batches mix lengths 1..40, so every property also shows that right padding
never leaks into valid positions.  Selector tests run each program three
ways -- default (fast rules), dense only (no rules), and a per-sequence
Python reference -- and check which fast rule handled the selector, so a
wrong fast path cannot hide behind the dense one.
"""
from __future__ import annotations

import functools
import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rasp
from rasp.errors import RaspError, RaspRuntimeError
from rasp.interpreter import BatchResult, driver, execute, ranges
from rasp.interpreter import run as interp_run
from rasp.limits import RunLimits
from rasp.ir import MAP_ARITY
from rasp.trace import format_trace

FAST = settings(max_examples=40, deadline=None)

# ---- programs over one input token t in 0..999, decoded into three s-ops ------

HEADER = """\
input seq: {0..999}
param n = len(seq) // 3
a = seq % 10 - 5
b = seq // 10 % 10 - 5
c = seq // 100 - 5
"""


def decode(t):
    """The reference view of the HEADER's s-ops for one token list."""
    return {"a": [x % 10 - 5 for x in t], "b": [x // 10 % 10 - 5 for x in t],
            "c": [x // 100 - 5 for x in t], "n": len(t) // 3, "i": list(range(len(t)))}


@functools.lru_cache(maxsize=None)
def program(source: str) -> rasp.Program:
    return rasp.loads(source)


def run(source, batch, **kw) -> BatchResult:
    return execute(program(source).ir, batch, **kw)


batches = st.lists(st.lists(st.integers(0, 999), min_size=1, max_size=40), min_size=1, max_size=6)


def trunc_div(s, c):
    return -((-s) // c) if s < 0 else s // c


# ---- element-wise operators ---------------------------------------------------------

MAP_CASES = {
    # op: (expression, reference on decoded values d at position i)
    "add": ("a + b", lambda d, i: d["a"][i] + d["b"][i]),
    "sub": ("a - c", lambda d, i: d["a"][i] - d["c"][i]),
    "mul": ("a * b", lambda d, i: d["a"][i] * d["b"][i]),
    "floordiv": ("a // where(b == 0, 3, b)", lambda d, i: d["a"][i] // (d["b"][i] or 3)),
    "mod": ("a % where(b == 0, -3, b)", lambda d, i: d["a"][i] % (d["b"][i] or -3)),
    "neg": ("-a", lambda d, i: -d["a"][i]),
    "eq": ("a == b", lambda d, i: int(d["a"][i] == d["b"][i])),
    "ne": ("a != b", lambda d, i: int(d["a"][i] != d["b"][i])),
    "lt": ("a < b", lambda d, i: int(d["a"][i] < d["b"][i])),
    "le": ("a <= b", lambda d, i: int(d["a"][i] <= d["b"][i])),
    "gt": ("a > b", lambda d, i: int(d["a"][i] > d["b"][i])),
    "ge": ("a >= b", lambda d, i: int(d["a"][i] >= d["b"][i])),
    "bitand": ("a & b", lambda d, i: d["a"][i] & d["b"][i]),
    "bitor": ("a | b", lambda d, i: d["a"][i] | d["b"][i]),
    "bitxor": ("a ^ b", lambda d, i: d["a"][i] ^ d["b"][i]),
    "invert": ("~a", lambda d, i: ~d["a"][i]),
    "and": ("a and b", lambda d, i: int(bool(d["a"][i]) and bool(d["b"][i]))),
    "or": ("a or b", lambda d, i: int(bool(d["a"][i]) or bool(d["b"][i]))),
    "not": ("not a", lambda d, i: int(not d["a"][i])),
    "min": ("min(a, b)", lambda d, i: min(d["a"][i], d["b"][i])),
    "max": ("max(a, b)", lambda d, i: max(d["a"][i], d["b"][i])),
    "abs": ("abs(a)", lambda d, i: abs(d["a"][i])),
    "where": ("where(c, a, b)", lambda d, i: d["a"][i] if d["c"][i] else d["b"][i]),
}


def test_every_map_op_is_tested():
    assert set(MAP_CASES) == set(MAP_ARITY)


@pytest.mark.parametrize("op", sorted(MAP_CASES))
@settings(max_examples=25, deadline=None)
@given(batch=batches)
def test_map_op(op, batch):
    expr, ref = MAP_CASES[op]
    res = run(HEADER + f"output {expr}\n", batch)
    for t, out in zip(batch, res.outputs):
        d = decode(t)
        assert out == [ref(d, i) for i in range(len(t))]


@FAST
@given(batch=batches)
def test_scalar_operands_broadcast(batch):
    res = run(HEADER + "output a * n - 2 + (n // 2) * b\n", batch)
    for t, out in zip(batch, res.outputs):
        d = decode(t)
        assert out == [a * d["n"] - 2 + (d["n"] // 2) * b for a, b in zip(d["a"], d["b"])]


# ---- select / aggregate / sel_width ----------------------------------------------------

PREDS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
         "gt": operator.gt, "ge": operator.ge, "always": lambda k, q: True}

# name: (key source, query source, key reference, query reference)
SHAPES = {
    "sops": ("a", "b", lambda d: d["a"], lambda d: d["b"]),
    "small_alphabet": ("a % 2", "b % 2", lambda d: [x % 2 for x in d["a"]],
                       lambda d: [x % 2 for x in d["b"]]),
    "small_keys": ("a % 3", "b", lambda d: [x % 3 for x in d["a"]], lambda d: d["b"]),
    "scalar_query": ("a", "2", lambda d: d["a"], lambda d: [2] * len(d["a"])),
    "full_query": ("a", "full(seq, n - 4)", lambda d: d["a"], lambda d: [d["n"] - 4] * len(d["a"])),
    "scalar_key": ("1", "b", lambda d: [1] * len(d["a"]), lambda d: d["b"]),
    "shift": ("indices(seq) + 2", "indices(seq)", lambda d: [i + 2 for i in d["i"]], lambda d: d["i"]),
    "shift_query": ("indices(seq)", "indices(seq) - 3", lambda d: d["i"], lambda d: [i - 3 for i in d["i"]]),
    "shift_left": ("indices(seq) - 1", "indices(seq)", lambda d: [i - 1 for i in d["i"]], lambda d: d["i"]),
    "shift_param": ("indices(seq) + n", "indices(seq)", lambda d: [i + d["n"] for i in d["i"]],
                    lambda d: d["i"]),
    "gather": ("indices(seq)", "b + 3", lambda d: d["i"], lambda d: [x + 3 for x in d["b"]]),
    "gather_offset": ("1 + indices(seq)", "a + 4", lambda d: [i + 1 for i in d["i"]],
                      lambda d: [x + 4 for x in d["a"]]),
    "index_query": ("c + 5", "indices(seq)", lambda d: [x + 5 for x in d["c"]], lambda d: d["i"]),
    "sparse_values": ("a * 100003", "b * 100003", lambda d: [x * 100003 for x in d["a"]],
                      lambda d: [x * 100003 for x in d["b"]]),
}

# which rule must handle (shape, pred); absent: the dense path
EXPECTED_RULE = {
    **{(s, "always"): "_rule_always" for s in SHAPES},
    **{(s, p): "_rule_scalar_side" for s in ("scalar_query", "full_query", "scalar_key")
       for p in ("eq", "ne", "lt", "le", "gt", "ge")},
    **{(s, "eq"): "_rule_index_eq" for s in ("shift", "shift_query", "shift_left", "shift_param",
                                             "gather", "gather_offset")},
    **{(s, p): "_rule_index_window" for s in ("shift", "shift_query", "shift_left")
       for p in ("lt", "le")},
    **{("small_alphabet", p): "_rule_few_values" for p in ("eq", "ne", "lt", "le", "gt", "ge")},
    ("small_keys", "eq"): "_rule_few_values",
    ("sops", "eq"): "_rule_eq_sorted",
    ("index_query", "eq"): "_rule_eq_sorted",
    ("sparse_values", "eq"): "_rule_eq_sorted",
}

VALUES = {"c": lambda d: d["c"], "7": lambda d: [7] * len(d["c"]),
          "indices(seq)": lambda d: d["i"]}
DEFAULTS = {"-9": lambda d: [-9] * len(d["c"]), "a": lambda d: d["a"], "n": lambda d: [d["n"]] * len(d["a"])}


def ref_reduce(d, shape, pred, value, reduction, default):
    _, _, kf, qf = SHAPES[shape]
    k, q = kf(d), qf(d)
    v = VALUES[value](d) if value else None
    dflt = DEFAULTS[default](d) if default else None
    out = []
    for i in range(len(k)):
        sel = [j for j in range(i + 1) if PREDS[pred](k[j], q[i])]
        if reduction == "width":
            out.append(len(sel))
        elif not sel:
            out.append(dflt[i])
        elif reduction == "mean":
            out.append(trunc_div(sum(v[j] for j in sel), len(sel)))
        else:
            out.append((max if reduction == "max" else min)(v[j] for j in sel))
    return out


def reduce_source(shape, pred, value, reduction, default):
    key, query = SHAPES[shape][:2]
    sel = f"select({key}, {query}, {pred})"
    if reduction == "width":
        return HEADER + f"output sel_width({sel})\n"
    return HEADER + f"output aggr({sel}, {value}, {default}, {reduction})\n"


class RuleSpy:
    """Records which rule answered each reduction."""

    def __init__(self, monkeypatch):
        self.fired = []
        wrapped = []
        for rule in interp_run.RULES:
            wrapped.append(self._wrap(rule))
        monkeypatch.setattr(interp_run, "RULES", tuple(wrapped))

    def _wrap(self, rule):
        def spy(*args):
            out = rule(*args)
            if out is not None:
                self.fired.append(rule.__name__)
            return out
        return spy


DATA_DEPENDENT = ("_rule_few_values", "_rule_eq_sorted")


def check_reduce(batch, shape, pred, reduction, value, default, exact_rule=True):
    """Fast, dense and reference agree; the expected rule fired.  With
    exact_rule=False the value-count rules may also take s-op shapes (short
    random sequences often have few distinct values)."""
    source = reduce_source(shape, pred, value, reduction, default)
    with pytest.MonkeyPatch.context() as mp:
        spy = RuleSpy(mp)
        fast = run(source, batch).outputs
    expected = EXPECTED_RULE.get((shape, pred))
    if exact_rule or expected not in (None,) + DATA_DEPENDENT:
        assert spy.fired == ([expected] if expected else [])
    else:
        assert len(spy.fired) <= 1 and set(spy.fired) <= {expected, *DATA_DEPENDENT}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(interp_run, "RULES", ())
        dense = run(source, batch).outputs
    for t, f, s in zip(batch, fast, dense):
        ref = ref_reduce(decode(t), shape, pred, value, reduction, default)
        assert s == ref, "dense path"
        assert f == ref, "fast path"


@pytest.mark.parametrize("shape", sorted(SHAPES))
@settings(max_examples=60, deadline=None)
@given(batch=batches, pred=st.sampled_from(sorted(PREDS)),
       reduction=st.sampled_from(["mean", "max", "min", "width"]),
       value=st.sampled_from(sorted(VALUES)), default=st.sampled_from(sorted(DEFAULTS)))
def test_select_reduce(shape, batch, pred, reduction, value, default):
    check_reduce(batch, shape, pred, reduction, value, default, exact_rule=False)


@pytest.mark.parametrize("shape,pred", sorted(EXPECTED_RULE))
def test_each_rule_case_matches_dense(shape, pred):
    """Every (shape, predicate) a rule claims, each reduction, one fixed batch."""
    rng = np.random.default_rng(len(shape) * 7 + len(pred))
    batch = [rng.integers(0, 1000, size=n).tolist() for n in (1, 2, 7, 23, 40)]
    for reduction in ("mean", "max", "min", "width"):
        check_reduce(batch, shape, pred, reduction, "c", "a")


def test_few_values_threshold_falls_through_to_sorting(monkeypatch):
    # a 10-value alphabet is too many for per-value masks, so eq sorts
    batch = [list(range(0, 1000, 37))]
    check_reduce(batch, "sops", "eq", "max", "c", "-9")


def test_eq_sorting_with_many_distinct_values():
    # > 2**15 distinct keys in the batch: no radix sort, no bucket table
    src = HEADER + "k = seq * 100 + indices(seq)\noutput aggr(select(k, shift_right(k, 3), eq), c, -9, RED)\n"
    rng = np.random.default_rng(4)
    batch = [rng.integers(0, 1000, size=100).tolist() for _ in range(999)] + [[5, 6, 7]]
    for red in ("max", "mean", "min"):
        with pytest.MonkeyPatch.context() as mp:
            spy = RuleSpy(mp)
            fast = run(src.replace("RED", red), batch).outputs
        assert spy.fired == ["_rule_index_eq", "_rule_eq_sorted"]
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(interp_run, "RULES", ())
            assert fast == run(src.replace("RED", red), batch).outputs
    for t, out in zip(batch[-3:], fast[-3:]):
        d = decode(t)
        k = [v * 100 + i for i, v in enumerate(t)]
        q = shift(k, 3, 0)
        assert out == [min((d["c"][j] for j in range(i + 1) if k[j] == q[i]), default=-9)
                       for i in range(len(t))]


def test_large_values_are_exact():
    # sums beyond float32/float64 precision, and spans too wide for the
    # segmented accumulate: the dense and fallback paths must stay exact
    big = 2**40
    src = HEADER + f"v = c * {big} + a\noutput aggr(select(a, b, PRED), v, 0, RED)\n"
    rng = np.random.default_rng(1)
    batch = [rng.integers(0, 1000, size=n).tolist() for n in (5, 40, 33)]
    for pred, red in [("lt", "mean"), ("eq", "max"), ("eq", "min"), ("eq", "mean"), ("ge", "max")]:
        res = run(src.replace("PRED", pred).replace("RED", red), batch)
        for t, out in zip(batch, res.outputs):
            d = decode(t)
            v = [c * big + a for c, a in zip(d["c"], d["a"])]
            ref = []
            for i in range(len(t)):
                sel = [v[j] for j in range(i + 1) if PREDS[pred](d["a"][j], d["b"][i])]
                if not sel:
                    ref.append(0)
                elif red == "mean":
                    ref.append(trunc_div(sum(sel), len(sel)))
                else:
                    ref.append((max if red == "max" else min)(sel))
            assert out == ref


def test_dense_chunks_cover_the_batch(monkeypatch):
    monkeypatch.setattr(interp_run, "DENSE_BUDGET_BYTES", 9 * 40 * 40 * 2)   # 2 inputs per chunk
    src = reduce_source("sops", "gt", "c", "mean", "a")
    rng = np.random.default_rng(3)
    batch = [rng.integers(0, 1000, size=n).tolist() for n in (40, 3, 17, 40, 1)]
    res = run(src, batch)
    for t, out in zip(batch, res.outputs):
        assert out == ref_reduce(decode(t), "sops", "gt", "c", "mean", "a")


# ---- library functions through the fast paths ---------------------------------------------

LIB_CASES = {
    "shift_right(a, 2, -1)": lambda d: [-1, -1] + d["a"][:-2] if len(d["a"]) > 2 else [-1] * len(d["a"]),
    "cumsum(a > 0)": lambda d: [sum(1 for x in d["a"][:i + 1] if x > 0) for i in d["i"]],
    "maximum(a)": lambda d: [max(d["a"][:i + 1]) for i in d["i"]],
    "minimum(a)": lambda d: [min(d["a"][:i + 1]) for i in d["i"]],
    "argmax(a)": lambda d: [max(j for j in range(i + 1) if d["a"][j] == max(d["a"][:i + 1])) for i in d["i"]],
    "num_prev(a, b)": lambda d: [sum(1 for j in range(i + 1) if d["a"][j] == d["b"][i]) for i in d["i"]],
    "has_seen(a, 3)": lambda d: [int(3 in d["a"][:i + 1]) for i in d["i"]],
    "firsts(a, b)": lambda d: [next((j for j in range(i + 1) if d["a"][j] == d["b"][i]), -1) for i in d["i"]],
    "lasts(a % 2, b % 2)": lambda d: [max((j for j in range(i + 1) if d["a"][j] % 2 == d["b"][i] % 2),
                                          default=-1) for i in d["i"]],
    "index_select(c, b + 2)": lambda d: [d["c"][d["b"][i] + 2] if 0 <= d["b"][i] + 2 <= i else 0
                                         for i in d["i"]],
    "first_true(a > 2)": lambda d: [next((j for j in range(i + 1) if d["a"][j] > 2), -1) for i in d["i"]],
}


@pytest.mark.parametrize("expr", sorted(LIB_CASES))
@FAST
@given(batch=batches)
def test_library(expr, batch):
    res = run(HEADER + f"output {expr}\n", batch)
    for t, out in zip(batch, res.outputs):
        assert out == LIB_CASES[expr](decode(t))


# ---- loops ---------------------------------------------------------------------------------

SMALL = "input seq: {0..9}\n"


def shift(x, s, fill):
    return ([fill] * s + x[:-s])[:len(x)] if s else list(x)


@FAST
@given(batch=st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=40), min_size=1, max_size=6))
def test_loop_per_input_counts(batch):
    src = SMALL + """\
param n = count(seq, 1)
x = seq
loop n:
    x = shift_right(x, 1, 7) + 1
output x
"""
    res = run(src, batch)
    for b, t in enumerate(batch):
        x = list(t)
        for _ in range(t.count(1)):
            x = [v + 1 for v in shift(x, 1, 7)]
        assert res.outputs[b] == x
        assert res.steps[b].tolist() == [t.count(1)]


@FAST
@given(batch=st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=40), min_size=1, max_size=6))
def test_loop_until_stable(batch):
    src = SMALL + """\
param n = len(seq)
x = seq
loop n until stable:
    x = max(x, shift_right(x, 1))
output x
"""
    res = run(src, batch)
    for b, t in enumerate(batch):
        x, steps = list(t), 0
        for _ in range(len(t)):
            new = [max(u, v) for u, v in zip(x, shift(x, 1, 0))]
            steps += 1
            changed, x = new != x, new
            if not changed:
                break
        assert res.outputs[b] == x
        assert res.steps[b].tolist() == [steps]


def test_until_stable_counts_first_definition_as_a_change():
    # z has no value before the loop: iteration 1 always counts as a change
    src = SMALL + """\
loop 5 until stable:
    z = seq * 0
output z
"""
    res = run(src, [[1, 2], [3]])
    assert res.steps.tolist() == [[2], [2]]
    assert res.outputs == [[0, 0], [0]]


@FAST
@given(batch=st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=30), min_size=1, max_size=5))
def test_nested_loops(batch):
    src = SMALL + """\
param n = count(seq, 1)
param m = count(seq, 2)
x = seq
loop n:
    y = x
    loop m:
        y = shift_right(y, 1) + 1
    x = y + x
output x
"""
    res = run(src, batch)
    for b, t in enumerate(batch):
        n, m = t.count(1), t.count(2)
        x = list(t)
        for _ in range(n):
            y = list(x)
            for _ in range(m):
                y = [v + 1 for v in shift(y, 1, 0)]
            x = [u + v for u, v in zip(y, x)]
        assert res.outputs[b] == x
        assert res.steps[b].tolist() == [n, n * m]


@FAST
@given(batch=st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=30), min_size=1, max_size=5),
       n=st.integers(-2, 12))
def test_param_override(batch, n):
    src = SMALL + """\
param n = count(seq, 1)
param k = n + 1
x = seq
loop n:
    x = shift_right(x, 1, k)
output x + k
"""
    res = run(src, batch, params={"n": n})
    for b, t in enumerate(batch):
        x = list(t)
        for _ in range(max(n, 0)):
            x = shift(x, 1, n + 1)
        assert res.outputs[b] == [v + n + 1 for v in x]
        assert res.steps[b].tolist() == [max(n, 0)]


def test_unknown_param_override():
    with pytest.raises(RaspError, match="unknown param 'nope'"):
        run(SMALL + "param n = len(seq)\noutput seq + n\n", [[1]], params={"nope": 3})


def test_selector_loop_variable():
    # a selector carried by a loop goes through the dense path
    src = SMALL + """\
A = select(seq, seq, eq)
loop 2:
    A = select(seq, shift_right(seq, 1), le)
output sel_width(A)
"""
    res = run(src, [[3, 1, 2, 2], [5]])
    ref = []
    for t in ([3, 1, 2, 2], [5]):
        q = shift(t, 1, 0)
        ref.append([sum(1 for j in range(i + 1) if t[j] <= q[i]) for i in range(len(t))])
    assert res.outputs == ref


def test_steps_shape_and_loop_order():
    src = SMALL + """\
param n = count(seq, 1)
x = seq
loop n:
    x = x + 1
loop 3:
    x = x * 2
output x
"""
    res = run(src, [[1, 1, 0], [2]])
    assert res.steps.dtype == np.int64 and res.steps.tolist() == [[2, 3], [0, 3]]
    assert res.outputs == [[24, 24, 16], [16]]


# ---- runtime errors: one per class ------------------------------------------------------------

def test_division_by_zero_at_a_valid_position():
    src = SMALL + "d = seq - 3\noutput seq // d\n"
    with pytest.raises(RaspRuntimeError) as e:
        run(src, [[1, 2], [4, 5, 6, 3]])
    assert e.value.input_index == 1 and e.value.loc.line == 3
    assert "division by zero" in e.value.message


def test_modulo_by_zero():
    with pytest.raises(RaspRuntimeError, match="division by zero"):
        run(SMALL + "output seq % (seq - seq)\n", [[1]])


def test_padding_never_divides_by_zero():
    # padded positions hold 0; a 1..9 input never divides by zero itself
    src = "input seq: {1..9}\noutput 100 // seq\n"
    assert run(src, [[4], [1, 2, 5, 9]]).outputs == [[25], [100, 50, 20, 11]]


def test_inactive_inputs_do_not_raise():
    # the second input runs the loop 0 times, so its zero divisor is never used
    src = SMALL + """\
param n = count(seq, 1)
x = seq
loop n:
    x = 12 // x
output x
"""
    assert run(src, [[1, 3], [0, 0]]).outputs == [[12, 4], [0, 0]]


def test_host_division_by_zero():
    src = SMALL + "param n = len(seq) // count(seq, 1)\noutput seq + n\n"
    assert run(src, [[1, 1, 5, 5]]).outputs == [[3, 3, 7, 7]]
    with pytest.raises(RaspRuntimeError, match="division by zero") as e:
        run(src, [[1, 1], [2, 2]])
    assert e.value.input_index == 1 and e.value.loc.line == 2


def test_undefined_after_zero_iterations():
    src = SMALL + """\
param n = count(seq, 1)
loop n:
    z = seq + 1
output z
"""
    assert run(src, [[1, 2]]).outputs == [[2, 3]]
    with pytest.raises(RaspRuntimeError) as e:
        run(src, [[1, 2], [2, 2]])
    assert e.value.input_index == 1
    assert "'z' is undefined: the loop at line 3 ran 0 times" in e.value.message
    assert e.value.loc.line == 3


def test_unread_undefined_variable_is_fine():
    src = SMALL + "loop count(seq, 1):\n    z = seq + 1\noutput seq\n"
    assert run(src, [[2, 2]]).outputs == [[2, 2]]


def test_step_limit():
    src = SMALL + "x = seq\nloop len(seq):\n    x = x + 1\noutput x\n"
    assert run(src, [[1, 2, 3]], limits=RunLimits(max_steps=3)).outputs == [[4, 5, 6]]
    with pytest.raises(RaspRuntimeError, match="--max-steps") as e:
        run(src, [[1], [1, 2, 3, 4]], limits=RunLimits(max_steps=3))
    assert e.value.input_index == 1 and e.value.loc.line == 3


def test_step_limit_until_stable_only_counts_steps_run():
    src = SMALL + "x = seq\nloop 1000 until stable:\n    x = min(x + 1, 5)\noutput x\n"
    res = run(src, [[1, 2, 3]], limits=RunLimits(max_steps=6))
    assert res.outputs == [[5, 5, 5]] and res.steps.tolist() == [[5]]
    with pytest.raises(RaspRuntimeError, match="--max-steps"):
        run(src, [[0]], limits=RunLimits(max_steps=5))


# ---- traces -----------------------------------------------------------------------------------

def test_trace_records_binds_and_steps():
    prog = rasp.load("programs/copy.rasp")
    tokens = prog.parse_input("0 1 1 > # # #")
    res = execute(prog.ir, [tokens], trace=True)
    names = [(e.name, e.steps) for e in res.trace]
    assert names[0] == ("seq", ())
    assert ("seq", (1,)) in names and ("seq", (3,)) in names and ("seq", (4,)) not in names
    assert names[-1] == ("output", ())
    assert res.trace[-1].value == res.outputs[0]
    text = format_trace(prog.ir, res)
    assert "\x1b" not in text
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["line", "step", "variable"]
    assert lines[1].split()[-4:] == [">", "#", "#", "#"]       # symbols as text
    assert lines[-1].split()[-4:] == ["0", "1", "1", "#"]      # the copy, from `>` on


def test_trace_shows_selectors_and_scalars():
    src = SMALL + "A = select(seq, seq, le)\nw = sel_width(A)\noutput w\n"
    res = run(src, [[2, 1, 3]], trace=True)
    sel = next(e for e in res.trace if e.name == "A")
    assert sel.value == [[1, 0, 0], [0, 1, 0], [1, 1, 1]]
    text = format_trace(program(src).ir, res)
    assert "A[2]" in text and "1 1 1" in text


def test_trace_nested_loop_steps():
    src = SMALL + "x = seq\nloop 2:\n    loop 3:\n        x = x + 1\n    y = x\noutput x\n"
    res = run(src, [[1, 2]], trace=True)
    steps = [(e.name, e.steps) for e in res.trace if e.name in ("x", "y")]
    assert steps[:5] == [("x", ()), ("x", (1, 1)), ("x", (1, 2)), ("x", (1, 3)), ("y", (1,))]
    assert ("x", (2, 3)) in steps
    assert "  1.2  " in format_trace(program(src).ir, res)


def test_no_trace_by_default():
    assert run(SMALL + "output seq\n", [[1]]).trace is None


# ---- whole programs -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["parity", "copy", "addition"])
def test_batch_equals_one_by_one(name):
    prog = rasp.load(f"programs/{name}.rasp")
    rng = np.random.default_rng(0)
    batch = []
    for n in rng.integers(1, 12, size=8):
        bits = rng.integers(0, 2, size=int(n)).tolist()
        if name == "addition":
            text = " ".join(map(str, bits)) + " + " + " ".join(map(str, bits[::-1])) + " >" + " #" * (n + 2)
        else:
            text = " ".join(map(str, bits)) + " >" + " #" * (n + 1)
        batch.append(prog.parse_input(text))
    together = execute(prog.ir, batch)
    for b, tokens in enumerate(batch):
        alone = execute(prog.ir, [tokens])
        assert alone.outputs[0] == together.outputs[b]
        assert alone.steps[0].tolist() == together.steps[b].tolist()


# ---- dtype narrowing: the interval analysis must be sound --------------------------------------

_PY_OPS = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "neg": operator.neg,
    "floordiv": lambda a, b: a // (b or 1), "mod": lambda a, b: a % (b or 1),
    "eq": lambda a, b: int(a == b), "ne": lambda a, b: int(a != b), "lt": lambda a, b: int(a < b),
    "le": lambda a, b: int(a <= b), "gt": lambda a, b: int(a > b), "ge": lambda a, b: int(a >= b),
    "bitand": operator.and_, "bitor": operator.or_, "bitxor": operator.xor, "invert": operator.invert,
    "and": lambda a, b: int(bool(a) and bool(b)), "or": lambda a, b: int(bool(a) or bool(b)),
    "not": lambda a: int(not a), "min": min, "max": max, "abs": abs,
    "where": lambda c, x, y: x if c else y,
}


def test_every_map_op_has_a_range_rule():
    assert set(_PY_OPS) == set(MAP_ARITY)


def _map_range_is_sound(op, data):
    """map_range's interval holds the op's value at a point drawn from the argument intervals."""
    bound = st.one_of(st.integers(-300, 300), st.integers(-2**40, 2**40))
    intervals, values = [], []
    for _ in range(MAP_ARITY[op]):
        lo, hi = sorted([data.draw(bound), data.draw(bound)])
        intervals.append((lo, hi))
        values.append(data.draw(st.integers(lo, hi)))
    if op == "mod" and intervals[1][0] <= 0 <= intervals[1][1]:
        values[1] = values[1] or intervals[1][1] or intervals[1][0] or 1
    lo, hi = ranges.map_range(op, intervals)
    assert lo <= _PY_OPS[op](*values) <= hi


@settings(max_examples=600, deadline=None)
@given(op=st.sampled_from(sorted(MAP_ARITY)), data=st.data())
def test_map_range_is_sound(op, data):
    """Every op, about 25 draws each (test_map_range_is_sound_thorough, slow: 3000 in all)."""
    _map_range_is_sound(op, data)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None)
@given(op=st.sampled_from(sorted(MAP_ARITY)), data=st.data())
def test_map_range_is_sound_thorough(op, data):
    """test_map_range_is_sound with 3000 draws; the fast one keeps every op covered."""
    _map_range_is_sound(op, data)


@FAST
@given(batch=batches)
def test_values_across_dtype_boundaries(batch):
    # int8/int16/int32 boundaries crossed by ordinary arithmetic
    src = HEADER + """\
w = seq * 37 - 18000
x = w * w - seq
y = (x // (a * 1000 + 7)) ^ ~w
output where(b > 0, y % 100003, shift_right(x, 1, -40000) - c * 129)
"""
    res = run(src, batch)
    for t, out in zip(batch, res.outputs):
        d = decode(t)
        w = [v * 37 - 18000 for v in t]
        x = [u * u - v for u, v in zip(w, t)]
        y = [(xi // (ai * 1000 + 7)) ^ ~wi for xi, ai, wi in zip(x, d["a"], w)]
        sx = shift(x, 1, -40000)
        assert out == [yi % 100003 if bi > 0 else sxi - ci * 129
                       for yi, bi, sxi, ci in zip(y, d["b"], sx, d["c"])]


@FAST
@given(batch=st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=40), min_size=1, max_size=5))
def test_loop_state_ranges_widen(batch):
    # x doubles each step: the analysis must give up on narrow dtypes; y settles
    src = SMALL + """\
param n = len(seq)
x = seq
y = seq
loop n:
    x = x * 2 + 1
    y = min(y + 1, 12)
output x - y
"""
    res = run(src, batch)
    for t, out in zip(batch, res.outputs):
        x, y = list(t), list(t)
        for _ in range(len(t)):
            x = [v * 2 + 1 for v in x]
            y = [min(v + 1, 12) for v in y]
        assert out == [u - v for u, v in zip(x, y)]


def test_narrow_dtypes_are_used():
    prog = rasp.load("programs/parity.rasp")
    run_ = interp_run.Run(prog.ir, np.array([[1, 0, -1, -2]]), np.array([4]), {}, False, RunLimits())
    loop = prog.ir.loops[0]
    assert all(run_.dtype[v.state] == np.int8 for v in loop.vars)


def test_empty_batch():
    res = run(SMALL + "loop 2:\n    x = seq\noutput seq\n", [])
    assert res.outputs == [] and res.steps.shape == (0, 1)


# ---- differential: an independent per-sequence evaluator, on every program ----------------

def test_agrees_with_naive_evaluator_on_every_program():
    import random
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    import references as R
    from bench.naive_rasp import run_naive
    checked = 0
    for path in sorted((root / "programs").glob("*.rasp")):
        sample = getattr(R, f"sample_{path.stem}", None)
        if sample is None:
            continue
        prog = rasp.load(str(path))
        rng = random.Random(7)
        batch = [prog.parse_input(" ".join(map(str, sample(rng, n)))) for n in (1, 2, 5, 8, 11)]
        assert execute(prog.ir, batch).outputs == run_naive(prog.ir, batch), path.stem
        checked += 1
    assert checked >= 3


@settings(max_examples=30, deadline=None)
@given(batch=st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=70), min_size=1, max_size=4))
def test_counters_cross_dtype_boundaries(batch):
    # up to 70 steps of +3: below 64 steps the analysis simulates every
    # iteration (int8 -> int16 boundary crossed), above it widens
    src = SMALL + "param n = len(seq)\nx = seq\nloop n:\n    x = x + 3\n    y = x * x\noutput y - x\n"
    res = run(src, batch)
    for t, out in zip(batch, res.outputs):
        x = [v + 3 * len(t) for v in t]
        assert out == [v * v - v for v in x]


def test_counter_dtype_follows_the_loop_count():
    src = SMALL + "param n = len(seq)\nx = seq\nloop n:\n    x = x + 1\noutput x\n"
    ir = program(src).ir
    var = ir.loops[0].vars[0]
    for n, dtype in [(20, np.int8), (200, np.int64)]:
        r = interp_run.Run(ir, np.ones((1, n), np.int64), np.array([n]), {}, False, RunLimits())
        assert r.dtype_of(var.state) == dtype


# ---- large mixed-length batches run in length groups ---------------------------------------

GROUPED_SRC = SMALL + """\
param n = count(seq, 1) + count(seq, 2)
x = seq
loop n:
    x = shift_right(x, 1, 7) + num_prev(seq, x)
output x
"""


def test_length_groups_give_the_same_results(monkeypatch):
    monkeypatch.setattr(driver, "GROUP_WORK", 64)
    rng = np.random.default_rng(11)
    batch = [rng.integers(0, 10, size=int(n)).tolist() for n in rng.integers(1, 41, size=300)]
    assert len(driver.length_groups([len(x) for x in batch])) == 4
    ir = program(GROUPED_SRC).ir
    grouped = execute(ir, batch)
    whole = driver.execute_as_one(ir, batch, None, False, RunLimits())
    assert grouped.outputs == whole.outputs
    assert grouped.steps.tolist() == whole.steps.tolist()


def test_length_groups_report_errors_like_one_batch(monkeypatch):
    monkeypatch.setattr(driver, "GROUP_WORK", 64)
    src = SMALL + "output 10 // (seq - 3)\n"
    batch = [[1] * n for n in range(200, 0, -1)]
    batch[60] = [1] * 139 + [3]             # in the third length group, not at its start
    with pytest.raises(RaspRuntimeError) as e:
        run(src, batch)
    assert e.value.input_index == 60


def test_small_or_uniform_batches_are_not_grouped():
    assert driver.length_groups([5] * 100) == []
    assert driver.length_groups([500] * 1000) == []          # all the same length
    assert len(driver.length_groups(list(range(100, 1100)))) == 4


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2 ** 31, 2 ** 31), min_size=3, max_size=3))
def test_the_numpy_operators_agree_with_the_python_table(xs):
    """rasp/operators.py (constant folding, the compiler's tables) and the
    interpreter's NumPy operators are one table in two semantics."""
    from rasp.interpreter.elementwise import NUMPY
    from rasp.operators import PYTHON
    assert set(NUMPY) == set(PYTHON) - {"floordiv", "mod"}       # a zero divisor is the run's error
    for name, fn in NUMPY.items():
        args = xs[:{"neg": 1, "invert": 1, "not": 1, "abs": 1, "where": 3}.get(name, 2)]
        got = fn(*(np.array([x], np.int64) for x in args))
        assert int(np.asarray(got, np.int64)[0]) == PYTHON[name](*args), (name, args)
