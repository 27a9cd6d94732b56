"""Aggregates and sel_width: the heads that read the selected keys' values
(one key's value, max/min by rank, means, lags, digit-split order selects)
and the MLPs that decode widths and truncate means."""
from __future__ import annotations

import numpy as np

from rasp import ir

from .. import attn as A
from .. import mean as MEAN
from .. import mlp as M
from ..basis import NOTBOS, Cat, Num, lin_add, lin_scale
from ..ops import Unit
from ..values import unique_key
from .base import CrafterBase


class AggregatesMixin(CrafterBase):
    def default_of(self, node):
        d = node.default
        if isinstance(d, ir.Const):
            return d.value
        if isinstance(d, ir.Full) and isinstance(d.inputs[0], ir.Const):
            return d.inputs[0].value
        raise self.error(node, "the default of an aggregate must be a constant for the compiler")

    def lagged(self, node, head, prefix_rep, default, label):
        """value at i = prefix_rep at i - t (default for i < t): one shift head
        (shift_head(t): its kind, key and query)."""
        kind, key, q = head
        out_vals = sorted(self.vals(node))
        if isinstance(prefix_rep, Cat):
            dims, rows, bos, outs = {}, [], [], []
            for w in out_vals:
                dims[w] = self.alloc(f"={w}", False)
                rows.append(prefix_rep.vals.get(w, {}))
                bos.append(1.0 if w == default else 0.0)
                outs.append({dims[w]: 1.0})
            self.attn(label + " (lag)", A.head(kind, key, q, "eq", rows, bos), outs)
            return Cat({w: {d: 1.0} for w, d in dims.items()})
        dim = self.alloc(label + " lag")
        self.attn(label + " (lag)", A.head(kind, key, q, "eq", [prefix_rep.numeric()], [float(default)]),
                  [{dim: 1.0}])
        return Num({dim: 1.0}, min(out_vals), max(out_vals))

    def build_aggregate(self, node):
        sel, red = node.selector, node.reduction
        kind, k, q = self.select_kind(sel, node)
        if kind == "never":              # no key is ever selected: the default everywhere
            d = self.default_of(node)
            return Cat({d: dict(NOTBOS)}) if self.is_cat(node) else Num(lin_scale(NOTBOS, float(d)), d, d)
        if kind == ("order digits",):
            return self.build_order_digits(node, k, q)
        if isinstance(kind, tuple):          # lag t: aggregate the prefix, then shift by t
            prefix = self.build_aggregate_kind(node, "always", k, q)
            self.value_heads.pop(node, None)     # that head returns the prefix, not the node
            rep = self.lagged(node, kind[2], prefix, self.default_of(node), self.op_label(red, node))
            return self.to_cat(node, rep) if self.is_cat(node) and isinstance(rep, Num) else rep
        return self.build_aggregate_kind(node, kind, k, q)

    def build_order_digits(self, node, k, q):
        """max/min of the values at keys where pred(key, query), pred an order,
        the numbers written as [high, low] digits of one base (order kept:
        a < b iff high(a) < high(b), or the highs are equal and low(a) <
        low(b)).  The keys split into two disjoint sets, each one head with
        the usual 0/1 score and rank term: equal high digits and pred on the
        low ones ("digit_same"), and the strict pred on the high digits
        ("digit_beyond").  Each head also returns whether it found a key (a
        row of ones, 0 at BOS) and, when it found none, the value neutral for
        the reduction; then max/min of the two (one ReLU) and the default
        where neither found one.  About 2 sqrt(range) dims per side instead
        of a one-hot code of the whole range."""
        sel, red = node.selector, node.reduction
        v, default, out_vals, label = self.aggregate_parts(node)
        sign = 1.0 if red == "max" else -1.0
        rank, span = self.rank_of(v, red)
        neutral = float(v.lo if red == "max" else v.hi)
        found, best = [], []
        for part in ("digit_same", "digit_beyond"):
            r, f = self.alloc(f"{label} {part}"), self.alloc(f"{label} {part} found", False)
            self.attn(f"{label} ({part})", A.head(part, k, q, sel.pred, [v.numeric(), dict(NOTBOS)],
                                                  [neutral, 0.0], rank, span), [{r: 1.0}, {f: 1.0}])
            found.append({f: 1.0})
            best.append({r: 1.0})
        # max(a, b) = b + relu(a - b); min(a, b) = b - relu(b - a); any = [found1 + found2 >= 1]
        m, any_ = self.alloc(f"{label} {red}"), self.alloc(f"{label} any", False)
        units = [Unit(lin_scale(lin_add(best[0], (-1.0, best[1])), sign), 0.0, {m: 1.0})]
        units += M.step_units(lin_add(*found), 1.0, {any_: 1.0})
        self.mlp(self.op_label(f"{red} of two", node), units, {m, any_})
        both = Num(lin_add(best[1], (sign, {m: 1.0})), min(v.lo, neutral), max(v.hi, neutral))
        cond = Cat({1: {any_: 1.0}, 0: lin_add(NOTBOS, (-1.0, {any_: 1.0}))})
        rep, units = M.num_where(cond, both, default, min(out_vals), max(out_vals), self.alloc)
        self.mlp(self.op_label("where", node), units, self.unit_writes(units))
        return self.to_cat(node, rep) if self.is_cat(node) else rep

    def aggregate_parts(self, node):
        """(value rep, default, output values, label) of an aggregate."""
        v = self.rep(node.value)
        if isinstance(v, int):
            v = Cat({v: dict(NOTBOS)})
        return v, self.default_of(node), sorted(self.vals(node)), self.op_label(node.reduction, node)

    @staticmethod
    def rank_of(v, red):
        """(form ranking the values of v for max/min, its span): a one-hot
        value by its place in the order, a number by itself."""
        if isinstance(v, Cat):
            order = sorted(v.vals) if red == "max" else sorted(v.vals, reverse=True)
            return lin_add(*[(float(r), v.vals[w]) for r, w in enumerate(order)]), float(len(order) - 1)
        sign = 1.0 if red == "max" else -1.0
        base = v.lo if red == "max" else v.hi
        return lin_add((sign, v.numeric()), (-sign * base, {0: 1.0})), float(v.hi - v.lo)

    def build_aggregate_kind(self, node, kind, k, q):
        sel, red = node.selector, node.reduction
        v, default, out_vals, label = self.aggregate_parts(node)
        want_cat = self.is_cat(node)
        single = unique_key(sel) or len(getattr(v, "vals", {0: 0, 1: 1})) == 1
        if red == "mean" and not single:
            return self.general_mean(node, kind, k, q, v, default, out_vals, want_cat, label)
        rank, span = None, 0.0
        if red in ("max", "min") and not single:
            rank, span = self.rank_of(v, red)
        if isinstance(v, Cat) and want_cat:
            outs, rows, bos = [], [], []
            dims = {}
            for w in out_vals:
                dims[w] = self.alloc(f"={w}", False)
                rows.append(v.vals.get(w, {}))
                bos.append(1.0 if w == default else 0.0)
                outs.append({dims[w]: 1.0})
            self.attn(label, A.head(kind, k, q, sel.pred, rows, bos, rank, span), outs)
            return Cat({w: {d: 1.0} for w, d in dims.items()})
        vnum = v.numeric()
        dim = self.alloc(label)
        rows, bos, outs = [vnum], [float(default)], [{dim: 1.0}]
        rep = Num({dim: 1.0}, min(out_vals), max(out_vals))
        if node in self.need_sq and v.square() is not None:
            sdim = self.alloc(label + "^2")
            rows.append(v.square())
            bos.append(float(default) ** 2)
            outs.append({sdim: 1.0})
            rep.sq = {sdim: 1.0}
        rot = self.rot_value_rows(v, default) if node in self.need_sq else None
        if rot is not None:
            cdim, sdim = self.alloc(label + " cos"), self.alloc(label + " sin")
            rows += rot[0]
            bos += rot[1]
            outs += [{cdim: 1.0}, {sdim: 1.0}]
            rep.rot = ({cdim: 1.0}, {sdim: 1.0}) + rot[2]
        op = self.attn(label, A.head(kind, k, q, sel.pred, rows, bos, rank, span), outs)
        if not want_cat:
            self.value_heads[node] = (op, v, default)
        return self.to_cat(node, rep) if want_cat else rep

    def general_mean(self, node, kind, k, q, v, default, out_vals, want_cat, label):
        """Mean over several keys: the head averages the value (centred on
        the middle of its range), MLPs truncate toward zero exactly
        (`mean.py`: one MLP when float32 allows it, three otherwise, or a
        located refusal when the range x length is beyond float32)."""
        vals = sorted(set(getattr(v, "vals", {})) | {default}) if isinstance(v, Cat) else [v.lo, v.hi, default]
        lo, hi = int(np.floor(min(vals))), int(np.ceil(max(vals)))
        try:
            how, B = MEAN.plan(lo, hi, self.L, want_cat)
        except MEAN.MeanTooWide as e:
            raise self.error(node, f"the mean of {self.what(node)} cannot be compiled exactly: {e} "
                             "(use a smaller --max-len or a smaller value range)") from None
        c = float((lo + hi) // 2)
        raw = self.alloc(label + " raw")
        self.attn(label, A.head(kind, k, q, node.selector.pred, [lin_add(v.numeric(), (-c, NOTBOS))],
                                [float(default) - c]), [{raw: 1.0}])
        if how == "direct":
            rep, stages = MEAN.direct({raw: 1.0}, c, lo, hi, self.L, lambda t: t,
                                      out_vals if want_cat else None, self.alloc)
        else:
            rep, stages = MEAN.split({raw: 1.0}, c, lo, hi, self.L, B, self.alloc)
        for i, units in enumerate(stages):
            self.mlp(self.op_label("trunc" if len(stages) == 1 else f"trunc {i + 1}/3", node), units,
                     self.unit_writes(units))
        return self.to_cat(node, rep) if want_cat and not isinstance(rep, Cat) else rep

    def build_selwidth(self, node):
        sel = node.inputs[0]
        kind, k, q = self.select_kind(sel, node)
        if kind == "never":
            return Num({}, 0, 0, {})
        if isinstance(kind, tuple) and kind[0] == "lag":     # j <= i - t: max(0, i - t + 1), a table of the index
            t = kind[1]
            rep = self.tabulate(node, self.reps_indices(), lambda i: max(0, i - t + 1), False)
            return rep
        label = self.op_label("sel_width", node)
        if kind == ("order digits",):
            # the keys split into two disjoint sets (build_order_digits): the
            # width is the sum of the two heads' widths, each decoded
            widths = []
            for part in ("digit_same", "digit_beyond"):
                raw = self.alloc(f"width raw {part}")
                self.attn(f"{label} ({part})", A.head(part, k, q, sel.pred, [{}], [1.0], width=True),
                          [{raw: 1.0}])
                (w,), units = M.selwidth_decode(raw, self.L, [("num", lambda w: w)], self.alloc)
                self.mlp(f"decode {label} ({part})", units, self.unit_writes(units))
                widths.append(w.lin)
            vals = sorted(self.vals(node))
            return Num(lin_add(*widths), vals[0], vals[-1])
        raw = self.alloc("width raw")
        self.attn(label, A.head(kind, k, q, sel.pred, [{}], [1.0], width=True), [{raw: 1.0}])
        outputs = [("num", lambda w: w)]
        if node in self.need_sq:
            outputs.append(("num", lambda w: w * w))
        reps, units = M.selwidth_decode(raw, self.L, outputs, self.alloc)
        before = len(self.ops)
        self.mlp(f"decode {label}", units, self.unit_writes(units))
        self.width_raw[node] = raw
        self.droppable += self.ops[before:]
        rep = reps[0]
        if len(reps) > 1:
            rep.sq = reps[1].lin
        return rep
