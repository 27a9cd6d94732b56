"""Evidence for issue 11: the P1 suites (flip-flop, ListOps, Logical
Inference) at the cpu preset, tabulated with accuracy AND mean executed depth
per split next to P1's Tables 1-3, and a sentence per suite on where our
ordering agrees with P1's.  It runs nothing itself: the runs are
`rasp compare`'s (train/eval subprocesses, skip finished, resume):

    rasp compare flipflop --preset cpu --seeds 1 --jobs 1 --out /work/results/flipflop
    rasp compare listops  --preset cpu --seeds 1 --jobs 1 --out /work/results/listops
    rasp compare logic    --preset cpu --seeds 1 --jobs 1 --out /work/results/logic
    python bench/recurrent_transformers.py --results /work/results

Writes bench/recurrent_transformers.md; the hand-written part of that file
(from the line `## Reading` on) is kept.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainer.compare.grid import expand  # noqa: E402
from trainer.compare.results import cell_value, load_run  # noqa: E402
from trainer.compare.runner import read_json  # noqa: E402
from trainer.compare.suite import cell_attrs, load_suite  # noqa: E402
from trainer.checkpoint import write_text_atomic  # noqa: E402

PRESET = "cpu"
KEEP_FROM = "## Reading"
# the columns each suite's ordering is judged on (labels of the suite's table)
JUDGE = {"flipflop": ["p_i 0.98, T", "p_i 0.98, 2T"],     # the sparse p_i = 0.98 columns separate the models
         "listops": ["near-IID"],
         "logic": None}                            # None: every column


def run_cells(suite, table, row, out: Path) -> dict:
    """One table row from its compare run: status, per column (accuracy in
    the table's scale, mean depth, n), and the seconds of train / eval."""
    specs = {s.model_entry: s for s in expand(suite, PRESET, seeds=1)}
    cells, status, seconds, run_dir = {}, "missing", {}, None
    for col in table.columns:
        attrs = cell_attrs(table, col, row, PRESET)
        spec = specs.get(attrs.get("model"))
        if spec is None:
            continue
        res = load_run(spec, out)           # its eval files, normalized
        status = res.status
        if res.status != "finished":
            continue
        run_dir = out / spec.run_id
        split = res.evals.get(attrs.get("eval") or spec.evals[0].name, {}).get(attrs["split"])
        if split is None:
            continue
        acc = cell_value(split, attrs["metric"])
        depth = split["stats"].get("depth", {}).get("mean")
        cells[col.label] = (None if acc is None else acc * table.scale, depth, split.get("n"))
    if cells:                   # the row's run: its train / eval seconds and steps
        record = read_json(run_dir / "compare_run.json") or {}
        seconds = {s["step"]: s["seconds"] for s in record.get("steps", [])}
        seconds["steps"] = (read_json(run_dir / "summary.json") or {}).get("step")
    return {"status": status, "cells": cells, "seconds": seconds}


def concordance(ours: dict, paper: dict) -> tuple:
    """Model pairs ordered alike, all comparable pairs, and the flipped ones."""
    names = [m for m in ours if m in paper]
    agree, flips, total = 0, [], 0
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if paper[a] == paper[b] or ours[a] == ours[b]:
                continue
            total += 1
            if (ours[a] > ours[b]) == (paper[a] > paper[b]):
                agree += 1
            else:
                flips.append(f"{a} vs {b}")
    return agree, total, flips


def fmt_cell(cell, digits: int) -> str:
    if cell is None or cell[0] is None:
        return "—"
    acc, depth, _ = cell
    return f"{acc:.{digits}f}" + ("" if depth is None else f" ({depth:.1f})")


def suite_section(name: str, out: Path) -> list:
    suite = load_suite(name)
    table = suite.tables[0]
    labels = [c.label for c in table.columns]
    splits = [cell_attrs(table, c, table.rows[0], PRESET).get("split", c.label) for c in table.columns]
    digits = min(table.digits, 1)
    rows = [(r, run_cells(suite, table, r, out)) for r in table.rows if r.attrs.get("model")]
    sizes = sorted({c[2] for _, r in rows for c in r["cells"].values() if c[2]})
    lines = [f"## {suite.title}", "",
             f"Ours: `rasp compare {name} --preset cpu --seeds 1` in `{out}`; cells = {table.attrs.get('metric')} % "
             f"(mean executed depth), {'/'.join(map(str, sizes)) or '?'} test examples per split.", "",
             "| model | " + " | ".join(splits) + " | steps | train s | eval s |",
             "|---|" + "---|" * (len(labels) + 3)]
    for row, r in rows:
        s = r["seconds"]
        tail = [str(s.get("steps", "—")), f"{s['train']:.0f}" if "train" in s else "—",
                f"{sum(v for k, v in s.items() if k.startswith('eval_')):.0f}" if any(k.startswith("eval_") for k in s)
                else "—"]
        note = "" if r["status"] == "finished" else f" ({r['status']})"
        lines.append(f"| {row.label}{note} | " + " | ".join(fmt_cell(r["cells"].get(c), digits) for c in labels)
                     + " | " + " | ".join(tail) + " |")
    lines += ["", f"P1 {table.paper_table} ({table.statistic}):", "",
              "| model | " + " | ".join(c.paper_column for c in table.columns) + " |",
              "|---|" + "---|" * len(labels)]
    for row, _ in rows:
        if any(isinstance(v, (int, float)) for v in row.published):
            lines.append(f"| {row.label} | " + " | ".join(f"{v:g}" if isinstance(v, (int, float)) else "—"
                                                          for v in row.published) + " |")
    judged = JUDGE.get(name) or labels
    idx = [labels.index(c) for c in judged]
    ours, paper = {}, {}
    for row, r in rows:
        vals = [r["cells"].get(c) for c in judged]
        pub = [row.published[i] for i in idx]
        if all(v and v[0] is not None for v in vals) and all(isinstance(p, (int, float)) for p in pub):
            ours[row.label], paper[row.label] = sum(v[0] for v in vals) / len(vals), sum(pub) / len(pub)
    if len(ours) >= 2:
        agree, total, flips = concordance(ours, paper)
        order = lambda d: " > ".join(f"{m} {d[m]:.1f}" for m in sorted(d, key=lambda m: -d[m]))
        lines += ["", f"Ordering on {', '.join(splits[i] for i in idx)} (ours, mean) vs P1's "
                      f"{', '.join(table.columns[i].paper_column for i in idx)}: ours {order(ours)}; P1 {order(paper)}.  "
                      f"{agree} of {total} model pairs are ordered as in P1"
                      + (f"; flipped: {', '.join(flips)}." if flips else ".")]
    return lines + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default="/work/results", help="folder holding one `rasp compare` --out per suite")
    ap.add_argument("--suites", default="flipflop,listops,logic")
    ap.add_argument("--out", default=str(ROOT / "bench" / "recurrent_transformers.md"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    old = out.read_text() if out.exists() else ""
    kept = old[old.index(KEEP_FROM):] if KEEP_FROM in old else ""
    lines = ["# Recurrent transformers with dynamic halting: cpu-preset evidence (issue 11)", "",
             f"Tabulated by `bench/recurrent_transformers.py` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}) "
             "from `rasp compare` runs at the cpu preset (trainer/seqpresets.py, the suites' cpu eval sizes), "
             "seed 0, one torch thread per run, one run at a time.  Depth = executed layers (Transformer: its "
             "layers; UT/GUT: looped layers; TLB/GUTLB: layers per chunk; looped: iterations).  "
             "Single seed: differences of a few points are noise.", ""]
    for name in [s for s in args.suites.split(",") if s]:
        lines += suite_section(name, Path(args.results) / name)
    text = "\n".join(lines) + "\n" + kept
    write_text_atomic(out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
