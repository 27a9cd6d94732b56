"""ProgramIR -> networkx dataflow graph, with the loop body kept as a subgraph.

Each node gets a stage: 'pre' (computed once, before the loop: the prelude
blocks), 'body' (the looped block) or 'post' (after the loop: the postlude).
Only nodes the output (or, for `until stable`, the halting test) needs are kept.
"""
from __future__ import annotations

import networkx as nx

from rasp import ir
from rasp.errors import RaspError


def bind_names(prog: ir.ProgramIR) -> dict:
    """node -> source variable name (for messages and drawings)."""
    names = {}

    def walk(block):
        for item in block.items:
            if isinstance(item, ir.Bind) and item.node not in names:
                names[item.node] = item.name
            elif isinstance(item, ir.Loop):
                for var in item.vars:
                    names.setdefault(var.state, var.name)
                    if getattr(var, "out", None) is not None:
                        names.setdefault(var.out, var.name)
                walk(item.body)
    walk(prog.body)
    return names


class ProgramGraph:
    def __init__(self, prog: ir.ProgramIR):
        self.ir = prog
        self.names = bind_names(prog)
        self.loop = self.check_loops()
        self.g = nx.DiGraph()
        self.stage: dict = {}
        self.build()

    def error(self, message, loc):
        return RaspError(message, loc=loc, source=self.ir.source)

    def check_loops(self):
        top_loops = [i for i in self.ir.body.items if isinstance(i, ir.Loop)]
        for loop in self.ir.loops:
            if loop.body.parent is not self.ir.body:
                raise self.error("the compiler supports one top-level loop; this loop is nested in another "
                                 "(unroll the inner loop or run the program with the interpreter)", loop.loc)
        if len(top_loops) > 1:
            raise self.error("the compiler supports one top-level loop; this is a second one (a compiled model "
                             "has a single looped block)", top_loops[1].loc)
        return top_loops[0] if top_loops else None

    def deps(self, node):
        """Data dependencies, with loop state/out linked to the loop variables."""
        if isinstance(node, ir.LoopState):
            return [node.var.init] if node.var.init is not None else []
        if isinstance(node, ir.LoopOut):
            return [node.var.state]
        return list(node.inputs)

    def build(self):
        loop = self.loop
        need = [self.ir.output]
        if loop is not None and loop.until_stable:
            need += [v.state for v in loop.vars]     # halting looks at every loop variable
        seen = set()
        while need:
            n = need.pop()
            if n in seen:
                continue
            seen.add(n)
            self.g.add_node(n)
            extra = []
            if isinstance(n, ir.LoopState):
                extra = [n.var.update]
            for d in self.deps(n) + extra:
                self.g.add_edge(d, n, loop_back=isinstance(n, ir.LoopState) and d is n.var.update)
                need.append(d)
        # stages
        body = set(loop.body.nodes()) | {v.state for v in loop.vars} if loop else set()
        for n in nx.topological_sort(self.forward()):
            if n in body:
                self.stage[n] = "body"
            elif isinstance(n, ir.LoopOut) or any(self.stage.get(d) == "post" for d in self.deps(n)):
                self.stage[n] = "post"
            else:
                self.stage[n] = "pre"

    def forward(self) -> nx.DiGraph:
        """The graph without loop back-edges (a DAG)."""
        return nx.subgraph_view(self.g, filter_edge=lambda a, b: not self.g.edges[a, b]["loop_back"])

    def order(self, stage: str) -> list:
        return [n for n in nx.topological_sort(self.forward()) if self.stage[n] == stage]

    def body_subgraph(self) -> nx.DiGraph:
        """The loop body as its own subgraph (state nodes, body ops, updates)."""
        return self.g.subgraph([n for n, st in self.stage.items() if st == "body"])

    def loop_vars(self) -> list:
        """Loop variables the compiled program keeps (those whose state is used)."""
        if self.loop is None:
            return []
        return [v for v in self.loop.vars if v.state in self.g]

    def name(self, node) -> str:
        return self.names.get(node, "")
