"""Exact MLP constructions (ReLU units over named residual forms).

* categorical maps of several one-hot inputs: one sharp step (two units) per
  (combination of the smaller inputs, output value) instead of one per input
  combination; the step is flat around 0 and 1, so float noise never grows
  from layer to layer or from one loop iteration to the next;
  a map of a single one-hot input is linear, so it needs no unit at all;
* `where` on one-hot branches: one unit per branch value;
* tables of a numeric input: two units per point where the function changes
  (a sharp step with a margin, so small float noise is harmless);
* the sel_width decoder: piecewise-linear interpolation through the points
  (1/(w+1), f(w)), one unit per knot, shared by every output read from it.
"""
from __future__ import annotations

import itertools

import numpy as np

from .basis import NOTBOS, Cat, Num, lin_add, lin_scale
from .ops import Unit


class OutCat:
    """Accumulates one-hot outputs: value -> dim, plus free (linear) parts."""

    def __init__(self, alloc, values, explicit=False, omit=None, signed=False):
        self.alloc, self.dims, self.free, self.signed = alloc, {}, {}, signed
        self.values = sorted(values)
        self.omit = None if explicit else omit

    def dim(self, w):
        if w not in self.dims:
            self.dims[w] = self.alloc(f"={w}", self.signed)
        return self.dims[w]

    def rep(self) -> Cat:
        vals = {}
        for w in self.values:
            if w == self.omit:
                continue
            vals[w] = lin_add(self.free.get(w, {}), {self.dims[w]: 1.0} if w in self.dims else {})
        if self.omit is not None:     # the omitted value is "real position and none of the others"
            vals[self.omit] = lin_add(NOTBOS, self.free.get(self.omit, {}),
                                      *[(-1.0, l) for l in vals.values()])
        return Cat({w: l for w, l in vals.items()})


def cat_map(f, args, out_values, alloc, explicit=False):
    """f over one-hot inputs (ints are constants).  Returns (Cat, units)."""
    reps = [a for a in args if isinstance(a, Cat)]
    pos = [i for i, a in enumerate(args) if isinstance(a, Cat)]

    def call(vals):
        full = list(args)
        for i, v in zip(pos, vals):
            full[i] = v
        return f(*full)

    if not reps:                             # every input a constant: so is the map
        w = call([])
        return Cat({} if w is None else {w: dict(NOTBOS)}), []
    if len(reps) == 1:                       # linear: out_w = sum of input indicators with f(v) = w
        out = {}
        for v, lin in reps[0].vals.items():
            w = call([v])
            if w is not None:
                out[w] = lin_add(out.get(w, {}), lin)
        return Cat(out), []
    order = sorted(range(len(reps)), key=lambda i: len(reps[i].vals))
    last, rest = order[-1], order[:-1]
    counts = {}
    table = {}
    for combo in itertools.product(*[sorted(reps[i].vals) for i in rest]):
        for u in reps[last].vals:
            vals = [None] * len(reps)
            for i, v in zip(rest, combo):
                vals[i] = v
            vals[last] = u
            w = call(vals)
            if w is None:
                continue
            table.setdefault(combo, {}).setdefault(w, []).append(u)
            counts[w] = counts.get(w, 0) + 1
    omit = max(counts, key=counts.get) if counts else None
    out = OutCat(alloc, out_values, explicit, omit)
    units = []
    k = len(rest)
    for combo, by_w in table.items():
        base = lin_add(*[reps[i].vals[v] for i, v in zip(rest, combo)])
        for w, us in by_w.items():
            if w == out.omit:
                continue
            if len(us) == len(reps[last].vals):       # f(combo, .) is constant: no test on the last input
                units += step_units(base, float(k), {out.dim(w): 1.0})
            else:
                units += step_units(lin_add(base, *[reps[last].vals[u] for u in us]), k + 1.0, {out.dim(w): 1.0})
    return out.rep(), units


def cat_map_cost(f, sets) -> int:
    """Units cat_map would use for f over one-hot inputs with these value sets."""
    if len(sets) <= 1:
        return 0
    order = sorted(range(len(sets)), key=lambda i: len(sets[i]))
    last, rest = order[-1], order[:-1]
    counts: dict[int, int] = {}           # output value -> times it is given
    per: list[set] = []
    for combo in itertools.product(*[sorted(sets[i]) for i in rest]):
        outs = set()
        for u in sets[last]:
            vals = [None] * len(sets)
            for i, v in zip(rest, combo):
                vals[i] = v
            vals[last] = u
            w = f(*vals)
            if w is not None:
                outs.add(w)
                counts[w] = counts.get(w, 0) + 1
        per.append(outs)
    omit = max(counts, key=counts.__getitem__) if counts else None
    return 2 * sum(len(o - {omit}) for o in per)


