"""Value ranges: an interval for every s-op and scalar node of a run, from the
batch's actual tokens, lengths and params, and from it the narrowest integer
dtype that holds the node (`Ranges.dtypes`) and the maps whose exact result
may leave int64 (`Ranges.overflow`, checked at run time)."""
from __future__ import annotations

import numpy as np

from ..ir import (SELECTOR, Aggregate, Bind, Const, Full, Host, Indices, Input, Lookup, Loop, LoopOut,
                  LoopState, Map, SelWidth)
from .nodes import eval_host

I64_MIN = np.int64(np.iinfo(np.int64).min)     # NumPy scalars: never narrowed
I64_MAX = np.int64(np.iinfo(np.int64).max)
INT_DTYPES = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64)]
_TOP = (int(I64_MIN), int(I64_MAX))


def _dtype_for(lo: int, hi: int) -> np.dtype:
    for dt in INT_DTYPES:
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return dt
    return INT_DTYPES[-1]


def _bits(lo: int, hi: int) -> int:
    """k such that every value in [lo, hi] lies in [-2^k, 2^k - 1]."""
    return max(lo.bit_length() if lo >= 0 else (-lo - 1).bit_length(),
               hi.bit_length() if hi >= 0 else (-hi - 1).bit_length())


def _hull(*rs):
    return (min(r[0] for r in rs), max(r[1] for r in rs))


def map_range(op, rs):
    """An interval holding op's result for operands in the intervals `rs`."""
    (alo, ahi) = rs[0]
    if op in ("eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not"):
        return (0, 1)
    if op == "neg":
        return (-ahi, -alo)
    if op == "invert":
        return (-ahi - 1, -alo - 1)
    if op == "abs":
        return (alo, ahi) if alo >= 0 else (-ahi, -alo) if ahi <= 0 else (0, max(-alo, ahi))
    if op == "where":
        return _hull(rs[1], rs[2])
    (blo, bhi) = rs[1]
    if op == "add":
        return (alo + blo, ahi + bhi)
    if op == "sub":
        return (alo - bhi, ahi - blo)
    if op == "mul":
        p = [alo * blo, alo * bhi, ahi * blo, ahi * bhi]
        return (min(p), max(p))
    if op == "min":
        return (min(alo, blo), min(ahi, bhi))
    if op == "max":
        return (max(alo, blo), max(ahi, bhi))
    if op == "floordiv":          # |x // d| <= |x| for every divisor d != 0
        m = max(abs(alo), abs(ahi))
        return (-m, m)
    if op == "mod":               # the result has the divisor's sign, |r| < |d|
        if blo >= 1:
            return (0, bhi - 1)
        if bhi <= -1:
            return (blo + 1, 0)
        m = max(abs(blo), abs(bhi), 1)
        return (-(m - 1), m - 1)
    k = _bits(min(alo, blo), max(ahi, bhi))
    if op == "bitand":
        if alo >= 0 and blo >= 0:
            return (0, min(ahi, bhi))
        if alo >= 0 or blo >= 0:
            return (0, ahi if alo >= 0 else bhi)
        return (-(1 << k), max(ahi, bhi))     # a & b <= a when a >= 0, <= min(a, b) when both < 0
    # bitor / bitxor stay within the operands' two's-complement width
    if alo >= 0 and blo >= 0:
        return (0, (1 << k) - 1)
    return (-(1 << k), (1 << k) - 1)


class Ranges:
    """Interval analysis: for every s-op and scalar node, [lo, hi] holding all
    its values at valid positions of this batch.  Loop states are solved as a
    fixpoint (hull of init and update), widened to int64 when they keep
    growing.  Padded positions may hold anything: they wrap harmlessly."""

    WIDEN_AFTER = 4
    EXACT_ROUNDS = 64

    def __init__(self, run):
        self.run = run
        self.r: dict = {}
        self.final: dict = {}
        self.overflow: set = set()

    def dtypes(self) -> dict:
        self.block(self.run.ir.body)
        self.of(self.run.ir.output)
        return {node: _dtype_for(*r) for node, r in self.r.items()}

    def block(self, block):
        for item in block.items:
            if isinstance(item, Loop):
                self.loop(item)
            elif isinstance(item, Bind):
                self.of(item.node)
            elif not isinstance(item, LoopState):
                self.of(item)

    def loop(self, loop):
        """Round r computes the body with the hull of the states of iterations
        1..r.  When the loop runs at most EXACT_ROUNDS times, that many rounds
        cover every iteration (a counter stays narrow); otherwise ranges that
        keep growing are widened to int64 until a fixpoint."""
        vars_ = [v for v in loop.vars if v.kind != SELECTOR]
        state = {v: None if v.init is None else self.of(v.init) for v in vars_}
        runs = int(self.run.hosts.value(loop.count)[0].max())
        exact = runs <= self.EXACT_ROUNDS
        for rounds in range(max(runs, 1) if exact else 64):
            for node in self.run.clear.get(loop, ()):
                self.r.pop(node, None)
            for v in vars_:
                self.r[v.state] = state[v] or (0, 0)   # no value yet: never read
            self.block(loop.body)
            new = {v: self.of(v.update) if state[v] is None else _hull(state[v], self.of(v.update))
                   for v in vars_}
            if new == state:
                break
            if not exact and rounds >= self.WIDEN_AFTER:
                new = {v: (r[0] if state[v] is None or r[0] >= state[v][0] else _TOP[0],
                           r[1] if state[v] is None or r[1] <= state[v][1] else _TOP[1])
                       for v, r in new.items()}
            state = new
        else:
            if not exact:
                raise AssertionError("range analysis did not converge")
        for v in vars_:
            self.final[v] = state[v]

    def of(self, node):
        if node.kind == SELECTOR:
            for i in node.inputs:
                self.of(i)
            return None
        try:
            return self.r[node]
        except KeyError:
            pass
        lo, hi = self.compute(node)
        if isinstance(node, Map) and (lo < _TOP[0] or hi > _TOP[1]):
            self.overflow.add(node)
        r = (max(lo, _TOP[0]), min(hi, _TOP[1]))
        self.r[node] = r
        return r

    def compute(self, node):
        run = self.run
        if isinstance(node, Const):
            return (node.value, node.value)
        if isinstance(node, (Host, Input)):
            v = eval_host(run, node) if isinstance(node, Host) else run.tokens
            return (int(v.min()), int(v.max()))
        if isinstance(node, Indices):
            return (0, run.N - 1)
        if isinstance(node, Full):
            return self.of(node.inputs[0])
        if isinstance(node, Lookup):
            for i in node.inputs:
                self.of(i)
            values = node.table.entries()
            return (min(values), max(values))
        if isinstance(node, Map):
            return map_range(node.op, [self.of(i) for i in node.inputs])
        if isinstance(node, SelWidth):
            self.of(node.inputs[0])
            return (0, run.N)
        if isinstance(node, Aggregate):
            self.of(node.selector)
            return _hull(self.of(node.value), self.of(node.default))
        if isinstance(node, LoopOut):
            return self.final.get(node.var, _TOP)
        return _TOP
