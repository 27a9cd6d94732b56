"""`rasp graph`: the dataflow graph of a program, loop bodies as clusters.

The drawing is meant to be read next to the source: every node says which
variable it computes and on which line, a library call is one node labelled
with the call as written, constants and other small leaf values are drawn
next to each use (so no edge crosses the picture to reach them), and symbol
values print as their text.  Node ids are numbered in program order, so the
same program always gives the same .dot file.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import graphviz
import networkx as nx

from . import ir
from .errors import RaspError

_SHAPES = {"Select": "diamond", "Aggregate": "box", "SelWidth": "box", "LoopState": "invhouse",
           "LoopOut": "house", "Input": "oval", "call": "component"}
_OPS = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%", "neg": "- (negate)",
        "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "bitand": "&", "bitor": "|",
        "bitxor": "^", "invert": "~", "and": "and", "or": "or", "not": "not"}
LEGEND = ("boxes: aggregates and sel_width; diamonds: selectors; components: library calls; "
          "dashed: the next loop iteration; dotted: a loop variable's value before the loop")


def _is_leaf(node) -> bool:
    """Values drawn next to each use instead of as one shared node."""
    if isinstance(node, ir.Full):
        return _is_leaf(node.inputs[0])
    return isinstance(node, (ir.Const, ir.Host, ir.Indices))


def _value_text(program: ir.ProgramIR, value: int) -> str:
    symbol = program.symbol_text(value)
    return f'"{symbol}"' if symbol is not None else str(value)


def host_text(program: ir.ProgramIR, e: ir.HostExpr) -> str:
    """A host expression as source-like text, symbols as their text."""
    if e.op == "lit":
        return str(e.args[0])
    if e.op == "param":
        return e.args[0]
    if e.op == "len":
        return f"len({program.input_name})"
    if e.op in ("count", "count_before"):
        return f"{e.op}({program.input_name}, {_value_text(program, e.args[0])})"
    parts = [host_text(program, a) for a in e.args]
    if e.op in _OPS and len(parts) == 2:
        return f"{parts[0]} {_OPS[e.op]} {parts[1]}"
    if e.op == "neg":
        return f"-{parts[0]}"
    return f"{e.op}({', '.join(parts)})"


def _leaf_text(program, node) -> str:
    if isinstance(node, ir.Full):
        return _leaf_text(program, node.inputs[0])
    if isinstance(node, ir.Const):
        return _value_text(program, node.value)
    if isinstance(node, ir.Host):
        return node.name or host_text(program, node.expr)
    return "indices"


def _op_text(node) -> str:
    if isinstance(node, ir.Lookup):
        return f"{node.table.name}[...]"
    if isinstance(node, ir.Map):
        return _OPS.get(node.op, node.op)
    if isinstance(node, ir.Select):
        return f"select {node.pred}"
    if isinstance(node, ir.Aggregate):
        return f"aggr {node.reduction}"
    if isinstance(node, ir.LoopState):
        return f"{node.var.name} at step start"
    if isinstance(node, ir.LoopOut):
        return f"{node.var.name} after the loop"
    return node.label()


def call_text(source: str, loc: ir.Loc) -> str:
    """The call written at `loc`, e.g. `shift_right(bits, 1)` (brackets matched)."""
    lines = source.splitlines()
    if loc is None or not 0 < loc.line <= len(lines):
        return "?"
    text = "\n".join(lines[loc.line - 1:])[loc.column - 1:]
    depth = 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == ")" and depth == 0:
            return " ".join(text[:i + 1].split())
    return text.split("\n")[0]


def dataflow_graph(program: ir.ProgramIR) -> nx.DiGraph:
    """Nodes have deterministic ids (`n0`, `n1`, … in program order) and
    `label`, `shape`, `cluster` (the loop index whose body computes them, or
    None); leaf values are separate nodes per use, with `leaf=True`."""
    names: dict = {}

    def collect(block):
        for item in block.items:
            if isinstance(item, ir.Bind) and isinstance(item.node, ir.Node):
                names.setdefault(item.node, []).append(item.name)
            elif isinstance(item, ir.Loop):
                collect(item.body)
    collect(program.body)

    g = nx.DiGraph()
    ids: dict = {}
    bound: dict = {}            # visual id -> variable names
    seen: set = set()

    def key_of(node):
        if node.origin and not isinstance(node, (ir.Input, ir.LoopState, ir.LoopOut)):
            return ("call", node.origin, node.loc)      # one node per library call
        return node

    def cluster_of(node):
        block = node.block
        return block.loop.index if block is not None and block.loop is not None else None

    def visit(node) -> str:
        key = key_of(node)
        if key not in ids:
            ids[key] = f"n{len(ids)}"
            v = ids[key]
            if isinstance(key, tuple):
                g.add_node(v, label=call_text(program.source, node.loc), shape=_SHAPES["call"],
                           cluster=cluster_of(node), line=node.loc.line if node.loc else None)
            else:
                g.add_node(v, label=_op_text(node), shape=_SHAPES.get(type(node).__name__, "ellipse"),
                           cluster=cluster_of(node), line=node.loc.line if node.loc else None)
        v = ids[key]
        bound.setdefault(v, [])
        for name in names.get(node, []):
            if name not in bound[v]:
                bound[v].append(name)
        if node in seen:
            return v
        seen.add(node)
        for i in node.inputs:
            if _is_leaf(i):
                if isinstance(key, tuple) and not isinstance(i, ir.Host):
                    continue            # a library call's constants are part of its definition
                leaf = f"{v}_in{sum(1 for _ in g.predecessors(v))}"
                g.add_node(leaf, label=_leaf_text(program, i), shape="plaintext", cluster=g.nodes[v]["cluster"],
                           leaf=True, line=None)
                g.add_edge(leaf, v)
            else:
                u = visit(i)
                if u != v:
                    g.add_edge(u, v)
        return v

    for loop in program.loops:
        for var in loop.vars:
            state = visit(var.state)
            update = visit(var.update)
            g.add_edge(update, state, style="dashed", label="next")
            if var.init is not None:
                init = visit(var.init) if not _is_leaf(var.init) else None
                if init is None:
                    init = f"{state}_init"
                    g.add_node(init, label=_leaf_text(program, var.init), shape="plaintext",
                               cluster=None, leaf=True, line=None)
                g.add_edge(init, state, style="dotted", label="init")
            if getattr(var, "out", None) is not None:
                g.add_edge(update, visit(var.out), style="dashed")
    out = visit(program.output) if not _is_leaf(program.output) else None
    g.add_node("output", label="output", shape="doubleoctagon", cluster=None,
               line=program.output_loc.line if program.output_loc else None)
    if out is None:
        g.add_node("output_in", label=_leaf_text(program, program.output), shape="plaintext",
                   cluster=None, leaf=True, line=None)
        out = "output_in"
    g.add_edge(out, "output")
    for v, data in g.nodes(data=True):
        if data.get("leaf"):
            continue
        label = data["label"]
        if bound.get(v):
            label = f"{', '.join(bound[v])} = {label}"
        if data.get("line") is not None:
            label += f"\nline {data['line']}"
        data["label"] = label
    return g


def to_graphviz(g: nx.DiGraph, program: ir.ProgramIR) -> graphviz.Digraph:
    dot = graphviz.Digraph("program", graph_attr={"rankdir": "TB", "fontname": "Helvetica",
                                                  "label": f"{Path(program.path).name}: dataflow\n{LEGEND}",
                                                  "labelloc": "b", "fontsize": "10"},
                           node_attr={"fontname": "Helvetica", "fontsize": "10"},
                           edge_attr={"fontname": "Helvetica", "fontsize": "9"})
    clusters = {}
    for loop in program.loops:
        sub = graphviz.Digraph(f"cluster_loop{loop.index}")
        kind = " until stable" if loop.until_stable else ""
        sub.attr(label=f"loop {host_text(program, loop.count)}{kind} (line {loop.loc.line if loop.loc else '?'})",
                 style="rounded", color="steelblue")
        clusters[loop.index] = sub
    for n, data in g.nodes(data=True):
        target = clusters.get(data["cluster"], dot)
        attrs = {"shape": data["shape"]}
        if data.get("leaf"):
            attrs.update(fontsize="9", fontcolor="gray30", height="0.2", margin="0")
        target.node(str(n), data["label"], **attrs)
    # nested loops: draw inner clusters inside their parent
    for loop in sorted(program.loops, key=lambda l: -l.body.depth):
        parent = loop.body.parent.loop
        (clusters[parent.index] if parent is not None else dot).subgraph(clusters[loop.index])
    for a, b, data in g.edges(data=True):
        dot.edge(str(a), str(b), **{k: str(v) for k, v in data.items()})
    return dot


def render(dot: graphviz.Digraph, output) -> str:
    """Write `output` (.svg/.png/.pdf rendered by graphviz's `dot`, or the .dot
    source).  Without `dot` installed, writes the .dot source next to it and
    says how to render it.  Returns the message for the user."""
    path = Path(output)
    fmt = path.suffix.lstrip(".").lower() or "svg"
    try:
        if fmt in ("dot", "gv"):
            path.write_text(dot.source, encoding="utf-8")
            return f"wrote {path}"
        if shutil.which("dot") is None:
            dot_path = path.with_suffix(".dot")
            dot_path.write_text(dot.source, encoding="utf-8")
            return (f"wrote {dot_path}: graphviz's `dot` program is not installed (apt-get install graphviz); "
                    f"render it with `dot -T{fmt} {dot_path} -o {path}`")
        path.write_bytes(dot.pipe(format=fmt))
        return f"wrote {path}"
    except graphviz.backend.ExecutableNotFound:
        raise RaspError("graphviz's `dot` program is not installed (apt-get install graphviz); "
                        "use -o FILE.dot") from None
    except (OSError, ValueError) as e:
        raise RaspError(f"cannot write {path}: {e}") from None


def draw_program(program: ir.ProgramIR, output: str) -> str:
    return render(to_graphviz(dataflow_graph(program), program), output)
