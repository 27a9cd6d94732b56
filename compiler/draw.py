"""Draw which operation sits in which layer and head of a compiled model
(top to bottom, one row per layer, with a legend for the labels)."""
from __future__ import annotations

import re

import graphviz

from rasp.draw import render

LEGEND = ("how to read a layer:\\l"
          "  attention  head h: REDUCTION [VAR] line L  =  head h computes the aggregate (mean/max/min)\\l"
          "             or sel_width that gives variable VAR at source line L\\l"
          "  MLP        OP [VAR] line L (K units)  =  K hidden units compute the element-wise op OP\\l"
          "             [fused]: several element-wise ops computed as one table\\l"
          "  the body's layers run T(n) times with shared weights; the input embedding is added each time\\l")


def _esc(text: str) -> str:
    text = re.sub(r" @(\d+)", r" line \1", text)      # craft labels end in @LINE
    for ch in "{}|<>":
        text = text.replace(ch, "\\" + ch)
    return text


def layers_graph(cm) -> graphviz.Digraph:
    g = graphviz.Digraph("layers", graph_attr={"rankdir": "TB", "fontname": "Helvetica", "nodesep": "0.3"},
                         node_attr={"shape": "record", "fontname": "Helvetica", "fontsize": "10"},
                         edge_attr={"fontname": "Helvetica", "fontsize": "9"})
    g.node("legend", LEGEND, shape="note", fontsize="9")
    prev = "input"
    g.node("input", "token embedding + position features (one, index, index²)", shape="box")
    g.edge("legend", "input", style="invis")
    titles = {"pre": "prelude (runs once)", "body": "body (looped T(n) times, weight-shared)",
              "post": "postlude (runs once)"}
    for stage in ("pre", "body", "post"):
        layers = cm.layout.get(stage, [])
        if not layers:
            continue
        with g.subgraph(name=f"cluster_{stage}") as sub:
            sub.attr(label=titles[stage], style="rounded", color="gray40", labeljust="l")
            for i, ops in enumerate(layers):
                heads = [o for o in ops if not o.startswith("mlp:")]
                mlps = [o[5:] for o in ops if o.startswith("mlp:")]
                head_txt = "\\l".join(f"head {h}: {_esc(x)}" for h, x in enumerate(heads)) or "(no head)"
                mlp_txt = "\\l".join(_esc(x) for x in mlps) or "(no MLP)"
                name = f"{stage}{i}"
                sub.node(name, f"{stage} layer {i}|attention\\l{head_txt}\\l|MLP\\l{mlp_txt}\\l")
                g.edge(prev, name)
                prev = name
        if stage == "body":
            g.edge(prev, "body0", label="× T (input injection)", style="dashed", constraint="false")
    g.node("out", "unembedding", shape="box")
    g.edge(prev, "out")
    return g


def draw_layers(cm, path) -> str:
    """Write the drawing; the format follows the extension (.svg/.png/.pdf/.dot).
    Returns a one-line message saying what was written."""
    return render(layers_graph(cm), path)
