"""The two kinds of operation a compiled layer holds, in named-subspace form.

An `AttnOp` is one causal attention head: query/key rows (score = q . k, the
attention scale is 1 so the construction picks its own sharpness), value rows
and where each value row is written.  Key and value rows get an exact
correction at BOS (the row reads the `bos` dim), so that BOS's key is
`k_bos` and BOS's value is `v_bos`: BOS is where a head puts its weight when
nothing is selected, and it then returns the default.

An `MlpOp` is a set of ReLU units: unit = relu(inp . x + bias [- GATE*bos]),
written with coefficients `out`.  Gated units are off at BOS, so an MLP
never writes a value at BOS; the ungated ones are exact cancellations.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class Unit:
    inp: dict
    bias: float
    out: dict
    gated: bool = True


@dataclass(eq=False)
class Op:
    kind: str                      # 'attn' | 'mlp'
    label: str                     # what it computes (for reports and drawings)
    stage: str                     # 'pre' | 'body' | 'post'
    writes: list = field(default_factory=list)    # residual dims it writes
    deps: list = field(default_factory=list)      # ops that must run before it
    layer: Optional[int] = None
    # attention
    q: list = field(default_factory=list)
    k: list = field(default_factory=list)
    k_bos: list = field(default_factory=list)
    v: list = field(default_factory=list)
    v_bos: list = field(default_factory=list)
    o: list = field(default_factory=list)          # per value row: {dim: coef}
    # mlp
    units: list = field(default_factory=list)
    out_bias: dict = field(default_factory=dict)   # constant written at every position

    def reads(self) -> set:
        dims = set()
        for lin in self.q + self.k + self.v:
            dims |= set(lin)
        for u in self.units:
            dims |= set(u.inp)
        return dims

    @property
    def width(self) -> int:
        return max(len(self.q), len(self.v)) if self.kind == "attn" else len(self.units)
