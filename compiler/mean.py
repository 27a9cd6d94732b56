"""Exact `mean` over several keys: int(sum / w) from the head's real-valued
average, decoded by ReLU steps that float32 cannot get wrong.

Why it is exact.  The head averages integers in [lo, hi] over w <= L selected
keys, so the true mean m = S/w is an integer or lies at least 1/w >= 1/L away
from one.  trunc(m) changes only at the integers, so every decision "m >= k"
(k >= 1) or "m > k" (k <= -1) can be taken at a threshold eta = 1/(2L) inside
the gap next to k, with a ramp of half-width eta/2: a head error below
1/(4L) never changes the result.

What float32 costs.  The head is centred (it averages v - c, c the middle of
[lo, hi]) so its error is about eps * (hi - lo) / 2 (measured: 0.8 eps * |v|).
A step unit with slope 1/eta = 2L on a value of size V carries a rounding
error of about 3 eps * 2L * V; summing many such steps in one dim (the old
construction, one step per integer of [lo, hi]) lost whole units at
L * (hi - lo) ~ 2e5 (Tracr's frac_prevs at --max-len 48).  So:

* `direct` (one MLP): every step into one dim, used only when the summed
  rounding bound stays below 1/4;
* `split` (three MLPs): coarse steps every B integers, each into its own dim;
  a second MLP snaps them to exact 0/1 and writes the remainder
  r = |m| - B * coarse; a third takes B fine steps on r (small values, so
  small rounding), again one dim each.  trunc(m) = floor(m+) - floor(m-);
* beyond what `split` can hold (the bounds below), a located refusal.
"""
from __future__ import annotations

import math

from .basis import NOTBOS, Num, lin_add, lin_scale
from .mlp import OutCat, step_units
from .ops import Unit

EPS32 = 2.0 ** -23          # float32 spacing relative to the value
HEAD_ERR = 4.0              # head error <= HEAD_ERR * EPS32 * max|v - c| (measured 0.8)
TOL = 0.25                  # noise a later step / the unembedding tolerates on an integer


class MeanTooWide(Exception):
    """float32 cannot decode this mean exactly (the message says why)."""


def thresholds(lo: int, hi: int, eta: float) -> list:
    """(theta, from, to): trunc(m) goes from `from` to `to` as m passes theta."""
    out = [(k + eta, k, k + 1) for k in range(lo, 0) if k + 1 <= hi]
    out += [(k - eta, k - 1, k) for k in range(max(1, lo + 1), hi + 1)]
    return out


def ramp(x: dict, theta: float, s: float, coefs: dict, sign: float = 1.0, c: float = 0.0) -> list:
    """[sign * (x + c - theta) > 0] with a ramp of half-width 1/(2s): two
    units.  The constant c goes into the bias (units are off at BOS), so the
    large products s * c and s * theta cancel in float64 before float32."""
    inp = lin_scale(x, sign * s)
    b = sign * s * (c - theta)
    return [Unit(inp, b + 0.5, coefs), Unit(inp, b - 0.5, {d: -c for d, c in coefs.items()})]


def head_error(lo, hi) -> float:
    return HEAD_ERR * EPS32 * (hi - lo) / 2.0 + 1e-9


def plan(lo: int, hi: int, L: int, want_cat: bool) -> tuple:
    """('direct', None) or ('split', B); raises MeanTooWide."""
    eta = 1.0 / (2 * L)
    s = 1.0 / eta
    vc = (hi - lo) / 2.0 + 1.0                 # largest centred value (and threshold)
    if head_error(lo, hi) + 4 * EPS32 * max(abs(lo), abs(hi)) >= eta / 2:
        raise MeanTooWide(f"values in [{lo}, {hi}] averaged over up to {L} keys need the mean to "
                          f"{eta / 2:.2g}; float32 attention gives only about {head_error(lo, hi):.2g}")
    n = len(thresholds(lo, hi, eta))
    if n * 3 * EPS32 * s * vc < TOL / 2:
        return "direct", None
    if 3 * EPS32 * s * vc >= TOL:
        raise MeanTooWide(f"values in [{lo}, {hi}] averaged over up to {L} keys: a float32 step "
                          f"resolving 1/{2 * L} at that magnitude is off by "
                          f"{3 * EPS32 * s * vc:.2g} (>= {TOL})")
    B = max(2, min(int(math.ceil(math.sqrt(max(hi, -lo, 1)))),
                   int(math.sqrt(TOL / (2 * 3 * EPS32 * s)))))
    return "split", B


def direct(m: dict, c: float, lo: int, hi: int, L: int, fout, out_cat, alloc):
    """One MLP: a step at every threshold where fout(trunc(m + c)) changes
    (m: the centred head output's form)."""
    eta = 1.0 / (2 * L)
    units = []
    base = fout(lo)
    if out_cat is not None:
        out = OutCat(alloc, out_cat, explicit=True, signed=True)
        out.free[base] = dict(NOTBOS)
    else:
        dim = alloc("mean")
    for theta, a, b in thresholds(lo, hi, eta):
        fa, fb = fout(a), fout(b)
        if fa == fb:
            continue
        coefs = {out.dim(fb): 1.0, out.dim(fa): -1.0} if out_cat is not None else {dim: float(fb - fa)}
        units += ramp(m, theta, 1.0 / eta, coefs, c=c)
    if out_cat is not None:
        return out.rep(), [units]
    vals = [fout(v) for v in range(lo, hi + 1)]
    return Num(lin_add((float(base), NOTBOS), {dim: 1.0}), min(vals), max(vals)), [units]


def split(m: dict, c: float, lo: int, hi: int, L: int, B: int, alloc):
    """Three MLPs (see the module docstring); returns (Num, [units per MLP])."""
    eta = 1.0 / (2 * L)
    s = 1.0 / eta
    coarse, clean, fine = [], [], []
    c_dim = alloc("mean coarse")
    out = {c_dim: 1.0}
    for sign, top in ((1.0, max(hi, 0)), (-1.0, max(-lo, 0))):
        if top == 0:
            continue
        r_dim = alloc("mean rest")
        # |m| on this side: relu(sign * m); coarse steps at B, 2B, ... of it
        clean.append(Unit(lin_scale(m, sign), sign * c, {r_dim: 1.0}))
        for b in range(1, top // B + 1):          # so that the rest r = |m| - B * coarse < B
            g = alloc(f"mean >= {b * B}")
            coarse += ramp(m, sign * (b * B - eta), s, {g: 1.0}, sign, c)
            clean += step_units({g: 1.0}, 1.0, {c_dim: sign * B, r_dim: -float(B)})
        for j in range(1, min(B, top + 1)):
            f = alloc(f"mean rest >= {j}")
            fine += ramp({r_dim: 1.0}, j - eta, s, {f: 1.0})
            out[f] = sign
    return Num(out, lo, hi), [coarse, clean, fine]
