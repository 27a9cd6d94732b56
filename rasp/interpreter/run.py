"""One batched execution (`Run`): memoized node values, the active-input mask,
blocks and loops, the trace, run-time errors located at the inputs that
compute the failing node, and the choice between a fast aggregate rule and
the dense selector path."""
from __future__ import annotations

import numpy as np

from .. import budget
from ..errors import RaspRuntimeError
from ..ir import (SCALAR, SELECTOR, SOP, Bind, Full, HostExpr, Indices, Loop, LoopOut, LoopState,
                  Map, Node, ProgramIR, Select)
from .elementwise import PREDICATES
from ..trace import TraceEvent
from .hosts import OVERFLOW_MESSAGE, HostValues, i64, int64_overflow
from .nodes import EVAL
from .ranges import INT_DTYPES, Ranges
from .reductions import RULES, dense_reduce

DENSE_BUDGET_BYTES = 200 * 2**20     # cap for [B, N, N] temporaries


class Run:
    """State of one batched execution: memoized node values, the active-input
    mask, loop bookkeeping and the trace."""

    def __init__(self, ir, tokens, lengths, params, trace, limits):
        self.ir = ir
        self.tokens, self.lengths = tokens, lengths
        self.B, self.N = tokens.shape
        self.pos = np.arange(self.N, dtype=np.int64)
        self.valid = self.pos[None, :] < lengths[:, None]          # [B, N]
        self.all_valid = bool(self.valid.all())
        self.live = np.ones(self.B, dtype=bool)                     # inputs executing now
        self.env: dict = {}
        self.final: dict = {}          # LoopVar -> value after its loop's latest run
        self.ran: dict = {}            # Loop -> [B] iterations in its latest run
        self.settled: dict = {}        # `until stable` Loop -> [B, N] last step a position changed in its latest run
        self.steps = np.zeros((self.B, len(ir.loops)), dtype=np.int64)
        self.limits = limits
        self.events = [] if trace else None
        self.step_path: list = []
        self.clear = _loop_scopes(ir)
        self.hosts = HostValues(ir, tokens, lengths, params)
        self.params = self.hosts.params
        self.reach_cache: dict = {}
        self.meter = budget.Meter(ir, self.hosts, lengths, limits.max_work, limits.max_steps,
                                  limits.advice("--max-work"))
        self.meter.check_before_run()
        self.dtype: dict = {}
        ranges = Ranges(self)
        self.dtype = ranges.dtypes()              # node -> narrowest safe int dtype
        self.may_overflow = ranges.overflow       # maps whose exact result may leave int64

    # -- errors ---------------------------------------------------------------
    def fail(self, message, loc, bad_rows, node=None):
        """Raise for the first input flagged in `bad_rows` ([B] bool) -- of
        those that really compute `node` (see `reach`)."""
        if node is not None:
            bad_rows = bad_rows & self.reach(node)
            if not bad_rows.any():
                return
        b = int(np.argmax(bad_rows))
        raise RaspRuntimeError(message, loc=loc, source=self.ir.source, input_index=b)

    def reach(self, node) -> np.ndarray:
        """[B] bool: inputs for which the program computes `node`.  A node
        hoisted out of loops (node.block) that the source computes inside them
        (node.use_block) is computed here for every executing input, but only
        inputs for which each of those loops runs at least once count: an
        error in `loop 0:` is no error.  Loop counts depend on the input
        alone, so this is known before the loops run."""
        use = getattr(node, "use_block", None)
        if use is None or use is node.block:
            return self.live
        key = (id(node.block), id(use))
        mask = self.reach_cache.get(key)
        if mask is None:
            mask = np.ones(self.B, dtype=bool)
            block = use
            while block is not None and block is not node.block:
                if block.loop is not None:
                    count, err = self.hosts.value(block.loop.count)
                    runs = count > 0
                    mask &= runs if err is None else runs | (err != 0)   # (its count fails itself)
                block = block.parent
            self.reach_cache[key] = mask
        return mask & self.live

    def host(self, e: HostExpr, loc, node=None) -> np.ndarray:
        """[B] values of a host expression; an error in it counts for the
        inputs executing now (that compute `node`)."""
        return self.hosts.checked(e, loc, self.live if node is None else self.reach(node))

    # -- values ---------------------------------------------------------------
    def value(self, node: Node):
        try:
            return self.env[node]
        except KeyError:
            pass
        v = EVAL[type(node)](self, node)
        if isinstance(v, np.ndarray) and node.kind != SELECTOR:
            v = v.astype(self.dtype_of(node), copy=False)
            self.meter.linear += 1
        self.env[node] = v
        return v

    def sop(self, v, dtype=None) -> np.ndarray:
        """A value as an s-op array [B, N] (scalars broadcast)."""
        if isinstance(v, np.ndarray) and v.shape == (self.B, self.N):
            return v
        return np.broadcast_to(np.asarray(v, dtype=dtype).reshape(-1, 1), (self.B, self.N))

    def dtype_of(self, node) -> np.dtype:
        return self.dtype.get(node, INT_DTYPES[-1])

    def typed(self, v, node):
        """A Python int as a NumPy scalar of `node`'s dtype (it fits: the
        node's range covers it), so it does not widen the arrays it meets."""
        return self.dtype_of(node).type(v) if isinstance(v, int) else v

    def scalar_of(self, node: Node):
        """The scalar value of `node` if it is a scalar or full(scalar), else None."""
        if node.kind == SCALAR:
            return self.value(node)
        if isinstance(node, Full):
            return self.value(node.inputs[0])
        return None

    def offset_of(self, node):
        s = self.scalar_of(node)
        return i64(s) if isinstance(s, np.ndarray) else s

    def index_offset(self, node: Node):
        """c (int or [B, 1]) if `node` is indices + c for a scalar c, else None."""
        if isinstance(node, Indices):
            return 0
        if isinstance(node, Map) and node.op in ("add", "sub"):
            a, b = node.inputs
            ca = self.index_offset(a)
            if ca is not None:
                s = self.offset_of(b)
                if s is not None:
                    return ca + s if node.op == "add" else ca - s
            if node.op == "add":
                cb = self.index_offset(b)
                s = self.offset_of(a)
                if cb is not None and s is not None:
                    return cb + s
        return None

    def divide(self, node: Map, x, y):
        zero = np.equal(y, 0)
        if zero.any():
            self.fail_at(node, zero, "division by zero")
            y = np.where(zero, 1, y)
        out = np.floor_divide(x, y) if node.op == "floordiv" else np.mod(x, y)
        if node.op == "floordiv" and node in self.may_overflow:       # INT64_MIN // -1
            self.fail_at(node, int64_overflow("floordiv", [x, y], out), OVERFLOW_MESSAGE)
        return out

    def fail_at(self, node, bad, message):
        """Raise `message` if `bad` (broadcastable to [B, N] or [B, 1]) holds
        at a valid position of an input that computes `node`."""
        if not np.any(bad):
            return
        bad = np.asarray(bad)
        bad = np.broadcast_to(bad.reshape(self.B, -1) if bad.ndim else bad, (self.B, self.N))
        rows = (bad & self.valid).any(axis=1) & self.live
        if rows.any():
            self.fail(message, node.loc, rows, node)

    # -- blocks, loops, binds ----------------------------------------------------
    def block(self, block):
        for item in block.items:
            if isinstance(item, Loop):
                self.loop(item)
            elif isinstance(item, Bind):
                self.bind(item)
            elif item.kind == SELECTOR or isinstance(item, (LoopOut, LoopState)):
                continue        # built on demand (most selectors never are)
            else:
                self.value(item)

    def loop(self, loop: Loop):
        outer_live = self.live
        count = np.where(outer_live, np.maximum(self.host(loop.count, loop.loc), 0), 0)
        limit = self.limits.max_steps
        if not loop.until_stable and (count > limit).any():
            self.fail_limit(loop, count > limit)
        state = {v: None if v.init is None else self.as_kind(self.value(v.init), v.kind)
                 for v in loop.vars}
        ran = np.zeros(self.B, dtype=np.int64)
        settled = np.zeros((self.B, self.N), dtype=np.int64) if loop.until_stable else None
        active = count > 0
        t = 0
        self.step_path.append(0)
        meter = self.meter
        try:
            while active.any():
                if t >= limit:
                    self.fail_limit(loop, active)
                meter.flush(self.live)
                before, upper_before = meter.work.copy(), meter.upper
                t += 1
                self.step_path[-1] = t
                self.live = active
                for node in self.clear.get(loop, ()):
                    self.env.pop(node, None)
                for var in loop.vars:
                    self.env[var.state] = state[var]
                self.block(loop.body)
                new = {v: self.as_kind(self.value(v.update), v.kind) for v in loop.vars}
                changed = np.zeros((self.B, self.N), dtype=bool)
                all_active = bool(active.all())
                for var in loop.vars:
                    old = state[var]
                    if loop.until_stable and var.kind != SELECTOR:
                        changed |= self.valid if old is None else self.changed_at(old, new[var])
                    if old is None or all_active:
                        state[var] = new[var]
                    else:       # inputs whose count ran out keep their state
                        merged = old.astype(np.result_type(old, new[var]))      # a copy
                        merged[active] = new[var][active]
                        state[var] = merged
                ran += active
                meter.flush(active)
                meter.check_loop(loop, active, before, upper_before, count, t, self.fail)
                if settled is not None:
                    settled[changed & active[:, None]] = t
                active = active & (t < count)
                if loop.until_stable:
                    active &= changed.any(axis=1)
        finally:
            self.step_path.pop()
            self.live = outer_live
        self.steps[:, loop.index] += ran
        self.ran[loop] = ran
        if settled is not None:
            self.settled[loop] = settled
        for var in loop.vars:
            self.final[var] = state[var]

    def fail_limit(self, loop, rows):
        self.fail(f"the loop ran more than {self.limits.max_steps} steps ({self.limits.advice('--max-steps')})",
                  loop.loc, rows)

    def changed_at(self, old, new) -> np.ndarray:
        """[B, N] bool: the value changed at that valid position (a scalar: at all of them)."""
        return self.sop(old != new) & self.valid

    def as_kind(self, v, kind):
        if kind == SOP:
            return self.sop(v)
        return v

    def bind(self, item: Bind):
        if self.events is None or not self.live[0]:
            return          # binds only matter for traces (of input 0)
        node = item.node
        if isinstance(node, LoopOut) and self.undefined(node).any():
            return          # the name has no value here; reading it is the error
        v = self.value(node)
        if node.kind == SELECTOR:
            if isinstance(node, Select):
                v = self.selector_rows(node, slice(0, 1))
            n = int(self.lengths[0])
            shown = v[0, :n, :n].astype(int).tolist()
        elif node.kind == SCALAR:
            shown = int(np.asarray(v).reshape(-1)[0])
        else:
            shown = self.sop(v)[0, :int(self.lengths[0])].tolist()
        self.events.append(TraceEvent(item.name, item.loc, tuple(self.step_path), node.kind, shown))

    def input_event(self):
        if self.events is not None:
            loc = getattr(self.ir.input, "loc", None)
            self.events.append(TraceEvent(self.ir.input_name, loc, (), SOP,
                                          self.tokens[0, :int(self.lengths[0])].tolist()))

    def output_event(self, out):
        if self.events is not None:
            self.events.append(TraceEvent("output", self.ir.output_loc, (), SOP,
                                          out[0, :int(self.lengths[0])].tolist()))

    def undefined(self, node: LoopOut) -> np.ndarray:
        """[B] bool: executing inputs for which the loop variable has no value."""
        if node.var.init is not None:
            return np.zeros(self.B, dtype=bool)
        return self.live & (self.ran[node.loop] == 0)

    # -- selectors: dense rows (fallback and traces) --------------------------------
    def selector_rows(self, sel: Node, rows: slice) -> np.ndarray:
        """bool [b, N, N] for the inputs in `rows`."""
        if not isinstance(sel, Select):
            return self.value(sel)[rows]
        nb = len(range(*rows.indices(self.B)))
        causal = self.pos[None, :] <= self.pos[:, None]            # [q, k]
        if sel.pred == "always":
            return np.broadcast_to(causal, (nb, self.N, self.N))
        k = _rows(self.value(sel.key), rows)
        q = _rows(self.value(sel.query), rows)
        k3 = k[:, None, :] if isinstance(k, np.ndarray) else k
        q3 = q[:, :, None] if isinstance(q, np.ndarray) else q
        a = PREDICATES[sel.pred](k3, q3) & causal
        return np.broadcast_to(a, (nb, self.N, self.N))

    def reduce(self, sel: Node, x, red: str, default):
        """Aggregate `x` (None for sel_width) over selector `sel`.  The rules
        and the dense path only ever see an s-op array x (or None)."""
        if red != "width" and (not isinstance(x, np.ndarray) or x.shape[1] == 1):
            # mean / max / min of a constant value is that value
            return np.where(self.reduce(sel, None, "width", 0) > 0, x, default)
        if isinstance(sel, Select):
            for rule in RULES:
                out = rule(self, sel, x, red, default)
                if out is not None:
                    return self.sop(out)
        return self.dense_reduce(sel, x, red, default)

    def dense_reduce(self, sel, x, red, default):
        B, N = self.B, self.N
        self.meter.quadratic += 1
        chunk = max(1, DENSE_BUDGET_BYTES // (N * N * 9))
        out = np.empty((B, N), dtype=np.int64)
        for lo in range(0, B, chunk):
            rows = slice(lo, min(B, lo + chunk))
            a = self.selector_rows(sel, rows)
            out[rows] = dense_reduce(a, _rows(x, rows), red, _rows(default, rows))
        return out


def _rows(v, rows: slice):
    """Rows of a per-input value; Python ints are the same for every input."""
    return v[rows] if isinstance(v, np.ndarray) else v


def _loop_scopes(ir: ProgramIR) -> dict:
    """Loop -> the nodes to recompute at each of its iterations: those placed in
    its body, and any node that depends on its loop state (found from the
    inputs, so a mis-placed node is still never stale)."""
    parent: dict = {}      # Loop -> enclosing Loop or None
    depth: dict = {None: 0}
    clear: dict = {}
    nodes: list = []

    def walk(block, enclosing):
        for item in block.items:
            if isinstance(item, Loop):
                parent[item] = enclosing
                depth[item] = depth[enclosing] + 1
                clear[item] = {i: None for i in item.body.items if isinstance(i, Node)}
                for v in item.vars:
                    nodes.extend(n for n in (v.init, v.update) if n is not None)
                walk(item.body, item)
            elif isinstance(item, Bind):
                nodes.append(item.node)
            else:
                nodes.append(item)

    walk(ir.body, None)
    nodes.append(ir.output)
    scope: dict = {}

    def scope_of(node):
        if node in scope:
            return scope[node]
        if isinstance(node, LoopState):
            s = node.loop
        elif isinstance(node, LoopOut):
            s = parent.get(node.loop)
        else:
            s = None
            for i in node.inputs:
                si = scope_of(i)
                if depth.get(si, 0) > depth.get(s, 0):
                    s = si
        scope[node] = s
        return s

    for n in nodes:
        scope_of(n)
    for n, s in scope.items():
        if s is not None:
            clear[s][n] = None
    return {loop: list(ns) for loop, ns in clear.items()}
