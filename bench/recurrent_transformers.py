"""Evidence for issue 11: the P1 suites (flip-flop, ListOps, Logical
Inference) at the cpu preset, tabulated with accuracy AND mean executed depth
per split next to P1's Tables 1-3, and a sentence per suite on where our
ordering agrees with P1's and which of its steps are within seed noise.  It
runs nothing itself: it reads the committed result folders docs/results/<suite>/
(`rasp compare` runs less their checkpoints, see bench/results_page.py) through
the report's own code (trainer/compare/report.py: mean ± standard error over
the seeds; trainer/compare/ranking.py: the test over seeds).

    python -m bench.results_page                  # regenerates this page with docs/results.md
    python -m bench.recurrent_transformers        # this page alone
    python -m bench.recurrent_transformers --results runs   # from your own `rasp compare --out runs/<suite>`

Writes bench/recurrent_transformers.md; the hand-written part of that file
(from the line `## Reading` on) is kept.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rasp.atomic import write_text_atomic
from trainer.compare import report as R
from trainer.compare.ranking import ALPHA, margin_test, method_name
from trainer.compare.runner import read_json
from trainer.tasks.scoring import summary

ROOT = Path(__file__).resolve().parents[1]

PRESET = "cpu"
RESULTS = ROOT / "docs" / "results"
PAGE = ROOT / "bench" / "recurrent_transformers.md"
SUITES = ("flipflop", "listops", "logic")
KEEP_FROM = "## Reading"
# the columns each suite's ordering is judged on (labels of the suite's table; None: every column run)
JUDGE = {"flipflop": ["p_i 0.98, T", "p_i 0.98, 2T"],     # the sparse p_i = 0.98 columns separate the models
         "listops": ["near-IID"],
         "logic": None}


def shown_path(p: Path) -> str:
    """A folder as the page names it: relative to the repository when inside it."""
    p = Path(p).resolve()
    return Path(os.path.relpath(p, ROOT)).as_posix() if p.is_relative_to(ROOT) else str(p)


def split_stats(doc: dict, cell: dict) -> tuple:
    """(mean executed depth over the cell's finished seeds or None, the
    split's example counts) of one report cell."""
    attrs, results = cell["attrs"], {r.spec.run_id: r for r in doc["_results"]}
    ev, depths, sizes = R.cell_eval(doc["_suite"], attrs), [], set()
    for rid in cell["ours"].get("runs", []):
        r = results[rid]
        split = r.evals.get(ev, {}).get(attrs.get("split", "test")) if r.status == "finished" else None
        if split:
            depths.append(split.get("stats", {}).get("depth", {}).get("mean"))
            sizes.add(split.get("n"))
    return summary(depths)["mean"], sizes - {None}


def row_seconds(folder: Path, runs: list) -> dict:
    """Mean over a row's runs of its training steps and the seconds of train / eval."""
    steps, train, evals = [], [], []
    for rid in runs:
        rec = read_json(folder / rid / "compare_run.json") or {}
        secs = {s.get("step"): s.get("seconds") for s in rec.get("steps", []) if isinstance(s, dict)}
        train.append(secs.get("train"))
        evals.append(sum(v for k, v in secs.items() if str(k).startswith("eval_") and isinstance(v, (int, float)))
                     if any(str(k).startswith("eval_") for k in secs) else None)
        steps.append((read_json(folder / rid / "summary.json") or {}).get("step"))
    return {k: summary(v)["mean"] for k, v in (("steps", steps), ("train", train), ("eval", evals))}


def concordance(ours: dict, paper: dict) -> tuple:
    """Model pairs ordered alike, all comparable pairs, and the flipped ones (a, b: ours a > b)."""
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
                flips.append((a, b) if ours[a] > ours[b] else (b, a))
    return agree, total, flips


def per_seed(cells: list) -> list:
    """A model's value per seed averaged over the judged cells (a seed counts
    when every judged cell has its value): what the test over seeds compares."""
    runs = set.intersection(*(set(c["ours"].get("by_run", {})) for c in cells))
    vals = [[c["ours"]["by_run"][rid] for c in cells] for rid in sorted(runs)]
    return [sum(v) / len(v) for v in vals if all(isinstance(x, float) for x in v)]


def ordering(name: str, t: dict, rows: list) -> list:
    """The sentence on our ordering against P1's, from means over seeds."""
    cols = [j for j, c in enumerate(t["columns"]) if c["shown"]]
    judged = [j for j in cols if t["columns"][j]["label"] in (JUDGE.get(name) or [t["columns"][j]["label"]])]
    if not judged:
        return []
    ours, paper, seeds = {}, {}, {}
    for row in rows:
        cells = [row["cells"][j] for j in judged]
        pub = [c["published"]["value"] for c in cells]
        if all(c["ours"].get("status") == "ok" for c in cells) and all(isinstance(p, (int, float)) for p in pub):
            ours[row["label"]] = sum(c["ours"]["mean"] for c in cells) / len(cells) * t["scale"]
            paper[row["label"]] = sum(pub) / len(pub)
            seeds[row["label"]] = per_seed(cells)
    if len(ours) < 2:
        return []
    noise = lambda a, b: not margin_test(seeds[a], seeds[b])["beyond_noise"]  # noqa: E731
    agree, total, flips = concordance(ours, paper)
    order = lambda d: " > ".join(f"{m} {d[m]:.1f}" for m in sorted(d, key=lambda m: -d[m]))  # noqa: E731
    ranked = sorted(ours, key=lambda m: -ours[m])
    close = [f"{a} > {b}" for a, b in zip(ranked, ranked[1:]) if noise(a, b)]
    flipped = [f"{a} > {b}" + (" (within noise)" if noise(a, b) else "") for a, b in flips]
    steps = len(ranked) - 1
    where = ", ".join(t["columns"][j]["label"] for j in judged)
    paper_where = ", ".join(t["columns"][j]["paper_column"] for j in judged)
    text = (f"Ordering on {where} (ours: mean over seeds) vs P1's {paper_where}: ours {order(ours)}; "
            f"P1 {order(paper)}.  {agree} of {total} model pairs are ordered as in P1"
            + (f"; ours the other way: {', '.join(flipped)}." if flipped else ".")
            + f"  Seed noise ({method_name()} on each seed's mean over these columns, beyond noise at "
              f"p ≤ {ALPHA:g}): ")
    if not close:
        text += "no step of our ordering is within noise."
    elif len(close) == steps:
        text += f"every step of our ordering is within noise ({', '.join(close)})."
    else:
        text += f"{len(close)} of its {steps} steps are within noise: {', '.join(close)}."
    return ["", text]


def cell_text(doc: dict, cell: dict) -> str:
    ours = cell["ours"]
    if ours.get("status") != "ok":
        return ours["text"]
    depth, _ = split_stats(doc, cell)
    return ours["text"] + ("" if depth is None else f", depth {depth:.1f}")


def suite_section(name: str, folder: Path, report=R.folder_suite_report) -> list:
    doc = report(folder, name, PRESET)
    if doc is None:
        return [f"## `{name}`", "", f"Not run: no `{name}` selection at preset {PRESET} in `{shown_path(folder)}`.", ""]
    lines = [f"## {doc['title']}", ""]
    if not any(t["selected"] for t in doc["tables"]):
        lines += [f"Not run: no run of this suite's tables in `{shown_path(folder)}`.", ""]
    for t in doc["tables"]:
        if not t["selected"]:
            continue
        cols = [j for j, c in enumerate(t["columns"]) if c["shown"]]
        rows = [r for r in t["rows"] if r["ours_run"]]
        ran = [r for r in rows if any(r["cells"][j]["ours"]["status"] != "not run" for j in cols)]
        splits = [next(r["cells"][j]["attrs"]["split"] for r in rows) for j in cols]
        sizes = sorted({n for r in ran for j in cols if r["cells"][j]["ours"]["status"] == "ok"
                        for n in split_stats(doc, r["cells"][j])[1]})
        seeds = ", ".join(f"{k} {label}" for k, label in R.seed_groups(doc.get("seeds_by_model") or {}))
        seeds = f"{doc['seeds']} seeds" + (f"; {seeds}" if seeds else "")
        lines += [f"Ours: `rasp compare {name} --preset {PRESET}` ({seeds}), "
                  f"collected in `{shown_path(folder)}` (how and where it ran: its notes.md); {t['title']}.  Cells: "
                  f"mean ± standard error over the seeds (their number), then the mean executed depth over them; "
                  f"{'/'.join(map(str, sizes)) or '?'} test examples per split.  Steps, train s and eval s: means "
                  f"over the row's runs.", "",
                  "| model | " + " | ".join(f"{t['columns'][j]['label']} ({s})" for j, s in zip(cols, splits))
                  + " | steps | train s | eval s |",
                  "|---|" + "---|" * (len(cols) + 3)]
        for row in ran:
            runs = sorted({rid for j in cols for rid in row["cells"][j]["ours"].get("runs", [])})
            secs = row_seconds(folder, runs)
            tail = ["—" if secs[k] is None else f"{secs[k]:.0f}" for k in ("steps", "train", "eval")]
            lines.append(f"| {row['label']} | " + " | ".join(R._md_escape(cell_text(doc, row["cells"][j]))
                                                            for j in cols) + " | " + " | ".join(tail) + " |")
        missing = [r["label"] for r in rows if r not in ran]
        lines += [""] + ([f"Not run: {', '.join(missing)}.", ""] if missing else [])
        published = [r for r in t["rows"] if any(r["cells"][j]["published"]["value"] is not None for j in cols)]
        lines += [f"P1 {t['paper_table']} ({t['statistic']}):", "",
                  "| model | " + " | ".join(t["columns"][j]["paper_column"] for j in cols) + " |",
                  "|---|" + "---|" * len(cols)]
        for row in published:
            lines.append(f"| {row['label']} | " + " | ".join(R._md_escape(row["cells"][j]["published"]["text"])
                                                            for j in cols) + " |")
        lines += ordering(name, t, ran)
        if doc["summary"].get("withheld"):
            lines += ["", f"The suite's report does not rank its models at preset {PRESET}: "
                          f"{doc['summary']['withheld']}"]
        lines.append("")
    return lines


def kept_part(page_text: str) -> str:
    """The hand-written part of the page (from `## Reading` on), or ''."""
    return page_text[page_text.index(KEEP_FROM):] if KEEP_FROM in page_text else ""


def render(results: Path = RESULTS, kept: str = "", suites=SUITES, report=R.folder_suite_report) -> str:
    """The page; `report(folder, suite, preset)` gives a suite's report (R.folder_suite_report's shape)."""
    lines = ["# Recurrent transformers with dynamic halting: cpu-preset evidence (issue 11)", "",
             "Generated by `python -m bench.results_page` (or `python -m bench.recurrent_transformers`) from the "
             f"result folders in `{shown_path(results)}` (`rasp compare` at the cpu preset: trainer/benchmark/presets.py and "
             "the suites' cpu eval sizes; every seed that ran); do not edit the tables by hand.  Depth = executed "
             "layers (Transformer: its layers; UT/GUT: looped layers; TLB/GUTLB: layers per chunk; looped: "
             "iterations).  The same runs' full reports, with the test over seeds per column, are in "
             "docs/results.md.", ""]
    for name in suites:
        lines += suite_section(name, Path(results) / name, report)
    return "\n".join(lines) + "\n" + kept


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=str(RESULTS), help="folder holding one result folder per suite "
                    "(default: docs/results)")
    ap.add_argument("--suites", default=",".join(SUITES))
    ap.add_argument("--out", default=str(PAGE))
    args = ap.parse_args(argv)
    old = Path(args.out).read_text() if Path(args.out).is_file() else ""
    text = render(Path(args.results), kept_part(old), [s for s in args.suites.split(",") if s])
    write_text_atomic(args.out, text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
