"""Batched NumPy interpreter for lowered n-RASP-L programs (`ProgramIR`).

`execute(ir, batch)` runs a whole batch at once.  Inputs are right-padded to a
`[B, N]` int64 array; every operation is causal, so padding never changes a
valid position (and errors are only raised for valid positions of inputs
that actually execute the operation).

Values, by node kind:
    s-op      int array [B, N] (possibly a read-only broadcast view)
    scalar    Python int (Const) or int array [B, 1] (Host and maps of it)
    selector  bool array [B, N, N], built only when something needs the matrix

Integer arrays use the narrowest dtype that holds every value the node can
take (`_Ranges`: interval analysis over the graph, with the batch's actual
tokens, lengths and params).  Element-wise work on bits in int8 moves an
eighth of the memory of int64; each operation computes in a dtype that holds
its operands and its result, so results are exactly those of int64.

Aggregates and sel_width never need the matrix for the common selector
shapes: a table of rules (`_RULES`) recognises them and computes the same
result in O(N) or O(N log N) per sequence; anything else falls back to the
dense path, chunked over the batch so [B, N, N] temporaries stay small.

Large batches of very mixed lengths are split into a few groups of similar
length (`_length_groups`), each padded and looped only as far as it needs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from . import budget
from .errors import RaspError, RaspRequireError, RaspRuntimeError
from .ir import (SCALAR, SELECTOR, SOP, Aggregate, Bind, Const, Full, Host, HostExpr, Indices,
                 Input, Lookup, Loop, LoopOut, LoopState, Map, Node, ProgramIR, Select, SelWidth)
from .limits import RunLimits
from .operators import HOST_BINARY, PREDICATES
from .operators import NUMPY as NUMPY_OPS
from .trace import TraceEvent
from .valuesets import in_table, lookup

I64_MIN = np.int64(np.iinfo(np.int64).min)     # NumPy scalars: never narrowed
I64_MAX = np.int64(np.iinfo(np.int64).max)
DENSE_BUDGET_BYTES = 200 * 2**20     # cap for [B, N, N] temporaries


@dataclass
class BatchResult:
    outputs: list                    # list[list[int]], each as long as its input
    steps: np.ndarray                # [B, len(ir.loops)] iterations each loop ran
    trace: Optional[list] = None     # list[TraceEvent] for input 0, when asked


GROUP_WORK = 2**16                   # padded tokens per length group (see _length_groups)


def execute(ir: ProgramIR, batch: list, params: Optional[dict] = None, *,
            trace: bool = False, limits: RunLimits = RunLimits()) -> BatchResult:
    """Run `ir` on every input of `batch` (validated lists of ints)."""
    groups = [] if trace else _length_groups([len(x) for x in batch])
    if len(groups) > 1:
        try:
            parts = [(idx, _execute(ir, [batch[b] for b in idx], params, False, limits))
                     for idx in groups]
        except RaspRuntimeError:
            pass        # run as one batch: the error names the same input as always
        else:
            outputs = [None] * len(batch)
            steps = np.empty((len(batch), len(ir.loops)), dtype=np.int64)
            for idx, res in parts:
                for out, b in zip(res.outputs, idx):
                    outputs[b] = out
                steps[idx] = res.steps
            return BatchResult(outputs, steps, None)
    return _execute(ir, batch, params, trace, limits)


def _length_groups(lengths: list) -> list:
    """Large batches of mixed lengths run in groups of similar length: padding
    to each group's own longest input and looping to each group's own largest
    count saves more than the extra per-group overhead costs.  Returns lists of
    input indices (a single group, or none, when grouping does not pay)."""
    if len(lengths) < 128:
        return []
    n_groups = 1
    while n_groups < 4 and len(lengths) * max(lengths) >= GROUP_WORK * 2 * n_groups:
        n_groups *= 2
    if n_groups == 1 or max(lengths) < 1.25 * min(lengths):
        return []
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    bounds = [len(order) * g // n_groups for g in range(n_groups + 1)]
    return [order[lo:hi] for lo, hi in zip(bounds, bounds[1:])]


def pad_batch(batch: list):
    """Right-pad token lists into ([B, N] int64 tokens, [B] lengths)."""
    lengths = np.array([len(x) for x in batch], dtype=np.int64)
    if (lengths == lengths[0]).all():
        return np.array(batch, dtype=np.int64).reshape(len(batch), -1), lengths
    tokens = np.zeros((len(batch), int(lengths.max())), dtype=np.int64)
    for b, x in enumerate(batch):
        tokens[b, :len(x)] = x
    return tokens, lengths


def _execute(ir, batch, params, trace, limits) -> BatchResult:
    if not batch:
        return BatchResult([], np.zeros((0, len(ir.loops)), dtype=np.int64), [] if trace else None)
    tokens, lengths = pad_batch(batch)
    # padded positions may overflow or divide garbage: never an error there
    with np.errstate(all="ignore"):
        run = _Run(ir, tokens, lengths, params or {}, trace, limits)
        _check_requires(run)
        run.input_event()
        run.block(ir.body)
        out = run.sop(run.value(ir.output))
    run.output_event(out)
    if (lengths == run.N).all():
        outputs = out.tolist()
    else:
        outputs = [out[b, :n].tolist() for b, n in enumerate(lengths.tolist())]
    return BatchResult(outputs, run.steps, run.events)


def check_requires(ir: ProgramIR, batch: list, params: Optional[dict] = None) -> None:
    """Raise RaspRequireError if an input of `batch` breaks a `require` of
    the program (for back ends that do not run the program itself)."""
    if ir.requires and batch:
        tokens, lengths = pad_batch(batch)
        with np.errstate(all="ignore"):
            _check_requires(_Run(ir, tokens, lengths, params or {}, False, RunLimits()))


def _check_requires(run: "_Run") -> None:
    """Every require condition must be nonzero at every (valid) position."""
    failures = []
    for req in run.ir.requires:
        v = run.value(req.node)
        if isinstance(v, np.ndarray) and v.shape == (run.B, run.N):
            bad = ((v == 0) & run.valid).any(axis=1)
        else:
            bad = np.broadcast_to(np.asarray(v).reshape(-1) == 0, (run.B,))
        if bad.any():
            failures.append((req.message, req.loc, np.flatnonzero(bad).tolist()))
    if failures:
        raise RaspRequireError(failures, run.ir.source)


# ---- element-wise operators -----------------------------------------------------

def _i64(x):
    return np.asarray(x).astype(np.int64, copy=False)


# ---- the run --------------------------------------------------------------------

def check_param_names(ir: ProgramIR, overrides) -> None:
    unknown = set(overrides or ()) - set(ir.params)
    if unknown:
        declared = ", ".join(ir.params) or "none"
        raise RaspError(f"unknown param '{sorted(unknown)[0]}' (the program declares: {declared})")


DIVISION_BY_ZERO, OVERFLOW = 1, 2       # host error codes, per input
HOST_ERRORS = {DIVISION_BY_ZERO: "division by zero",
               OVERFLOW: "integer overflow: the result does not fit in a 64-bit int"}


def _first_error(a, b):
    """Merge [B] error codes (None: no error anywhere); the first one wins."""
    if a is None:
        return b
    if b is None:
        return a
    return np.where(a != 0, a, b)


class HostValues:
    """Host expressions (params, loop counts) of a padded batch as [B] int64
    arrays, cached.  The interpreter and compiled models both use it.
    Division by zero and int64 overflow are errors, reported only for the
    inputs that need the value (`checked(..., rows)`)."""

    def __init__(self, ir: ProgramIR, tokens: np.ndarray, lengths: np.ndarray, overrides: dict):
        check_param_names(ir, overrides)
        self.ir, self.tokens, self.lengths = ir, tokens, lengths
        self.valid = np.arange(tokens.shape[1])[None, :] < lengths[:, None]
        self.cache: dict = {}
        self.params: dict = {}      # filled in declaration order: a param reads only earlier ones
        everyone = np.ones(len(lengths), dtype=bool)
        for name, p in ir.params.items():
            if name in overrides:
                self.params[name] = np.full(len(lengths), int(overrides[name]), dtype=np.int64)
            else:
                self.params[name] = self.checked(p.expr, p.loc, everyone)

    def checked(self, e: HostExpr, loc, rows: np.ndarray) -> np.ndarray:
        """Values of `e`; an error in it is raised for the first input in `rows`."""
        v, err = self.value(e)
        if err is not None:
            bad = (err != 0) & rows
            if bad.any():
                b = int(np.argmax(bad))
                raise RaspRuntimeError(HOST_ERRORS[int(err[b])], loc=loc, source=self.ir.source,
                                       input_index=b)
        return v

    def value(self, e: HostExpr):
        """(values, [B] error codes of `e` or None when none), cached."""
        try:
            return self.cache[e]
        except KeyError:
            pass
        op, a = e.op, e.args
        zero = None
        if op == "lit":
            v = np.full(len(self.lengths), a[0], dtype=np.int64)
        elif op == "param":
            if a[0] not in self.params:      # the lowering lets a param read only earlier ones
                raise RaspError(f"param '{a[0]}' is read before it is computed")
            v = self.params[a[0]]
        elif op == "len":
            v = self.lengths
        elif op in ("count", "count_before"):
            hit = (self.tokens == a[0]) & self.valid
            if op == "count":
                v = hit.sum(axis=1)
            else:
                v = np.where(hit.any(axis=1), hit.argmax(axis=1), self.lengths)
        elif op == "neg":
            x, zero = self.value(a[0])
            with np.errstate(all="ignore"):
                v = -x
            zero = _first_error(zero, _codes(int64_overflow("neg", [x], v)))
        else:
            (x, zx), (y, zy) = self.value(a[0]), self.value(a[1])
            zero = _first_error(zx, zy)
            with np.errstate(all="ignore"):
                if op in ("floordiv", "mod"):
                    z = y == 0
                    if z.any():
                        zero = _first_error(zero, z.astype(np.int8) * DIVISION_BY_ZERO)
                        y = np.where(z, 1, y)
                    v = np.floor_divide(x, y) if op == "floordiv" else np.mod(x, y)
                else:
                    v = HOST_BINARY[op](x, y)
            zero = _first_error(zero, _codes(int64_overflow(op, [x, y], v)))
        self.cache[e] = (v, zero)
        return v, zero


def _codes(overflow):
    return None if overflow is None or not overflow.any() else overflow.astype(np.int8) * OVERFLOW


_MIN = np.iinfo(np.int64).min


def int64_overflow(op: str, args: list, out):
    """Exactly where int64 `op` wrapped: bool array (broadcast shape of
    `args`), or None when `op` cannot overflow.  `out` is the wrapped result."""
    if op == "add":
        x, y = args
        return ((x ^ out) & (y ^ out)) < 0
    if op == "sub":
        x, y = args
        return ((x ^ y) & (x ^ out)) < 0
    if op in ("neg", "abs"):
        return np.equal(args[0], _MIN)
    if op == "floordiv":
        x, y = args
        return np.equal(x, _MIN) & np.equal(y, -1)
    if op == "mul":
        x, y = args
        with np.errstate(all="ignore"):
            back = np.floor_divide(out, np.where(np.equal(x, 0), 1, x))
        return (np.not_equal(x, 0) & np.not_equal(back, y)) | (np.equal(x, -1) & np.equal(y, _MIN))
    return None


def host_values(ir: ProgramIR, batch: list, e: HostExpr, loc=None, params: Optional[dict] = None) -> np.ndarray:
    """[B] values of host expression `e` (e.g. a loop count) on raw inputs."""
    tokens, lengths = pad_batch(batch)
    hosts = HostValues(ir, tokens, lengths, params or {})
    return hosts.checked(e, loc, np.ones(len(batch), dtype=bool))


class _Run:
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
        self.steps = np.zeros((self.B, len(ir.loops)), dtype=np.int64)
        self.limits = limits
        self.events = [] if trace else None
        self.step_path: list = []
        self.clear = _loop_scopes(ir)
        self.hosts = HostValues(ir, tokens, lengths, params)
        self.params = self.hosts.params
        self.reach_cache: dict = {}
        self.meter = budget.Meter(ir, self.hosts, lengths, limits.max_work, limits.max_steps)
        self.meter.check_before_run()
        self.dtype: dict = {}
        ranges = _Ranges(self)
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
        v = _EVAL[type(node)](self, node)
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
        return self.dtype.get(node, _INT_DTYPES[-1])

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
        return _i64(s) if isinstance(s, np.ndarray) else s

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
                changed = np.zeros(self.B, dtype=bool)
                all_active = bool(active.all())
                for var in loop.vars:
                    old = state[var]
                    if loop.until_stable and var.kind != SELECTOR:
                        changed |= True if old is None else self.differs(old, new[var])
                    if old is None or all_active:
                        state[var] = new[var]
                    else:       # inputs whose count ran out keep their state
                        merged = old.astype(np.result_type(old, new[var]))      # a copy
                        merged[active] = new[var][active]
                        state[var] = merged
                ran += active
                meter.flush(active)
                meter.check_loop(loop, active, before, upper_before, count, t, self.fail)
                active = active & (t < count)
                if loop.until_stable:
                    active &= changed
        finally:
            self.step_path.pop()
            self.live = outer_live
        self.steps[:, loop.index] += ran
        self.ran[loop] = ran
        for var in loop.vars:
            self.final[var] = state[var]

    def fail_limit(self, loop, rows):
        self.fail(f"the loop ran more than {self.limits.max_steps} steps; raise the limit "
                  f"with --max-steps", loop.loc, rows)

    def differs(self, old, new) -> np.ndarray:
        """[B] bool: the s-op changed at some valid position."""
        return ((old != new) & self.valid).any(axis=1)

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
            for rule in _RULES:
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
            out[rows] = _dense_reduce(a, _rows(x, rows), red, _rows(default, rows))
        return out


def _rows(v, rows: slice):
    """Rows of a per-input value; Python ints are the same for every input."""
    return v[rows] if isinstance(v, np.ndarray) else v


# ---- node evaluation ----------------------------------------------------------------

def _eval_lookup(run: _Run, node: Lookup):
    """T[x] / T[x][y] by fancy indexing; an index outside the table at a valid
    position is a located error (padding may hold anything: read entry 0)."""
    args = [_i64(run.value(i)) for i in node.inputs]
    ok = in_table(node.table, args)
    if not ok.all():
        shape = node.table.shape
        bad = np.broadcast_to(~ok, (run.B, run.N)) & run.valid & run.live[:, None]
        if bad.any():
            b, i = map(int, np.argwhere(bad)[0])
            index = ", ".join(str(int(np.broadcast_to(a, (run.B, run.N))[b, i])) for a in args)
            run.fail_at(node, ~ok, f"the lookup table '{node.table.name}' has indices "
                        f"{' x '.join(f'0..{n - 1}' for n in shape)}, but position {i} reads "
                        f"[{index}]")
    out = lookup(node.table, args, ok)
    if node.kind == SCALAR:
        return out.reshape(run.B, 1)
    return run.sop(out.astype(run.dtype_of(node), copy=False))


def _eval_map(run: _Run, node: Map):
    args = [run.value(i) for i in node.inputs]
    # compute in a dtype that holds the operands and the result: then
    # wrapping arithmetic in it is exact
    dtype = run.dtype_of(node)
    for a, i in zip(args, node.inputs):
        dtype = np.promote_types(dtype, a.dtype if isinstance(a, np.ndarray) else run.dtype_of(i))
    args = [a.astype(dtype, copy=False) if isinstance(a, np.ndarray) else dtype.type(a) for a in args]
    if node.op in ("floordiv", "mod"):
        out = run.divide(node, *args)
    else:
        out = NUMPY_OPS[node.op](*args)
        if node in run.may_overflow and node.op in _OVERFLOWING:
            # values are Python ints in the language, int64 here: never wrap silently
            run.fail_at(node, int64_overflow(node.op, args, out), OVERFLOW_MESSAGE)
    if np.ndim(out) == 0:
        return int(out)
    if out.dtype == np.bool_:
        out = out.view(np.int8)
    if node.kind == SCALAR:
        return out.reshape(run.B, 1)
    return run.sop(out)


_OVERFLOWING = {"add", "sub", "mul", "neg", "abs"}
OVERFLOW_MESSAGE = HOST_ERRORS[OVERFLOW]


def _eval_host(run: _Run, node: Host):
    if node.name is not None and node.name in run.params:
        return run.params[node.name].reshape(-1, 1)
    return run.host(node.expr, node.loc, node).reshape(-1, 1)


def _eval_aggregate(run: _Run, node: Aggregate):
    # full(c) values and defaults are used as the scalar c (cheaper to broadcast)
    x, d = (run.scalar_of(i) for i in (node.value, node.default))
    x = run.value(node.value) if x is None else x
    d = run.value(node.default) if d is None else d
    return run.reduce(node.selector, run.typed(x, node), node.reduction, run.typed(d, node))


def _eval_loop_state(run: _Run, node: LoopState):
    raise RaspRuntimeError(f"'{node.var.name}' is read in the loop before it is assigned",
                           loc=node.loc, source=run.ir.source)


def _eval_loop_out(run: _Run, node: LoopOut):
    bad = run.undefined(node)
    if bad.any():
        line = node.loop.loc.line if node.loop.loc else "?"
        run.fail(f"'{node.var.name}' is undefined: the loop at line {line} ran 0 times",
                 node.loop.loc, bad, node)
    value = run.final[node.var]
    if value is None:       # no input ran the loop, and none of them computes this node
        value = np.zeros((run.B, run.N, run.N) if node.kind == SELECTOR else (run.B, run.N), dtype=np.int8)
    return value


_EVAL = {
    Const: lambda run, n: n.value,
    Host: _eval_host,
    Input: lambda run, n: run.tokens,
    Indices: lambda run, n: np.broadcast_to(run.pos.astype(run.dtype_of(n)), (run.B, run.N)),
    Full: lambda run, n: run.sop(run.value(n.inputs[0]), run.dtype_of(n)),
    Map: _eval_map,
    Lookup: _eval_lookup,
    Select: lambda run, n: run.selector_rows(n, slice(None)),
    Aggregate: _eval_aggregate,
    SelWidth: lambda run, n: run.reduce(n.inputs[0], None, "width", 0),
    LoopState: _eval_loop_state,
    LoopOut: _eval_loop_out,
}


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


# ---- value ranges: the narrowest dtype for every node ------------------------------------

_INT_DTYPES = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64)]
_TOP = (int(I64_MIN), int(I64_MAX))


def _dtype_for(lo: int, hi: int) -> np.dtype:
    for dt in _INT_DTYPES:
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return dt
    return _INT_DTYPES[-1]


def _bits(lo: int, hi: int) -> int:
    """k such that every value in [lo, hi] lies in [-2^k, 2^k - 1]."""
    return max(lo.bit_length() if lo >= 0 else (-lo - 1).bit_length(),
               hi.bit_length() if hi >= 0 else (-hi - 1).bit_length())


def _hull(*rs):
    return (min(r[0] for r in rs), max(r[1] for r in rs))


def _map_range(op, rs):
    """An interval holding op's result for operands in the intervals `rs`."""
    (alo, ahi) = rs[0]
    if op in ("eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not"):
        return (0, 1)
    if op == "neg":
        return (-ahi, -alo)
    if op == "invert":
        return (-ahi - 1, -alo - 1)
    if op == "abs":
        return (alo, ahi) if alo >= 0 else (-ahi, -alo) if ahi <= 0 else (0, max(-alo, ahi))
    if op == "where":
        return _hull(rs[1], rs[2])
    (blo, bhi) = rs[1]
    if op == "add":
        return (alo + blo, ahi + bhi)
    if op == "sub":
        return (alo - bhi, ahi - blo)
    if op == "mul":
        p = [alo * blo, alo * bhi, ahi * blo, ahi * bhi]
        return (min(p), max(p))
    if op == "min":
        return (min(alo, blo), min(ahi, bhi))
    if op == "max":
        return (max(alo, blo), max(ahi, bhi))
    if op == "floordiv":          # |x // d| <= |x| for every divisor d != 0
        m = max(abs(alo), abs(ahi))
        return (-m, m)
    if op == "mod":               # the result has the divisor's sign, |r| < |d|
        if blo >= 1:
            return (0, bhi - 1)
        if bhi <= -1:
            return (blo + 1, 0)
        m = max(abs(blo), abs(bhi), 1)
        return (-(m - 1), m - 1)
    k = _bits(min(alo, blo), max(ahi, bhi))
    if op == "bitand":
        if alo >= 0 and blo >= 0:
            return (0, min(ahi, bhi))
        if alo >= 0 or blo >= 0:
            return (0, ahi if alo >= 0 else bhi)
        return (-(1 << k), max(ahi, bhi))     # a & b <= a when a >= 0, <= min(a, b) when both < 0
    # bitor / bitxor stay within the operands' two's-complement width
    if alo >= 0 and blo >= 0:
        return (0, (1 << k) - 1)
    return (-(1 << k), (1 << k) - 1)


