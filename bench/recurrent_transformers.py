"""Evidence for issue 11: Transformer, UT, GUT, TLB and GUTLB at the cpu
preset on flip-flop, small ListOps and Logical Inference, next to P1's
Tables 1-3 (BENCHMARKS.md §2.1-2.3).  Accuracy and mean executed depth per
test split; a sentence per task on where our ordering agrees with P1's.

    python bench/recurrent_transformers.py                      # everything
    python bench/recurrent_transformers.py --tasks flipflop --steps 300 -n 200

Every run is `rasp train --preset cpu` + `rasp eval` in its own process
(one torch thread, nice 10, at most --jobs at a time); finished runs are
reused, so an interrupted bench picks up where it stopped.  Writes
bench/recurrent_transformers.md (runs under bench/runs/recurrent_transformers/).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = {"transformer_xpos": "Transformer", "ut": "UT", "gut": "GUT", "tlb": "TLB", "gutlb": "GUTLB"}
COST = {"gutlb": 4, "gut": 2, "ut": 1.2, "tlb": 1, "transformer_xpos": 0.3}   # s/step seen at load 10: start the long ones first

# P1 tables (BENCHMARKS.md §2.1-2.3), in %; the columns each task's ordering is judged on
P1 = {
    "flipflop": {
        "title": "P1 Table 3 (median of 3; trained T = 512, p_i 0.8): last-read accuracy",
        "columns": ["512 / 0.1", "512 / 0.8", "512 / 0.98", "1024 / 0.1", "1024 / 0.8", "1024 / 0.98"],
        "rows": {"Transformer": [100, 100, 90, 100, 100, 87], "UT": [100, 92.8, 59, 100, 92.7, 59],
                 "GUT": [100, 100, 82, 93, 100, 80], "TLB": [100, 100, 94, 100, 100, 95],
                 "GUTLB": [100, 100, 95, 100, 100, 96]},
        "judge": [2, 5],            # the sparse p_i = 0.98 columns separate the models
    },
    "listops": {
        "title": "P1 Table 1 (mean of 3): ListOps accuracy",
        "columns": ["near-IID", "200-300", "500-600", "900-1000", "10 args", "15 args", "LRA"],
        "rows": {"Transformer": [73.0, 15.6, 10.4, 9.6, 15.8, 10.3, 8.1], "UT": [65.8, 14.1, 10.3, 10.0, 13.9, 10.7, 8.6],
                 "GUT": [83.2, 17.6, 11.1, 10.5, 16.2, 14.2, 9.8], "TLB": [58.3, 37.7, 30.5, 25.0, 37.3, 37.0, 31.1],
                 "GUTLB": [63.6, 35.8, 28.4, 21, 34.5, 33.8, 26.4]},
        "judge": [0],               # near-IID: what a small depth <= 6 ListOps can compare with
    },
    "logic": {
        "title": "P1 Table 2 (mean of 3; trained <= 6 operators): accuracy by number of operators",
        "columns": ["7", "8", "9", "10", "11", "12"],
        "rows": {"Transformer": [90.88, 81.26, 72.56, 64.71, 58.45, 53.88],
                 "UT": [76.65, 65.47, 57.4, 51.02, 50.08, 46.62], "GUT": [96.36, 84.84, 74.80, 66.81, 58.99, 51.97],
                 "TLB": [76.66, 69.83, 66.22, 60.09, 55.36, 49.75], "GUTLB": [76.17, 71.39, 67.37, 60.87, 57.95, 52.36]},
        "judge": [0, 1, 2, 3, 4, 5],
    },
}

# what to train on and test: split names of trainer/tasks/<family>.py
PLAN = {
    "flipflop": {"train": ["--set", "train_split=train_128", "--set", "valid_split=valid_128", "--set", "eval_every=0"],
                 "splits": [f"test_{T}_p{p}" for T in (128, 256) for p in ("0.1", "0.8", "0.98")],
                 "metric": "last_read_acc"},
    "listops": {"train": ["--set", "train_split=train_cpu", "--set", "valid_split=valid_cpu", "--set", "eval_every=0"],
                "splits": ["valid_cpu", "test_cpu_51_100"], "metric": "acc"},       # depth <= 6: <= 50 / 51-100 tokens
    # test7..test12: one split per operator count (each split is one group, so no by-group columns)
    "logic": {"train": ["--set", "eval_every=0"], "splits": None, "metric": "acc"},
}


def run_cmd(args, log: Path) -> float:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    t = time.time()
    with open(log, "a") as f:
        subprocess.run(["nice", "-n", "10", sys.executable, "-m", "trainer", *args], env=env, check=True,
                       stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    return time.time() - t


def task_splits(task: str) -> list:
    sys.path.insert(0, str(ROOT))
    from trainer.tasks import get_task
    return [s for s in get_task(task).splits if not s.startswith(("train", "valid"))]


def one_run(task: str, model: str, args, out_root: Path) -> dict:
    out = out_root / task / model
    out.mkdir(parents=True, exist_ok=True)
    log = out.parent / f"{model}.log"
    summary = out / "summary.json"
    train_s = None
    if not (summary.exists() and json.loads(summary.read_text()).get("finished")):
        cmd = ["train", "--task", task, "--model", model, "--preset", "cpu", "--seed", str(args.seed),
               "--out", str(out), "--no-progress", "--threads", "1", *PLAN[task]["train"]]
        if args.steps:
            cmd += ["--steps", str(args.steps)]
        if (out / "latest.json").exists():
            cmd.append("--resume")
        train_s = run_cmd(cmd, log)
    splits = PLAN[task]["splits"] or task_splits(task)
    done = json.loads((out / "eval.json").read_text()) if (out / "eval.json").exists() else {}
    if train_s is not None or any(done.get("splits", {}).get(s, {}).get("n") != args.n for s in splits):
        run_cmd(["eval", str(out), "--splits", ",".join(splits), "-n", str(args.n), "--no-progress", "--no-plots",
                 "--threads", "1"], log)
    res = json.loads((out / "eval.json").read_text())
    return {"task": task, "model": model, "eval": res, "train_s": train_s,
            "summary": json.loads(summary.read_text())}


def finished_run(task: str, model: str, out_root: Path):
    out = out_root / task / model
    if not ((out / "summary.json").exists() and (out / "eval.json").exists()):
        return None
    return {"task": task, "model": model, "eval": json.loads((out / "eval.json").read_text()), "train_s": None,
            "summary": json.loads((out / "summary.json").read_text())}


def cells(task: str, r: dict) -> dict:
    """column -> (accuracy %, mean depth)."""
    metric, out = PLAN[task]["metric"], {}
    names = PLAN[task]["splits"] or task_splits(task)   # the plan's / task's order (eval.json sorts its keys: test10 < test7)
    for name, e in ((n, r["eval"]["splits"][n]) for n in names if n in r["eval"]["splits"]):
        depth = e["stats"].get("depth", {}).get("mean", float("nan"))
        out[name] = (100 * e["metrics"][metric]["mean"], depth)
    return out


def concordance(ours: dict, paper: dict) -> tuple:
    """Pairs of models ordered alike / all comparable pairs, and the flips."""
    names = [m for m in ours if m in paper]
    agree, flips, total = 0, [], 0
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if paper[a] == paper[b] or abs(ours[a] - ours[b]) < 1e-9:
                continue
            total += 1
            if (ours[a] > ours[b]) == (paper[a] > paper[b]):
                agree += 1
            else:
                flips.append(f"{a} vs {b}")
    return agree, total, flips


def report(results: list, args, started: float, loads: tuple) -> str:
    from trainer.seqpresets import FAMILY
    preset_steps = ", ".join(f"{t} {FAMILY['cpu'][t]['steps']}" for t in PLAN)
    lines = ["# Recurrent transformers with dynamic halting: cpu-preset evidence (issue 11)", "",
             f"Written by `bench/recurrent_transformers.py` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}); "
             f"seed {args.seed}, "
             f"training steps as in each table's steps column (the cpu preset has {preset_steps}; fewer means capped: "
             f"the machine was shared), "
             f"one thread per run, {args.jobs} runs at a time.  "
             + ("Tabulated from finished runs (--report-only)." if args.report_only else
                f"Load average at start / end: {loads[0]:.1f} / {loads[1]:.1f} on {os.cpu_count()} cores; "
                f"total {(time.time() - started) / 60:.0f} min."),
             "", "Cells: accuracy % (mean executed depth: layers for Transformer/UT/GUT, layers per chunk "
             "for TLB/GUTLB).  Single seed, so differences of a few points are noise.", ""]
    for task in PLAN:
        rs = [r for r in results if r["task"] == task]
        if not rs:
            lines += [f"## {task}", "", f"not run here (task missing or not asked for): "
                      f"`python bench/recurrent_transformers.py --tasks {task}`.", ""]
            continue
        table = {MODELS[r["model"]]: cells(task, r) for r in rs}
        cols = list(next(iter(table.values())))
        sizes = sorted({e["n"] for r in rs for e in r["eval"]["splits"].values()})
        lines += [f"## {task} (metric: {PLAN[task]['metric']}; {'/'.join(map(str, sizes))} test examples per split)", "",
                  "| model | " + " | ".join(cols) + " | train s | steps |",
                  "|---|" + "---|" * (len(cols) + 2)]
        for r in rs:
            row = table[MODELS[r["model"]]]
            fmt = lambda c: f"{c[0]:.1f}" + ("" if c[1] != c[1] else f" ({c[1]:.1f})")
            s = r["summary"]
            lines.append(f"| {MODELS[r['model']]} | " + " | ".join(fmt(row[c]) for c in cols)
                         + f" | {s.get('seconds', float('nan')):.0f} | {s.get('step', '?')} |")
        p1 = P1[task]
        lines += ["", p1["title"] + ":", "", "| model | " + " | ".join(p1["columns"]) + " |",
                  "|---|" + "---|" * len(p1["columns"])]
        lines += [f"| {m} | " + " | ".join(f"{v:g}" for v in vals) + " |" for m, vals in p1["rows"].items()]
        judge_cols = [cols[i] for i in p1["judge"] if i < len(cols)]
        ours = {m: sum(table[m][c][0] for c in judge_cols) / len(judge_cols) for m in table}
        paper = {m: sum(p1["rows"][m][i] for i in p1["judge"]) / len(p1["judge"]) for m in p1["rows"]}
        agree, total, flips = concordance(ours, paper)
        order = lambda d: " > ".join(sorted(d, key=lambda m: -d[m]))
        lines += ["", f"Ordering on {', '.join(judge_cols)} (ours) vs P1's {', '.join(p1['columns'][i] for i in p1['judge'])}: "
                  f"ours {order(ours)}; P1 {order({m: paper[m] for m in ours})}. "
                  f"{agree} of {total} model pairs are ordered as in P1"
                  + (f"; flipped: {', '.join(flips)}." if flips else "."), ""]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="flipflop,listops,logic")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--steps", type=int, default=0, help="training steps (0: the cpu preset's)")
    ap.add_argument("-n", type=int, default=1000, help="test examples per split")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", default=str(ROOT / "bench" / "runs" / "recurrent_transformers"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "recurrent_transformers.md"))
    ap.add_argument("--report-only", action="store_true", help="tabulate the finished, evaluated runs; run nothing")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from trainer.tasks import TASKS
    tasks = [t for t in args.tasks.split(",") if t]
    missing = [t for t in tasks if t not in TASKS]
    if missing:
        print(f"not on this branch yet, skipped: {', '.join(missing)}", file=sys.stderr)
    jobs = sorted(((t, m) for t in tasks if t not in missing for m in args.models.split(",") if m),
                  key=lambda tm: -COST.get(tm[1], 1))
    started, load0 = time.time(), os.getloadavg()[0]
    if args.report_only:
        results = [r for r in map(lambda tm: finished_run(*tm, Path(args.runs)), jobs) if r]
    else:
        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda tm: one_run(*tm, args, Path(args.runs)), jobs))
    order = {(t, m): i for i, (t, m) in enumerate((t, m) for t in tasks for m in args.models.split(","))}
    results.sort(key=lambda r: order.get((r["task"], r["model"]), 0))
    text = report(results, args, started, (load0, os.getloadavg()[0]))
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
