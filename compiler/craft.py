"""Turn every graph node into a residual representation plus the attention
heads / MLP units that compute it (not yet placed in layers)."""
from __future__ import annotations

import numpy as np

from rasp import ir
from rasp.errors import RaspError
from rasp.operators import PYTHON as PYTHON_OPS

from . import attn as A
from . import mlp as M
from . import groups as G
from . import mean as MEAN
from .basis import IDX, IDX2, NOTBOS, Cat, ClockedNum, Num, Residual, lin_add, lin_scale, rep_dims
from .clock import DONE_LOGIT, OPEN_LOGIT
from .graph import ProgramGraph
from .ops import Op, Unit
from .values import unique_key


CAT_LIMIT = 160          # larger (or length-dependent) value sets are encoded as numbers
NUMBER_ABOVE = 24        # compact models: a wider set of small, dense ints is a number too
LINEAR = {"add", "sub", "neg", "mul"}
COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}


def quadratic_unembed_exact(lo, hi, scale=1.0) -> bool:
    """The numeric unembedding (logit 2tx - t^2 for every token t in [lo, hi])
    keeps neighbouring logits 1 - 2*0.05 apart (output noise <= 0.05) while
    its float32 rounding, about 3 eps M^2 (M = max |t|), stays below 0.4.
    scale: the largest logit multiplier over the smallest (a clocked output's
    DONE_LOGIT / OPEN_LOGIT): rounding grows with the first, the gap with the
    second."""
    m = max(abs(lo), abs(hi))
    return 3 * 2.0 ** -23 * m * m * scale <= 0.4


def dense_small(vals) -> bool:
    """A value set a number holds as compactly as a one-hot code: ints within
    the quadratic equality score's float32 range (numeric selects stay one
    head; tables of one operand step only between the values it takes)."""
    lo, hi = min(vals), max(vals)
    return A.numeric_eq_exact([max(abs(lo), abs(hi))])


