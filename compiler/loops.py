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

from rasp import ir
from rasp.errors import RaspError

COUNTER = "(step)"       # not an identifier: no program variable has this name


def const_count(prog: ir.ProgramIR, e: ir.HostExpr):
    if e.op == "lit":
        return int(e.args[0])
    return None


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
                raise err(f"this loop's count {loop.count} is known only from the whole input, and another "
                          "loop follows it: a causal model cannot tell, at the positions before that is "
                          "known, when the next loop starts (use a constant count for every loop but the "
                          "last)", loop.loc)
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
    pre = {}                # before the loop: every loop's variables hold their initial values
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
        nxt_memo = {v.state: nv.state for v, nv in new_var.items()}
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
