"""Sequential top-level loops -> one loop (a compiled model has one looped block).

    loop T1: body1          one loop of T1 + T2 + ... iterations with a step
    (code between)    ==>   counter c; a variable of loop j takes its update
    loop T2: body2          while S(j-1) <= c < S(j) (S = running sums of the
                            counts), its initial value before, and keeps its
                            value after.

The initial value of a later loop's variable is recomputed every iteration
from the current values of the earlier loops, so it is right whenever the
loop starts.  The model must know at every position when a loop starts, so
every count but the last must be a constant: a count such as
count_before(seq, EOQ) is not known at the positions before EOQ, and those
positions' variables would switch loops at the wrong step (a located refusal).
The host runs the sum of the counts (`CompiledModel.loop_counts`).
"""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Optional

from rasp import ir
from rasp.errors import RaspError

COUNTER = "(step)"       # not an identifier: no program variable has this name


_CONST_OPS: dict[str, Callable[..., Optional[int]]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "min": min, "max": max, "neg": lambda a: -a,
    "floordiv": lambda a, b: a // b if b else None, "mod": lambda a, b: a % b if b else None}


def const_count(prog: ir.ProgramIR, e: ir.HostExpr):
    """The value of a host expression that does not depend on the input
    (literals and arithmetic on them; not params, which the CLI may override)."""
    if e.op == "lit":
        return int(e.args[0])
    if e.op in _CONST_OPS:
        args = [const_count(prog, a) for a in e.args]
        return None if any(a is None for a in args) else _CONST_OPS[e.op](*args)
    return None


def _count_text(prog, e: ir.HostExpr) -> str:
    """`n1 (= len(seq))` for a param, the expression itself otherwise."""
    if e.op == "param" and e.args[0] in prog.params:
        return f"{e} = {_count_text(prog, prog.params[e.args[0]].expr)}"
    return str(e)


def host_ops(prog, e: ir.HostExpr) -> set:
    """The operations host expression e is built from, params followed into
    their definitions: {(op, arg)}, arg the token of count / count_before and
    the name of a param, None otherwise."""
    out, stack = set(), [e]
    while stack:
        x = stack.pop()
        if x.op == "param" and x.args[0] in prog.params:
            stack.append(prog.params[x.args[0]].expr)
        out.add((x.op, x.args[0] if x.op in ("count", "count_before", "param") else None))
        stack += [a for a in x.args if isinstance(a, ir.HostExpr)]
    return out


def _when_known(prog, e: ir.HostExpr) -> str:
    """When a causal model could know host expression e, in words."""
    ops = {op for op, _ in host_ops(prog, e)}
    if ops & {"len", "count"}:
        return "needs len(seq) or count(seq, ...): only the last position sees the whole input"
    if "count_before" in ops:
        return "knows count_before(seq, TOK) only from the first TOK on"
    return "is a param, which --param may change per run"


def one_loop(prog: ir.ProgramIR) -> ir.ProgramIR:
    """The program as the compiled model runs it: loops of constant count 0
    removed, nested loops flattened, sequential loops merged (at most one
    loop left).  RaspError (located) when that cannot be done."""
    return merge_sequential(flatten_nested(drop_empty_loops(prog)))


def drop_empty_loops(prog: ir.ProgramIR) -> ir.ProgramIR:
    """`prog` itself when no loop (top-level or nested) has a constant count
    <= 0, else a copy without those loops: after such a loop every variable
    holds its initial value (a body that never runs needs no construction, and
    its value sets would be empty).  Loops that hold a dropped loop are copied."""
    empty = {l for l in prog.loops if (c := const_count(prog, l.count)) is not None and c <= 0}
    if not empty:
        return prog
    top = ir.Block()
    post: dict[ir.Node, ir.Node] = {}          # node before -> after the copy
    undefined: list[_Undefined] = []
    _copy_items(prog.body.items, post, top, empty, prog, undefined)
    output = _rebuild(prog.output, post, top, None)
    for u in undefined:
        if _depends_on(output, u):
            raise RaspError(f"loop variable '{u.var.name}' is first defined inside this loop, which runs 0 "
                            "times: it has no value after it", loc=u.loop.loc, source=prog.source)
    loops = _all_loops(top)
    for n, l in enumerate(loops):
        l.index = n
    return dataclasses.replace(prog, body=top, output=output, loops=loops)


def _all_loops(block) -> list:
    """Every loop in `block`, nested ones included, in source order."""
    out = []
    for it in block.items:
        if isinstance(it, ir.Loop):
            out.append(it)
            out += _all_loops(it.body)
    return out


def _copy_items(items, post, block, empty, prog, undefined):
    """Copy a block's items into `block` (new nodes through post: old -> new),
    leaving out the loops in `empty` (their variables keep their initial values)."""
    for it in items:
        if it in empty:
            for v in it.vars:
                o = getattr(v, "out", None)
                if o is None:
                    continue
                if v.init is None:
                    # read after a loop that never runs: the interpreter has no value either
                    post[o] = _Undefined(v, it, prog)
                    undefined.append(post[o])
                else:
                    post[o] = _rebuild(v.init, post, block, None)
        elif isinstance(it, ir.Node):
            if _rebuild(it, post, block, None) is it:      # (a rebuilt copy is already listed)
                block.items.append(it)
        elif isinstance(it, ir.Bind):
            block.items.append(ir.Bind(it.name, _rebuild(it.node, post, block, None), it.loc))
        elif _all_loops(it.body) or _reads_any(it, post):
            block.items.append(_copy_loop(it, post, block, empty, prog, undefined))
        else:
            block.items.append(it)


def _loop_shell(old, post, parent):
    """A new loop in block `parent` with copies of `old`'s variables, their
    initial values read through post -> (loop, body, memo, old var -> new var)."""
    body = ir.Block(parent=parent)
    loop = ir.Loop(old.count, old.until_stable, body, [], 0, old.loc)
    body.loop = loop
    memo = dict(post)
    new = {}
    for v in old.vars:
        nv = ir.LoopVar(v.name, v.kind, _rebuild(v.init, post, parent, None) if v.init is not None else None)
        nv.state = ir.LoopState(loop, nv)
        nv.state.loc, nv.state.block = v.state.loc, body
        memo[v.state] = nv.state
        new[v] = nv
        loop.vars.append(nv)
    return loop, body, memo, new


def _finish_loop(old, loop, body, memo, new, post, parent):
    """The copied variables' updates, and their outputs added to post."""
    for v in old.vars:
        new[v].update = _rebuild(v.update, memo, body, None)
    for v in old.vars:
        if getattr(v, "out", None) is not None:
            o = ir.LoopOut(loop, new[v])
            o.loc, o.block = v.out.loc, parent
            new[v].out = o
            post[v.out] = o
    return loop


def _copy_loop(old, post, parent, empty, prog, undefined):
    """A copy of loop `old` in block `parent` reading the values in `post`,
    its nested loops copied (the ones in `empty` left out); its outputs are
    added to post."""
    loop, body, memo, new = _loop_shell(old, post, parent)
    _copy_items(old.body.items, memo, body, empty, prog, undefined)
    return _finish_loop(old, loop, body, memo, new, post, parent)


class _Undefined(ir.Node):
    """The value of a variable first defined in a loop that runs 0 times."""
    def __init__(self, var, loop, prog):
        self.var, self.loop, self.inputs, self.kind = var, loop, (), var.kind
        self.loc, self.block = loop.loc, None

    def label(self):
        return f"{self.var.name} (undefined)"


def _depends_on(n, target, memo=None) -> bool:
    """Whether n reads target, through loops' initial values and updates too."""
    memo = {} if memo is None else memo
    if n not in memo:
        memo[n] = False                     # (loop states read themselves)
        ins = list(n.inputs)
        if isinstance(n, (ir.LoopState, ir.LoopOut)):
            ins += [x for v in n.loop.vars for x in (v.init, v.update) if x is not None]
        memo[n] = n is target or any(_depends_on(i, target, memo) for i in ins)
    return memo[n]


def _reads_any(loop, post) -> bool:
    """Whether a flat loop's initial values or body read a value in `post`."""
    memo: dict[ir.Node, bool] = {}
    nodes = [v.init for v in loop.vars if v.init is not None] + [v.update for v in loop.vars]
    return any(_depends_any(n, post, memo) for n in nodes)


def _depends_any(n, post, memo) -> bool:
    if n not in memo:
        memo[n] = n in post or any(_depends_any(i, post, memo) for i in n.inputs)
    return memo[n]


def merge_sequential(prog: ir.ProgramIR) -> ir.ProgramIR:
    """`prog` itself when it has at most one top-level loop, else a copy with
    the loops merged; RaspError (located) when they cannot be."""
    loops = [i for i in prog.body.items if isinstance(i, ir.Loop)]
    if len(loops) <= 1 or any(l.body.parent is not prog.body for l in prog.loops):
        return prog                   # nested loops: graph.py reports them
    err = lambda msg, loc: RaspError(msg, loc=loc, source=prog.source)
    starts, total = [], 0
    for j, loop in enumerate(loops):
        if loop.until_stable:
            raise err("the compiler merges sequential loops into one looped block; an 'until stable' loop "
                      "cannot be one of several (its length is only known when it converges)", loop.loc)
        if j > 0 and any(v.init is None for v in loop.vars):
            v = next(v for v in loop.vars if v.init is None)
            raise err(f"loop variable '{v.name}' is first defined inside this loop, which follows another "
                      "loop; the compiler needs its value before the loop (assign it before the loop)", loop.loc)
        starts.append(total)
        if j < len(loops) - 1:
            c = const_count(prog, loop.count)
            if c is None:
                nxt = loops[j + 1]
                raise err(f"this loop's count depends on the input ({_count_text(prog, loop.count)}), and the "
                          f"loop at line {nxt.loc.line if nxt.loc else '?'} follows it: the compiler merges sequential "
                          "loops into one looped block that switches to the next loop after a step it counts "
                          "itself, and a causal model does not know this count at every position (it "
                          f"{_when_known(prog, loop.count)}), so positions would switch at the wrong step; give every "
                          "loop but the last a constant count, or make the input-dependent loop the last one", loop.loc)
            total += max(c, 0)
    first = loops[0]
    count = first.count
    for loop in loops[1:]:
        count = ir.HostExpr("add", (count, loop.count))
    top = ir.Block()
    body = ir.Block(parent=top)
    merged = ir.Loop(count, False, body, [], 0, first.loc)
    body.loop = merged
    loc = first.loc

    def node(n, block):
        n.loc = n.loc or loc
        n.block = block
        block.items.append(n)
        return n

    def const(v, block):
        return node(ir.Const(v), block)

    new_var = {}            # old LoopVar -> merged LoopVar
    counter = ir.LoopVar(COUNTER, ir.SOP, None)
    merged.vars.append(counter)
    counter.state = ir.LoopState(merged, counter)
    counter.state.loc, counter.state.block = loc, body

    def rebuild(n, memo, block):
        """n with its inputs mapped through memo (old -> new), new nodes in block."""
        if n in memo:
            return memo[n]
        if isinstance(n, (ir.LoopState, ir.LoopOut)):
            raise err(f"the compiler cannot merge these loops: {n.label()} is used where it is not "
                      "defined", n.loc)
        ins = tuple(rebuild(i, memo, block) for i in n.inputs)
        if all(a is b for a, b in zip(ins, n.inputs)):
            memo[n] = n
            return n
        c = copy.copy(n)
        c.inputs = ins
        memo[n] = node(c, block)
        return memo[n]

    items = list(prog.body.items)
    at = [items.index(l) for l in loops]
    top.items = items[:at[0]]
    # code between and after the loops that does not read a loop goes before the merged loop
    for it in items[at[0] + 1:]:
        if isinstance(it, ir.Node) and not _reads_loop(it):
            top.items.append(it)
    counter.init = node(ir.Full(const(0, top)), top)
    outs = {v: v.out for l in loops for v in l.vars if getattr(v, "out", None) is not None}
    pre: dict[ir.Node, ir.Node] = {}        # before the loop: every loop's variables hold their initial values
    for loop in loops:
        for v in loop.vars:
            nv = ir.LoopVar(v.name, v.kind, rebuild(v.init, pre, top) if v.init is not None else None)
            nv.state = ir.LoopState(merged, nv)
            nv.state.loc, nv.state.block = loc, body
            new_var[v] = nv
            merged.vars.append(nv)
            if v in outs:
                pre[outs[v]] = nv.init if nv.init is not None else nv.state
    cur = {v.state: nv.state for v, nv in new_var.items()}      # inside: current values
    cur.update({o: new_var[v].state for v, o in outs.items()})
    c_state = counter.state
    for j, loop in enumerate(loops):
        lo, hi = starts[j], (starts[j + 1] if j + 1 < len(loops) else None)
        active = node(ir.Map("ge", (c_state, const(lo, body))), body)
        if hi is not None:
            active = node(ir.Map("and", (active, node(ir.Map("lt", (c_state, const(hi, body))), body))), body)
        # initial values on the earlier loops' values after this iteration
        # (Optional: the types of LoopVar.state and .update, set by now)
        nxt_memo: dict[Optional[ir.Node], Optional[ir.Node]] = {v.state: nv.state for v, nv in new_var.items()}
        for v in loop.vars:
            nv = new_var[v]
            nv.update = node(ir.Map("where", (active, rebuild(v.update, cur, body), nv.state)), body)
        if j > 0 and lo > 0:
            for l in loops[:j]:
                for v in l.vars:
                    if v in outs:
                        nxt_memo[outs[v]] = new_var[v].update
            waiting = node(ir.Map("lt", (c_state, const(lo, body))), body)
            for v in loop.vars:
                nv = new_var[v]
                nv.update = node(ir.Map("where", (waiting, rebuild(v.init, nxt_memo, body), nv.update)), body)
    counter.update = node(ir.Map("add", (c_state, const(1, body))), body)
    top.items.append(merged)
    post = {}
    for v, o in outs.items():
        out = ir.LoopOut(merged, new_var[v])
        out.loc, out.block = o.loc, top
        new_var[v].out = out
        post[o] = out
    for it in items[at[0] + 1:]:
        if isinstance(it, ir.Node) and _reads_loop(it):
            rebuild(it, post, top)
        elif isinstance(it, ir.Bind):
            top.items.append(ir.Bind(it.name, rebuild(it.node, post, top), it.loc))
    output = rebuild(prog.output, post, top)
    return dataclasses.replace(prog, body=top, output=output, loops=[merged])


def _reads_loop(n, memo=None) -> bool:
    memo = {} if memo is None else memo
    if n not in memo:
        memo[n] = isinstance(n, (ir.LoopState, ir.LoopOut)) or any(_reads_loop(i, memo) for i in n.inputs)
    return memo[n]


def flatten_nested(prog: ir.ProgramIR) -> ir.ProgramIR:
    """A top-level loop `loop T: P; loop K: I; Q` (K a constant >= 1, one level
    of nesting) becomes one loop of T * K steps with a phase p = step mod K:
    the inner variables restart from their initial values (computed from the
    outer variables' current values) when p = 0 and update every step; the
    outer variables update when p = K - 1, from the inner values of that step.
    `prog` itself when nothing is nested; RaspError (located) otherwise."""
    nested = [l for l in prog.loops if l.body.parent is not prog.body]
    if not nested:
        return prog
    err = lambda msg, loc: RaspError(msg, loc=loc, source=prog.source)
    for inner in nested:
        outer = inner.body.parent.loop
        if outer is None or outer.body.parent is not prog.body:
            raise err("the compiler flattens one level of nested loops; this loop is nested two deep", inner.loc)
        if inner.until_stable or outer.until_stable:
            raise err("the compiler flattens nested count loops; 'until stable' cannot be one of them",
                      inner.loc if inner.until_stable else outer.loc)
        k = const_count(prog, inner.count)
        if k is None or k < 1:
            raise err(f"an inner loop's count must be a constant >= 1 for the compiler ({inner.count} is not): "
                      "the model restarts the inner loop at steps it counts itself", inner.loc)
        if sum(isinstance(i, ir.Loop) for i in outer.body.items) > 1:
            raise err("the compiler flattens one inner loop per outer loop; this loop holds several", outer.loc)
        for v in inner.vars:
            if v.init is None:
                raise err(f"loop variable '{v.name}' is first defined inside a nested loop; the compiler needs "
                          "its value before the loop (assign it before the loop)", inner.loc)
    items = list(prog.body.items)
    new_top = ir.Block()
    post = {}
    for it in items:
        if isinstance(it, ir.Loop) and any(l.body.parent is it.body for l in nested):
            loop, outs = _flatten(prog, it, next(l for l in nested if l.body.parent is it.body), new_top)
            post.update(outs)
            new_top.items.append(loop)
        elif isinstance(it, ir.Node):
            if _rebuild(it, post, new_top, None) is it:      # (a rebuilt copy is already listed)
                new_top.items.append(it)
        elif isinstance(it, ir.Bind):
            new_top.items.append(ir.Bind(it.name, _rebuild(it.node, post, new_top, None), it.loc))
        else:                               # a flat loop, rebuilt on the new loops' outputs
            new_top.items.append(_rebuild_flat(it, post, new_top))
    output = _rebuild(prog.output, post, new_top, None)
    loops = [i for i in new_top.items if isinstance(i, ir.Loop)]
    for n, l in enumerate(loops):
        l.index = n
    return dataclasses.replace(prog, body=new_top, output=output, loops=loops)


def _rebuild(n, memo, block, err):
    """n with its inputs mapped through memo (old -> new); new nodes go to block."""
    if n in memo:
        return memo[n]
    if isinstance(n, (ir.LoopState, ir.LoopOut)) or not n.inputs:
        memo[n] = n
        return n
    ins = tuple(_rebuild(i, memo, block, err) for i in n.inputs)
    if all(a is b for a, b in zip(ins, n.inputs)):
        memo[n] = n
        return n
    c = copy.copy(n)
    c.inputs = ins
    c.block = block
    block.items.append(c)
    memo[n] = c
    return c


def _flatten(prog, outer, inner, top):
    K = const_count(prog, inner.count)
    body = ir.Block(parent=top)
    loop = ir.Loop(ir.HostExpr("mul", (outer.count, ir.HostExpr("lit", (K,)))), False, body, [], 0, outer.loc)
    body.loop = loop
    loc = outer.loc

    def node(n):
        n.loc = n.loc or loc
        n.block = body
        body.items.append(n)
        return n

    def const(v):
        return node(ir.Const(v))

    def var(name, kind, init):
        nv = ir.LoopVar(name, kind, init)
        nv.state = ir.LoopState(loop, nv)
        nv.state.loc, nv.state.block = loc, body
        loop.vars.append(nv)
        return nv
    phase = var("(phase)", ir.SOP, None)
    zero = ir.Const(0)
    zero.loc, zero.block = loc, top
    top.items.append(zero)
    phase.init = ir.Full(zero)
    phase.init.loc, phase.init.block = loc, top
    top.items.append(phase.init)
    new = {}
    for v in outer.vars:
        new[v] = var(v.name, v.kind, v.init)
    for u in inner.vars:
        new[u] = var(u.name, u.kind, None)       # set below: the initial value on the outer one
    cur = {v.state: nv.state for v, nv in new.items() if v in outer.vars}
    start = node(ir.Map("eq", (phase.state, const(0))))
    # inner variables: restart from their initial value when the phase is 0
    eff = dict(cur)
    inits = {}
    for u in inner.vars:
        inits[u] = _rebuild(u.init, dict(cur), body, None)
    for u in inner.vars:
        eff[u.state] = node(ir.Map("where", (start, inits[u], new[u].state)))
    for u in inner.vars:
        new[u].update = _rebuild(u.update, eff, body, None)
    # before the loop the inner variables hold their initial values on the outer ones' initial values
    pre = {v.state: v.init for v in outer.vars if v.init is not None}
    for u in inner.vars:
        new[u].init = _rebuild(u.init, pre, top, None)
    last = node(ir.Map("eq", (phase.state, const(K - 1))))
    after = dict(cur)
    for u in inner.vars:
        if getattr(u, "out", None) is not None:
            after[u.out] = new[u].update
    for v in outer.vars:
        new[v].update = node(ir.Map("where", (last, _rebuild(v.update, after, body, None), new[v].state)))
    phase.update = node(ir.Map("mod", (node(ir.Map("add", (phase.state, const(1)))), const(K))))
    outs = {}
    for v in outer.vars + inner.vars:
        if getattr(v, "out", None) is not None:
            o = ir.LoopOut(loop, new[v])
            o.loc, o.block = v.out.loc, top
            new[v].out = o
            outs[v.out] = o
    return loop, outs


def _rebuild_flat(old, post, top):
    """A copy of flat loop `old` in block `top`, reading the values in `post`
    (old -> new nodes of the loops before it); its outputs are added to post."""
    loop, body, memo, new = _loop_shell(old, post, top)
    return _finish_loop(old, loop, body, memo, new, post, top)