class _Ranges:
    """Interval analysis: for every s-op and scalar node, [lo, hi] holding all
    its values at valid positions of this batch.  Loop states are solved as a
    fixpoint (hull of init and update), widened to int64 when they keep
    growing.  Padded positions may hold anything: they wrap harmlessly."""

    WIDEN_AFTER = 4
    EXACT_ROUNDS = 64

    def __init__(self, run: _Run):
        self.run = run
        self.r: dict = {}
        self.final: dict = {}
        self.overflow: set = set()

    def dtypes(self) -> dict:
        self.block(self.run.ir.body)
        self.of(self.run.ir.output)
        return {node: _dtype_for(*r) for node, r in self.r.items()}

    def block(self, block):
        for item in block.items:
            if isinstance(item, Loop):
                self.loop(item)
            elif isinstance(item, Bind):
                self.of(item.node)
            elif not isinstance(item, LoopState):
                self.of(item)

    def loop(self, loop):
        """Round r computes the body with the hull of the states of iterations
        1..r.  When the loop runs at most EXACT_ROUNDS times, that many rounds
        cover every iteration (a counter stays narrow); otherwise ranges that
        keep growing are widened to int64 until a fixpoint."""
        vars_ = [v for v in loop.vars if v.kind != SELECTOR]
        state = {v: None if v.init is None else self.of(v.init) for v in vars_}
        runs = int(self.run.hosts.value(loop.count)[0].max())
        exact = runs <= self.EXACT_ROUNDS
        for rounds in range(max(runs, 1) if exact else 64):
            for node in self.run.clear.get(loop, ()):
                self.r.pop(node, None)
            for v in vars_:
                self.r[v.state] = state[v] or (0, 0)   # no value yet: never read
            self.block(loop.body)
            new = {v: self.of(v.update) if state[v] is None else _hull(state[v], self.of(v.update))
                   for v in vars_}
            if new == state:
                break
            if not exact and rounds >= self.WIDEN_AFTER:
                new = {v: (r[0] if state[v] is None or r[0] >= state[v][0] else _TOP[0],
                           r[1] if state[v] is None or r[1] <= state[v][1] else _TOP[1])
                       for v, r in new.items()}
            state = new
        else:
            if not exact:
                raise AssertionError("range analysis did not converge")
        for v in vars_:
            self.final[v] = state[v]

    def of(self, node):
        if node.kind == SELECTOR:
            for i in node.inputs:
                self.of(i)
            return None
        try:
            return self.r[node]
        except KeyError:
            pass
        lo, hi = self.compute(node)
        if isinstance(node, Map) and (lo < _TOP[0] or hi > _TOP[1]):
            self.overflow.add(node)
        r = (max(lo, _TOP[0]), min(hi, _TOP[1]))
        self.r[node] = r
        return r

    def compute(self, node):
        run = self.run
        if isinstance(node, Const):
            return (node.value, node.value)
        if isinstance(node, (Host, Input)):
            v = _eval_host(run, node) if isinstance(node, Host) else run.tokens
            return (int(v.min()), int(v.max()))
        if isinstance(node, Indices):
            return (0, run.N - 1)
        if isinstance(node, Full):
            return self.of(node.inputs[0])
        if isinstance(node, Lookup):
            for i in node.inputs:
                self.of(i)
            values = node.table.entries()
            return (min(values), max(values))
        if isinstance(node, Map):
            return _map_range(node.op, [self.of(i) for i in node.inputs])
        if isinstance(node, SelWidth):
            self.of(node.inputs[0])
            return (0, run.N)
        if isinstance(node, Aggregate):
            self.of(node.selector)
            return _hull(self.of(node.value), self.of(node.default))
        if isinstance(node, LoopOut):
            return self.final.get(node.var, _TOP)
        return _TOP


