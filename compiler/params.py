"""Params used as values: replaced by the causal s-op that computes them.

A param (or any host expression used as a value) is computed by the
interpreter from the whole input and broadcast to every position.  A causal
model knows `count_before(seq, TOK)` (the index of the first TOK) only from
that TOK on, which is every scored position when TOK is the end-of-query
symbol `>` (docs/language.md §13: outputs before it are not scored) and a
`require` guarantees that `>` is in the input.  Such a param becomes the
s-op of clock.py (`count_before` -> index of the first `>`, then sums,
differences and constant multiples), when nothing reads it at an earlier
position: no select or aggregate may see it (directly or through values
computed from it, loop variables included), since attention at a scored
position reads keys before `>`.

Everything else is a located refusal that names the reason: `len(seq)` and
`count(seq, TOK)` are known only at the last position; `count_before` of
another token, or of `>` without a `require` that it occurs, before it.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from rasp import ir
from rasp.errors import RaspError

from .clock import NoClock, _Builder
from .loops import _all_loops, _copy_items, _count_text, _rebuild, host_ops


def _guarantees(prog, tok: Optional[int]) -> bool:
    """Whether a scalar `require` says that `tok` occurs in every input."""
    for r in prog.requires:
        n = r.node
        if n.kind != ir.SCALAR:
            continue
        if isinstance(n, ir.Host) and n.expr.op == "count" and n.expr.args[0] == tok:
            return True                         # require count(seq, TOK)
        if isinstance(n, ir.Map) and len(n.inputs) == 2:
            a, b = n.inputs
            if isinstance(b, ir.Host) and isinstance(a, ir.Const):
                a, b = b, a
                flip = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
                op = flip.get(n.op, n.op)
            else:
                op = n.op
            if isinstance(a, ir.Host) and a.expr.op == "count" and a.expr.args[0] == tok \
                    and isinstance(b, ir.Const):
                k = b.value
                if (op == "eq" and k >= 1) or (op == "ge" and k >= 1) or (op == "gt" and k >= 0) \
                        or (op == "ne" and k == 0):
                    return True
    return False


def _deps(n):
    """What node n reads: its inputs, and a loop variable's init and update."""
    d = list(n.inputs)
    if isinstance(n, (ir.LoopState, ir.LoopOut)):
        d += [x for x in (n.var.init, n.var.update) if x is not None]
    return d


def _all_nodes(prog) -> list:
    seen, order, stack = set(), [], [prog.output]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        order.append(n)
        stack += _deps(n)
    return order


def causal_params(prog: ir.ProgramIR) -> ir.ProgramIR:
    """`prog` itself when no host value is used as a value, else a copy with
    each replaced by its causal s-op; RaspError (located) when that would not
    be exact at every scored position."""
    nodes = _all_nodes(prog)
    hosts = [n for n in nodes if isinstance(n, ir.Host)]
    if not hosts:
        return prog
    err = lambda msg, node: RaspError(msg, loc=node.loc, source=prog.source)
    eoq = prog.symbols.get(">")
    users: dict[ir.Node, list[ir.Node]] = {}      # node -> the nodes that read it
    for n in nodes:
        for i in n.inputs:
            users.setdefault(i, []).append(n)

    def use(h):
        """The first s-op that reads h (through scalar arithmetic): where it is used as a value."""
        stack = [h]
        while stack:
            x = stack.pop(0)
            for u in users.get(x, []):
                if u.kind != ir.SCALAR:
                    return u if u.loc is not None else h
                stack.append(u)
        return h
    for h in hosts:
        what = f"a param used as a value ({_count_text(prog, h.expr)})"
        for op, arg in sorted(host_ops(prog, h.expr), key=str):
            if op in ("len", "count"):
                raise err(f"{what} uses {op}(...), which a causal model knows only at the last position "
                          "(it needs the whole input); the compiler can use params as values only when they "
                          "are built from count_before(seq, >), constants, + - and constant multiples", use(h))
            if op == "count_before" and arg != eoq:
                raise err(f"{what} uses count_before of a token other than the end-of-query symbol '>': a "
                          "causal model knows it only from that token on, but positions before it are scored", use(h))
            if op == "count_before" and not _guarantees(prog, eoq):
                raise err(f"{what} uses count_before(seq, >), which equals len(seq) (known only at the last "
                          "position) when '>' is absent; add `require count(seq, EOQ) >= 1` (with EOQ the "
                          "'>' symbol) so that the compiled model can compute it causally", use(h))
    # what is computed from a host value must never be read by attention (keys before '>' are wrong)
    tainted = set(hosts)
    changed = True
    while changed:
        changed = False
        for n in nodes:
            if n not in tainted and not isinstance(n, (ir.Select, ir.Aggregate, ir.SelWidth)) \
                    and any(d in tainted for d in _deps(n)):
                tainted.add(n)
                changed = True
    for n in nodes:
        if isinstance(n, (ir.Select, ir.Aggregate, ir.SelWidth)) and any(i in tainted for i in n.inputs):
            h = next(h for h in hosts)
            name = f"param '{h.name}'" if h.name else str(h.expr)
            raise err(f"this {n.label()} reads a value computed from {name} (count_before(seq, >)), which a "
                      "causal model knows only from the first '>' on; attention here also reads the "
                      "positions before it, where the value is unknown", n)
    top = ir.Block()
    b = _Builder(prog, None)
    memo: dict[ir.Node, ir.Node] = {}

    def sop(n):
        if n in memo:
            return memo[n]
        b.loc = n.loc
        if isinstance(n, ir.Const):
            r = b.node(ir.Full(n), top)
        elif isinstance(n, ir.Host):
            try:
                r = b.count_sop(n.expr, top)
            except NoClock as e:
                raise err(f"the compiler cannot compute {n.label()} as a value in a causal model: {e}", n) from e
        elif isinstance(n, ir.Map) and type(n) is ir.Map and n.kind == ir.SCALAR:
            r = b.node(ir.Map(n.op, tuple(sop(i) for i in n.inputs)), top)
        else:
            raise err(f"the compiler cannot compute {n.label()} as a value in a causal model", n)
        memo[n] = r
        return r
    post = {}
    for n in nodes:
        for i in n.inputs:
            if n.kind != ir.SCALAR and i.kind == ir.SCALAR and not isinstance(i, ir.Const) and i in tainted:
                post[i] = sop(i)
        if isinstance(n, ir.Full) and n.inputs[0] in tainted:
            post[n] = sop(n.inputs[0])
        if isinstance(n, (ir.LoopState, ir.LoopOut)):
            for x in (n.var.init, n.var.update):
                if x is not None and x.kind == ir.SCALAR and x in tainted:
                    post[x] = sop(x)
    if prog.output in tainted and prog.output.kind == ir.SCALAR:
        post[prog.output] = sop(prog.output)
    _copy_items(prog.body.items, post, top, set(), prog, [])
    output = _rebuild(prog.output, post, top, None)
    loops = _all_loops(top)
    for k, loop in enumerate(loops):
        loop.index = k
    return dataclasses.replace(prog, body=top, output=output, loops=loops)


def value_params(prog: ir.ProgramIR) -> list:
    """Names of the params the program uses as values (the compiled model
    computes them itself, so `--param` cannot override them)."""
    names = set()
    for n in _all_nodes(prog):
        if isinstance(n, ir.Host):
            if n.name:
                names.add(n.name)
            names |= {arg for op, arg in host_ops(prog, n.expr) if op == "param"}
    return sorted(names)
