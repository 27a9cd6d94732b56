"""Benchmark page: P3's linear-recurrence baselines (S4D, Mamba, NRU) on CPU,
beside P3's published ✓/✗ (docs/benchmarks.md §3, §6, §7), tabulated from the
committed result folders docs/results/<suite>/ (see bench/results_page.py).

    python -m bench.results_page                  # regenerates this page with docs/results.md
    python -m bench.linear_recurrence             # this page alone
    python -m bench.linear_recurrence --results runs   # from your own `rasp compare --out runs/<suite>`

The runs are `rasp compare`'s: counting = the `counting` suite's models
s4d_h8/h64, mamba_h8/h64, nru_h8/h64; copying = the `memory` suite's
copy_blanks runs of s4d/mamba/nru at 1 and 2 layers; words = the `words`
suite's Z60 runs of s4d/mamba/nru.  To train them yourself:

    rasp compare counting --preset cpu --models s4d_h8,s4d_h64,mamba_h8,mamba_h64,nru_h8,nru_h64 --out runs/counting
    rasp compare memory --preset cpu --tasks copy_blanks --models s4d_1l,s4d_2l,mamba_1l,mamba_2l,nru_1l,nru_2l --out runs/memory
    rasp compare words --preset cpu --tasks z60_k8 --models s4d,mamba,nru --out runs/words
    python -m bench.linear_recurrence --results runs --md /tmp/linear_recurrence.md

(This script used to train its own runs; that was `rasp compare` again, with
its own run names and a `--max-wall` whose step count depended on the load,
so it now only tabulates.)  Cells come from the report's own code
(trainer/compare/report.py our_cell: mean ± standard error over the seeds,
their number, ✓/✗ by the suite table's criterion); a cell no run stands
behind reads "not run".
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from rasp.atomic import write_text_atomic
from bench.recurrent_transformers import shown_path
from trainer.compare import report as R
from trainer.compare.runner import read_json
from trainer.compare.suite import load_suite

ROOT = Path(__file__).resolve().parents[1]

PRESET = "cpu"
RESULTS = ROOT / "docs" / "results"
PAGE = ROOT / "bench" / "linear_recurrence.md"


@dataclass
class Group:
    name: str
    suite: str
    table: str            # the suite table whose scale, digits and ✓/✗ criterion the cells use
    metric: str
    columns: list         # (task entry, split, heading)
    rows: list            # (model entry, P3's verdict for that setting)
    about: str


# P3 Table 4 (counting, 1 layer, hidden 8 / 64): offset solved at L = 200 by
# S4D ✓✓ and NRU ✓✓, not by 1-layer Mamba ✗✗; Table 5 (phase alignment,
# hidden 8 / 64): two ISI S4D ✓✓ NRU ✗✓ Mamba ✗✗, double ISI S4D ✓✓ NRU ✓✓
# Mamba ✗✗.  Table 3 (copying S = 10, T ≤ 50, 1 / 2 layers): S4D ✓✓, Mamba
# ✗✓, NRU ✓✓.  Table 2 (words, k = 8): Mamba (and S4/Transformer/IDS4) ✓ at
# 1X only; NRU ✓ 1X..5X.  S4D is not in Table 2; P3 §4.1 groups it with Mamba
# ("consistent with Grazzi et al."), hence "✓ 1X, ✗ 2X+" for it too.
GROUPS = [
    Group("counting", "counting", "p3_table4", "offset_acc",
          [("short", "valid_cpu", "short (valid_cpu)"), ("medium", "valid_medium_cpu", "medium (valid_medium_cpu)"),
           ("long", "valid_long_cpu", "long (valid_long_cpu)"), ("short", "test_two_isi_cpu", "two ISI"),
           ("short", "test_double_isi_cpu", "double ISI")],
          [("s4d_h8", "offset ✓, two ISI ✓, double ISI ✓"), ("mamba_h8", "offset ✗, two ISI ✗, double ISI ✗"),
           ("nru_h8", "offset ✓, two ISI ✗, double ISI ✓"), ("s4d_h64", "offset ✓, two ISI ✓, double ISI ✓"),
           ("mamba_h64", "offset ✗, two ISI ✗, double ISI ✗"), ("nru_h64", "offset ✓, two ISI ✓, double ISI ✓")],
          "The `counting` suite at its cpu preset: every setting at 1/5 of P3's length (the *_cpu splits: "
          "length 40 / 120 / 200), the phase-alignment tests on the models trained on the short setting.  The "
          "rows this page showed before were P3's full-length splits (valid, test_long_iti, test_two_isi, "
          "test_double_isi) after an older cpu preset; test_long_iti has no P3 verdict and the suite does not "
          "evaluate it."),
    Group("copying", "memory", "p3_table3", "acc",
          [("copy_blanks", "valid_cpu", "valid_cpu (T 5..20)"), ("copy_blanks", "test_cpu_T40", "test_cpu_T40"),
           ("copy_blanks", "test_cpu_T80", "test_cpu_T80")],
          [("s4d_1l", "learns ✓ (1 layer); no blank-length extrapolation"),
           ("s4d_2l", "learns ✓ (2 layers); no blank-length extrapolation"),
           ("mamba_1l", "✗ (1 layer)"), ("mamba_2l", "✓ (2 layers); extrapolates to longer blanks"),
           ("nru_1l", "learns ✓ (1 layer); extrapolates to longer blanks"),
           ("nru_2l", "learns ✓ (2 layers); extrapolates to longer blanks")],
          "The `memory` suite's copy_blanks runs at its cpu preset, on the same splits as this page's earlier "
          "runs of its own (trained on train_cpu / valid_cpu: S = 5 symbols, blanks T 5..20; tested at blanks 40 "
          "and 80), at the suite's 1 and 2 layers and its 300 steps (the earlier runs: the layers of the cpu "
          "preset then, 954-1000 steps)."),
    Group("words (Z60)", "words", "p3_table2", "seq_acc",
          [("z60_k8", "valid", "1X (valid)"), ("z60_k8", "test_16", "2X (test_16)"),
           ("z60_k8", "test_32", "4X (test_32)")],
          [("s4d", "✓ 1X, ✗ 2X+ (as S4/Mamba)"), ("mamba", "✓ 1X, ✗ 2X+"), ("nru", "✓ 1X … 5X")],
          "The `words` suite's Z60 runs (k = 8) at its cpu preset, scored by whole-sequence accuracy as P3."),
]


def group_rows(group: Group, folder: Path, report=R.folder_suite_report) -> tuple:
    """(the suite's report of the folder or None, {model entry: [cell per column]})."""
    suite = load_suite(group.suite)
    table = next(t for t in suite.tables if t.id == group.table)
    doc = report(folder, group.suite, PRESET)
    by_cell: dict = {}
    for res in (doc or {}).get("_results", []):
        by_cell.setdefault((res.spec.task_entry, res.spec.model_entry), []).append(res)
    seeds = doc["seeds"] if doc else 0
    rows = {}
    for model, _ in group.rows:
        rows[model] = [R.our_cell(table, {"task": task, "model": model, "split": split, "metric": group.metric},
                                  by_cell.get((task, model), []), seeds, suite)
                       for task, split, _ in group.columns]
    return doc, rows


def run_facts(folder: Path, cells: list) -> tuple:
    """(parameters, training steps) of a row's finished runs, '–' where none."""
    runs = sorted({rid for c in cells for rid, v in c.get("by_run", {}).items() if isinstance(v, float)})
    params = sorted({str((read_json(folder / r / "run.json") or {}).get("n_params", "?")) for r in runs})
    steps = sorted({str((read_json(folder / r / "summary.json") or {}).get("step", "?")) for r in runs}, key=str)
    return "/".join(params) or "–", "/".join(steps) or "–"


def group_section(group: Group, results: Path, report=R.folder_suite_report) -> list:
    folder = Path(results) / group.suite
    doc, rows = group_rows(group, folder, report)
    lines = [f"## {group.name} ({group.metric})", "", group.about, ""]
    if doc is None:
        lines += [f"Not run: no `{group.suite}` selection at preset {PRESET} in `{shown_path(folder)}` "
                  f"(`rasp compare {group.suite} --preset {PRESET}`, then `python -m bench.results_page --collect` "
                  "its --out folder)."]
    else:
        lines += [f"From `{shown_path(folder)}` (`rasp compare {group.suite} --preset {PRESET}`, {doc['seeds']} "
                  "seeds; how and where it ran: its notes.md)."]
    suite = load_suite(group.suite)
    lines += ["", "| model | params | steps | " + " | ".join(c[2] for c in group.columns) + " | P3 |",
              "|---|---|---|" + "---|" * len(group.columns) + "---|"]
    for model, verdict in group.rows:
        label = suite.model(model).label
        params, steps = run_facts(folder, rows[model])
        lines.append(f"| {label} | {params} | {steps} | "
                     + " | ".join(R._md_escape(c["text"]) for c in rows[model]) + f" | {verdict} |")
    return lines + [""]


def render(results: Path = RESULTS, report=R.folder_suite_report) -> str:
    """The page; `report(folder, suite, preset)` gives a suite's report (R.folder_suite_report's shape)."""
    lines = ["# Linear-recurrence baselines on CPU (P3: S4D, Mamba, NRU)", "",
             "Generated by `python -m bench.results_page` (or `python -m bench.linear_recurrence`) from the result "
             f"folders in `{shown_path(results)}`; do not edit by hand.  Cells: the metric named in each heading per "
             "split, mean ± standard error over the seeds that finished and their number (\"1 seed\": no standard "
             "error), each seed's value a mean over the split's examples; ✓/✗ = ours by the suite table's "
             "criterion (counting: offset accuracy ≥ 0.9 in a majority of seeds; copying, words: mean ≥ 0.99 / "
             "0.9); \"not run\" = no run of that cell in the folder.  Params and steps: of the runs behind the row.  "
             "P3 = the paper's verdict for the same setting (docs/benchmarks.md §3, §6, §7); ours is a CPU-sized "
             "model and minutes of training, so a ✗ here can mean under-training.  The suites' full tables, with "
             "the test over seeds, are in docs/results.md.", ""]
    for group in GROUPS:
        lines += group_section(group, results, report)
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=RESULTS,
                   help="folder holding one result folder per suite (default: docs/results)")
    p.add_argument("--md", type=Path, default=PAGE)
    args = p.parse_args(argv)
    write_text_atomic(args.md, render(args.results))
    print(f"wrote {args.md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
