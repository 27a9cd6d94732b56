"""Named residual directions and the sparse linear forms built on them.

Every residual dimension has a name (variable, value) and a lower bound (used
to cancel it exactly with one ReLU unit).  A `Lin` is a sparse linear form
over the residual: {dim: coef}.  Weights are written between these named
subspaces and only made dense by `assemble`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# fixed dimensions present in every compiled model (the embedding writes them)
ONE, BOS, IDX, IDX2 = 0, 1, 2, 3
GATE = 1.0e6          # pre-activation push that switches a gated ReLU off at BOS


def lin_add(*terms) -> dict:
    """Sum of (coef, lin) pairs or plain lins."""
    out: dict = {}
    for t in terms:
        c, lin = t if isinstance(t, tuple) else (1.0, t)
        for d, v in lin.items():
            out[d] = out.get(d, 0.0) + c * v
    return {d: v for d, v in out.items() if v != 0.0}


def lin_scale(lin: dict, c: float) -> dict:
    return {d: c * v for d, v in lin.items()} if c else {}


NOTBOS = {ONE: 1.0, BOS: -1.0}     # 1 on real tokens, 0 on BOS


@dataclass
class Dim:
    name: str
    stage: str        # 'pre' (in the injected embedding e), 'body', 'state', 'carry', 'post'
    signed: bool = False   # may hold negative values (else one ReLU unit cancels it)


class Residual:
    """Allocates named residual dimensions."""

    def __init__(self):
        self.dims: list[Dim] = []
        for name, signed in (("one", False), ("bos", False), ("index", True), ("index_sq", False)):
            self.dims.append(Dim(name, "pre", signed))
        self.carry: dict = {}      # pre dim -> carry dim (copied through the body for the postlude)

    def new(self, name: str, stage: str, signed: bool = True) -> int:
        self.dims.append(Dim(name, stage, signed))
        return len(self.dims) - 1

    def __len__(self):
        return len(self.dims)

    def carried(self, lin: dict) -> dict:
        """The postlude's view of a form over 'pre' dims: the dim itself (holds
        the value when the loop ran 0 times) plus its carry copy (holds it after
        >= 1 iterations, when the body has cancelled the original)."""
        out = dict(lin)
        for d, v in lin.items():
            if self.dims[d].stage == "pre":
                c = self.carry.get(d)
                if c is None:
                    c = self.carry[d] = self.new(f"carry:{self.dims[d].name}", "carry", self.dims[d].signed)
                out[c] = out.get(c, 0.0) + v
        return out


    def carry_fix(self, lin: dict) -> dict:
        """Postlude form: every 'pre' dim d also reads its carry copy with the
        same coefficient (idempotent)."""
        out = dict(lin)
        for d, v in lin.items():
            if self.dims[d].stage == "pre":
                out[self._carry_of(d)] = v
        return out

    def _carry_of(self, d: int) -> int:
        c = self.carry.get(d)
        if c is None:
            c = self.carry[d] = self.new(f"carry:{self.dims[d].name}", "carry", self.dims[d].signed)
        return c


# ---- representations of s-ops in the residual --------------------------------

@dataclass
class Cat:
    """Categorical: value -> indicator form (1 at positions holding it)."""
    vals: dict

    def numeric(self) -> dict:
        return lin_add(*[(float(v), lin) for v, lin in self.vals.items()])

    def square(self) -> dict:
        return lin_add(*[(float(v) ** 2, lin) for v, lin in self.vals.items()])

    @property
    def lo(self):
        return min(self.vals)

    @property
    def hi(self):
        return max(self.vals)

    def map_forms(self, f) -> "Cat":
        return Cat({v: f(l) for v, l in self.vals.items()})


@dataclass
class Num:
    """Numeric: the value itself is a linear form (exact at integers up to small
    float noise).  `sq` is a form for its square when one is available (for
    equality attention); `affine` = (a, b) when the value is a*index + b;
    `rot` = (cos form, sin form, lo, hi): cos and sin of the angle 2 pi v / P
    for the values v in [lo, hi], both 0 for the others (P the compile's
    rotary period: equality attention past the quadratic score's range,
    craft.rotary.rot_of)."""
    lin: dict
    lo: float
    hi: float
    sq: Optional[dict] = None
    affine: Optional[tuple] = None
    rot: Optional[tuple] = None

    def numeric(self) -> dict:
        return self.lin

    def square(self) -> Optional[dict]:
        return self.sq

    def map_forms(self, f) -> "Num":
        return Num(f(self.lin), self.lo, self.hi, f(self.sq) if self.sq is not None else None, self.affine,
                   None if self.rot is None else (f(self.rot[0]), f(self.rot[1])) + self.rot[2:])


@dataclass
class ClockedNum:
    """A numeric output under the halting clock (clock.py): `value` is the
    answer, `done_value` a form for done * value and `done` the 0/1 form of
    done.  The unembedding's logit for token t is OPEN (2tv - t^2) +
    (DONE - OPEN) (2t done_value - t^2 done): argmax v, margin DONE where
    done, OPEN elsewhere (assemble.unembed_rows)."""
    value: Num
    done_value: dict
    done: dict

    def map_forms(self, f) -> "ClockedNum":
        return ClockedNum(self.value.map_forms(f), f(self.done_value), f(self.done))


def rep_dims(rep) -> set:
    """Residual dims a representation reads."""
    if isinstance(rep, Cat):
        return {d for lin in rep.vals.values() for d in lin}
    out = set(rep.lin)
    if rep.sq:
        out |= set(rep.sq)
    if rep.rot:
        out |= set(rep.rot[0]) | set(rep.rot[1])
    return out
