"""`rasp graph`: the dataflow graph of a program, loop bodies as clusters."""
from __future__ import annotations

import shutil
from pathlib import Path

import graphviz
import networkx as nx

from . import ir
from .errors import RaspError

_SHAPES = {"Select": "diamond", "Aggregate": "box", "SelWidth": "box", "LoopState": "invhouse",
           "LoopOut": "house", "Input": "oval", "Indices": "oval"}


def dataflow_graph(program: ir.ProgramIR) -> nx.DiGraph:
    """Nodes are IR nodes (by id) with `label`, `shape` and `cluster` (the
    loop index whose body computes them, or None)."""
    names = {}

    def collect(block):
        for item in block.items:
            if isinstance(item, ir.Bind) and isinstance(item.node, ir.Node):
                names.setdefault(id(item.node), []).append(item.name)
            elif isinstance(item, ir.Loop):
                collect(item.body)
    collect(program.body)

    g = nx.DiGraph()

    def add(node):
        if id(node) in g:
            return
        label = node.label()
        if id(node) in names:
            label = f"{', '.join(dict.fromkeys(names[id(node)]))} = {label}"
        block = node.block
        g.add_node(id(node), label=label, shape=_SHAPES.get(type(node).__name__, "ellipse"),
                   cluster=block.loop.index if block is not None and block.loop is not None else None)
        for i in node.inputs:
            add(i)
            g.add_edge(id(i), id(node))

    for loop in program.loops:
        for var in loop.vars:
            add(var.state)
            add(var.update)
            g.add_edge(id(var.update), id(var.state), style="dashed", label="next")
            if var.init is not None:
                add(var.init)
                g.add_edge(id(var.init), id(var.state), style="dotted", label="init")
            if getattr(var, "out", None) is not None:
                add(var.out)
                g.add_edge(id(var.update), id(var.out), style="dashed")
    add(program.output)
    g.add_node("output", label="output", shape="doubleoctagon", cluster=None)
    g.add_edge(id(program.output), "output")
    return g


def to_graphviz(g: nx.DiGraph, program: ir.ProgramIR) -> graphviz.Digraph:
    dot = graphviz.Digraph("program", graph_attr={"rankdir": "TB", "fontname": "Helvetica"},
                           node_attr={"fontname": "Helvetica", "fontsize": "10"})
    clusters = {}
    for loop in program.loops:
        sub = graphviz.Digraph(f"cluster_loop{loop.index}")
        kind = " until stable" if loop.until_stable else ""
        sub.attr(label=f"loop {loop.count}{kind} (line {loop.loc.line if loop.loc else '?'})",
                 style="rounded", color="steelblue")
        clusters[loop.index] = sub
    for n, data in g.nodes(data=True):
        target = clusters.get(data["cluster"], dot)
        target.node(str(n), data["label"], shape=data["shape"])
    # nested loops: draw inner clusters inside their parent
    for loop in sorted(program.loops, key=lambda l: -l.body.depth):
        parent = loop.body.parent.loop
        (clusters[parent.index] if parent is not None else dot).subgraph(clusters[loop.index])
    for a, b, data in g.edges(data=True):
        dot.edge(str(a), str(b), **{k: str(v) for k, v in data.items()})
    return dot


def render(dot: graphviz.Digraph, output: str) -> str:
    """Write `output` (.svg/.png/.pdf rendered by `dot`, or .dot source).
    Returns a message for the user."""
    path = Path(output)
    fmt = path.suffix.lstrip(".").lower() or "svg"
    try:
        if fmt in ("dot", "gv"):
            path.write_text(dot.source)
            return f"wrote {path}"
        if shutil.which("dot") is None:
            dot_path = path.with_suffix(".dot")
            dot_path.write_text(dot.source)
            return (f"graphviz's `dot` program is not installed, so wrote {dot_path} instead; render it with "
                    f"`dot -T{fmt} {dot_path} -o {path}` (install: apt-get install graphviz)")
        path.write_bytes(dot.pipe(format=fmt))
        return f"wrote {path}"
    except graphviz.backend.ExecutableNotFound:
        raise RaspError("graphviz's `dot` program is missing; use -o FILE.dot") from None
    except (OSError, ValueError) as e:
        raise RaspError(f"cannot write {path}: {e}") from None


def draw_program(program: ir.ProgramIR, output: str) -> str:
    return render(to_graphviz(dataflow_graph(program), program), output)
