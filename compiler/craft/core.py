"""The Crafter's core: its constructor, the stage-by-stage driver and the
per-node build dispatcher.  The layer kinds it builds live in the mixins it
is composed of (fusion, maps, selects, rotary, digits, aggregates,
readout); their common base (base.CrafterBase) holds the state they share
through self, dim allocation and the choice between one-hot and numeric
encodings."""
from __future__ import annotations

from rasp import ir
from rasp.errors import RaspError

from .. import attn as A
from ..basis import NOTBOS, Cat, ClockedNum, Num, rep_dims
from ..graph import ProgramGraph
from .aggregates import AggregatesMixin
from .digits import DigitsMixin
from .fusion import FusionMixin
from .maps import MapsMixin
from .readout import ReadoutMixin
from .rotary import RotaryMixin
from .selects import SelectsMixin

LINEAR = {"add", "sub", "neg", "mul"}


class Crafter(FusionMixin, MapsMixin, SelectsMixin, RotaryMixin, DigitsMixin, AggregatesMixin,
              ReadoutMixin):
    """Every graph node -> a residual representation plus the attention heads
    / MLP units that compute it (not yet placed in layers)."""
    def __init__(self, pg: ProgramGraph, sets: dict, sets2: dict, length: int, compact: bool = False,
                 gate=None):
        super().__init__(pg, sets, sets2, length, compact, gate)
        self.need_sq = self.find_need_sq()
        self.plan_fusion()
        self.embedded_maps = self.plan_embedded_maps()

    # ---- which numeric s-ops need a square form (numeric equality select) ----
    def find_need_sq(self):
        need = set()
        for n in self.pg.g:
            if isinstance(n, ir.Select) and n.pred == "eq":
                need |= {n.key, n.query}
        changed = True
        while changed:
            changed = False
            for n in list(need):
                more = []
                if isinstance(n, ir.Map) and n.op in LINEAR:
                    more = [i for i in n.inputs if not isinstance(i, ir.Const)]
                elif isinstance(n, ir.Aggregate):
                    more = [n.value]
                for m in more:
                    if m not in need:
                        need.add(m)
                        changed = True
        return need

    # ---- driver -----------------------------------------------------------------
    def refuse_zero_divisors(self):
        """The interpreter reports a division by zero at run time; an MLP table
        has no entry for it (the output would be silently wrong).  So a `//` or
        `%` whose divisor's value set holds 0 is refused here, located (int64
        overflow likewise, in values.py)."""
        for node in self.pg.g:
            if not (isinstance(node, ir.Map) and node.op in ("floordiv", "mod") and node.kind == ir.SOP):
                continue
            d = node.inputs[1]
            if isinstance(d, ir.Full) and isinstance(d.inputs[0], ir.Const):
                d = d.inputs[0]
            if isinstance(d, ir.Const):
                zero = d.value == 0
            elif isinstance(d, ir.Host) or getattr(d, "kind", None) == ir.SCALAR:
                continue            # a host value: refused (or computed on the host) elsewhere
            else:
                zero = 0 in self.vals(d)
            if zero:
                sym = "//" if node.op == "floordiv" else "%"
                raise self.error(node, f"the divisor of this '{sym}' can be 0 (its values include 0), "
                                 "where the interpreter reports a division by zero; a compiled model has "
                                 "no such error (make its values nonzero, e.g. max(d, 1) for a count)")

    def run(self):
        self.refuse_zero_divisors()
        clocked = self.pg.loop is not None and self.numeric_clock()
        self.stage = "pre"
        self.build(self.ir.input)          # the embedding always has the token one-hot
        for node in self.pg.order("pre"):
            if node is self.ir.input:
                continue
            self.build(node)
        if self.pg.loop is not None:
            self.stage = "body"
            for var in self.pg.loop_vars():
                self.make_state(var)
            for node in self.pg.order("body"):
                if not isinstance(node, ir.LoopState):
                    self.build(node)
            for var in self.pg.loop_vars():      # a one-hot variable needs a one-hot update
                if self.pg.stage.get(var.update) == "body" and isinstance(self.state[var][0], Cat) \
                        and isinstance(self.reps.get(var.update), Num):
                    self.reps[var.update] = self.to_cat(var.update, self.reps[var.update])
            self.stage = "post"
            for node in self.pg.order("post"):
                if not isinstance(node, ir.LoopOut) and not (clocked and node in (self.gate.shifted,
                                                                                   self.ir.output)):
                    self.build(node)
        self.stage = "post" if self.pg.loop is not None else "pre"
        out = self.read_out(clocked)
        self.drop_unread(out)
        if self.pg.loop is not None:
            self.res.carry_fix(NOTBOS)          # the postlude's one/bos carry copies always exist
            out = out.map_forms(self.res.carry_fix)
            for op in self.ops:
                if op.stage == "post":
                    op.q = [self.res.carry_fix(l) for l in op.q]
                    op.k = [self.res.carry_fix(l) for l in op.k]
                    op.v = [self.res.carry_fix(l) for l in op.v]
                    for u in op.units:
                        u.inp = self.res.carry_fix(u.inp)
        return out

    def drop_unread(self, out):
        """Remove the tables nothing reads: square tables build_node made for
        a select that then compared digits or one-hot codes, and sel_width
        decoders whose widths were only compared (`compare_widths`).  A dead
        table would still widen its layer's MLP."""
        read = rep_dims(out) if not isinstance(out, ClockedNum) else \
            rep_dims(out.value) | set(out.done_value) | set(out.done)
        for var in self.pg.loop_vars() if self.pg.loop is not None else ():
            # the loop's state, its init, and its update, which the commit
            # (layers.py, after this) reads: an update that does not read the
            # state may be a prelude value nothing else reads
            s, init = self.state[var]
            for r in (s, init, self.reps.get(var.update)):
                if isinstance(r, (Cat, Num)):
                    read |= rep_dims(r)
        for op in self.ops:
            read |= op.reads()
        dead = {id(op) for op in self.droppable if not set(op.writes) & read}
        self.ops = [op for op in self.ops if id(op) not in dead]

    def make_state(self, var):
        if var.kind != ir.SOP:
            raise self.error(var.update, f"loop variable '{var.name}' is a {var.kind}; the compiler supports "
                             "s-op loop variables only")
        init = self.reps[var.init] if var.init is not None and var.init in self.reps else None
        if var.init is not None and init is None:
            init = self.rep(var.init)
        if isinstance(init, int):
            init = Cat({init: dict(NOTBOS)})
        self.stage = "state"
        vals = sorted(self.vals(var.state))
        if self.is_cat(var.state):
            if init is not None and not isinstance(init, Cat):
                raise self.error(var.update, f"loop variable '{var.name}' starts from a numeric value but "
                                 "takes few values; unsupported")
            s = Cat({v: {self.alloc(f"{var.name}={v}", True): 1.0} for v in vals})
        else:
            s = Num({self.alloc(f"{var.name}", True): 1.0}, min(vals), max(vals))
        self.stage = "body"
        self.state[var] = (s, init)
        self.reps[var.state] = self.state_view(s, init)

    def build(self, node):
        try:
            self.build_node(node)
        except RaspError:
            raise
        except Exception as e:           # never a traceback for the user: say where it happened
            raise self.error(node, f"the compiler cannot compile {self.what(node)} "
                             f"(internal error: {type(e).__name__}: {e})") from e

    def build_node(self, node):
        if isinstance(node, (ir.Const, ir.Select, ir.Host)) or node in self.absorbed:
            return
        if isinstance(node, ir.Input):
            vals = sorted(self.ir.vocab)
            self.input_dims = {v: self.alloc(f"{self.ir.input_name}={v}", False) for v in vals}
            self.reps[node] = Cat({v: {d: 1.0} for v, d in self.input_dims.items()})
        elif isinstance(node, ir.Indices):
            self.reps[node] = self.reps_indices()
        elif isinstance(node, ir.Full):
            if not isinstance(node.inputs[0], ir.Const):
                raise self.error(node, "full() of a host value (param) cannot be computed by a causal "
                                 "transformer; use a const")
            self.reps[node] = self.rep(node)
        elif isinstance(node, ir.Map):
            self.reps[node] = self.build_map(node)
        elif isinstance(node, ir.Aggregate):
            self.reps[node] = self.build_aggregate(node)
        elif isinstance(node, ir.SelWidth):
            self.reps[node] = self.build_selwidth(node)
        else:
            raise self.error(node, f"the compiler does not support {node.label()} here")
        r = self.reps[node]
        if node in self.need_sq and isinstance(r, Num) and r.sq is None and not self.FORCE_DIGITS \
                and A.numeric_eq_exact([max(abs(r.lo), abs(r.hi))]):    # wider ones are compared by digits
            before = len(self.ops)
            self.add_square(node, r, points=sorted(self.vals(node)))
            self.droppable += self.ops[before:]      # (none for a constant)