# ---- reductions: finishing, dense path ------------------------------------------------

def _trunc_div(s, c):
    """s / c truncated toward zero, exactly (c > 0)."""
    q = np.abs(s) // c
    return np.where(s < 0, -q, q)


def _finish(cnt, stat, red, default):
    """From the number of selected keys and their sum/max/min to the result."""
    if red == "width":
        return cnt
    has = cnt > 0
    val = stat
    if red == "mean":
        c = np.maximum(cnt, 1)
        if c.max() > 1:       # (at most one selected key: the mean is the sum)
            val = stat // c if stat.min() >= 0 else _trunc_div(stat, c)
    return np.where(has, val, default)


def _exact_sum(a, x):
    """sum over k of a[b, q, k] * x[b, k], exactly, via BLAS when floats are exact."""
    n = a.shape[-1]
    bound = max(abs(int(x.min())), abs(int(x.max()))) * n if x.size else 0
    for dtype, limit in ((np.float32, 2**24), (np.float64, 2**53)):
        if bound < limit:
            s = np.matmul(a.astype(dtype), x[:, :, None].astype(dtype))[:, :, 0]
            return np.rint(s).astype(np.int64)
    return np.einsum("bqk,bk->bq", a.astype(np.int64), _i64(x))


def _dense_reduce(a, x, red, default):
    cnt = np.count_nonzero(a, axis=2).astype(np.int64, copy=False)
    if red == "width":
        return cnt
    if red == "mean":
        stat = _exact_sum(a, x)
    else:
        # unselected keys hold the identity of x's own dtype (narrow: fast);
        # rows with nothing selected take the default in _finish
        info = np.iinfo(x.dtype)
        ident = x.dtype.type(info.min if red == "max" else info.max)
        masked = np.where(a, x[:, None, :], ident)
        stat = masked.max(axis=2) if red == "max" else masked.min(axis=2)
    return _finish(cnt, stat, red, default)


