"""Fusion planning: which chains of one-hot maps are computed as one MLP of
their leaf inputs (plan_fusion).  Planned in Crafter.__init__, before
anything is built; maps.build_map builds what it planned."""
from __future__ import annotations

import numpy as np

from rasp import ir

from .. import mlp as M
from .base import CrafterBase


class FusionMixin(CrafterBase):
    FUSE_PRODUCT = 20000       # largest product of the leaves' value-set sizes (costing larger ones took most of count.rasp's compile time and never won)
    FUSE_COMBOS = 1200         # largest product over all leaves but the biggest

    def absorbable(self, child, parent) -> bool:
        g = self.pg.g
        return (isinstance(child, ir.Map) and child.kind == ir.SOP and self.pg.stage[child] == self.pg.stage[parent]
                and child is not self.ir.output and set(g.successors(child)) == {parent}
                and self.is_cat(child) and not g.edges[child, parent].get("loop_back", False)
                and all(isinstance(i, ir.Const) or (isinstance(i, ir.Full) and isinstance(i.inputs[0], ir.Const))
                        or self.is_cat(i) for i in child.inputs))

    def plan_fusion(self):
        """A map of maps (e.g. a lambda body, or `(a | b) & ~(a & b)`) becomes one
        function of its leaf inputs, so it costs one MLP instead of a chain."""
        import networkx as nx
        order = list(nx.topological_sort(self.pg.forward()))
        for m in reversed(order):
            if not isinstance(m, ir.Map) or m.kind != ir.SOP or m in self.absorbed or not self.is_cat(m):
                continue
            inner, leaves = set(), []

            def walk(node, inner=inner, leaves=leaves):
                for i in node.inputs:
                    if self.absorbable(i, node):
                        inner.add(i)
                        walk(i)
                    elif not isinstance(i, ir.Const) and not (isinstance(i, ir.Full)
                                                              and isinstance(i.inputs[0], ir.Const)):
                        if i not in leaves:
                            leaves.append(i)
            walk(m)
            if not inner or not all(self.is_cat(l) for l in leaves):
                continue
            sizes = sorted(len(self.vals(l)) for l in leaves)
            if np.prod(sizes, dtype=float) > self.FUSE_PRODUCT or np.prod(sizes[:-1], dtype=float) > self.FUSE_COMBOS:
                continue
            f = self.composed(m, leaves)
            table = {}

            def memo(*vals, _f=f, _t=table):     # the fused table is evaluated once
                if vals not in _t:
                    _t[vals] = _f(*vals)
                return _t[vals]
            f = memo
            fused = M.cat_map_cost(f, [self.vals(l) for l in leaves])
            separate = sum(self.map_cost(n) for n in inner | {m})
            lin = self.linear_core(m, inner, leaves)
            if lin is not None and lin[2] < min(fused, separate + 16):
                self.absorbed |= inner
                self.fused[m] = (leaves, lin)     # h(sum of a_i * leaf_i): one table
                continue
            if fused > separate + 16:       # fusing saves layers; allow a little more width, not much
                continue
            self.absorbed |= inner
            self.fused[m] = (leaves, f)

    def linear_coeffs(self, node, inner, leaves):
        """{leaf: coef} and constant when node is an integer linear combination."""
        if node in leaves:
            return {node: 1}, 0
        if isinstance(node, ir.Const):
            return {}, node.value
        if isinstance(node, ir.Full):
            return {}, node.inputs[0].value
        if not (isinstance(node, ir.Map) and node in inner and node.op in ("add", "sub", "neg", "mul")):
            return None
        parts = [self.linear_coeffs(i, inner, leaves) for i in node.inputs]
        if any(p is None for p in parts):
            return None
        if node.op == "neg":
            return {k: -v for k, v in parts[0][0].items()}, -parts[0][1]
        if node.op == "mul":
            (ca, ka), (cb, kb) = parts
            if ca and cb:
                return None
            coef, const, scale = (ca, ka, kb) if ca else (cb, kb, ka)
            return {k: v * scale for k, v in coef.items()}, const * scale
        sign = 1 if node.op == "add" else -1
        (ca, ka), (cb, kb) = parts
        out = dict(ca)
        for k, v in cb.items():
            out[k] = out.get(k, 0) + sign * v
        return out, ka + sign * kb

    def linear_core(self, m, inner, leaves):
        """When m = h(linear combination of the leaves) (e.g. (a + b) % 60):
        (coefficients, h, table cost), else None."""
        chain, node = [], m
        while True:
            lc = self.linear_coeffs(node, inner | {m}, leaves)
            if lc is not None and set(lc[0]) == set(leaves) and node is not m or (lc is not None and node is m
                                                                                   and set(lc[0]) == set(leaves)):
                break
            if not isinstance(node, ir.Map):
                return None
            kids = [i for i in node.inputs if i in inner]
            others = [i for i in node.inputs if i not in inner and not isinstance(i, (ir.Const, ir.Full))]
            if len(kids) != 1 or others:
                return None
            chain.append(node)
            node = kids[0]
        coef, const = lc
        lo = const + sum(min(a * v for v in (min(self.vals(l)), max(self.vals(l)))) for l, a in coef.items())
        hi = const + sum(max(a * v for v in (min(self.vals(l)), max(self.vals(l)))) for l, a in coef.items())
        if hi - lo > 20000:
            return None
        core = node

        def h(t):
            def ev(n):
                if n is core:
                    return t
                if isinstance(n, ir.Const):
                    return n.value
                if isinstance(n, ir.Full):
                    return n.inputs[0].value
                args = [ev(i) for i in n.inputs]
                return None if any(a is None for a in args) else self.fn(n)(*args)
            return ev(m)
        hv = {t: h(t) for t in range(lo, hi + 1)}
        if any(v is None for v in hv.values()):
            return None
        cost = 2 * sum(1 for t in range(lo + 1, hi + 1) if hv[t] != hv[t - 1])
        return (coef, const, lo, hi, hv), None, cost

    def map_cost(self, node) -> int:
        """Units the map would use on its own (one-hot inputs)."""
        args = [i for i in node.inputs if not isinstance(i, ir.Const)
                and not (isinstance(i, ir.Full) and isinstance(i.inputs[0], ir.Const))]
        if len(args) <= 1 or self.one_operand(node) is not None:     # one-hot tables of one operand: linear
            return 0
        if node.op == "where" and args[0] is node.inputs[0]:
            return 2 * sum(len(self.vals(b)) for b in node.inputs[1:] if b in args)
        pos = [k for k, i in enumerate(node.inputs) if i in args]
        consts = {k: (i.value if isinstance(i, ir.Const) else i.inputs[0].value)
                  for k, i in enumerate(node.inputs) if k not in pos}
        fn = self.fn(node)

        def g(*vals):
            full = [None] * len(node.inputs)
            for k, v in zip(pos, vals):
                full[k] = v
            for k, v in consts.items():
                full[k] = v
            return fn(*full)
        return M.cat_map_cost(g, [self.vals(node.inputs[k]) for k in pos])

    def composed(self, m, leaves):
        """m as a function of the leaves' values: the tree of element-wise functions,
        built into closures once (each node's function looked up once, not per value)."""
        pos = {l: i for i, l in enumerate(leaves)}
        built = {}

        def build(node):
            if node in built:
                return built[node]
            if node in pos:
                k = pos[node]
                e = (lambda vals: vals[k])
            elif isinstance(node, ir.Const) or isinstance(node, ir.Full):
                c = node.value if isinstance(node, ir.Const) else node.inputs[0].value
                e = (lambda vals: c)
            else:
                subs = [build(i) for i in node.inputs]
                f = self.fn(node)

                def e(vals, subs=subs, f=f):
                    args = [s(vals) for s in subs]
                    if any(a is None for a in args):
                        return None
                    return f(*args)
            built[node] = e
            return e
        top = build(m)
        return lambda *vals: top(vals)
