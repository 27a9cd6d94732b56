"""A naive per-sequence evaluator of the IR, in the style of the original
RASP-L NumPy library (Zhou et al. 2024, Listing 4 of Fan et al. 2024): one
sequence at a time, every selector built with Python loops calling the
predicate for each (query, key) pair, `mean` aggregation with `np.dot`.

Like the library's `kqv`, a selector is rebuilt at every use (the IR hoists
loop-invariant selects out of loop bodies; the library calls `select` inside
the loop each step).  Element-wise operations use NumPy on 1-D arrays, which
is kinder to the baseline than the library's Python-level `tok_map` /
`seq_map`.  It exists only as the benchmark's baseline (bench/interpreter.py).
"""
from __future__ import annotations

import operator

import numpy as np

from rasp.ir import (SOP, Aggregate, Bind, Const, Full, Host, Indices, Input, Loop, LoopOut,
                     LoopState, Map, Select, SelWidth)

PREDS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
         "gt": operator.gt, "ge": operator.ge, "always": lambda k, q: True}

def _int(x):
    """0/1 as ints, for s-ops and for scalars (e.g. `require count(seq, EOQ) == 1`)."""
    return np.asarray(x).astype(int)


MAPS = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": operator.floordiv,
    "mod": operator.mod, "neg": operator.neg, "invert": operator.invert,
    "eq": lambda a, b: _int(a == b), "ne": lambda a, b: _int(a != b),
    "lt": lambda a, b: _int(a < b), "le": lambda a, b: _int(a <= b),
    "gt": lambda a, b: _int(a > b), "ge": lambda a, b: _int(a >= b),
    "bitand": operator.and_, "bitor": operator.or_, "bitxor": operator.xor,
    "and": lambda a, b: _int((a != 0) & (b != 0)),
    "or": lambda a, b: _int((a != 0) | (b != 0)),
    "not": lambda a: _int(a == 0),
    "min": np.minimum, "max": np.maximum, "abs": np.abs,
    "where": lambda c, x, y: np.where(c != 0, x, y),
}


def select(k, q, pred):
    n = len(k)
    a = np.zeros((n, n), dtype=bool)
    for i in range(n):
        for j in range(i + 1):
            a[i, j] = pred(k[j], q[i])
    return a


def aggregate(a, v, reduction, default):
    width = a.sum(axis=1)
    out = np.array(default, dtype=np.int64) * np.ones(len(a), dtype=np.int64)
    if reduction == "mean":
        s = np.dot(a.astype(np.int64), v)
        for i in range(len(a)):
            if width[i]:
                out[i] = int(s[i] / width[i])
    else:
        for i in range(len(a)):
            if width[i]:
                out[i] = v[a[i]].max() if reduction == "max" else v[a[i]].min()
    return out


class NaiveRun:
    """Evaluate one sequence."""

    def __init__(self, ir, tokens, params=None):
        self.ir, self.tokens = ir, np.array(tokens, dtype=np.int64)
        self.n = len(tokens)
        self.env = {}
        self.final = {}
        self.params = {}
        for name, p in ir.params.items():
            self.params[name] = (params or {}).get(name, self.host(p.expr))

    def host(self, e):
        t = self.tokens.tolist()
        if e.op == "lit":
            return e.args[0]
        if e.op == "param":
            return self.params[e.args[0]]
        if e.op == "len":
            return self.n
        if e.op == "count":
            return t.count(e.args[0])
        if e.op == "count_before":
            return t.index(e.args[0]) if e.args[0] in t else self.n
        if e.op == "neg":
            return -self.host(e.args[0])
        x, y = self.host(e.args[0]), self.host(e.args[1])
        return {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
                "floordiv": operator.floordiv, "mod": operator.mod, "min": min, "max": max}[e.op](x, y)

    def value(self, node):
        if isinstance(node, Select):
            return self.compute(node)       # rebuilt at every use, as kqv does
        if node in self.env:
            return self.env[node]
        v = self.compute(node)
        self.env[node] = v
        return v

    def sop(self, v):
        return np.full(self.n, v, dtype=np.int64) if np.ndim(v) == 0 else v

    def compute(self, node):
        if isinstance(node, Const):
            return node.value
        if isinstance(node, Host):
            return self.params[node.name] if node.name in self.params else self.host(node.expr)
        if isinstance(node, Input):
            return self.tokens
        if isinstance(node, Indices):
            return np.arange(self.n)
        if isinstance(node, Full):
            return self.sop(self.value(node.inputs[0]))
        if isinstance(node, Map) and node.op == "lookup":    # a const table: T[x] / T[x][y]
            table = np.array(node.table.rows)
            return table[tuple(np.asarray(self.value(i)) for i in node.inputs)]
        if isinstance(node, Map):
            return MAPS[node.op](*[self.value(i) for i in node.inputs])
        if isinstance(node, Select):
            k, q = self.sop(self.value(node.key)), self.sop(self.value(node.query))
            return select(k.tolist(), q.tolist(), PREDS[node.pred])
        if isinstance(node, Aggregate):
            return aggregate(self.value(node.selector), self.sop(self.value(node.value)),
                             node.reduction, self.value(node.default))
        if isinstance(node, SelWidth):
            return self.value(node.inputs[0]).sum(axis=1)
        if isinstance(node, LoopOut):
            return self.final[node.var]
        raise TypeError(f"cannot evaluate {node.label()}")

    def block(self, block):
        for item in block.items:
            if isinstance(item, Loop):
                self.loop(item)
            elif not isinstance(item, (Bind, LoopOut, LoopState)):
                self.value(item)

    def loop(self, loop):
        state = {v: None if v.init is None else self.value(v.init) for v in loop.vars}
        for _ in range(max(0, self.host(loop.count))):
            for item in loop.body.items:
                self.env.pop(item, None)
            for v in loop.vars:
                self.env[v.state] = state[v]
            self.block(loop.body)
            new = {v: self.value(v.update) for v in loop.vars}
            stable = all(v.kind != SOP or np.array_equal(new[v], state[v]) for v in loop.vars
                         if state[v] is not None) and all(state[v] is not None for v in loop.vars)
            state = new
            if loop.until_stable and stable:
                break
        self.final.update(state)


def run_naive(ir, batch, params=None):
    """Outputs for each input of `batch`, one sequence at a time."""
    outs = []
    for tokens in batch:
        r = NaiveRun(ir, tokens, params)
        r.block(ir.body)
        outs.append(r.sop(r.value(ir.output)).tolist())
    return outs