# ---- fast selector rules ----------------------------------------------------------------
#
# Each rule looks at a Select node (key, query, pred) and returns the
# aggregate's result, or None if it does not apply.  A rule must give exactly
# what _dense_reduce gives at every valid position.  The first that applies wins.
#
# Most rules build on `_prefix`: the selector  A[i, j] = r[i] & m[j] & (j <= i)
# (a row mask times a key mask) reduces with running sums/maxima in O(N).

_IDENTITY = {"mean": 0, "max": I64_MIN, "min": I64_MAX, "width": 0}


def _prefix(run, red, x, m=None, r=None):
    """(count, stat) of A[i, j] = r[i] & m[j] & (j <= i); stat holds the
    reduction's identity where count is 0.  m, r: bool broadcastable to [B, N]
    (None: all true)."""
    shape = (run.B, run.N)
    if m is None:
        cnt = np.broadcast_to(run.pos + 1, shape)
    else:
        cnt = np.cumsum(np.broadcast_to(m, shape), axis=1, dtype=np.int64)
    stat = None
    if red != "width":
        ident = _IDENTITY[red]
        if red == "mean":
            stat = np.cumsum(x if m is None else np.where(m, x, 0), axis=1)
        else:
            acc = np.maximum if red == "max" else np.minimum
            stat = acc.accumulate(x if m is None else np.where(m, x, ident), axis=1)
        if r is not None:
            stat = np.where(r, stat, ident)
    if r is not None:
        cnt = np.where(r, cnt, 0)
    return cnt, stat


