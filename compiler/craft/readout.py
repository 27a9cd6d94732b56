"""The output's read-out: the output rep the unembedding reads, a one-hot
table where the numeric unembedding is not exact, and the halting clock's
numeric form (clock.py: value and done * value instead of value + offset)."""
from __future__ import annotations

from .. import mlp as M
from ..basis import NOTBOS, Cat, ClockedNum, Num
from ..clock import DONE_LOGIT, OPEN_LOGIT
from .base import CrafterBase


def quadratic_unembed_exact(lo, hi, scale=1.0) -> bool:
    """The numeric unembedding (logit 2tx - t^2 for every token t in [lo, hi])
    keeps neighbouring logits 1 - 2*0.05 apart (output noise <= 0.05) while
    its float32 rounding, about 3 eps M^2 (M = max |t|), stays below 0.4.
    scale: the largest logit multiplier over the smallest (a clocked output's
    DONE_LOGIT / OPEN_LOGIT): rounding grows with the first, the gap with the
    second."""
    m = max(abs(lo), abs(hi))
    return 3 * 2.0 ** -23 * m * m * scale <= 0.4


class ReadoutMixin(CrafterBase):
    def numeric_clock(self) -> bool:
        """Whether the clocked output where(done, value, value + offset) would
        be a number (a wide value set, is_cat): a number v + offset reads as
        itself, so neither it nor value + offset is built in the postlude;
        `clocked_number` gives the unembedding value and done * value instead
        (one unit, no one-hot table).  Not when done is no 0/1 one-hot code."""
        g = self.gate
        if g is None or g.done is None or self.is_cat(self.ir.output):
            return False
        return not {g.done, g.value, g.shifted} & self.absorbed and self.is_cat(g.done) \
            and set(self.vals(g.done)) <= {0, 1}

    def clocked_number(self):
        """The clocked output as a ClockedNum (see numeric_clock); beyond the
        quadratic unembedding at the clock's margins, the clocked output itself
        (`run` reads it through a one-hot code)."""
        g = self.gate
        value, done = self.rep(g.value), self.rep(g.done)
        x = value if isinstance(value, Num) else self.as_num(g.value, value)
        if not quadratic_unembed_exact(x.lo, x.hi, DONE_LOGIT / OPEN_LOGIT):
            self.build(g.shifted)
            self.build(self.ir.output)
            return self.rep(self.ir.output)
        rep, units = M.num_where(done, x, 0, min(x.lo, 0), max(x.hi, 0), self.alloc)
        self.mlp(self.op_label("where", self.ir.output), units, self.unit_writes(units))
        return ClockedNum(x, rep.lin, done.vals.get(1, {}))

    def read_out(self, clocked):
        """The output rep the unembedding reads (`clocked`: numeric_clock)."""
        out = self.clocked_number() if clocked else self.rep(self.ir.output)
        if isinstance(out, int):
            out = Cat({out: dict(NOTBOS)})
        if isinstance(out, Num) and (self.gate is not None or not quadratic_unembed_exact(out.lo, out.hi)):
            # logits 2tx - t^2 lose the 1-logit gap between neighbours in float32
            # once |t| ~ 1000, and read a clocked output's v + offset as itself:
            # read the output through a one-hot table instead
            out = self.to_cat(self.ir.output, out)
        return out