def group_steps(a_vals, b_vals, action) -> list:
    """The (i, j, k) of group_map's first layer: b sends i to j and a sends
    j to k for some values a, b can take (within one orbit of the action)."""
    im = action.images
    b_moves = {(p, im[v][p]) for v in b_vals for p in range(action.points)}
    a_moves = {(p, im[v][p]) for v in a_vals for p in range(action.points)}
    orbit_of = {p: orbit for orbit in action.orbits for p in orbit}
    return [(i, j, k) for i in action.base for j in orbit_of[i] if (i, j) in b_moves
            for k in orbit_of[i] if (j, k) in a_moves]


def group_map(a: Cat, b: Cat, action, out_values, alloc, explicit=False):
    """a . b for one-hot group elements, by a faithful action of the group
    (compiler/groups.py; images[g][p]: where g sends point p), in two layers:
    the product's images of the base points, [ab(i) = k] = sum over j of
    [b(i) = j] and [a(j) = k], one sharp step per (i, j, k); then its
    one-hot code, one step per element (the sum of its images of the B base
    points reaches B only for it: the base tells elements apart).  Both
    steps are flat around 0 and 1, like cat_map's.  Returns (Cat, units of
    layer 1, units of layer 2)."""
    im = action.images

    def moves(c: Cat) -> dict:      # (p, q) -> sum of the indicators of the values sending p to q
        forms: dict[tuple[int, int], dict] = {}
        for v, lin in c.vals.items():
            for p in range(action.points):
                forms[(p, im[v][p])] = lin_add(forms.get((p, im[v][p]), {}), lin)
        return forms
    am, bm = moves(a), moves(b)
    images, first = {}, []
    for i, j, k in group_steps(a.vals, b.vals, action):
        if (i, k) not in images:
            images[(i, k)] = alloc(f"@{i}->{k}", False)
        first += step_units(lin_add(bm[(i, j)], am[(j, k)]), 2.0, {images[(i, k)]: 1.0})
    out = OutCat(alloc, out_values, explicit, omit=out_values[0])
    second = []
    for w in out_values:
        keys = [(p, im[w][p]) for p in action.base]
        if w == out.omit or not all(key in images for key in keys):
            continue
        second += step_units(lin_add(*[{images[key]: 1.0} for key in keys]), float(len(keys)),
                             {out.dim(w): 1.0})
    return out.rep(), first, second


def cat_where(c: Cat, x, y, out_values, alloc):
    """where(c, x, y) with one-hot branches (or constant ones): one unit per
    value of each one-hot branch, none for a constant branch."""
    nz = lin_add(*[l for v, l in c.vals.items() if v != 0])
    z = lin_add(*[l for v, l in c.vals.items() if v == 0])
    out = OutCat(alloc, out_values, explicit=True)
    units = []
    for branch, cond in ((x, nz), (y, z)):
        if isinstance(branch, Cat):
            for w, lin in branch.vals.items():
                units += step_units(lin_add(lin, cond), 2.0, {out.dim(w): 1.0})
        else:
            out.free[branch] = lin_add(out.free.get(branch, {}), cond)
    return out.rep(), units


def num_where(c: Cat, x, y, lo, hi, alloc):
    """where(c, x, y) with numeric (or constant) branches -> Num."""
    nz = lin_add(*[l for v, l in c.vals.items() if v != 0])
    z = lin_add(*[l for v, l in c.vals.items() if v == 0])
    dim = alloc("where")
    units: list[Unit] = []
    free: dict = {}
    for branch, cond in ((x, nz), (y, z)):
        if isinstance(branch, int):
            free = lin_add(free, (float(branch), cond))
            continue
        xl = branch.numeric()
        blo, bhi = (branch.lo, branch.hi)
        r = bhi - blo + 1.0
        # cond * (x - lo) = relu((x - lo) - r * (1 - cond));  the lo * cond part is linear
        units.append(Unit(lin_add(xl, (r, cond)), -blo - r, {dim: 1.0}))
        free = lin_add(free, (float(blo), cond))
    return Num(lin_add(free, {dim: 1.0}), lo, hi), units


def step_units(x: dict, k: float, coefs: dict):
    """[x >= k] for integer-valued x (float noise < 0.25): two units whose
    difference ramps from 0 at x = k - 0.75 to 1 at x = k - 0.25."""
    x2 = lin_scale(x, 2.0)
    return [Unit(x2, -2.0 * k + 1.5, coefs), Unit(x2, -2.0 * k + 0.5, {d: -c for d, c in coefs.items()})]


