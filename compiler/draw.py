"""Draw which operation sits in which layer and head of a compiled model."""
from __future__ import annotations

import shutil
from pathlib import Path

import graphviz


def layers_graph(cm) -> graphviz.Digraph:
    g = graphviz.Digraph("layers", graph_attr={"rankdir": "LR", "fontname": "Helvetica"},
                         node_attr={"shape": "record", "fontname": "Helvetica", "fontsize": "10"})
    prev = "input"
    g.node("input", "token embedding\\n+ position features (one, index, index²)", shape="box")
    titles = {"pre": "prelude", "body": "body (looped, weight-shared)", "post": "postlude"}
    for stage in ("pre", "body", "post"):
        layers = cm.layout.get(stage, [])
        if not layers:
            continue
        with g.subgraph(name=f"cluster_{stage}") as sub:
            sub.attr(label=titles[stage], style="rounded", color="gray40")
            for i, ops in enumerate(layers):
                heads = [o for o in ops if not o.startswith("mlp:")]
                mlps = [o[5:] for o in ops if o.startswith("mlp:")]
                esc = lambda s: s.replace("{", "\\{").replace("}", "\\}").replace("|", "\\|").replace("<", "\\<").replace(">", "\\>")
                head_txt = "\\l".join(f"head {h}: {esc(x)}" for h, x in enumerate(heads)) or "(no head)"
                mlp_txt = "\\l".join(esc(x) for x in mlps) or "(no MLP)"
                name = f"{stage}{i}"
                sub.node(name, f"{{layer {i}|attention\\l{head_txt}\\l|MLP\\l{mlp_txt}\\l}}")
                g.edge(prev, name)
                prev = name
        if stage == "body":
            g.edge(prev, "body0", label="× T (input injection)", style="dashed", constraint="false")
    g.node("out", "unembedding", shape="box")
    g.edge(prev, "out")
    return g


def draw_layers(cm, path) -> str:
    """Write the drawing; the format follows the extension (.svg/.png/.pdf/.dot).
    Without the graphviz `dot` binary a .dot file is written instead.
    Returns a one-line message saying what was written."""
    path = Path(path)
    g = layers_graph(cm)
    fmt = path.suffix.lstrip(".").lower() or "svg"
    if fmt == "dot" or shutil.which("dot") is None:
        dot_path = path.with_suffix(".dot")
        dot_path.write_text(g.source, encoding="utf-8")
        if fmt != "dot":
            return (f"wrote {dot_path} (graphviz 'dot' is not installed; render it with "
                    f"`dot -T{fmt} {dot_path} -o {path}`)")
        return f"wrote {dot_path}"
    data = g.pipe(format=fmt)
    path.write_bytes(data)
    return f"wrote {path}"