def _combine(parts, red):
    """Merge (count, stat) parts of a selector split into disjoint pieces."""
    cnt, stat = parts[0]
    for c, s in parts[1:]:
        cnt = cnt + c
        if red == "mean":
            stat = stat + s
        elif red == "max":
            stat = np.maximum(stat, s)
        elif red == "min":
            stat = np.minimum(stat, s)
    return cnt, stat


def _shift(run, x, s: int, red, default):
    """Row i selects exactly key i - s when 0 <= i - s: x shifted right by s."""
    B, N = run.B, run.N
    if red == "width":       # s < 0 selects nothing: key i - s lies after i
        return np.broadcast_to(((run.pos >= s) & (s >= 0)).astype(np.int64), (B, N))
    if s == 0:
        return run.sop(x)
    d = run.sop(default)
    if s < 0 or s >= N:
        return d
    x = run.sop(x)
    out = np.empty((B, N), dtype=np.result_type(x, d))
    out[:, s:] = x[:, :N - s]
    out[:, :s] = d[:, :s]
    return out


def _rule_index_eq(run, sel, x, red, default):
    """select(indices + c, q, eq): row i selects the single key j = q[i] - c
    when 0 <= j <= i -- a gather (a shift when q is indices + const)."""
    if sel.pred != "eq":
        return None
    c = run.index_offset(sel.key)
    if c is None:
        return None
    cq = run.index_offset(sel.query)
    if isinstance(c, int) and isinstance(cq, int):
        return _shift(run, x, c - cq, red, default)
    j = run.sop(np.subtract(_i64(run.value(sel.query)), c))
    ok = (j >= 0) & (j <= run.pos)
    if red == "width":
        return ok.astype(np.int64)
    x = np.take_along_axis(x, np.clip(j, 0, run.N - 1), axis=1)
    return np.where(ok, x, default)


