"""Finite value sets of element-wise maps, and the value sets the checker can
know without running the program (those fixed by the input's declared
vocabulary and the consts).

`eval_node` is the one definition of what a `Map` (a lookup included) can
give over sets of operand values; the compiler's value-set inference
(compiler/values.py) uses it at every length, the checker uses
`static_values` to refuse a lookup whose index can leave its table.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np

from . import ir

MAX_EVAL = 4_000_000     # largest product of operand value sets a map is evaluated on

_NP: dict[str, Callable[..., Any]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply,
    "floordiv": np.floor_divide, "mod": np.mod, "neg": np.negative,
    "eq": lambda a, b: (a == b), "ne": lambda a, b: (a != b), "lt": lambda a, b: (a < b),
    "le": lambda a, b: (a <= b), "gt": lambda a, b: (a > b), "ge": lambda a, b: (a >= b),
    "bitand": np.bitwise_and, "bitor": np.bitwise_or, "bitxor": np.bitwise_xor,
    "invert": np.invert, "and": lambda a, b: (a != 0) & (b != 0),
    "or": lambda a, b: (a != 0) | (b != 0), "not": lambda a: (a == 0),
    "min": np.minimum, "max": np.maximum, "abs": np.abs,
    "where": lambda c, x, y: np.where(c != 0, x, y),
}


def apply_op(op: str, args: Sequence) -> np.ndarray:
    """Element-wise op on broadcastable int arrays, with the interpreter's int
    semantics (floor division/modulo; comparisons give 0/1)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = _NP[op](*[np.asarray(a, dtype=np.int64) for a in args])
    return np.asarray(out).astype(np.int64)


def table_array(table: ir.Table) -> np.ndarray:
    """The table's ints as an int64 array (cached on the table)."""
    cached = table.__dict__.get("_array")
    if cached is None:
        cached = np.array(table.rows, dtype=np.int64)
        cached.flags.writeable = False
        object.__setattr__(table, "_array", cached)
    return cached


def in_table(table: ir.Table, args: Sequence) -> np.ndarray:
    """Where every index lies inside the table (broadcast over args)."""
    ok = np.ones(np.broadcast_shapes(*[np.shape(a) for a in args]), dtype=bool)
    for a, n in zip(args, table.shape):
        ok &= (np.asarray(a) >= 0) & (np.asarray(a) < n)
    return ok


def lookup(table: ir.Table, args: Sequence, ok=None) -> np.ndarray:
    """T[a] / T[a][b] element-wise; positions outside the table read entry 0
    (callers report or drop them: see in_table)."""
    ok = in_table(table, args) if ok is None else ok
    index = tuple(np.where(ok, np.asarray(a, dtype=np.int64), 0) for a in args)
    return table_array(table)[index]


def eval_map(op: str, sets: list, table: Optional[ir.Table] = None) -> np.ndarray:
    """All values of `op` over the product of the operand sets (combinations
    that are run-time errors -- division by zero, an index outside a lookup
    table -- are skipped: the interpreter rejects them)."""
    arrays = [np.array(sorted(s), dtype=np.int64) for s in sets]
    total = int(np.prod([len(a) for a in arrays])) if arrays else 1
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    if total > MAX_EVAL:
        if op in ("add", "sub") and len(arrays) == 2:       # interval arithmetic
            a, b = arrays
            lo, hi = (a[0] + b[0], a[-1] + b[-1]) if op == "add" else (a[0] - b[-1], a[-1] - b[0])
            return np.arange(lo, hi + 1)
        raise OverflowError(total)
    grids = np.meshgrid(*arrays, indexing="ij")
    if op == "lookup":
        assert table is not None, "a lookup brings its table"
        ok = in_table(table, grids)
        return np.unique(lookup(table, grids, ok)[ok])
    out = apply_op(op, grids)
    if op in ("floordiv", "mod"):
        out = out[grids[1] != 0]
    return np.unique(out)


def eval_node(node: ir.Map, sets: list) -> np.ndarray:
    """eval_map for a Map node (a Lookup brings its table)."""
    return eval_map(node.op, sets, getattr(node, "table", None))


MAX_STATIC = 100_000     # larger sets are not tracked by the checker


def static_values(node: ir.Node, vocab, memo: dict) -> frozenset | None:
    """The values `node` can hold at any position of any valid input, when the
    input's declared vocabulary and the consts fix them (element-wise maps,
    lookups, max/min aggregates and constant means of such values); None when
    they depend on the length, a loop or a param.  Iterative (graphs from
    inlined code can be deep); `memo` caches results across calls."""
    stack = [node]
    while stack:
        n = stack[-1]
        if n in memo:
            stack.pop()
            continue
        deps = _static_inputs(n)
        missing = [d for d in deps if d not in memo]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        memo[n] = _static_of(n, [memo[d] for d in deps], vocab)
    return memo[node]


def _static_inputs(n) -> list:
    if isinstance(n, (ir.Full, ir.Map)):
        return list(n.inputs)
    if isinstance(n, ir.Aggregate):
        return [n.value, n.default]
    return []


def _static_of(n, sets, vocab):
    if isinstance(n, ir.Input):
        return frozenset(vocab)
    if isinstance(n, ir.Const):
        return frozenset({n.value})
    if any(s is None for s in sets):
        return None
    if isinstance(n, ir.Full):
        return sets[0]
    if isinstance(n, ir.Map) and n.kind == ir.SOP:
        try:
            out = eval_node(n, sets)
        except OverflowError:
            return None
        return frozenset(int(v) for v in out) if len(out) <= MAX_STATIC else None
    if isinstance(n, ir.Aggregate):
        value, default = sets
        if n.reduction in ("max", "min") or len(value) == 1:
            return value | default
    return None
