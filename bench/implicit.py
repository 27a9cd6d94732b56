"""Benchmark: implicit vs explicit Mamba2 and Llama on the Z60 word problem
(BENCHMARKS.md §4.2: train k = 8, test 16 and 32; the cpu preset).

    python bench/implicit.py                       # mamba2 vs implicit_mamba2, then llama vs implicit_llama
    python bench/implicit.py --models mamba2,implicit_mamba2 --parallel 2

Each model is trained by `trainer.seqtrain.train_seq` and scored by
`trainer.seqeval.evaluate_seq_run` (the code behind `rasp train` / `rasp eval`)
in its own `nice`d one-thread process, `--parallel` at a time.  Writes
OUT/<model>/ (run directories with eval.json) and the markdown table
bench/implicit.md: sequence and token accuracy per test length, and the
solver's iterations (mean, max) and relative residual per length.

Task: `words_z60` when it is registered; otherwise (`--task z60_local`, or
when words_z60 is missing) a local Z60 task of this file — prefix sums mod
60, training lengths 2..8, tests at 8, 16, 32 — and the table says so.
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
# the repository before bench/ itself (bench/compiler.py would shadow the package)
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]

MODELS = ("mamba2", "implicit_mamba2", "llama", "implicit_llama", "gru", "transformer")
# Explicit steps are ~10x cheaper; BENCHMARKS.md §4.2 gave the explicit block
# 3 852 steps and the implicit one ~1 100.  An implicit Llama step costs ~2x an
# implicit Mamba2 step on the CPU (its f has an MLP), hence fewer steps.
STEPS = {"mamba2": 4000, "llama": 4000, "implicit_mamba2": 1200, "implicit_llama": 800,
         "gru": 1500, "transformer": 1500}
LOCAL_TASK = "z60_local"


def local_z60_task():
    """Prefix sums mod 60 (the Z60 word problem, BENCHMARKS.md §2.5.1): input
    ids = element + 1, target at t = m_0 + ... + m_t mod 60."""
    import numpy as np

    from trainer.tasks.base import Example, SeqTask, Split

    def generate(rng: np.random.Generator, params: dict, n: int):
        out = []
        for _ in range(n):
            length = int(rng.integers(params["min_len"], params["max_len"] + 1))
            x = rng.integers(0, 60, length)
            out.append(Example(input=[int(v) + 1 for v in x], target=[int(v) for v in np.cumsum(x) % 60]))
        return out

    def split(name, lo, hi, size):
        return Split(name, {"min_len": lo, "max_len": hi}, size)
    splits = {s.name: s for s in (split("train", 2, 8, 10**6), split("valid", 8, 8, 512),
                                  split("test_8", 8, 8, 1000), split("test_16", 16, 16, 1000),
                                  split("test_32", 32, 32, 1000))}
    elements = tuple(str(i) for i in range(60))
    return SeqTask(name=LOCAL_TASK, kind="per_position", vocab=elements, labels=elements, splits=splits,
                   generate=generate, metrics=("seq_acc", "token_acc"), family="words",
                   description="bench/implicit.py's Z60 word problem", train_range=(2, 8))


def resolve_task(name: str) -> str:
    """The task to use: `name` if registered, else the local Z60 task (registered)."""
    from trainer.tasks import TASKS, register
    if name != LOCAL_TASK and name in TASKS:
        return name
    if LOCAL_TASK not in TASKS:
        register(local_z60_task())
    return LOCAL_TASK


def splits_at_lengths(task, lengths) -> list:
    """The first non-training split of a single length for each of `lengths`."""
    chosen = {}
    for name, split in task.splits.items():
        lo, hi = split.params.get("min_len"), split.params.get("max_len")
        if name != task.splits["train"].name and lo == hi and lo in lengths and lo not in chosen:
            chosen[lo] = name
    return [chosen[L] for L in sorted(chosen)]


def worker(args) -> None:
    """Train and evaluate one model in this process; print one JSON line."""
    import torch
    torch.set_num_threads(1)
    from trainer.models import get_encoder_spec
    from trainer.seqeval import evaluate_seq_run
    from trainer.seqpresets import make_seq_hparams
    from trainer.seqtrain import SeqRunConfig, seq_task, train_seq

    task_name = resolve_task(args.task)
    task = seq_task(task_name)
    spec = get_encoder_spec(args.worker)
    steps = args.steps or STEPS[args.worker]
    hp = make_seq_hparams("cpu", task, spec, {"steps": steps, "seed": args.seed}, {"eval_every": 0})
    out = Path(args.out) / args.worker
    spent = out / "bench_seconds.json"          # wall time over every segment of a resumed run
    before = 0.0
    if args.resume and spent.exists():
        before = json.loads(spent.read_text())["seconds"]
    elif args.resume and (out / "summary.json").exists():
        before = json.loads((out / "summary.json").read_text()).get("seconds", 0.0)
    t0 = time.perf_counter()
    if args.eval_only:
        summary = json.loads((out / "summary.json").read_text())
        before = 0.0
    else:
        summary = train_seq(SeqRunConfig(task_name, args.worker, str(out), "cpu", hp, progress=False,
                                         max_wall=args.max_wall, resume=args.resume and out.exists()))
    train_s = time.perf_counter() - t0
    tests = splits_at_lengths(task, [int(x) for x in args.lengths.split(",")])
    res = evaluate_seq_run(out, splits=tests, n=args.n, plots=False, progress=False)
    if args.worker.startswith("implicit"):
        # the token-by-token order over caches (MODELS.md §1.7.2), on fewer sequences
        evaluate_seq_run(out, splits=tests, n=max(1, args.n // 4), sets={"eval_mode": "sequential"}, plots=False,
                         progress=False, out_json=out / "eval_sequential.json")
    if not args.eval_only:
        train_s = before + summary.get("seconds", train_s)
        spent.write_text(json.dumps({"seconds": train_s}))
    print(json.dumps({"model": args.worker, "task": task_name, "train_s": train_s,
                      "steps": summary["step"], "n_params": summary["n_params"], "eval": res["json"]}))


def launch(args, models):
    """Run the workers, `--parallel` at a time, each `nice -n 10` with one thread."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    pending, running, results = list(models), [], []
    while pending or running:
        while pending and len(running) < args.parallel:
            m = pending.pop(0)
            cmd = ["nice", "-n", "10", sys.executable, __file__, "--worker", m, "--task", args.task,
                   "--out", args.out, "--n", str(args.n), "--seed", str(args.seed), "--lengths", args.lengths]
            if args.steps:
                cmd += ["--steps", str(args.steps)]
            if args.max_wall:
                cmd += ["--max-wall", str(args.max_wall)]
            if args.resume:
                cmd += ["--resume"]
            if args.eval_only:
                cmd += ["--eval-only"]
            running.append((m, subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)))
        time.sleep(2)
        for m, p in list(running):
            if p.poll() is not None:
                running.remove((m, p))
                lines = [ln for ln in p.stdout.read().splitlines() if ln.startswith("{")]
                if p.returncode or not lines:
                    print(f"{m}: worker failed (exit {p.returncode})", file=sys.stderr)
                    continue
                results.append(json.loads(lines[-1]))
                print(f"{m}: done in {results[-1]['train_s']:.0f} s", file=sys.stderr)
    return results


