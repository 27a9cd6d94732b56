"""The halting clock: a compiled model that shows, in its own logits, when it
is done, so that maximum-confidence stopping (Fan et al. Eq. 2) picks T(n).

A compiled model computes exact one-hot outputs, equally sharp after every
iteration, so confidence alone cannot tell step T(n) from any other.  The
clock adds three things to the program's dataflow graph before it is
compiled, all built from primitives the compiler already makes exact:

    T     = the loop count, computed causally in the prelude (an s-op);
    clock = a loop variable, 0 before the loop and +1 per iteration;
    out'  = where(clock == T, out, out + OFFSET)     (after the loop)

The unembedding maps both `v` and `v + OFFSET` to token `v`, with a large
logit for the first and a small one for the second (a one-hot output).  A
numeric output (a wide value set, craft.Crafter.is_cat) cannot be read that
way (a number v + OFFSET reads as itself): `out'` is not built, and the
unembedding reads `out` and `done * out` instead (basis.ClockedNum).  The argmax after any
step is what the program alone would give; the margin is DONE_LOGIT only
when the model has run exactly T iterations, and OPEN_LOGIT otherwise.

T must be known at the scored positions of a causal model: `count_before(seq,
tok)` is (the index of the first `tok`, once it has been seen), and so are
constants and sums, differences and constant multiples of these.  `len(seq)`
and `count(seq, tok)` depend on tokens after a position, and products of two
counts are beyond the compiler: such programs compile without a clock.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, TypeVar

from rasp import ir
from rasp.errors import RaspError

from .graph import ProgramGraph
from .values import ValueSets

CLOCK = "(clock)"        # not an identifier, so no program variable has this name
DONE_LOGIT = 13.0        # output margin after exactly T iterations
OPEN_LOGIT = 3.0         # output margin after any other number of iterations
_N = TypeVar("_N", bound=ir.Node)


class NoClock(Exception):
    """Why a program gets no clock (the model is compiled without one)."""


@dataclasses.dataclass
class Clock:
    offset: int            # not-done output values are shifted by this
    count: str             # the loop count the clock compares with (for reports)
    # the IR nodes of out' = where(done, value, shifted), shifted = value + offset
    done: Optional[ir.Node] = dataclasses.field(default=None, repr=False, compare=False)
    value: Optional[ir.Node] = dataclasses.field(default=None, repr=False, compare=False)
    shifted: Optional[ir.Node] = dataclasses.field(default=None, repr=False, compare=False)


class _Builder:
    """Makes new IR nodes located at the loop and listed in a block."""

    def __init__(self, prog: ir.ProgramIR, loc):
        self.prog, self.loc = prog, loc

    def node(self, node: _N, block: ir.Block) -> _N:
        node.loc, node.block = self.loc, block
        block.items.append(node)
        return node

    def const(self, value: int, block) -> ir.Node:
        return self.node(ir.Const(value), block)

    def count_sop(self, e: ir.HostExpr, block: ir.Block) -> ir.Node:
        """The host expression `e` as an s-op that holds its value at every
        position from which the tokens it depends on are visible."""
        op, a = e.op, e.args
        if op == "lit":
            return self.node(ir.Full(self.const(a[0], block)), block)
        if op == "param":
            return self.count_sop(self.prog.params[a[0]].expr, block)
        if op == "count_before":
            return self.first_index(a[0], block)
        if op == "neg":
            return self.node(ir.Map("neg", (self.count_sop(a[0], block),)), block)
        if op in ("add", "sub", "min", "max"):
            return self.node(ir.Map(op, (self.count_sop(a[0], block), self.count_sop(a[1], block))), block)
        if op in ("mul", "floordiv", "mod") and a[1].op == "lit":
            return self.node(ir.Map(op, (self.count_sop(a[0], block), self.const(a[1].args[0], block))), block)
        if op == "mul" and a[0].op == "lit":
            return self.node(ir.Map(op, (self.const(a[0].args[0], block), self.count_sop(a[1], block))), block)
        if op in ("len", "count"):
            raise NoClock(f"the loop count uses {op}(...), which a causal model does not know before "
                          "the end of the input")
        raise NoClock(f"the loop count {e} is not a sum of counts and constants")

    def first_index(self, token: int, block: ir.Block) -> ir.Node:
        """Index of the first `token` (0 before it appears): the one key where
        the token is seen and was not seen one position earlier."""
        n = lambda node: self.node(node, block)
        zero, one = self.const(0, block), self.const(1, block)
        ones, idx = n(ir.Full(one)), n(ir.Indices())
        hit = n(ir.Map("eq", (self.prog.input, self.const(token, block))))
        seen = n(ir.Aggregate(n(ir.Select(hit, ones, "eq")), ones, "mean", zero))
        seen_before = n(ir.Aggregate(n(ir.Select(n(ir.Map("add", (idx, one))), idx, "eq")), seen, "mean", zero))
        first = n(ir.Map("gt", (seen, seen_before)))
        at_first = n(ir.Select(first, ones, "eq"))
        at_first.one_key = True          # true by construction: a mean over it needs no truncation
        return n(ir.Aggregate(at_first, idx, "mean", zero))


def with_clock(prog: ir.ProgramIR, length: int) -> tuple:
    """(a copy of `prog` with the clock, Clock); raises NoClock.  `prog` itself
    is not changed (the interpreter keeps running the original)."""
    loop = next((i for i in prog.body.items if isinstance(i, ir.Loop)), None)
    if loop is None:
        raise NoClock("the program has no loop")
    if loop.until_stable:
        raise NoClock("the loop halts by convergence (until stable)")
    if len(prog.loops) != 1:
        raise NoClock("the program has more than one loop")
    pg = ProgramGraph(prog)
    keep = set(pg.g)
    out_vals = ValueSets(prog, length, pg.names, keep).get(prog.output)
    if out_vals != ValueSets(prog, 2 * length, pg.names, keep).get(prog.output):
        raise NoClock("the output is a number that grows with the length")
    offset = max(out_vals) - min(out_vals) + 1

    top = ir.Block()
    body = ir.Block(items=list(loop.body.items), parent=top)
    new_loop = dataclasses.replace(loop, body=body, vars=list(loop.vars))
    body.loop = new_loop
    b = _Builder(prog, loop.loc)
    items = list(prog.body.items)
    at = items.index(loop)
    top.items = items[:at]
    T = b.count_sop(loop.count, top)
    top.items.append(ir.Bind("T(clock)", T, loop.loc))      # names for the layout and drawings

    var = ir.LoopVar(CLOCK, ir.SOP, b.node(ir.Full(b.const(0, top)), top))
    var.state = ir.LoopState(new_loop, var)
    var.state.loc, var.state.block = loop.loc, body
    var.update = b.node(ir.Map("add", (var.state, b.const(1, body))), body)
    new_loop.vars.append(var)
    top.items += [new_loop] + items[at + 1:]
    var.out = b.node(ir.LoopOut(new_loop, var), top)

    done = b.node(ir.Map("eq", (b.node(ir.Map("sub", (var.out, T)), top), b.const(0, top))), top)
    open_out = b.node(ir.Map("add", (prog.output, b.const(offset, top))), top)
    output = b.node(ir.Map("where", (done, prog.output, open_out)), top)
    top.items += [ir.Bind("done(clock)", done, loop.loc), ir.Bind("output(clock)", output, loop.loc)]
    clocked = dataclasses.replace(prog, body=top, output=output, loops=[new_loop])
    return clocked, Clock(offset, str(loop.count), done=done, value=prog.output, shifted=open_out)


def try_clock(prog: ir.ProgramIR, length: int):
    """with_clock, or (prog, reason) when the program gets none."""
    try:
        return with_clock(prog, length)
    except NoClock as e:
        return prog, str(e)
    except RaspError as e:           # the plain compile reports the program's own errors
        return prog, f"the program's output could not be analysed ({e.message})"
