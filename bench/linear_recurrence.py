"""Benchmark: P3's linear-recurrence baselines (S4D, Mamba, NRU) on CPU,
beside P3's published ✓/✗ (docs/benchmarks.md §3, §6, §7).

    python bench/linear_recurrence.py --out runs/bench_linrec              # train + evaluate all
    python bench/linear_recurrence.py --out runs/bench_linrec --only counting
    python bench/linear_recurrence.py --out runs/bench_linrec --report-only  # rebuild the table

Every run is `rasp train --preset cpu` followed by `rasp eval` (the code a
user runs), two at a time, one torch thread each, under `nice`; a finished
run (summary.json + eval.json) is not run again.  Writes
bench/linear_recurrence.md (or --md): one row per run with the headline
metric on every evaluated split, P3's verdict for the same setting, and the
machine load.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# (group, task, model, extra rasp-train flags, P3's verdict for that setting)
# P3 Table 4 (counting, 1 layer, hidden 8 / 64): offset solved at L = 200 by
# S4D ✓✓ and NRU ✓✓, not by 1-layer Mamba ✗✗; Table 5 (phase alignment,
# hidden 8 / 64): two ISI S4D ✓✓ NRU ✗✓ Mamba ✗✗, double ISI S4D ✓✓ NRU ✓✓
# Mamba ✗✗ (test_long_iti, a 600-token signal, has no P3 verdict).  Table 2 (words, k = 8):
# Mamba (and S4/Transformer/IDS4) ✓ at 1X only; NRU ✓ 1X..5X.  S4D is not in
# Table 2; P3 §4.1 groups it with Mamba ("consistent with Grazzi et al."),
# hence "✓ 1X, ✗ 2X+" for it too.  Table 3 (copying S = 10, T ≤ 50, 1 / 2
# layers): S4D ✓✓, Mamba ✗✓, NRU ✓✓.
# CPU-sized copying: S = 5 symbols, blanks T in 5..20 (the task's *_cpu splits)
COPY_CPU = ["--set", "train_split=train_cpu", "--set", "valid_split=valid_cpu"]
RUNS = [
    ("counting", "counting", "s4d", ["--d-model", "8"], "offset ✓, two ISI ✓, double ISI ✓"),
    ("counting", "counting", "mamba", ["--d-model", "8"], "offset ✗, two ISI ✗, double ISI ✗"),
    ("counting", "counting", "nru", ["--d-model", "8"], "offset ✓, two ISI ✗, double ISI ✓"),
    ("counting", "counting", "s4d", ["--d-model", "64"], "offset ✓, two ISI ✓, double ISI ✓"),
    ("counting", "counting", "mamba", ["--d-model", "64"], "offset ✗, two ISI ✗, double ISI ✗"),
    ("counting", "counting", "nru", ["--d-model", "64"], "offset ✓, two ISI ✓, double ISI ✓"),
    ("words", "words_z60", "s4d", [], "✓ 1X, ✗ 2X+ (as S4/Mamba)"),
    ("words", "words_z60", "mamba", [], "✓ 1X, ✗ 2X+"),
    ("words", "words_z60", "nru", [], "✓ 1X … 5X"),
    ("copying", "copying", "s4d", COPY_CPU, "learns ✓ (1 layer); no blank-length extrapolation"),
    ("copying", "copying", "mamba", COPY_CPU, "✗ 1 layer / ✓ 2 layers; extrapolates to longer blanks"),
    ("copying", "copying", "nru", COPY_CPU, "learns ✓; extrapolates to longer blanks"),
]


# per group: the splits `rasp eval` scores (None = all) and the metric shown
# (P3 scores word problems by whole-sequence accuracy, counting by the offset)
EVAL = {"words": (["valid", "test_16", "test_24", "test_32", "test_40"], "seq_acc"),
        "counting": (["valid", "test_long_iti", "test_two_isi", "test_double_isi"], "offset_acc"),
        "copying": (["valid_cpu", "test_cpu_T40", "test_cpu_T80"], "acc")}


def run_name(task: str, model: str, flags: list) -> str:
    tail = "_".join(f.lstrip("-").replace("-", "") for f in flags if f not in COPY_CPU)
    return f"{task}_{model}" + (f"_{tail}" if tail else "")


def rasp(*args) -> list:
    return [sys.executable, "-c", "import sys; from rasp.cli import main; sys.exit(main(sys.argv[1:]))", *args]


def command(out: Path, group: str, task: str, model: str, flags: list, args) -> list:
    splits = EVAL[group][0]
    train = rasp("train", "--task", task, "--model", model, "--preset", "cpu", "--seed", str(args.seed),
                 "--out", str(out), "--no-progress", "--max-wall", str(args.max_wall), *flags)
    evaluate = rasp("eval", str(out), "--no-progress", "-n", str(args.eval_n),
                    *(["--splits", ",".join(splits)] if splits else []))
    return ["nice", "-n", "10"] + train, ["nice", "-n", "10"] + evaluate


def finished(out: Path) -> bool:
    try:
        return json.loads((out / "summary.json").read_text()).get("finished") and (out / "eval.json").is_file()
    except (OSError, ValueError):
        return False


def run_all(selected: list, args) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    queue = [r for r in selected if not finished(args.out / run_name(r[1], r[2], r[3]))]
    running = []
    while queue or running:
        while queue and len(running) < args.parallel:
            group, task, model, flags, _ = queue.pop(0)
            out = args.out / run_name(task, model, flags)
            train, evaluate = command(out, group, task, model, flags, args)
            log = open(args.out / f"{out.name}.log", "w")
            script = " && ".join(" ".join(f"'{a}'" for a in c) for c in (train, evaluate))
            print(f"start {out.name}", flush=True)
            running.append((out, subprocess.Popen(["bash", "-c", script], env=env, stdout=log,
                                                  stderr=subprocess.STDOUT), log, time.time()))
        time.sleep(2)
        with open(args.out / "load.jsonl", "a") as f:      # the load the timings were taken under
            f.write(json.dumps(os.getloadavg()[0]) + "\n")
        for item in list(running):
            out, proc, log, t0 = item
            if proc.poll() is not None:
                log.close()
                print(f"done  {out.name} rc={proc.returncode} {time.time() - t0:.0f}s", flush=True)
                running.remove(item)


def headline(split: dict, wanted=None) -> tuple:
    """(metric name, mean): `wanted` when the split has it, else its first metric."""
    name = wanted if wanted in split["metrics"] else next(iter(split["metrics"]))
    return name, split["metrics"][name]["mean"]


def cell(split: dict, wanted, first: str) -> str:
    """The wanted metric, and the task's headline metric in brackets when it
    differs (word problems: sequence accuracy (token accuracy))."""
    name, value = headline(split, wanted)
    other = split["metrics"].get(first, {}).get("mean")
    return f"{value:.3f}" + (f" ({other:.2f})" if first != name and other is not None else "")


def report(selected: list, args) -> str:
    lines = ["# Linear-recurrence baselines on CPU (P3: S4D, Mamba, NRU)", "",
             "Generated by `python bench/linear_recurrence.py`; every run is `rasp train --preset cpu` "
             f"(seed {args.seed}; training stopped by `--max-wall`, column s, or the preset's steps) then `rasp eval -n {args.eval_n}`. "
             "Cells: the metric named in each heading per evaluated split (mean over examples; "
             "in brackets the task's first metric when it differs, e.g. token accuracy). "
             "P3 = the paper's verdict for the same setting (docs/benchmarks.md §3, §6, §7); ours is one seed, "
             "a CPU-sized model and minutes of training, so a ✗ here can mean under-training.", ""]
    for group in dict.fromkeys(r[0] for r in selected):
        rows = [r for r in selected if r[0] == group]
        results = []
        for _, task, model, flags, p3 in rows:
            out = args.out / run_name(task, model, flags)
            try:
                ev = json.loads((out / "eval.json").read_text())
                summary = json.loads((out / "summary.json").read_text())
            except (OSError, ValueError):
                results.append((task, model, flags, p3, None, None))
                continue
            results.append((task, model, flags, p3, ev, summary))
        wanted = EVAL[group][1]
        splits = EVAL[group][0] or list(dict.fromkeys(s for r in results if r[4] for s in r[4]["splits"]))
        metric = next((headline(r[4]["splits"][s], wanted)[0] for r in results if r[4] for s in r[4]["splits"]),
                      wanted or "?")
        lines += [f"## {group} ({metric})", "",
                  "| run | params | steps | s | " + " | ".join(splits) + " | P3 |",
                  "|---|---|---|---|" + "---|" * len(splits) + "---|"]
        for task, model, flags, p3, ev, summary in results:
            name = f"{model} {' '.join(f for f in flags if f not in COPY_CPU)}".strip()
            if ev is None:
                lines.append(f"| {name} | – | – | – | " + " | ".join("pending" for _ in splits) + f" | {p3} |")
                continue
            cells = [cell(ev["splits"][s], wanted, ev.get("headline")) if s in ev["splits"] else "–"
                     for s in splits]
            lines.append(f"| {name} | {summary.get('n_params', '?')} | {summary.get('step', '?')} | "
                         f"{summary.get('seconds', 0):.0f} | " + " | ".join(cells) + f" | {p3} |")
        lines.append("")
    lines += [f"Load while measuring: {args.load}.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_linrec")
    p.add_argument("--md", type=Path, default=ROOT / "bench" / "linear_recurrence.md")
    p.add_argument("--only", default=None, help="comma-separated groups: counting, words, copying")
    p.add_argument("--models", default=None, help="comma-separated models (default: s4d, mamba, nru)")
    p.add_argument("--max-wall", type=float, default=300.0, help="training seconds per run")
    p.add_argument("--eval-n", type=int, default=500)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args(argv)
    groups = set(args.only.split(",")) if args.only else None
    models = set(args.models.split(",")) if args.models else None
    selected = [r for r in RUNS if (groups is None or r[0] in groups) and (models is None or r[2] in models)]
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        run_all(selected, args)
    try:
        loads = [json.loads(x) for x in (args.out / "load.jsonl").read_text().split()]
    except OSError:
        loads = list(os.getloadavg()[:1])
    args.load = (f"1-minute load average {sum(loads) / len(loads):.1f} mean, {max(loads):.1f} max "
                 f"on {os.cpu_count()} cores (other sessions share the machine)")
    args.md.write_text(report(RUNS, args))          # every run, pending where not run yet
    print(f"wrote {args.md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
