"""Benchmark: P3's linear-recurrence baselines (S4D, Mamba, NRU) on CPU,
beside P3's published ✓/✗ (docs/benchmarks.md §3, §6, §7).

    python bench/linear_recurrence.py --out runs/bench_linrec              # train + evaluate all
    python bench/linear_recurrence.py --out runs/bench_linrec --only counting
    python bench/linear_recurrence.py --out runs/bench_linrec --report-only  # rebuild the table

Every run is `rasp train --preset cpu` followed by `rasp eval` (the code a
user runs), two at a time, one torch thread each, under `nice`; a finished
run (summary.json + eval.json) is not run again.  Training runs the preset's
steps, so a rerun gives the same figures whatever the machine's load
(`--max-wall` stops on the clock instead, for a quick look; its rows then
depend on the load and are marked).  Writes bench/linear_recurrence.md (or
--md): one row per setting with the headline metric on every evaluated split
as mean ± standard error over the seeds that finished, P3's verdict for the
same setting, and the machine load.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rasp.atomic import write_text_atomic  # noqa: E402
from trainer.tasks.scoring import summary  # noqa: E402

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


def run_name(task: str, model: str, flags: list, seed: int) -> str:
    tail = "_".join(f.lstrip("-").replace("-", "") for f in flags if f not in COPY_CPU)
    return f"{task}_{model}" + (f"_{tail}" if tail else "") + f"_s{seed}"


def runs_of(selected: list, seeds: int) -> list:
    """(setting, seed) for every seed of every selected setting."""
    return [(r, seed) for r in selected for seed in range(seeds)]


def rasp(*args) -> list:
    return [sys.executable, "-c", "import sys; from rasp.cli import main; sys.exit(main(sys.argv[1:]))", *args]


def command(out: Path, group: str, task: str, model: str, flags: list, seed: int, args) -> list:
    splits = EVAL[group][0]
    wall = ["--max-wall", str(args.max_wall)] if args.max_wall else []
    train = rasp("train", "--task", task, "--model", model, "--preset", "cpu", "--seed", str(seed),
                 "--out", str(out), "--no-progress", *wall, *flags)
    evaluate = rasp("eval", str(out), "--no-progress", "-n", str(args.eval_n),
                    *(["--splits", ",".join(splits)] if splits else []))
    return ["nice", "-n", "10"] + train, ["nice", "-n", "10"] + evaluate


def finished(out: Path) -> bool:
    try:
        return json.loads((out / "summary.json").read_text()).get("finished") and (out / "eval.json").is_file()
    except (OSError, ValueError):
        return False


def run_all(selected: list, args) -> None:
    # ROOT first, keeping the caller's path (packages installed with --target live there)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path)
    queue = [(r, seed) for r, seed in runs_of(selected, args.seeds)
             if not finished(args.out / run_name(r[1], r[2], r[3], seed))]
    running = []
    while queue or running:
        while queue and len(running) < args.parallel:
            (group, task, model, flags, _), seed = queue.pop(0)
            out = args.out / run_name(task, model, flags, seed)
            train, evaluate = command(out, group, task, model, flags, seed, args)
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


def headline(split: dict, wanted=None) -> str:
    """The metric shown for a split: `wanted` when the split has it, else its first."""
    return wanted if wanted in split["metrics"] else next(iter(split["metrics"]))


def mean_se(values: list) -> str:
    """"m ± se" over seeds (the comparison cells' summary); the value alone, marked, for one seed."""
    s = summary(values)
    return f"{s['mean']:.3f} ± {s['se']:.3f}" if s["se"] is not None else f"{s['mean']:.3f} (1 seed)"


def read_run(out: Path):
    """(eval.json, summary.json) of a finished run, else None."""
    try:
        return json.loads((out / "eval.json").read_text()), json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return None


def report(selected: list, args) -> str:
    wall = (f"training stopped by `--max-wall {args.max_wall:g}` or the preset's steps: the step column "
            "depends on the load" if args.max_wall else "the preset's steps")
    lines = ["# Linear-recurrence baselines on CPU (P3: S4D, Mamba, NRU)", "",
             f"Generated by `python bench/linear_recurrence.py --seeds {args.seeds}`; every run is "
             f"`rasp train --preset cpu` ({wall}) then `rasp eval -n {args.eval_n}`, seeds 0..{args.seeds - 1}. "
             "Cells: the metric named in each heading per evaluated split, mean ± standard error over the "
             "seeds that finished (n = their number; one seed is marked), each seed's value a mean over the "
             "split's examples. P3 = the paper's verdict for the same setting (docs/benchmarks.md §3, §6, §7); "
             "ours is a CPU-sized model and minutes of training, so a ✗ here can mean under-training.", ""]
    for group in dict.fromkeys(r[0] for r in selected):
        rows = [r for r in selected if r[0] == group]
        wanted = EVAL[group][1]
        lines += [f"## {group} ({wanted})", "",
                  "| run | n | params | steps | s per run | " + " | ".join(EVAL[group][0]) + " | P3 |",
                  "|---|---|---|---|---|" + "---|" * len(EVAL[group][0]) + "---|"]
        for _, task, model, flags, p3 in rows:
            name = f"{model} {' '.join(f for f in flags if f not in COPY_CPU)}".strip()
            done = [x for x in (read_run(args.out / run_name(task, model, flags, seed))
                                for seed in range(args.seeds)) if x is not None]
            if not done:
                lines.append(f"| {name} | 0 | – | – | – | " + " | ".join("pending" for _ in EVAL[group][0])
                             + f" | {p3} |")
                continue
            cells = []
            for split in EVAL[group][0]:
                values = [ev["splits"][split]["metrics"][headline(ev["splits"][split], wanted)]["mean"]
                          for ev, _ in done if split in ev["splits"]]
                cells.append(mean_se(values) if values else "–")
            steps = sorted({str(sm.get("step", "?")) for _, sm in done})
            secs = np.mean([sm.get("seconds", 0) for _, sm in done])
            lines.append(f"| {name} | {len(done)} | {done[0][1].get('n_params', '?')} | {'/'.join(steps)} | "
                         f"{secs:.0f} | " + " | ".join(cells) + f" | {p3} |")
        lines.append("")
    lines += [f"Load while measuring: {args.load}.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_linrec")
    p.add_argument("--md", type=Path, default=ROOT / "bench" / "linear_recurrence.md")
    p.add_argument("--only", default=None, help="comma-separated groups: counting, words, copying")
    p.add_argument("--models", default=None, help="comma-separated models (default: s4d, mamba, nru)")
    p.add_argument("--max-wall", type=float, default=None,
                   help="stop training after this many seconds (default: the preset's steps, reproducible)")
    p.add_argument("--eval-n", type=int, default=500)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..K-1 per setting")
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
    write_text_atomic(args.md, report(RUNS, args))          # every run, pending where not run yet
    print(f"wrote {args.md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
