"""Rotary position codes: (cos, sin) of 2 pi v / P for positions and values
+-index + b, so equality selects between them stay exact past the quadratic
score's range (attn.rot_eq_exact)."""
from __future__ import annotations

import numpy as np

from .. import attn as A
from ..basis import Num, lin_add, lin_scale
from .base import CrafterBase


class RotaryMixin(CrafterBase):
    ROT_OFFSETS = 64         # the rotary period is L + this: offsets up to it from a position

    @property
    def rot_period(self) -> int:
        return self.L + self.ROT_OFFSETS

    def rot_wanted(self) -> bool:
        """Positions are compared by rotary codes where the quadratic score is
        not exact at this length and the rotary score is (attn.rot_eq_exact)."""
        return not self.FORCE_DIGITS and (self.FORCE_ROT or not A.numeric_eq_exact([self.L])) \
            and A.rot_eq_exact(self.rot_period)

    def index_rot(self) -> tuple:
        """(cos, sin) forms of 2 pi i / P: two position features of the
        embedding (model.looped.position_feature), allocated on first use."""
        if self.rot_dims is None:
            self.rot_dims = (self.res.new("index_cos", "pre", True), self.res.new("index_sin", "pre", True))
        return {self.rot_dims[0]: 1.0}, {self.rot_dims[1]: 1.0}

    def rot_point(self, v) -> tuple:
        """(cos, sin) of 2 pi v / P."""
        a = 2.0 * np.pi * float(v) / self.rot_period
        return float(np.cos(a)), float(np.sin(a))

    def rotated(self, rot, sign: int, offset) -> tuple:
        """The rot of sign * v + offset from the rot of v (sign +-1): a rotation,
        linear in the forms; its range moves with the value."""
        c, s_, lo, hi = rot
        ca, sa = self.rot_point(offset)
        s_ = lin_scale(s_, float(sign))
        lo, hi = sorted((sign * lo + offset, sign * hi + offset))
        return lin_add((ca, c), (-sa, s_)), lin_add((ca, s_), (sa, c)), lo, hi

    def rot_of(self, r):
        """r's rot: its own (a head's copy of a key's, see build_aggregate_kind)
        or, for a value +-index + b, the index's rotated; None where positions
        are not compared this way at this length."""
        if not isinstance(r, Num) or not self.rot_wanted():
            return None
        if r.rot is not None:
            return r.rot
        aff = r.affine
        if aff is not None and aff[0] in (1, -1):
            c, s_ = self.index_rot()
            return self.rotated((c, s_, 0, self.L - 1), int(aff[0]), aff[1])
        return None

    def rot_pair(self, k, q):
        """("rot", key forms, query forms) for k == q by rotary codes, or None:
        both sides need rot, differences on the circle below the period, and a
        side's values off the circle (a default outside its positions) must
        equal nothing on the other side."""
        rk, rq = self.rot_of(k), self.rot_of(q)
        if rk is None or rq is None:
            return None
        if max(rk[3] - rq[2], rq[3] - rk[2]) >= self.rot_period:
            return None
        for r, rr, o in ((k, rk, q), (q, rq, k)):
            off = [(r.lo, rr[2] - 1), (rr[3] + 1, r.hi)]
            if any(a <= b and a <= o.hi and o.lo <= b for a, b in off):
                return None
        return "rot", rk[:2], rq[:2] + (A.rot_scale(self.rot_period),)

    def rot_value_rows(self, v, default):
        """Value rows copying a key's rot through a head that returns one key's
        value: (rows, BOS values, (lo, hi)); the default is off the circle
        (0, 0) where it lies outside the values' range."""
        rot = self.rot_of(v)
        if rot is None:
            return None
        lo, hi = rot[2], rot[3]
        bos = list(self.rot_point(default)) if lo <= default <= hi else [0.0, 0.0]
        return [rot[0], rot[1]], bos, (lo, hi)