def _rule_always(run, sel, x, red, default):
    """select(_, _, always): every j <= i -- running sum / max / min."""
    if sel.pred != "always":
        return None
    return _finish(*_prefix(run, red, x), red, default)


def _rule_scalar_side(run, sel, x, red, default):
    """A scalar query makes the predicate a key mask m[j] = pred(k[j], c); a
    scalar key makes it a row mask r[i] = pred(c, q[i])."""
    qs, ks = run.scalar_of(sel.query), run.scalar_of(sel.key)
    if qs is None and ks is None:
        return None
    pred = PREDICATES[sel.pred]
    if ks is None:
        part = _prefix(run, red, x, m=pred(run.value(sel.key), qs))
    elif qs is None:
        part = _prefix(run, red, x, r=pred(ks, run.value(sel.query)))
    else:
        part = _prefix(run, red, x, r=np.asarray(pred(ks, qs)))
    return _finish(*part, red, default)


def _rule_index_window(run, sel, x, red, default):
    """select(indices + a, indices + b, lt/le): j <= i + e, a shifted prefix."""
    if sel.pred not in ("lt", "le"):
        return None
    ck, cq = run.index_offset(sel.key), run.index_offset(sel.query)
    if ck is None or cq is None or not (isinstance(ck, int) and isinstance(cq, int)):
        return None
    e = cq - ck - (1 if sel.pred == "lt" else 0)
    s = max(0, -e)        # row i selects keys 0 .. i - s
    cnt, stat = _prefix(run, red, x)
    cnt = _shift(run, cnt, s, "mean", 0)
    if stat is not None:
        stat = _shift(run, stat, s, "mean", _IDENTITY[red])
    return _finish(cnt, stat, red, default)