def table(x: dict, lo: int, hi: int, fvals: dict, out_cat, alloc, explicit=False, points=None):
    """f(x) for integer x in [lo, hi] (fvals: x -> f(x)), continued as the
    constant f(hi) above hi.  out_cat: output values (-> Cat) or None (-> Num).
    explicit: every value is a single written dim (a unit writes the base value),
    so a loop update can be written straight into the loop state.
    points: the sorted values x can take (fvals holds them), when fewer than
    the range: one step (at the higher point) per pair of neighbouring points
    whose f differs, exact for x in points (a step ramps within 1 below it)."""
    pts = list(points) if points is not None else list(range(lo, hi + 1))
    lo = pts[0]
    ks = [b for a, b in zip(pts, pts[1:]) if fvals[b] != fvals[a]]
    prev = dict(zip(pts[1:], pts))
    units = []
    if out_cat is not None:
        out = OutCat(alloc, out_cat, explicit=True, signed=True)
        if explicit:
            units.append(Unit(dict(NOTBOS), 0.0, {out.dim(fvals[lo]): 1.0}))
        else:
            out.free[fvals[lo]] = dict(NOTBOS)
        for k in ks:
            units += step_units(x, k, {out.dim(fvals[k]): 1.0, out.dim(fvals[prev[k]]): -1.0})
        return out.rep(), units
    dim = alloc("table")
    for k in ks:
        units += step_units(x, k, {dim: float(fvals[k] - fvals[prev[k]])})
    used = [fvals[p] for p in pts]
    return Num(lin_add((float(fvals[lo]), NOTBOS), {dim: 1.0}), min(used), max(used)), units


def selwidth_decode(a_dim: int, L: int, outputs: list, alloc):
    """Given a = 1/(w+1) (w = 0..L), outputs: list of (kind, f) with kind 'num'
    (f: w -> number) or 'cat' (f: w -> value).  Piecewise-linear interpolation
    in a through the knots a_k = 1/(k+1); knots where no output bends are dropped."""
    a = np.array([1.0 / (k + 1) for k in range(L + 1)])        # descending
    cols = []      # (dim, y values over w, free base)
    reps = []
    for kind, f in outputs:
        if kind == "num":
            d = alloc("sel_width")
            cols.append((d, np.array([float(f(w)) for w in range(L + 1)])))
            ys = [f(w) for w in range(L + 1)]
            reps.append(("num", d, min(ys), max(ys)))
        else:
            ys = [f(w) for w in range(L + 1)]
            dims = {}
            for v in sorted(set(ys)):
                dims[v] = alloc(f"={v}", True)
                cols.append((dims[v], np.array([1.0 if y == v else 0.0 for y in ys])))
            reps.append(("cat", dims, None, None))
    # Basis relu(a_k - a): a unit is on for widths above k.  For the convex
    # outputs used here (w, w^2) every coefficient is positive, so the sum has
    # no cancellation and stays exact in float32 at long lengths.
    units: dict[int, dict[int, float]] = {}     # knot -> {output dim: coefficient}
    for d, y in cols:
        slope = (y[:-1] - y[1:]) / (a[:-1] - a[1:])     # segment k spans [a_{k+1}, a_k]
        coef = {0: -slope[0]}
        for k in range(1, L):
            coef[k] = slope[k - 1] - slope[k]
        for k, c in coef.items():
            if abs(c) > 1e-12 * max(1.0, abs(slope).max()):
                units.setdefault(k, {})[d] = c
    mlp = [Unit({a_dim: -1.0}, float(a[k]), out) for k, out in sorted(units.items())]
    out_reps: list[Num | Cat] = []
    for (kind, d, lo, hi), (_, f) in zip(reps, outputs):
        if kind == "num":
            out_reps.append(Num(lin_add((float(f(0)), NOTBOS), {d: 1.0}), lo, hi))
        else:
            vals = {}
            for v, dv in d.items():
                base = 1.0 if f(0) == v else 0.0
                vals[v] = lin_add((base, NOTBOS), {dv: 1.0})
            out_reps.append(Cat(vals))
    return out_reps, mlp


def square_table(x: dict, lo: int, hi: int, alloc):
    """x^2 for integer x in [lo, hi] by interpolation: one unit per integer."""
    d = alloc("square")
    units = []
    # g(x) = lo^2 + sum_k c_k relu(x - k), slopes 2k+1 on [k, k+1]
    prev = 0.0
    for k in range(lo, hi):
        slope = 2.0 * k + 1.0
        units.append(Unit(dict(x), -float(k), {d: slope - prev}))
        prev = slope
    # below lo the units are off and g = lo^2 (x >= lo always)
    return lin_add((float(lo * lo), NOTBOS), {d: 1.0}), units
