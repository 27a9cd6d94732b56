"""Element-wise maps: one-hot tables, token maps in the embedding, group
lookups, linear forms, tables of one numeric operand, comparisons of
sel_width values, and the conversions between numbers and one-hot codes."""
from __future__ import annotations

import numpy as np

from rasp import ir

from .. import groups as G
from .. import mlp as M
from ..basis import NOTBOS, Cat, Num, lin_add, lin_scale
from ..ops import Unit
from .base import CrafterBase

COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}


class MapsMixin(CrafterBase):
    def plan_embedded_maps(self) -> set:
        """Token maps (one-hot maps of the input alone) the embedding writes
        into dims of their own, when the input is read only through them and
        their values are fewer than its tokens: then the input's one-hot dims
        are read by nothing after the embedding and are dropped, and a loop
        that starts from such a map carries (and cancels) one dim per value
        instead of one per token (words_mixed: 64 instead of 240)."""
        inp = self.ir.input
        users = list(self.pg.g.successors(inp)) if inp in self.pg.g else []
        loop_ends = {x for v in (self.pg.loop_vars() if self.pg.loop is not None else ())
                     for x in (v.init, v.update)}
        gate = {self.gate.value, self.gate.done, self.gate.shifted} if self.gate is not None else set()
        if not users or inp is self.ir.output or inp in loop_ends | gate:
            return set()
        for u in users:
            if not (isinstance(u, ir.Map) and u.kind == ir.SOP and self.pg.stage.get(u) == "pre"
                    and u not in self.absorbed and self.is_cat(u)
                    and all(i is inp or isinstance(i, ir.Const) for i in u.inputs)):
                return set()
        if sum(len(self.vals(u)) for u in users) >= len(self.ir.vocab):
            return set()
        return set(users)

    def embedded_map(self, node):
        """A token map as dims the embedding writes (plan_embedded_maps)."""
        same = self.one_operand(node)       # seq == seq: a map of the input alone too
        f, inputs = (same[1], (same[0],)) if same else (self.fn(node), node.inputs)
        rep, units = M.cat_map(f, [self.rep(i) for i in inputs], sorted(self.vals(node)), self.alloc)
        assert not units                  # one one-hot operand: linear forms
        out = {}
        for w, lin in rep.vals.items():
            dim = self.alloc(f"{self.ir.input_name}->{w}", False)
            self.embedded[dim] = lin
            out[w] = {dim: 1.0}
        return Cat(out)

    def build_map(self, node):
        if node in self.embedded_maps:
            return self.embedded_map(node)
        if node in self.fused and isinstance(self.fused[node][1], tuple):
            leaves, ((coef, const, lo, hi, hv), _, _) = self.fused[node]
            lin = lin_add((float(const), NOTBOS), *[(float(a), self.rep(l).numeric()) for l, a in coef.items()])
            x = Num(lin, lo, hi)
            want_cat = self.is_cat(node)
            rep, units = M.table(x.numeric(), lo, hi, hv, sorted(set(hv.values())) if want_cat else None,
                                 self.alloc, explicit=self.is_update(node))
            self.mlp(self.op_label(node.op, node) + " [linear+table]", units, self.unit_writes(units))
            return rep
        if node in self.fused:
            leaves, f = self.fused[node]
            args = [self.rep(l) for l in leaves]
            rep, units = M.cat_map(f, args, sorted(self.vals(node)), self.alloc, explicit=self.is_update(node))
            self.mlp(self.op_label(node.op, node) + " [fused]", units, self.unit_writes(units))
            return rep
        if any(isinstance(i, ir.Host) or (isinstance(i, ir.Map) and i.kind == ir.SCALAR) for i in node.inputs):
            raise self.error(node, f"{self.what(node)} uses a param/host value; a causal transformer "
                             "cannot compute it (params may only be loop counts)")
        inputs, f, op = node.inputs, self.fn(node), node.op
        same = self.one_operand(node)
        # a number plus or minus itself stays a linear form (2c, 0): no table
        if same is not None and not (op in ("add", "sub") and isinstance(self.rep(same[0]), Num)):
            (x, f), op = same, "map"          # f(x, x): a map of one operand, by the paths below
            inputs = (x,)
        args = [self.rep(i) for i in inputs]
        nonconst = [a for a in args if not isinstance(a, int)]
        out_vals = sorted(self.vals(node))
        want_cat = self.is_cat(node)
        if not nonconst:
            return Cat({f(*args): dict(NOTBOS)})
        if all(isinstance(a, Cat) for a in nonconst):
            if len(nonconst) == 1:
                rep, _ = M.cat_map(f, args, out_vals, self.alloc)
                return rep if want_cat else self.as_num(node, rep)
            if op in ("add", "sub", "neg") and not want_cat:
                return self.linear(node, args)
            if op == "where" and isinstance(args[0], Cat) and not want_cat:
                # a number (see is_cat): one unit per branch, not one per value
                x, y = [a if isinstance(a, int) else self.as_num(node, a) for a in args[1:]]
                rep, units = M.num_where(args[0], x, y, out_vals[0], out_vals[-1], self.alloc)
            elif op == "where" and isinstance(args[0], Cat):
                rep, units = M.cat_where(args[0], args[1], args[2], out_vals, self.alloc)
            else:
                if not want_cat and not self.fixed_set(node):
                    raise self.error(node, f"the values of {self.what(node)} depend on the input length; "
                                     f"'{op}' of them cannot be computed exactly")
                if want_cat and self.group_lookup(node, args, out_vals):
                    return self.reps_group
                rep, units = M.cat_map(f, args, out_vals, self.alloc, explicit=self.is_update(node))
                if not want_cat:        # a number (see is_cat): the one-hot's value form
                    rep = self.as_num(node, rep)
            self.mlp(self.op_label(op, node), units, self.unit_writes(units))
            return rep
        # some operand is numeric
        if op in ("add", "sub", "neg") or (op == "mul" and len(nonconst) == 1):
            rep = self.linear(node, args)
            return self.to_cat(node, rep) if want_cat else rep
        if op == "where":
            c = args[0]
            if not isinstance(c, Cat):
                c = self.to_cat(node, c, f=lambda v: int(v != 0), vals=[0, 1])
            x, y = args[1], args[2]
            if want_cat and all(isinstance(b, (Cat, int)) for b in (x, y)):
                rep, units = M.cat_where(c, x, y, out_vals, self.alloc)
            else:
                rep, units = M.num_where(c, x, y, min(out_vals), max(out_vals), self.alloc)
            self.mlp(self.op_label("where", node), units, self.unit_writes(units))
            return self.to_cat(node, rep) if want_cat and isinstance(rep, Num) else rep
        if len(nonconst) == 1:
            i = next(i for i, a in enumerate(args) if not isinstance(a, int))
            x = args[i]

            def g(v):
                a = list(args)
                a[i] = v
                return f(*a)
            # steps only between the values the operand can take (its value set at L)
            return self.tabulate(node, x, g, want_cat, points=sorted(self.vals(inputs[i])))
        if op in ("lt", "le", "gt", "ge") and set(out_vals) == {0, 1} and self.compare_widths_exact() \
                and all(i in self.width_raw and self.pg.stage.get(i) == self.stage for i in node.inputs):
            return self.compare_widths(node, op, want_cat)
        if op in COMPARE and len(nonconst) == 2:
            a, b = args
            d = Num(lin_add(a.numeric(), (-1.0, b.numeric())), a.lo - b.hi, a.hi - b.lo)
            return self.tabulate(node, d, lambda v: f(v, 0), want_cat)
        if len(nonconst) == 2 and sum(isinstance(a, Cat) for a in nonconst) == 1:
            rep = self.cat_times_num(node, args, f)
            if rep is not None:
                return self.to_cat(node, rep) if want_cat else rep
        if op in ("min", "max") and len(nonconst) == 2:
            a, b = args
            dim = self.alloc(op)
            sign = 1.0 if op == "max" else -1.0
            # max(a,b) = b + relu(a - b);  min(a,b) = a - relu(a - b)
            units = [Unit(lin_add(a.numeric(), (-1.0, b.numeric())), 0.0, {dim: 1.0})]
            self.mlp(self.op_label(op, node), units, {dim})
            base = b.numeric() if op == "max" else a.numeric()
            rep = Num(lin_add(base, (sign, {dim: 1.0})), min(out_vals), max(out_vals))
            return self.to_cat(node, rep) if want_cat else rep
        raise self.error(node, f"'{op}' on numeric (length-dependent) values of {self.what(node)} has no "
                         "exact compilation; only +, -, comparisons, min/max, where and one-operand "
                         "tables are supported")

    def group_lookup(self, node, args, out_vals) -> bool:
        """A lookup in a group's multiplication table (compiler/groups.py) as
        the product of the elements' permutations, two MLP layers
        (mlp.group_map), where that takes fewer units than the one-hot table
        in two layers as in one; leaves the rep in self.reps_group."""
        if not (isinstance(node, ir.Lookup) and len(args) == 2 and all(isinstance(a, Cat) for a in args)
                and len(node.table.shape) == 2):
            return False
        action = G.group_action(node.table.rows)
        if action is None or any(not 0 <= v < len(action.images) for a in args for v in a.vals):
            return False
        steps = len(M.group_steps(args[0].vals, args[1].vals, action))
        # the one-hot table: a step per output of each row (or column) but one;
        # a group's rows and columns hold distinct values (a Latin square)
        small, large = sorted(len(a.vals) for a in args)
        if 2 * 2 * max(steps, len(out_vals)) >= 2 * small * (large - 1):
            return False
        rep, first, second = M.group_map(args[0], args[1], action, out_vals, self.alloc,
                                         explicit=self.is_update(node))
        self.mlp(self.op_label("lookup", node) + " [group: point images]", first, self.unit_writes(first))
        self.mlp(self.op_label("lookup", node) + " [group: product]", second, self.unit_writes(second))
        self.reps_group = rep
        return True

    def cat_times_num(self, node, args, f):
        """f(cat c, number x) that is affine in x for every value of c (e.g.
        x * flag, x + bit, x - 2*c): one unit per value of c with a slope."""
        ic = next(i for i, a in enumerate(args) if isinstance(a, Cat))
        ix = next(i for i, a in enumerate(args) if isinstance(a, Num))
        c, x = args[ic], args[ix]
        lo, hi = int(np.floor(x.lo)), int(np.ceil(x.hi))

        def g(v, t):
            a = list(args)
            a[ic], a[ix] = v, t
            return f(*a)
        pieces = {}
        for v in c.vals:
            ys = [g(v, t) for t in range(lo, hi + 1)]
            if any(y is None for y in ys):
                return None
            slope = ys[1] - ys[0] if len(ys) > 1 else 0
            if any(y != ys[0] + slope * k for k, y in enumerate(ys)):
                return None
            pieces[v] = (slope, ys[0])
        dim = self.alloc(node.op)
        r = hi - lo + 1.0
        units, free = [], {}
        for v, (slope, base) in pieces.items():
            ind = c.vals[v]
            free = lin_add(free, (float(base), ind))          # value at x = lo
            if slope:
                # ind * (x - lo) = relu((x - lo) - r * (1 - ind))
                units.append(Unit(lin_add(x.numeric(), (r, ind)), -lo - r, {dim: float(slope)}))
        self.mlp(self.op_label(node.op, node), units, {dim})
        vals = sorted(self.vals(node))
        return Num(lin_add(free, {dim: 1.0}), vals[0], vals[-1])

    def compare_widths_exact(self) -> bool:
        """Whether two sel_width heads' BOS shares a = 1/(w+1) (0 <= w <= L)
        order their widths through one sharp step on x = K (a1 - a2), K =
        (L+1)(L+2).  Exact values: for w1 < w2, a1 - a2 = (w2 - w1) /
        ((w1+1)(w2+1)) >= 1/(L(L+1)) > 1/K, so x > 1; equal widths give 0.
        Float32: each share is a softmax of equal scores (BOS and the w keys;
        unselected keys at least 40 logits lower leak below 1e-15) over a sum
        of w + 1 ones, a few ulps of a <= 1; the step's input rounds K a1 and
        K a2 to an ulp of K each.  All of it is within 8 ulps (8 * 2^-23) of
        each share times K, which must stay below the step's 0.25 margin (0 at
        x <= 0.25, 1 at x >= 0.75): kept below 0.1, L <= 322 (--max-len 80).
        Longer designs decode each width instead."""
        return 8 * 2.0 ** -23 * (self.L + 1) * (self.L + 2) <= 0.1

    def compare_widths(self, node, op, want_cat):
        """w1 < w2 (and >, <=, >=) for two sel_width values, from their heads'
        raw shares (one step, 2 units) instead of decoding each width (L units
        each; a decoder nothing else reads is dropped, drop_unread)."""
        a1, a2 = (self.width_raw[i] for i in node.inputs)
        K = float((self.L + 1) * (self.L + 2))
        # lt: a1 > a2; ge = not lt; gt: a2 > a1; le = not gt
        big, small = (a1, a2) if op in ("lt", "ge") else (a2, a1)
        x = lin_add({big: K}, (-K, {small: 1.0}))        # 0 when both are one node
        dim = self.alloc(f"{op} of widths", False)
        units = M.step_units(x, 1.0, {dim: 1.0})
        self.mlp(self.op_label(f"{op} of widths", node), units, {dim})
        strict = {dim: 1.0}
        rest = lin_add(NOTBOS, (-1.0, strict))
        rep = Cat({1: strict, 0: rest}) if op in ("lt", "gt") else Cat({1: rest, 0: strict})
        return rep if want_cat else self.as_num(node, rep)

    def is_update(self, node):
        return self.stage == "body" and any(v.update is node for v in self.pg.loop_vars())

    def linear(self, node, args):
        """add/sub/neg/mul-by-const: a linear form, no layer needed."""
        op = node.op
        forms = [a if isinstance(a, int) else a for a in args]
        vals = sorted(self.vals(node))

        def num(a):
            return lin_scale(NOTBOS, float(a)) if isinstance(a, int) else a.numeric()
        if op == "neg":
            lin = lin_scale(num(forms[0]), -1.0)
        elif op == "add":
            lin = lin_add(num(forms[0]), num(forms[1]))
        elif op == "sub":
            lin = lin_add(num(forms[0]), (-1.0, num(forms[1])))
        else:
            c = next(a for a in forms if isinstance(a, int))
            lin = lin_scale(num(next(a for a in forms if not isinstance(a, int))), float(c))
        rep = Num(lin, min(vals), max(vals))
        nonconst = [a for a in forms if not isinstance(a, int)]
        if len(nonconst) == 1:
            x = nonconst[0]
            c = next((a for a in forms if isinstance(a, int)), 0)
            # rep = scale * x + off
            scale, off = (c, 0) if op == "mul" else (-1, 0) if op == "neg" else (1, c) if op == "add" \
                else (1, -c) if forms[0] is x else (-1, c)
            if x.square() is not None:
                rep.sq = lin_add((float(scale * scale), x.square()), (2.0 * scale * off, x.numeric()),
                                 (float(off * off), NOTBOS))
                aff = getattr(x, "affine", None)
                if aff is not None:
                    rep.affine = (aff[0] * scale, aff[1] * scale + off)
            if getattr(x, "rot", None) is not None and op != "mul":
                rep.rot = self.rotated(x.rot, scale, off)
        return rep

    def as_num(self, node, cat: Cat):
        vals = sorted(cat.vals)
        return Num(cat.numeric(), vals[0], vals[-1], cat.square())

    def tabulate(self, node, x, g, want_cat, points=None):
        """One-operand function of a numeric value, by a table over its range
        (or over `points`, the values it can take, when they are fewer)."""
        lo, hi = int(np.floor(x.lo)), int(np.ceil(x.hi))
        if points is not None and len(points) >= hi - lo + 1:
            points = None
        if (len(points) if points is not None else hi - lo) > 20000:
            raise self.error(node, f"the operand of {self.what(node)} ranges over {hi - lo} values; too many "
                             "to tabulate")
        fvals, last = {}, 0
        for v in (points if points is not None else range(lo, hi + 1)):
            r = g(v)
            fvals[v] = last = r if r is not None else last
        out_vals = sorted(set(fvals.values()))
        if want_cat and len(out_vals) > self.ONEHOT_LIMIT + 1:
            # each value is a residual dim and two units: tens of thousands of them make
            # weights of gigabytes, so this is refused instead of built
            raise self.error(node, f"{self.what(node)} takes {len(out_vals)} different values at length "
                             f"{self.L}, too many for a one-hot table (at most {self.ONEHOT_LIMIT + 1}: one "
                             "residual dim each); use a smaller value range or a smaller --max-len")
        rep, units = M.table(x.numeric(), lo, hi, fvals, out_vals if want_cat else None, self.alloc,
                             explicit=self.is_update(node), points=points)
        self.mlp(self.op_label(node.label(), node), units, self.unit_writes(units))
        return rep

    def to_cat(self, node, rep, f=None, vals=None):
        """A numeric rep -> one-hot.  Without `f`, `rep` is node's own value, so
        the table needs steps only between the values node can take at L."""
        if isinstance(rep, Cat):
            return rep
        points = sorted(self.vals(node)) if f is None else None
        f = f or (lambda v: v)
        return self.tabulate(node, rep, f, True, points=points)

    def add_square(self, node, r: Num, points=None):
        """r.sq by a table: one unit per integer of r's range, or, where
        `points` (the values r can take) are fewer, one step per point."""
        lo, hi = int(np.floor(r.lo)), int(np.ceil(r.hi))
        if points is not None and 2 * (len(points) - 1) < hi - lo:
            sq, units = M.table(r.numeric(), lo, hi, {v: v * v for v in points}, None, self.alloc,
                                points=points)
            sq = sq.lin
        else:
            sq, units = M.square_table(r.numeric(), lo, hi, self.alloc)
        self.mlp(self.op_label("square", node), units, self.unit_writes(units))
        r.sq = sq