FEW_VALUES = 4          # distinct values below which per-value masks beat sorting


def _rule_few_values(run, sel, x, red, default):
    """Few distinct query (or key) values: split the selector by value; each
    piece is a row mask times a key mask (exact for any predicate)."""
    pred = PREDICATES[sel.pred]
    k, q = run.value(sel.key), run.value(sel.query)
    limit = FEW_VALUES if sel.pred == "eq" else max(FEW_VALUES, run.N // 8)
    qv = np.unique(q[run.valid])
    if len(qv) <= limit:
        parts = [_prefix(run, red, x, m=pred(k, v), r=(q == v)) for v in qv.tolist()]
        return _finish(*_combine(parts, red), red, default)
    kv = np.unique(k[run.valid])
    if len(kv) <= limit:
        parts = [_prefix(run, red, x, m=(k == u), r=pred(u, q)) for u in kv.tolist()]
        return _finish(*_combine(parts, red), red, default)
    return None


def _rule_eq_sorted(run, sel, x, red, default):
    """eq between two s-ops: order each input's keys by (value, position); the
    keys row i selects are then a contiguous run [lo, hi) of that order,
    starting at its value's bucket and ending at the last position <= i."""
    if sel.pred != "eq":
        return None
    B, N = run.B, run.N
    k, q = _i64(run.value(sel.key)), _i64(run.value(sel.query))
    rk, rq, U = _value_ranks(k, q, None if run.all_valid else run.valid)
    stride = N + 1
    if B * U * stride >= 2**62:
        return None
    it = np.int32 if B * U * stride < 2**31 else np.int64     # narrower: less memory traffic
    rk, rq = rk.astype(it), rq.astype(it)
    # a stable sort of each row by value keeps equal values in position order
    # (radix sort when the ranks fit in int16)
    order = np.argsort(rk.astype(np.int16) if U < 2**15 else rk, axis=1, kind="stable").astype(it)
    rows = np.arange(B, dtype=it)[:, None]
    bucket = rows * U + np.take_along_axis(rk, order, axis=1)      # (input, value)
    keys = (bucket * stride + order).ravel()                       # ascending
    qbucket = rows * U + rq
    hi = np.searchsorted(keys, qbucket * stride + run.pos.astype(it), side="right")
    if B * U <= 8 * B * N + 2**20:
        sizes = np.bincount(bucket.ravel(), minlength=B * U)
        lo = (np.cumsum(sizes) - sizes)[qbucket]
    else:
        lo = np.searchsorted(keys, qbucket * stride, side="left")
    cnt = hi - lo
    if red == "width":
        return cnt
    xs = np.take_along_axis(_i64(x), order, axis=1).ravel()
    if red == "mean":
        csum = np.concatenate([[0], np.cumsum(xs)])
        stat = csum[hi] - csum[lo]
    else:
        running = _segment_running(xs, bucket.ravel(), red)
        if running is None:
            return None
        stat = running[np.maximum(hi - 1, 0)]
    return _finish(cnt, stat, red, default)


def _value_ranks(k, q, valid):
    """Ranks [B, N] for keys and queries such that equal values get equal
    ranks.  A query equal to no key gets rank U - 2, a padded key U - 1 (so
    it matches nothing).  valid: [B, N] bool, None if all are.
    Returns (key ranks, query ranks, U)."""
    kv = k if valid is None else k[valid]
    lo, hi = int(kv.min()), int(kv.max())
    span = hi - lo + 1
    if span <= 4 * k.shape[1] + 64:                  # compact values: offsets are ranks
        nk = span
        rk, rq = k - lo, np.where((q >= lo) & (q <= hi), q - lo, nk)
    else:
        uniq = np.unique(kv)
        nk = len(uniq)
        rk = np.minimum(np.searchsorted(uniq, k), nk - 1)
        rq = np.minimum(np.searchsorted(uniq, q), nk - 1)
        rq = np.where(uniq[rq] == q, rq, nk)
    return (rk if valid is None else np.where(valid, rk, nk + 1)), rq, nk + 2


def _segment_running(vals, seg, red):
    """Running max/min of `vals` restarting wherever `seg` (sorted) changes,
    as one accumulate over seg_number * span + value.  None if that overflows."""
    lo, hi = int(vals.min()), int(vals.max())
    span = hi - lo + 1
    sid = np.cumsum(np.concatenate([[False], seg[1:] != seg[:-1]]), dtype=np.int64)
    if (int(sid[-1]) + 1) * span >= 2**62:
        return None
    offset = (vals - lo) if red == "max" else (hi - vals)
    run = np.maximum.accumulate(sid * span + offset) - sid * span
    return run + lo if red == "max" else hi - run


_RULES = (
    _rule_index_eq,         # shift_right, index_select
    _rule_always,           # maximum, minimum, running mean
    _rule_scalar_side,      # cumsum, has_seen(x, TOKEN), first_true
    _rule_index_window,     # strict / shifted prefixes over positions
    _rule_few_values,       # num_prev / has_seen on small alphabets, any predicate
    _rule_eq_sorted,        # firsts / lasts / num_prev on large alphabets
)
