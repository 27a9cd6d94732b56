"""How each kind of node computes its value on a `Run` (the `EVAL` table, by
node class): lookups and maps with their located errors, aggregates handed
to the run's reduction, loop states and outputs."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import RaspRuntimeError
from ..ir import (SCALAR, SELECTOR, Aggregate, Const, Full, Host, Indices, Input, Lookup, LoopOut,
                  LoopState, Map, Select, SelWidth)
from .elementwise import NUMPY as NUMPY_OPS
from ..valuesets import in_table, lookup
from .hosts import OVERFLOW_MESSAGE, i64, int64_overflow


def _eval_lookup(run, node: Lookup):
    """T[x] / T[x][y] by fancy indexing; an index outside the table at a valid
    position is a located error (padding may hold anything: read entry 0)."""
    args = [i64(run.value(i)) for i in node.inputs]
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


def _eval_map(run, node: Map):
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


def eval_host(run, node: Host):
    if node.name is not None and node.name in run.params:
        return run.params[node.name].reshape(-1, 1)
    return run.host(node.expr, node.loc, node).reshape(-1, 1)


def _eval_aggregate(run, node: Aggregate):
    # full(c) values and defaults are used as the scalar c (cheaper to broadcast)
    x, d = (run.scalar_of(i) for i in (node.value, node.default))
    x = run.value(node.value) if x is None else x
    d = run.value(node.default) if d is None else d
    return run.reduce(node.selector, run.typed(x, node), node.reduction, run.typed(d, node))


def _eval_loop_state(run, node: LoopState):
    raise RaspRuntimeError(f"'{node.var.name}' is read in the loop before it is assigned",
                           loc=node.loc, source=run.ir.source)


def _eval_loop_out(run, node: LoopOut):
    bad = run.undefined(node)
    if bad.any():
        line = node.loop.loc.line if node.loop.loc else "?"
        run.fail(f"'{node.var.name}' is undefined: the loop at line {line} ran 0 times",
                 node.loop.loc, bad, node)
    value = run.final[node.var]
    if value is None:       # no input ran the loop, and none of them computes this node
        value = np.zeros((run.B, run.N, run.N) if node.kind == SELECTOR else (run.B, run.N), dtype=np.int8)
    return value


EVAL: dict[type, Callable[..., Any]] = {
    Const: lambda run, n: n.value,
    Host: eval_host,
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
