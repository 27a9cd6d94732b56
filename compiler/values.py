"""Value-set inference: the finite set of ints every s-op can hold at a given
sequence length, from the input vocabulary, the consts and the maps.

Sets are computed at two lengths; an s-op whose set changes with the length
(indices, counts, anything derived from them) is encoded numerically by the
compiler, everything else one-hot.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from rasp import ir
from rasp.errors import RaspError
from rasp.valuesets import MAX_EVAL, apply_op, eval_map, eval_node  # noqa: F401  (re-exported)

MAX_SET = 100_000        # a larger set is "huge": a located error


MAX_ITER = 4096          # value-set iterations for a loop whose count has no bound


def host_bound(prog, e: ir.HostExpr, length: int):
    """An upper bound of a host expression over inputs of at most `length`
    tokens (None if unknown).  The loop runs at most this many times, so the
    value sets after that many iterations are complete (params overridden on
    the command line beyond it are outside what was compiled)."""
    op, a = e.op, e.args
    if op == "lit":
        return int(a[0])
    if op in ("len", "count", "count_before"):
        return length
    if op == "param":
        p = prog.params.get(a[0])
        return host_bound(prog, p.expr, length) if p is not None else None
    if op == "neg":
        return None
    x, y = host_bound(prog, a[0], length), host_bound(prog, a[1], length)
    if op == "sub":
        return x if x is not None and _nonneg(prog, a[1]) else None
    if x is None or y is None:
        return None
    if op == "add":
        return x + y
    if op == "mul":
        return x * y if _nonneg(prog, a[0]) and _nonneg(prog, a[1]) else None
    if op == "min":
        return min(x, y)
    if op == "max":
        return max(x, y)
    if op in ("floordiv", "mod"):
        return x if _nonneg(prog, a[0]) else None
    return None


def _nonneg(prog, e: ir.HostExpr) -> bool:
    if e.op == "lit":
        return e.args[0] >= 0
    if e.op in ("len", "count", "count_before"):
        return True
    if e.op == "param":
        p = prog.params.get(e.args[0])
        return p is not None and _nonneg(prog, p.expr)
    if e.op in ("add", "mul", "min", "max", "floordiv", "mod"):
        return all(_nonneg(prog, x) for x in e.args)
    return False


def unique_key(sel: ir.Select) -> bool:
    """At most one key per query: eq on a key that is index + c, or a select
    the compiler built itself and marked (`one_key`, see clock.py)."""
    if getattr(sel, "one_key", False):
        return True
    if sel.pred != "eq":
        return False
    affine = affine_of(sel.key)
    return affine is not None and affine[0] != 0


def affine_of(node) -> tuple | None:
    """(a, b) when node == a*indices + b, else None."""
    if isinstance(node, ir.Indices):
        return (1, 0)
    if isinstance(node, ir.Map):
        ins = node.inputs
        if node.op == "neg":
            a = affine_of(ins[0])
            return None if a is None else (-a[0], -a[1])
        if node.op in ("add", "sub", "mul") and len(ins) == 2:
            consts = [isinstance(i, ir.Const) for i in ins]
            if consts == [False, True] or consts == [True, False]:
                c = ins[1].value if consts[1] else ins[0].value
                a = affine_of(ins[0] if consts[1] else ins[1])
                if a is None:
                    return None
                if node.op == "add":
                    return (a[0], a[1] + c)
                if node.op == "mul":
                    return (a[0] * c, a[1] * c)
                return (a[0], a[1] - c) if consts[1] else (-a[0], c - a[1])
    return None


class ValueSets:
    """node -> frozenset of ints at sequence lengths 1..length."""

    def __init__(self, prog: ir.ProgramIR, length: int, names: dict, keep=None):
        self.ir, self.length, self.names = prog, length, names
        self.keep = keep          # only these nodes (the ones the output needs)
        self.sets: dict = {}
        # inside a loop's fixpoint: node -> its set at the previous iteration,
        # for the nodes recomputed in this one (see grown_map)
        self.before: dict = {}
        self.run_block(prog.body)

    def error(self, node, message):
        return RaspError(message, loc=node.loc, source=self.ir.source)

    def name(self, node):
        n = self.names.get(node)
        return f"'{n}'" if n else f"this {node.label()}"

    def get(self, node) -> frozenset:
        if node not in self.sets:
            self.sets[node] = self.compute(node)
        return self.sets[node]

    def run_block(self, block: ir.Block):
        for item in block.items:
            if isinstance(item, ir.Loop):
                self.run_loop(item)
            elif isinstance(item, ir.Node) and (self.keep is None or item in self.keep):
                self.get(item)

    def run_loop(self, loop: ir.Loop):
        # fixpoint: state = init U update(state), iterated until nothing grows
        if self.keep is not None:
            vars_ = [v for v in loop.vars if v.state in self.keep]
        else:
            vars_ = list(loop.vars)
        for var in vars_:
            self.sets[var.state] = self.get(var.init) if var.init is not None else frozenset()
        # a constant count bounds the iterations; otherwise a value set must
        # converge within `length` iterations (sets that grow with the length,
        # like counters, then differ between the two lengths and become numeric)
        bound = host_bound(self.ir, loop.count, self.length)
        const = bound is not None and bound <= MAX_ITER
        cap = bound if const else MAX_ITER
        body = [n for n in loop.body.nodes() if self.keep is None or n in self.keep]
        # the body nodes each variable's set reaches, in body order: an iteration
        # recomputes only those of the variables whose sets grew (a step counter
        # grows every iteration; the rest of the body need not be redone)
        reach = {}
        for var in vars_:
            nodes, seen = [], {var.state}
            for n in body:
                if any(i in seen for i in n.inputs):
                    nodes.append(n)
                    seen.add(n)
            reach[var.state] = nodes
        order = {n: k for k, n in enumerate(body)}
        self.reach, self.order = reach, order
        counters = {var.state: step for var in vars_ if (step := counter_step(var)) is not None
                    and not any(v.update in reach[var.state] for v in vars_ if v is not var)}
        grown = None             # None: the first pass computes every body node
        try:
            for done in range(max(cap, 0)):
                if grown is None:
                    redo = body
                    for n in body:
                        self.sets.pop(n, None)
                else:
                    redo = sorted({n for state in grown for n in reach[state]}, key=order.__getitem__) \
                        if len(grown) > 1 else reach[next(iter(grown))]
                    for n in redo:
                        self.before[n] = self.sets.pop(n, None)
                for n in redo:
                    self.get(n)
                grown, self.before = set(), {}
                for var in vars_:
                    old = self.sets[var.state]
                    new = old | self.get(var.update)
                    if len(new) > MAX_SET:
                        raise self.error(var.update, f"the values of loop variable '{var.name}' grow without "
                                         "bound; the compiler needs a finite value set")
                    if new != old:
                        self.sets[var.state] = new
                        self.before[var.state] = old
                        grown.add(var.state)
                if not grown:
                    return
                if const and all(state in counters for state in grown) and done + 2 < cap \
                        and self.count_on(grown, counters, cap - done - 1):
                    return
        finally:
            self.before = {}
        if const:
            return
        var = next((v for v in vars_ if self.sets[v.state] != self.sets[v.state] | self.get(v.update)), vars_[0])
        raise self.error(var.update, f"the value set of loop variable '{var.name}' does not converge "
                         f"(it keeps growing from iteration to iteration); the compiler needs a finite set")

    def count_on(self, grown: set, counters: dict, left: int) -> bool:
        """The last `left` iterations of a loop in which only step counters
        (`counter_step`) still grow, at once: a counter's set S becomes
        S + step * {0..left} (S + step * {0..left-1} where the body reads
        it), which iterating would reach one value per iteration; the other
        variables no longer change (no counter reaches their updates).  False
        (nothing done: the caller iterates) where a set would become huge."""
        final = {}
        for state in grown:
            step = counters[state]
            final[state] = frozenset(x + step * k for x in self.sets[state] for k in range(left + 1))
            if len(final[state]) > MAX_SET or max(map(abs, final[state])) > MAX_COUNTER:
                return False
        for state in grown:          # (self.before keeps the set the body last read)
            step = counters[state]
            self.sets[state] = frozenset(x + step * k for x in self.sets[state] for k in range(left))
        redo = sorted({n for state in grown for n in self.reach[state]}, key=self.order.__getitem__)
        for n in redo:
            self.before[n] = self.sets.pop(n, None)
        for n in redo:
            self.get(n)
        self.before = {}
        for state in grown:
            var = state.var
            assert self.sets[state] | self.get(var.update) == final[state]
            self.sets[state] = final[state]
        return True

    def compute(self, node) -> frozenset:
        L = self.length
        for i in node.inputs:
            if isinstance(i, ir.Host) or (isinstance(i, ir.Map) and i.kind == ir.SCALAR):
                name = getattr(i, "name", None)
                what = f"param '{name}'" if name else "a host value (len/count/param)"
                raise self.error(node, f"{what} is computed on the host from the whole input; a causal "
                                 "transformer cannot use it as a value here (params may only be loop counts)")
        if isinstance(node, ir.Input):
            return frozenset(self.ir.vocab)
        if isinstance(node, ir.Indices):
            return frozenset(range(L))
        if isinstance(node, ir.Const):
            return frozenset({node.value})
        if isinstance(node, ir.Host):
            return frozenset()          # its consumers report it (located at the use)
        if isinstance(node, ir.Full):
            return self.get(node.inputs[0])
        if isinstance(node, (ir.LoopState, ir.LoopOut)):
            return self.sets.get(node.var.state, frozenset())
        if isinstance(node, ir.SelWidth):
            return frozenset(range(L + 1))
        if isinstance(node, ir.Select):
            return frozenset()
        if isinstance(node, ir.Aggregate):
            v, d = self.get(node.value), self.get(node.default)
            if node.reduction != "mean" or len(v) <= 1 or unique_key(node.selector):
                return v | d
            return mean_values(v, L) | d
        if isinstance(node, ir.Map):
            sets = [self.get(i) for i in node.inputs]
            if may_overflow(node.op, sets):
                raise self.error(node, f"the values of {self.name(node)} can leave the 64-bit range, where the "
                                 "interpreter reports an integer overflow; a compiled model has no such error")
            out = self.grown_map(node, sets)
            if out is None:
                try:
                    out = frozenset(eval_node(node, sets).tolist())
                except OverflowError as e:
                    raise self.error(node, f"the value set of {self.name(node)} is too large to enumerate "
                                     f"({e.args[0]} operand combinations)") from None
            if len(out) > MAX_SET:
                raise self.error(node, f"the value set of {self.name(node)} is huge ({len(out)} values)")
            return out
        raise self.error(node, f"unsupported operation {node.label()}")

    def grown_map(self, node: ir.Map, sets: list):
        """The map's set from its set at the previous loop iteration, evaluating
        only the operand combinations that use a value new to some operand
        (the previous set covers the rest): equal to eval_node over `sets`,
        in time linear rather than quadratic in the iterations of a counter.
        None where that equality is not certain (no previous set, an operand
        that lost values, a product beyond MAX_EVAL: eval_node then returns a
        range or refuses)."""
        prev = self.before.get(node)
        if prev is None or math.prod(len(s) for s in sets) > MAX_EVAL:
            return None
        olds = [self.before.get(i, s) for i, s in zip(node.inputs, sets)]
        if not all(o is not None and o <= s for o, s in zip(olds, sets)):
            return None
        parts = [prev]
        for k, (old, new) in enumerate(zip(olds, sets)):
            if len(old) != len(new):
                parts.append(eval_node(node, sets[:k] + [new - old] + sets[k + 1:]).tolist())
        return frozenset().union(*parts)


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


MAX_COUNTER = 1 << 40     # count_on: a counter's values stay far inside int64


def counter_step(var: ir.LoopVar):
    """c when the variable's update is its state + const c (c != 0): a step
    counter, whose set after k more iterations is S + c * {0..k}."""
    u = var.update
    if not (isinstance(u, ir.Map) and u.op == "add" and len(u.inputs) == 2):
        return None
    a, b = u.inputs
    if isinstance(a, ir.Const):
        a, b = b, a
    if a is var.state and isinstance(b, ir.Const) and b.value != 0:
        return b.value
    return None


def may_overflow(op: str, sets: list) -> bool:
    """Whether `op` over these value sets can leave int64 (eval_map computes
    in int64 and would wrap): the extremes of add/sub/mul/neg/abs lie at the
    corners of the operands' ranges, computed here in Python's exact ints."""
    if op in ("add", "sub", "mul", "neg", "abs") and all(sets):
        corners = itertools.product(*[(min(v), max(v)) for v in sets])
        ops: dict[str, Callable[..., int]] = {
            "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
            "neg": lambda a: -a, "abs": lambda a: abs(a)}
        f = ops[op]
        return any(not INT64_MIN <= f(*c) <= INT64_MAX for c in corners)
    if op == "floordiv" and len(sets) == 2:
        return INT64_MIN in sets[0] and -1 in sets[1]
    return False


MEAN_ENUMERATION = 200_000       # (width, sum) pairs enumerated at most; beyond: the whole range


def mean_values(v: frozenset, L: int) -> frozenset:
    """Every mean, truncated toward zero, of 1..L values from `v`: a superset,
    enumerating the sums on v's lattice (min(v) + g * m, g the gcd of the
    differences) for every width w <= L.  Small when the values are few and
    wide (1000 * bools: 1000 s/w for s <= w <= L), which keeps the tables read
    after the mean (a one-hot output) to the values it can take; the whole
    range [min, max] when the enumeration would be long."""
    vs = sorted(v)
    a, g = vs[0], 0
    for x in vs[1:]:
        g = math.gcd(g, x - a)
    top = (vs[-1] - a) // g
    if sum(w * top + 1 for w in range(1, L + 1)) > MEAN_ENUMERATION:
        return frozenset(range(vs[0], vs[-1] + 1))
    out: set[int] = set()
    if max(abs(vs[0]), abs(vs[-1])) * (L + 1) < 2 ** 62:
        # vectorised (no int64 overflow: every sum lies within L * max|v|); the values are
        # added in the loop's order below, so the set (and its iteration order) is the same
        for w in range(1, L + 1):
            s = w * a + g * np.arange(w * top + 1, dtype=np.int64)
            out.update(np.where(s >= 0, s // w, -((-s) // w)).tolist())
        return frozenset(out)
    for w in range(1, L + 1):
        for m in range(w * top + 1):
            s = w * a + g * m
            out.add(s // w if s >= 0 else -((-s) // w))
    return frozenset(out)
