"""Selects: which kind of score a select's head uses (one-hot codes, the
quadratic score, rotary or digit codes, a lag, always/never), and the
narrowing of numeric sides (clamps, or extra rows of an aggregate's head)
that keeps a score exact."""
from __future__ import annotations

import numpy as np

from rasp import ir

from .. import attn as A
from ..basis import IDX, IDX2, NOTBOS, Cat, Num, lin_add
from ..ops import Unit
from ..values import unique_key
from .base import CrafterBase


class SelectsMixin(CrafterBase):
    def select_kind(self, sel, agg_node):
        k, q = self.rep(sel.key), self.rep(sel.query)
        if sel.pred == "always":
            return "always", k, q
        if isinstance(k, Cat) and isinstance(q, Cat):
            return "cat", k, q
        several = isinstance(agg_node, ir.Aggregate) and agg_node.reduction in ("max", "min") \
            and not unique_key(sel) and len(self.vals(agg_node.value)) > 1
        if sel.pred == "eq" and several:
            # the quadratic score cannot also rank keys in float32 at length L:
            # compare one-hot codes of both sides instead (a table each), over
            # the range where the sides can meet; digits once that is wide
            k, q = self.narrowed(sel, k, q, square=False)
            if self.FORCE_DIGITS or self.span(k, q) + 1 > self.DIGITS_ABOVE:
                return self.digit_select(sel, k, q)
            return "cat", self.onehot(sel.key, k), self.onehot(sel.query, q)
        quadratic = sel.pred == "eq" and A.numeric_eq_exact(self.magnitudes(k, q))
        if sel.pred == "eq" and (self.FORCE_ROT or not quadratic):
            rot = self.rot_pair(k, q)
            if rot is not None:
                return rot
        if sel.pred == "eq" and not self.FORCE_DIGITS and not quadratic:
            k, q = self.narrowed(sel, k, q, square=True)
        if sel.pred == "eq" and (self.FORCE_DIGITS or not A.numeric_eq_exact(self.magnitudes(k, q))):
            # the quadratic score's float32 rounding would reach the selection
            # margin: compare two small digits of each side instead, as numbers
            return self.number_digit_select(sel, k, q)
        if sel.pred == "eq":
            for side, r in ((sel.key, k), (sel.query, q)):
                if r.square() is None:        # e.g. a loop variable: square it here, by a table
                    self.add_square(side, r)
            return "num", k, q
        ka, qa = getattr(k, "affine", None), getattr(q, "affine", None)
        if ka and qa and ka[0] == qa[0] and ka[0] != 0:
            # pred(a*j + b1, a*i + b2) for the keys j <= i: an order between
            # integers depends on key - query = (b1 - b2) - a d alone, d = i - j,
            # so one pass over every distance the design length allows decides
            # it (checking small distances only took `indices + 60 >= indices`
            # for always true: wrong past 60)
            test = A.PREDS[sel.pred]
            a, c = ka[0], ka[1] - qa[1]
            holds = [bool(test(c - a * d, 0)) for d in range(self.L)]
            if all(holds):
                return "always", k, q
            if not any(holds):
                return "never", k, q
            # selected exactly when j <= i - t (t >= 1): a prefix ending t positions back
            t = holds.index(True)
            if t <= 32 and all(holds[t:]):
                # a width needs no shift head (a table of the index); an aggregate
                # whose shift head is not exact at this length takes the general path
                counted = isinstance(agg_node, ir.SelWidth)
                head = None if counted else self.shift_head(t)
                if counted or head is not None:
                    return ("lag", t, head), k, q
        counted = isinstance(agg_node, ir.SelWidth)
        if (several or counted) and sel.pred in ("lt", "le", "gt", "ge") \
                and (self.FORCE_DIGITS or self.span(k, q) + 1 > self.DIGITS_ABOVE):
            # max/min over (or the width of) an order select of wide numbers:
            # two heads on digits (build_order_digits, build_selwidth)
            _, kd, qd = self.digit_select(sel, k, q)
            return ("order digits",), kd, qd
        # order (and ne) predicates between numbers: a 0/1 table between one-hot codes
        return "cat", self.onehot(sel.key, k), self.onehot(sel.query, q)

    DIGITS_ABOVE = 64        # a many-match max/min select compares digits beyond this range

    @staticmethod
    def magnitudes(*reps):
        return [max(abs(r.lo), abs(r.hi)) for r in reps]

    @staticmethod
    def span(k, q):
        return int(np.ceil(max(k.hi, q.hi))) - int(np.floor(min(k.lo, q.lo)))

    def narrowed(self, sel, k, q, square):
        """(k, q) for an equality select, each numeric side clamped to
        [m - 1, M + 1], [m, M] the range both sides can take (by two ReLUs,
        `clamped`).  Exact: equal values lie in [m, M], where nothing is
        clamped; a side clamped to m - 1 was below m, so it could not equal
        the other side before (that side is >= m when it is the one that
        starts at m, and then it is never m - 1) nor after; the same at M + 1.
        Unchanged when the ranges do not meet (nothing is ever selected)."""
        m = int(np.ceil(max(k.lo, q.lo)))
        M = int(np.floor(min(k.hi, q.hi)))
        if m > M:
            return k, q
        out = []
        for node, r in ((sel.key, k), (sel.query, q)):
            if square and A.numeric_eq_exact(self.magnitudes(r)):
                pass                # the quadratic score takes this side as it is
            elif isinstance(r, Num) and (r.lo < m - 1 or r.hi > M + 1):
                r = self.clamped(node, r, m - 1, M + 1, square)
            out.append(r)
        return tuple(out)

    def clamped(self, node, r, a, b, square):
        """min(max(r, a), b) = a + relu(r - a) - relu(r - b): two units (and,
        with `square`, the square table of a quadratic equality score when the
        clamped range allows one), or the aggregate's own head where it can
        (clamped_by_head); built in the stage that computes the node, cached
        by node, stage and range."""
        stage = self.pg.stage.get(node, self.stage)

        def build():
            by_head = self.clamped_by_head(node, r, a, b, square, stage)
            if by_head is not None:
                return by_head
            x = r.numeric()
            dim = self.alloc(f"clamp {a}..{b}")
            units = [Unit(x, -float(a), {dim: 1.0}), Unit(x, -float(b), {dim: -1.0})]
            self.mlp(self.op_label("clamp", node), units, {dim})
            out = Num(lin_add({dim: 1.0}, (float(a), NOTBOS)), a, b)
            if square and A.numeric_eq_exact(self.magnitudes(out)):
                self.add_square(node, out)
            return out
        return self.in_node_stage(node, ("clamp", node, a, b, square), build)

    def clamped_by_head(self, node, r, a, b, square, stage):
        """For `clamped`: agg + c, an aggregate that returns one key's value
        (max/min, or a unique key), narrowed by two more value rows of its own
        head instead of two ReLUs and a square table: agg + c (a one-hot
        value: clamp(value + c, a, b)) and its square, with clamp(default + c,
        a, b) and its square at BOS.  Values at keys keep their place outside
        [a, b] (the range may grow a little past it): as with the clamp, a
        value below a + 1 (above b - 1) can equal nothing on the other side.
        None where this does not apply."""
        c = 0
        while isinstance(node, ir.Map) and node.op in ("add", "sub") and node not in self.value_heads:
            consts = [i for i in node.inputs if isinstance(i, ir.Const)]
            if len(consts) != 1 or (node.op == "sub" and node.inputs[1] is not consts[0]):
                return None
            c += consts[0].value if node.op == "add" else -consts[0].value
            node = next(i for i in node.inputs if not isinstance(i, ir.Const))
        if node not in self.value_heads:
            return None
        op, v, default = self.value_heads[node]
        if op.stage != stage:
            return None
        agg = self.reps[node]
        if lin_add(agg.numeric(), (float(c), NOTBOS)) != r.numeric():
            return None
        d = min(max(default + c, a), b)
        if isinstance(v, Cat):
            # each one-hot value's row weight is its own clamped value (values
            # that clamp alike share it: a sum over the code, no dict of values)
            at = {w: min(max(w + c, a), b) for w in v.vals}
            lo, hi = min(min(at.values()), d), max(max(at.values()), d)
            value = lin_add(*[(float(at[w]), l) for w, l in v.vals.items()])
            sq = lin_add(*[(float(at[w]) ** 2, l) for w, l in v.vals.items()])
        else:
            lo, hi = min(v.lo + c, a), max(v.hi + c, b)
            value = lin_add(v.numeric(), (float(c), NOTBOS))
            sq = None if v.square() is None else \
                lin_add(v.square(), (2.0 * c, v.numeric()), (float(c * c), NOTBOS))
        if square and (sq is None or not A.numeric_eq_exact([max(abs(lo), abs(hi))])):
            return None
        rows = [(value, float(d), "clamp")] + ([(sq, float(d * d), "clamp^2")] if square else [])
        dims = []
        stage, self.stage = self.stage, op.stage
        try:
            for row, bos, name in rows:
                dims.append(self.alloc(f"{op.label} {name}"))
                op.v.append(row)
                op.v_bos.append(bos)
                op.o.append({dims[-1]: 1.0})
                self.writer[dims[-1]] = op
        finally:
            self.stage = stage
        op.writes = sorted(set(op.writes) | set(dims))
        return Num({dims[0]: 1.0}, lo, hi, {dims[1]: 1.0} if len(dims) > 1 else None)

    def onehot(self, node, r):
        """A numeric s-op as a one-hot code over its range at the design length
        (one table; cached per stage).  Exact for inputs up to L; beyond L the
        table holds its last value."""
        if isinstance(r, Cat):
            return r
        lo, hi = int(np.floor(r.lo)), int(np.ceil(r.hi))
        key = (node, self.stage, lo, hi)      # (a narrowed rep of the node has its own code)
        if key not in self.onehots:
            if hi - lo > self.ONEHOT_LIMIT:
                raise self.error(node, f"{self.what(node)} ranges over {hi - lo + 1} values at length "
                                 f"{self.L}; a select comparing it with another number needs a one-hot "
                                 f"code of at most {self.ONEHOT_LIMIT + 1} values")
            self.onehots[key] = self.tabulate(node, r, lambda v: v, True)
        return self.onehots[key]

    def shift_head(self, t):
        """(kind, key, query) of the head selecting the key t positions back:
        the quadratic score while it is exact, else rotary codes; None where
        neither is exact at this length (select_kind then takes the general path)."""
        key = Num(lin_add({IDX: 1.0}, (float(t), NOTBOS)), t, self.L - 1 + t,
                  lin_add({IDX2: 1.0}, (2.0 * t, {IDX: 1.0}), (float(t * t), NOTBOS)), (1, t))
        q = self.reps_indices()
        if self.FORCE_ROT or not A.numeric_eq_exact(self.magnitudes(key, q)):
            return self.rot_pair(key, q)
        return "num", key, q