class Crafter:
    def __init__(self, pg: ProgramGraph, sets: dict, sets2: dict, length: int, compact: bool = False,
                 gate=None):
        self.pg, self.ir = pg, pg.ir
        self.compact = compact          # encode wide dense value sets as numbers (see is_cat)
        self.gate = gate                # the halting clock (clock.Clock) the program was given, or None
        self.sets, self.sets2, self.L = sets, sets2, length
        self.res = Residual()
        self.ops: list[Op] = []
        self.writer: dict = {}          # dim -> op writing it
        self.reps: dict = {}            # node -> rep in its own stage
        self.state: dict = {}           # LoopVar -> (S rep, init rep or None)
        self.stage = "pre"
        self.input_dims: dict = {}
        self.need_sq = self.find_need_sq()
        self.fused: dict = {}          # map node -> (leaf nodes, composed function)
        self.absorbed: set = set()      # maps computed inside a consumer's fused MLP
        self.onehots: dict = {}         # (numeric node, stage) -> its one-hot code (see onehot)
        self.droppable: list = []       # tables built before knowing anything reads them (drop_unread)
        self.width_raw: dict = {}       # sel_width node -> its head's BOS share 1/(w+1) (a dim)
        self.value_heads: dict = {}     # numeric aggregate -> (head, value rep, default): one key's value
        self.plan_fusion()
        self.embedded_maps = self.plan_embedded_maps()
        self.embedded: dict = {}        # dim the embedding writes -> its form over the input's one-hot dims
        self.rot_dims = None            # (cos, sin) position-feature dims, allocated on first use (index_rot)

    # ---- helpers -------------------------------------------------------------
    def error(self, node, message):
        return RaspError(message, loc=node.loc, source=self.ir.source)

    def what(self, node):
        n = self.pg.name(node)
        return f"'{n}'" if n else node.label()

    def alloc(self, name, signed=True):
        return self.res.new(name, self.stage, signed)

    def vals(self, node):
        key = node.var.state if isinstance(node, (ir.LoopState, ir.LoopOut)) else node
        return self.sets[key]

    def fixed_set(self, node) -> bool:
        """Whether node's values do not depend on the length (a one-hot code
        could hold them; is_cat says whether one does)."""
        key = node.var.state if isinstance(node, (ir.LoopState, ir.LoopOut)) else node
        return not isinstance(node, (ir.Indices, ir.SelWidth)) and self.sets[key] == self.sets2[key]

    def is_cat(self, node) -> bool:
        if isinstance(node, ir.Input):
            return True
        if isinstance(node, (ir.Indices, ir.SelWidth)):
            return False
        key = node.var.state if isinstance(node, (ir.LoopState, ir.LoopOut)) else node
        s1, s2 = self.sets[key], self.sets2[key]
        if s1 != s2 or len(s1) > CAT_LIMIT:
            return False
        return not (self.compact and len(s1) > NUMBER_ABOVE and dense_small(s1))

    def op_label(self, what, node) -> str:
        name = self.pg.name(node)
        where = f" @{node.loc.line}" if node.loc is not None else ""
        return f"{what} {name}{where}" if name else f"{what}{where}"

    def add_op(self, op: Op) -> Op:
        op.stage = self.stage
        deps = {self.writer[d] for d in op.reads() if d in self.writer}
        op.deps = [d for d in deps if d.stage == self.stage]
        for d in op.writes:
            self.writer[d] = op
        self.ops.append(op)
        return op

    def mlp(self, label, units, writes) -> None:
        if not units:
            return
        self.add_op(Op("mlp", label, self.stage, writes=sorted(writes), units=units))

    @staticmethod
    def unit_writes(units):
        return {d for u in units for d in u.out}

    def rep(self, node):
        """The representation of `node` as seen from the current stage."""
        if isinstance(node, ir.Const):
            return node.value
        if isinstance(node, ir.Full) and isinstance(node.inputs[0], ir.Const):
            return Cat({node.inputs[0].value: dict(NOTBOS)})
        if isinstance(node, ir.LoopOut):
            s, init = self.state[node.var]
            return self.state_view(s, init)
        # (in the postlude a 'pre' dim d is read as d + its carry copy; forms stay
        # over d alone while crafting and `run` maps every postlude form at the
        # end: a linear map, so combining forms -- e.g. a value form minus
        # c * NOTBOS -- cannot leave d and its carry with different coefficients)
        return self.reps[node]

    def state_view(self, s, init):
        """A loop variable = its state dims S (0 before the first iteration) plus
        its initial value's dims: S holds (current - init)."""
        if init is None:
            return s
        if isinstance(s, Cat):
            return Cat({v: lin_add(l, init.vals.get(v, {})) for v, l in s.vals.items()})
        return Num(lin_add(s.lin, init.numeric()), s.lo, s.hi)

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

    # ---- fusing chains of categorical maps into one MLP --------------------------
    FUSE_PRODUCT = 20000       # largest product of the leaves' value-set sizes (costing larger ones took most of count.rasp's compile time and never won)
    FUSE_COMBOS = 1200         # largest product over all leaves but the biggest

    def absorbable(self, child, parent) -> bool:
        g = self.pg.g
        return (isinstance(child, ir.Map) and child.kind == ir.SOP and self.pg.stage[child] == self.pg.stage[parent]
                and child is not self.ir.output and set(g.successors(child)) == {parent}
                and self.is_cat(child) and not g.edges[child, parent].get("loop_back", False)
                and all(isinstance(i, ir.Const) or (isinstance(i, ir.Full) and isinstance(i.inputs[0], ir.Const))
                        or self.is_cat(i) for i in child.inputs))

    def plan_fusion(self):
        """A map of maps (e.g. a lambda body, or `(a | b) & ~(a & b)`) becomes one
        function of its leaf inputs, so it costs one MLP instead of a chain."""
        import networkx as nx
        order = list(nx.topological_sort(self.pg.forward()))
        for m in reversed(order):
            if not isinstance(m, ir.Map) or m.kind != ir.SOP or m in self.absorbed or not self.is_cat(m):
                continue
            inner, leaves = set(), []

            def walk(node):
                for i in node.inputs:
                    if self.absorbable(i, node):
                        inner.add(i)
                        walk(i)
                    elif not isinstance(i, ir.Const) and not (isinstance(i, ir.Full)
                                                              and isinstance(i.inputs[0], ir.Const)):
                        if i not in leaves:
                            leaves.append(i)
            walk(m)
            if not inner or not all(self.is_cat(l) for l in leaves):
                continue
            sizes = sorted(len(self.vals(l)) for l in leaves)
            if np.prod(sizes, dtype=float) > self.FUSE_PRODUCT or np.prod(sizes[:-1], dtype=float) > self.FUSE_COMBOS:
                continue
            f = self.composed(m, leaves)
            table = {}

            def memo(*vals, _f=f, _t=table):     # the fused table is evaluated once
                if vals not in _t:
                    _t[vals] = _f(*vals)
                return _t[vals]
            f = memo
            fused = M.cat_map_cost(f, [self.vals(l) for l in leaves])
            separate = sum(self.map_cost(n) for n in inner | {m})
            lin = self.linear_core(m, inner, leaves)
            if lin is not None and lin[2] < min(fused, separate + 16):
                self.absorbed |= inner
                self.fused[m] = (leaves, lin)     # h(sum of a_i * leaf_i): one table
                continue
            if fused > separate + 16:       # fusing saves layers; allow a little more width, not much
                continue
            self.absorbed |= inner
            self.fused[m] = (leaves, f)

    def linear_coeffs(self, node, inner, leaves):
        """{leaf: coef} and constant when node is an integer linear combination."""
        if node in leaves:
            return {node: 1}, 0
        if isinstance(node, ir.Const):
            return {}, node.value
        if isinstance(node, ir.Full):
            return {}, node.inputs[0].value
        if not (isinstance(node, ir.Map) and node in inner and node.op in ("add", "sub", "neg", "mul")):
            return None
        parts = [self.linear_coeffs(i, inner, leaves) for i in node.inputs]
        if any(p is None for p in parts):
            return None
        if node.op == "neg":
            return {k: -v for k, v in parts[0][0].items()}, -parts[0][1]
        if node.op == "mul":
            (ca, ka), (cb, kb) = parts
            if ca and cb:
                return None
            coef, const, scale = (ca, ka, kb) if ca else (cb, kb, ka)
            return {k: v * scale for k, v in coef.items()}, const * scale
        sign = 1 if node.op == "add" else -1
        (ca, ka), (cb, kb) = parts
        out = dict(ca)
        for k, v in cb.items():
            out[k] = out.get(k, 0) + sign * v
        return out, ka + sign * kb

    def linear_core(self, m, inner, leaves):
        """When m = h(linear combination of the leaves) (e.g. (a + b) % 60):
        (coefficients, h, table cost), else None."""
        chain, node = [], m
        while True:
            lc = self.linear_coeffs(node, inner | {m}, leaves)
            if lc is not None and set(lc[0]) == set(leaves) and node is not m or (lc is not None and node is m
                                                                                   and set(lc[0]) == set(leaves)):
                break
            if not isinstance(node, ir.Map):
                return None
            kids = [i for i in node.inputs if i in inner]
            others = [i for i in node.inputs if i not in inner and not isinstance(i, (ir.Const, ir.Full))]
            if len(kids) != 1 or others:
                return None
            chain.append(node)
            node = kids[0]
        coef, const = lc
        lo = const + sum(min(a * v for v in (min(self.vals(l)), max(self.vals(l)))) for l, a in coef.items())
        hi = const + sum(max(a * v for v in (min(self.vals(l)), max(self.vals(l)))) for l, a in coef.items())
        if hi - lo > 20000:
            return None
        core = node

        def h(t):
            def ev(n):
                if n is core:
                    return t
                if isinstance(n, ir.Const):
                    return n.value
                if isinstance(n, ir.Full):
                    return n.inputs[0].value
                args = [ev(i) for i in n.inputs]
                return None if any(a is None for a in args) else self.fn(n)(*args)
            return ev(m)
        hv = {t: h(t) for t in range(lo, hi + 1)}
        if any(v is None for v in hv.values()):
            return None
        cost = 2 * sum(1 for t in range(lo + 1, hi + 1) if hv[t] != hv[t - 1])
        return (coef, const, lo, hi, hv), None, cost

    def map_cost(self, node) -> int:
        """Units the map would use on its own (one-hot inputs)."""
        args = [i for i in node.inputs if not isinstance(i, ir.Const)
                and not (isinstance(i, ir.Full) and isinstance(i.inputs[0], ir.Const))]
        if len(args) <= 1:
            return 0
        if node.op == "where" and args[0] is node.inputs[0]:
            return 2 * sum(len(self.vals(b)) for b in node.inputs[1:] if b in args)
        pos = [k for k, i in enumerate(node.inputs) if i in args]
        consts = {k: (i.value if isinstance(i, ir.Const) else i.inputs[0].value)
                  for k, i in enumerate(node.inputs) if k not in pos}
        fn = self.fn(node)

        def g(*vals):
            full = [None] * len(node.inputs)
            for k, v in zip(pos, vals):
                full[k] = v
            for k, v in consts.items():
                full[k] = v
            return fn(*full)
        return M.cat_map_cost(g, [self.vals(node.inputs[k]) for k in pos])

    def composed(self, m, leaves):
        pos = {l: i for i, l in enumerate(leaves)}

        def ev(node, vals):
            if node in pos:
                return vals[pos[node]]
            if isinstance(node, ir.Const):
                return node.value
            if isinstance(node, ir.Full):
                return node.inputs[0].value
            args = [ev(i, vals) for i in node.inputs]
            if any(a is None for a in args):
                return None
            return self.fn(node)(*args)
        return lambda *vals: ev(m, vals)

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
        out = self.clocked_number() if clocked else self.rep(self.ir.output)
        if isinstance(out, int):
            out = Cat({out: dict(NOTBOS)})
        if isinstance(out, Num) and (self.gate is not None or not quadratic_unembed_exact(out.lo, out.hi)):
            # logits 2tx - t^2 lose the 1-logit gap between neighbours in float32
            # once |t| ~ 1000, and read a clocked output's v + offset as itself:
            # read the output through a one-hot table instead
            out = self.to_cat(self.ir.output, out)
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
            self.reps[node] = Num({IDX: 1.0}, 0, self.L - 1, {IDX2: 1.0}, (1, 0))
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

    # ---- element-wise maps --------------------------------------------------------
    def fn(self, node):
        if isinstance(node, ir.Lookup):       # None outside the table: a run-time error, never tabulated
            return node.table.get
        op = PYTHON_OPS[node.op]
        zero_check = node.op in ("floordiv", "mod")

        def f(*args):
            if zero_check and args[1] == 0:
                return None
            return int(op(*args))
        return f

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
        args = [self.rep(i) for i in node.inputs]
        rep, units = M.cat_map(self.fn(node), args, sorted(self.vals(node)), self.alloc)
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
        args = [self.rep(i) for i in node.inputs]
        if any(isinstance(i, ir.Host) or (isinstance(i, ir.Map) and i.kind == ir.SCALAR) for i in node.inputs):
            raise self.error(node, f"{self.what(node)} uses a param/host value; a causal transformer "
                             "cannot compute it (params may only be loop counts)")
        f, op = self.fn(node), node.op
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
            return self.tabulate(node, x, g, want_cat, points=sorted(self.vals(node.inputs[i])))
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

    # ---- attention ---------------------------------------------------------------------
    def select_kind(self, sel, agg_node):
        k, q = self.rep(sel.key), self.rep(sel.query)
        if sel.pred == "always":
            return "always", k, q
        if isinstance(k, Cat) and isinstance(q, Cat):
            return "cat", k, q
        several = isinstance(agg_node, ir.Aggregate) and agg_node.reduction in ("max", "min") \
            and not unique_key(sel) and len(self.vals(agg_node.value)) > 1
        if sel.pred == "eq" and several:
            # the quadratic score cannot also rank keys in float32 at length L:
            # compare one-hot codes of both sides instead (a table each), over
            # the range where the sides can meet; digits once that is wide
            k, q = self.narrowed(sel, k, q, square=False)
            if self.FORCE_DIGITS or self.span(k, q) + 1 > self.DIGITS_ABOVE:
                return self.digit_select(sel, k, q)
            return "cat", self.onehot(sel.key, k), self.onehot(sel.query, q)
        quadratic = sel.pred == "eq" and A.numeric_eq_exact(self.magnitudes(k, q))
        if sel.pred == "eq" and (self.FORCE_ROT or not quadratic):
            rot = self.rot_pair(k, q)
            if rot is not None:
                return rot
        if sel.pred == "eq" and not self.FORCE_DIGITS and not quadratic:
            k, q = self.narrowed(sel, k, q, square=True)
        if sel.pred == "eq" and (self.FORCE_DIGITS or not A.numeric_eq_exact(self.magnitudes(k, q))):
            # the quadratic score's float32 rounding would reach the selection
            # margin: compare two small digits of each side instead, as numbers
            return self.number_digit_select(sel, k, q)
        if sel.pred == "eq":
            for side, r in ((sel.key, k), (sel.query, q)):
                if r.square() is None:        # e.g. a loop variable: square it here, by a table
                    self.add_square(side, r)
            return "num", k, q
        ka, qa = getattr(k, "affine", None), getattr(q, "affine", None)
        if ka and qa and ka[0] == qa[0] and ka[0] != 0:
            # pred(a*j + b1, a*i + b2) for the keys j <= i: an order between
            # integers depends on key - query = (b1 - b2) - a d alone, d = i - j,
            # so one pass over every distance the design length allows decides
            # it (checking small distances only took `indices + 60 >= indices`
            # for always true: wrong past 60)
            test = A.PREDS[sel.pred]
            a, c = ka[0], ka[1] - qa[1]
            holds = [bool(test(c - a * d, 0)) for d in range(self.L)]
            if all(holds):
                return "always", k, q
            if not any(holds):
                return "never", k, q
            # selected exactly when j <= i - t (t >= 1): a prefix ending t positions back
            t = holds.index(True)
            if t <= 32 and all(holds[t:]):
                # a width needs no shift head (a table of the index); an aggregate
                # whose shift head is not exact at this length takes the general path
                counted = isinstance(agg_node, ir.SelWidth)
                head = None if counted else self.shift_head(t)
                if counted or head is not None:
                    return ("lag", t, head), k, q
        counted = isinstance(agg_node, ir.SelWidth)
        if (several or counted) and sel.pred in ("lt", "le", "gt", "ge") \
                and (self.FORCE_DIGITS or self.span(k, q) + 1 > self.DIGITS_ABOVE):
            # max/min over (or the width of) an order select of wide numbers:
            # two heads on digits (build_order_digits, build_selwidth)
            _, kd, qd = self.digit_select(sel, k, q)
            return ("order digits",), kd, qd
        # order (and ne) predicates between numbers: a 0/1 table between one-hot codes
        return "cat", self.onehot(sel.key, k), self.onehot(sel.query, q)

    ONEHOT_LIMIT = 4096      # widest numeric range turned into a one-hot code for a select
    DIGITS_ABOVE = 64        # a many-match max/min select compares digits beyond this range

    @staticmethod
    def magnitudes(*reps):
        return [max(abs(r.lo), abs(r.hi)) for r in reps]

    @staticmethod
    def span(k, q):
        return int(np.ceil(max(k.hi, q.hi))) - int(np.floor(min(k.lo, q.lo)))

    def narrowed(self, sel, k, q, square):
        """(k, q) for an equality select, each numeric side clamped to
        [m - 1, M + 1], [m, M] the range both sides can take (by two ReLUs,
        `clamped`).  Exact: equal values lie in [m, M], where nothing is
        clamped; a side clamped to m - 1 was below m, so it could not equal
        the other side before (that side is >= m when it is the one that
        starts at m, and then it is never m - 1) nor after; the same at M + 1.
        Unchanged when the ranges do not meet (nothing is ever selected)."""
        m = int(np.ceil(max(k.lo, q.lo)))
        M = int(np.floor(min(k.hi, q.hi)))
        if m > M:
            return k, q
        out = []
        for node, r in ((sel.key, k), (sel.query, q)):
            if square and A.numeric_eq_exact(self.magnitudes(r)):
                pass                # the quadratic score takes this side as it is
            elif isinstance(r, Num) and (r.lo < m - 1 or r.hi > M + 1):
                r = self.clamped(node, r, m - 1, M + 1, square)
            out.append(r)
        return tuple(out)

    def clamped(self, node, r, a, b, square):
        """min(max(r, a), b) = a + relu(r - a) - relu(r - b): two units (and,
        with `square`, the square table of a quadratic equality score when the
        clamped range allows one), or the aggregate's own head where it can
        (clamped_by_head); built in the stage that computes the node, cached
        by node, stage and range."""
        stage = self.pg.stage.get(node, self.stage)

        def build():
            by_head = self.clamped_by_head(node, r, a, b, square, stage)
            if by_head is not None:
                return by_head
            x = r.numeric()
            dim = self.alloc(f"clamp {a}..{b}")
            units = [Unit(x, -float(a), {dim: 1.0}), Unit(x, -float(b), {dim: -1.0})]
            self.mlp(self.op_label("clamp", node), units, {dim})
            out = Num(lin_add({dim: 1.0}, (float(a), NOTBOS)), a, b)
            if square and A.numeric_eq_exact(self.magnitudes(out)):
                self.add_square(node, out)
            return out
        return self.in_node_stage(node, ("clamp", node, a, b, square), build)

    def clamped_by_head(self, node, r, a, b, square, stage):
        """For `clamped`: agg + c, an aggregate that returns one key's value
        (max/min, or a unique key), narrowed by two more value rows of its own
        head instead of two ReLUs and a square table: agg + c (a one-hot
        value: clamp(value + c, a, b)) and its square, with clamp(default + c,
        a, b) and its square at BOS.  Values at keys keep their place outside
        [a, b] (the range may grow a little past it): as with the clamp, a
        value below a + 1 (above b - 1) can equal nothing on the other side.
        None where this does not apply."""
        c = 0
        while isinstance(node, ir.Map) and node.op in ("add", "sub") and node not in self.value_heads:
            consts = [i for i in node.inputs if isinstance(i, ir.Const)]
            if len(consts) != 1 or (node.op == "sub" and node.inputs[1] is not consts[0]):
                return None
            c += consts[0].value if node.op == "add" else -consts[0].value
            node = next(i for i in node.inputs if not isinstance(i, ir.Const))
        if node not in self.value_heads:
            return None
        op, v, default = self.value_heads[node]
        if op.stage != stage:
            return None
        agg = self.reps[node]
        if lin_add(agg.numeric(), (float(c), NOTBOS)) != r.numeric():
            return None
        d = min(max(default + c, a), b)
        if isinstance(v, Cat):
            # each one-hot value's row weight is its own clamped value (values
            # that clamp alike share it: a sum over the code, no dict of values)
            at = {w: min(max(w + c, a), b) for w in v.vals}
            lo, hi = min(min(at.values()), d), max(max(at.values()), d)
            value = lin_add(*[(float(at[w]), l) for w, l in v.vals.items()])
            sq = lin_add(*[(float(at[w]) ** 2, l) for w, l in v.vals.items()])
        else:
            lo, hi = min(v.lo + c, a), max(v.hi + c, b)
            value = lin_add(v.numeric(), (float(c), NOTBOS))
            sq = None if v.square() is None else \
                lin_add(v.square(), (2.0 * c, v.numeric()), (float(c * c), NOTBOS))
        if square and (sq is None or not A.numeric_eq_exact([max(abs(lo), abs(hi))])):
            return None
        rows = [(value, float(d), "clamp")] + ([(sq, float(d * d), "clamp^2")] if square else [])
        dims = []
        stage, self.stage = self.stage, op.stage
        try:
            for row, bos, name in rows:
                dims.append(self.alloc(f"{op.label} {name}"))
                op.v.append(row)
                op.v_bos.append(bos)
                op.o.append({dims[-1]: 1.0})
                self.writer[dims[-1]] = op
        finally:
            self.stage = stage
        op.writes = sorted(set(op.writes) | set(dims))
        return Num({dims[0]: 1.0}, lo, hi, {dims[1]: 1.0} if len(dims) > 1 else None)

    FORCE_DIGITS = False     # tests: compare every numeric equality by digits (digit_select)
    FORCE_ROT = False        # tests: compare positions by rotary codes wherever they have them
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

    def in_node_stage(self, node, key, build):
        """build(), run in the stage that computes `node` (a prelude value's
        tables are not recomputed at every loop iteration); cached by key and
        that stage."""
        stage = self.pg.stage.get(node, self.stage)
        key = (key, stage)
        if key not in self.onehots:
            outer, self.stage = self.stage, stage if stage in ("pre", "body", "post") else self.stage
            try:
                self.onehots[key] = build()
            finally:
                self.stage = outer
        return self.onehots[key]

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

    def onehot(self, node, r):
        """A numeric s-op as a one-hot code over its range at the design length
        (one table; cached per stage).  Exact for inputs up to L; beyond L the
        table holds its last value."""
        if isinstance(r, Cat):
            return r
        lo, hi = int(np.floor(r.lo)), int(np.ceil(r.hi))
        key = (node, self.stage, lo, hi)      # (a narrowed rep of the node has its own code)
        if key not in self.onehots:
            if hi - lo > self.ONEHOT_LIMIT:
                raise self.error(node, f"{self.what(node)} ranges over {hi - lo + 1} values at length "
                                 f"{self.L}; a select comparing it with another number needs a one-hot "
                                 f"code of at most {self.ONEHOT_LIMIT + 1} values")
            self.onehots[key] = self.tabulate(node, r, lambda v: v, True)
        return self.onehots[key]

    def attn(self, label, spec, outs):
        op = Op("attn", label, self.stage, q=spec["q"], k=spec["k"], k_bos=spec["k_bos"],
                v=spec["v"], v_bos=spec["v_bos"], o=outs)
        op.writes = sorted({d for o in outs for d in o})
        return self.add_op(op)

    def default_of(self, node):
        d = node.default
        if isinstance(d, ir.Const):
            return d.value
        if isinstance(d, ir.Full) and isinstance(d.inputs[0], ir.Const):
            return d.inputs[0].value
        raise self.error(node, "the default of an aggregate must be a constant for the compiler")

    def shift_head(self, t):
        """(kind, key, query) of the head selecting the key t positions back:
        the quadratic score while it is exact, else rotary codes; None where
        neither is exact at this length (select_kind then takes the general path)."""
        key = Num(lin_add({IDX: 1.0}, (float(t), NOTBOS)), t, self.L - 1 + t,
                  lin_add({IDX2: 1.0}, (2.0 * t, {IDX: 1.0}), (float(t * t), NOTBOS)), (1, t))
        q = self.reps_indices()
        if self.FORCE_ROT or not A.numeric_eq_exact(self.magnitudes(key, q)):
            return self.rot_pair(key, q)
        return "num", key, q

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

    def reps_indices(self):
        return Num({IDX: 1.0}, 0, self.L - 1, {IDX2: 1.0}, (1, 0))

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