def collect(out: Path, model: str, run: Path = None, label: str = None):
    """A finished model's entry from its run directory (OUT/<model>, or `run`,
    e.g. one made by `rasp train`; None when it has no eval.json).  `label`
    names the row (default: the model)."""
    run = Path(run) if run is not None else out / model
    if not (run / "eval.json").exists():
        return None
    summary = json.loads((run / "summary.json").read_text())
    model = label or summary.get("model", model)
    spent = run / "bench_seconds.json"
    seconds = json.loads(spent.read_text())["seconds"] if spent.exists() else summary["seconds"]
    return {"model": model, "task": summary["task"], "train_s": seconds, "steps": summary["step"],
            "n_params": summary["n_params"], "eval": str(run / "eval.json")}


def table(results, load: str) -> str:
    rows = []
    evals = []
    for r in results:
        evals.append((r, r["model"], json.loads(Path(r["eval"]).read_text())))
        seq = Path(r["eval"]).with_name("eval_sequential.json")
        if seq.exists():
            evals.append((r, r["model"] + " (sequential)", json.loads(seq.read_text())))
    for r, label, ev in evals:
        for split, e in ev["splits"].items():
            if split == "train":
                continue
            for L, by in e["by_length"].items():
                st = e.get("stats", {})
                it = st.get("iterations")
                res = st.get("residual")
                rows.append((label, int(L), by.get("seq_acc"), by.get("token_acc"), by["n"],
                             f"{it['by_length'][L]:.1f} / {it['max']:.0f}" if it else "—",
                             f"{res['by_length'][L]:.3f}" if res else "—", r["steps"], r["train_s"]))
    def order(row):
        base = row[0].split()[0]
        return (MODELS.index(base) if base in MODELS else len(MODELS), row[0], row[1])
    rows.sort(key=order)
    lines = ["| model | L | seq acc | token acc | n | iterations mean / split max | residual | steps | train s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for m, L, sa, ta, n, it, res, steps, s in rows:
        lines.append(f"| {m} | {L} | {sa:.3f} | {ta:.3f} | {n} | {it} | {res} | {steps} | {s:.0f} |")
    task = results[0]["task"] if results else "?"
    head = [f"# Implicit vs explicit Mamba2 / Llama on Z60 (`python bench/implicit.py`)", "",
            f"Task `{task}`" + (" (bench/implicit.py's own Z60 data: prefix sums mod 60, training lengths "
                                "2..8 mixed, valid at 8 — the definition of `words_z60`, which was not yet "
                                "registered when these runs started)" if task == LOCAL_TASK else "")
            + "; cpu preset (BENCHMARKS.md §4.2: 1 layer, d 64; implicit: 150 unrolled 4x warm-up steps, "
            "then <= 16 undamped iterations + 4 phantom steps, test cap 64, tolerance 0.05; "
            "\"(sequential)\": the token-by-token order, damped τ 0.8, on a quarter of the sequences, residual = "
            "a sample's largest over its tokens); one seed; "
            f"each model in its own one-thread `nice` process; machine load during the runs: {load}.", ""]
    return "\n".join(head + lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--task", default="words_z60")
    ap.add_argument("--steps", type=int, default=None, help="override the per-model step counts")
    ap.add_argument("--max-wall", type=float, default=None, help="seconds of training per model at most")
    ap.add_argument("--n", type=int, default=500, help="test sequences per split")
    ap.add_argument("--lengths", default="8,16,32", help="test lengths (one split each)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resume", action="store_true", help="continue runs that --max-wall cut short")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "runs" / "bench_implicit"))
    ap.add_argument("--md", default=str(ROOT / "bench" / "implicit.md"))
    ap.add_argument("--eval-only", action="store_true", help="evaluate the existing runs again, no training")
    ap.add_argument("--report", action="store_true", help="only rewrite the table from the runs in --out")
    ap.add_argument("--runs", default="",
                    help="with --report: LABEL=DIR,... run directories (e.g. made by `rasp train` + `rasp eval`) "
                         "tabled instead of OUT/<model>; LABEL's first word is the model")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"unknown model {unknown[0]!r} (choose from {', '.join(MODELS)})")
    if not args.report:
        launch(args, models)
    if args.runs:
        pairs = [item.rsplit("=", 1) for item in args.runs.split(",") if item]
        if any(len(p) != 2 for p in pairs):
            ap.error("--runs takes LABEL=DIR,...")
        results = [r for r in (collect(Path(args.out), lab.split()[0], Path(d), lab) for lab, d in pairs) if r]
    else:
        results = [r for r in (collect(Path(args.out), m) for m in models) if r]
    load = os.getloadavg()
    md = table(results, f"load average {load[0]:.1f} when the table was written")
    Path(args.md).write_text(md)
    print(md)


if __name__ == "__main__":
    main()
