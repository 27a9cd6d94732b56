"""Digit codes: equality of wide numbers by their digits in one base,
either one-hot digits (digit_select) or two small numbers with their
squares (number_digit_select)."""
from __future__ import annotations

import numpy as np

from .. import attn as A
from .. import mlp as M
from ..basis import NOTBOS, Cat, Num, lin_add
from .base import CrafterBase


class DigitsMixin(CrafterBase):
    def digit_select(self, sel, k, q):
        """Numeric equality of wide numbers (|value| > 362, where the quadratic
        score's float32 rounding would reach its margin): both sides written
        in one base B ~ sqrt(range), v - lo = B*a + r, each digit one-hot
        (about 2 sqrt(range) dims and 4 sqrt(range) units per side instead of
        range dims and 2 range units), and the head scores SEL per matching
        digit minus SEL (attn.score_rows).  Exact for every value in the
        range at L (beyond it the high digit's table holds its last value);
        ranges over 4096^2 values are a located refusal."""
        lo = int(np.floor(min(k.lo, q.lo)))
        span = int(np.ceil(max(k.hi, q.hi))) - lo
        base = int(np.ceil(np.sqrt(span + 1)))
        if base > self.ONEHOT_LIMIT:
            raise self.error(sel, f"the numbers compared by this select range over {span + 1} values at "
                             f"length {self.L}; exact equality needs at most {self.ONEHOT_LIMIT ** 2} "
                             "(use a smaller --max-len)")
        return "digits", self.digits(sel.key, k, lo, base), self.digits(sel.query, q, lo, base)

    def number_digit_select(self, sel, k, q):
        """Numeric equality of wide numbers without one-hot codes: both sides
        written as v - lo = B*h + l with B ~ sqrt(2 range), h and l numbers
        with their squares, and the head scores SEL - EQ_GAP ((h_k - h_q)^2 +
        (l_k - l_q)^2) (attn.score_rows "number digits"): the quadratic score
        on numbers below sqrt(2 range) instead of the range itself.  Per side
        2 range / B units for h (and h^2, the same steps) and B for l^2; four
        residual dims and seven head rows instead of 2B one-hot dims."""
        lo = int(np.floor(min(k.lo, q.lo)))
        span = int(np.ceil(max(k.hi, q.hi))) - lo
        base = max(2, int(np.ceil(np.sqrt(2 * (span + 1)))))
        top = max(span // base, base - 1)
        if not A.numeric_eq_exact([top]):
            raise self.error(sel, f"the numbers compared by this select range over {span + 1} values at "
                             f"length {self.L}; exact equality needs at most {362 ** 2 // 2} "
                             "(use a smaller --max-len)")
        return "number digits", self.number_digits(sel.key, k, lo, base), self.number_digits(sel.query, q, lo, base)

    def number_digits(self, node, r, lo, base):
        """[h, l] (Nums with squares) of v - lo = base*h + l.  A one-hot value
        gives linear forms; a number one table of steps (flat around every
        integer) for h and h^2, then l = v - lo - base*h (linear) and a square
        table of l.  Built in the stage that computes the node; cached."""
        if isinstance(r, Cat):
            out = []
            for f in (lambda v: (v - lo) // base, lambda v: (v - lo) % base):
                vals = {v: f(v) for v in r.vals}
                out.append(Num(lin_add(*[(float(vals[v]), l) for v, l in r.vals.items()]),
                               min(vals.values()), max(vals.values()),
                               lin_add(*[(float(vals[v]) ** 2, l) for v, l in r.vals.items()])))
            return out
        def build():
            x, low_x, top = self.shifted_range(r, lo)
            h0 = low_x // base
            dh, dh2 = self.alloc("digit hi"), self.alloc("digit hi^2")
            units = []
            for t in range((h0 + 1) * base, top + 1, base):
                h = t // base
                units += M.step_units(x, t, {dh: 1.0, dh2: float(h * h - (h - 1) ** 2)})
            self.mlp(self.op_label("digit hi", node), units, {dh, dh2})
            high = Num(lin_add((float(h0), NOTBOS), {dh: 1.0}), h0, top // base,
                       lin_add((float(h0 * h0), NOTBOS), {dh2: 1.0}))
            low = Num(lin_add(x, (-float(base), high.numeric())), 0, base - 1)
            self.add_square(node, low)
            return [high, low]
        return self.in_node_stage(node, ("number digits", node, lo, base, r.lo, r.hi), build)

    @staticmethod
    def shifted_range(r, lo):
        """(form of v - lo, its least and largest integer value) of a number."""
        return lin_add(r.numeric(), (-float(lo), NOTBOS)), int(np.floor(r.lo)) - lo, int(np.ceil(r.hi)) - lo

    def digits(self, node, r, lo, base):
        """[high, low] digits of v - lo in base `base`, each a one-hot Cat.
        A one-hot value gives linear forms; a number one table of steps for
        the high digit (2 units per multiple of base), then one for the low
        digit r = (v - lo) - base * high (2 units per value).  Steps are flat
        around every integer, so float noise in v does not reach the score.
        Built in the stage that computes the node (a prelude value's digits
        are not recomputed at every loop iteration); cached."""
        if isinstance(r, Cat):
            out = []
            for f in (lambda v: (v - lo) // base, lambda v: (v - lo) % base):
                vals = {}
                for v, l in r.vals.items():
                    vals[f(v)] = lin_add(vals.get(f(v), {}), l)
                out.append(Cat(vals))
            return out
        def build():
            x, low_x, top = self.shifted_range(r, lo)
            fh = {t: t // base for t in range(low_x, top + 1)}
            high, units = M.table(x, low_x, top, fh, sorted(set(fh.values())), self.alloc)
            self.mlp(self.op_label("digit hi", node), units, self.unit_writes(units))
            rest = lin_add(x, (-float(base), high.numeric()))
            fl = {t: t for t in range(base)}
            low, units = M.table(rest, 0, base - 1, fl, list(range(base)), self.alloc)
            self.mlp(self.op_label("digit lo", node), units, self.unit_writes(units))
            return [high, low]
        # (a narrowed rep of the node has its own)
        return self.in_node_stage(node, ("digits", node, lo, base, r.lo, r.hi), build)
