"""Benchmark: parity and copy on CPU, random vs compiled initialisation,
oracle vs maximum-confidence (and threshold) stopping.

    python -m bench.train --out runs/bench_train            # train + evaluate
    python -m bench.train --out runs/bench_train --eval-only  # re-evaluate existing runs

Writes OUT/results.md (markdown table), OUT/results.json and one accuracy-vs-
length plot per task.  Every number comes from `trainer.fan.kind` /
`trainer.fan.evaluate.evaluate_run`, the code behind `rasp train` / `rasp eval`.
"""
from __future__ import annotations

import argparse
import json
import time
import traceback
from pathlib import Path

import torch

from rasp.errors import RaspError
from trainer.run import plots
from trainer.fan.evaluate import evaluate_run, rows
from trainer.fan.presets import make_hparams
from trainer.tasks import get_task
from trainer.fan.kind import RunConfig, train
from rasp.readfile import read_json

ROOT = Path(__file__).resolve().parents[1]


def run_one(out: Path, task: str, init: str, args) -> dict:
    # "compiled0": the compiled start itself, evaluated without any training;
    # "compiled_trainguard": the fine-tune without length protection (guard
    # sample from the training lengths only, nothing frozen), for comparison
    over = dict(steps={"random": args.steps, "compiled0": 0, "compressed0": 0}.get(init, args.finetune_steps))
    if init == "compiled_trainguard":
        over.update(freeze_fragile=False, guard_max_n=0)
    if args.d_model:
        over.update(d_model=args.d_model, n_head=args.n_head)
    if init != "random":
        over.update(lr=args.finetune_lr)
    hp = make_hparams("cpu", get_task(task), "random" if init == "random" else "compiled", **over)
    hp.eval_every = 100 if init == "random" else 50
    cfg = RunConfig(task=task, out=str(out), init=init, hp=hp, progress=not args.quiet,
                    compress=args.compress if init.startswith("compressed") else None)
    if init in ("compressed", "compressed0", "compiled0", "compiled_trainguard"):
        cfg.init = "compiled"
    t0 = time.perf_counter()
    summary = train(cfg)
    summary["wall_seconds"] = time.perf_counter() - t0
    return summary


def summarise(rows: list, train_max: int) -> dict:
    ind = [r["exact_match"] for r in rows if r["length"] <= train_max]
    ood = [r["exact_match"] for r in rows if r["length"] > train_max]
    return {"in_dist": sum(ind) / len(ind), "ood": sum(ood) / len(ood) if ood else None,
            "longest": rows[-1]["exact_match"], "longest_n": rows[-1]["length"],
            "step_err": sum(abs(r["chosen_step"] - r["oracle_step"]) for r in rows) / len(rows),
            "iters": sum(r["iterations"] for r in rows) / len(rows),
            "oracle_iters": sum(r["oracle_step"] for r in rows) / len(rows),
            "eval_s": sum(r["seconds"] for r in rows)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/bench_train")
    ap.add_argument("--tasks", default="parity,copy")
    ap.add_argument("--inits", default="random,compiled0,compiled",
                    help="random, compiled0, compiled, compiled_trainguard (--compress D adds compressed0, compressed)")
    ap.add_argument("--stops", default="oracle,confidence,threshold")
    ap.add_argument("--steps", type=int, default=None, help="random-init steps (default: cpu preset)")
    ap.add_argument("--finetune-steps", type=int, default=300)
    ap.add_argument("--finetune-lr", type=float, default=1e-4)
    ap.add_argument("--compress", type=int, default=None, help="also run the compiled start compressed to D")
    ap.add_argument("--d-model", type=int, default=None)
    ap.add_argument("--n-head", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=None, help="longest test length (default 2x training)")
    ap.add_argument("--samples", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eval-only", action="store_true")
    ap.add_argument("--reuse", action="store_true", help="skip training for runs that already finished")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    inits = [i for i in args.inits.split(",") if i] + (["compressed0", "compressed"] if args.compress else [])
    results = []
    for task in args.tasks.split(","):
        curves, labels, train_max = [], [], None
        for init in inits:
            run_dir = out / f"{task}_{init}"
            entry = {"task": task, "init": init}
            try:
                if not args.eval_only and not (args.reuse and (run_dir / "summary.json").exists()):
                    entry["train"] = run_one(run_dir, task, init, args)
                else:
                    entry["train"] = read_json(run_dir / "summary.json")
                run = read_json(run_dir / "run.json")
                train_max = run["hparams"]["max_train_n"]
                lengths = list(range(1, (args.max_len or 2 * train_max) + 1))
                entry["stops"] = {}
                for stop in args.stops.split(","):
                    res = evaluate_run(run_dir, lengths, stop, samples=args.samples, threshold=0.01)
                    entry["stops"][stop] = summarise(rows(res), train_max) | {"rows": rows(res)}
                    curves.append(rows(res))
                    labels.append(f"{init}, {stop}")
            except (RaspError, ImportError, RuntimeError) as e:
                entry["error"] = f"{type(e).__name__}: {e}"
                traceback.print_exc()
            results.append(entry)
        if curves:
            plots.accuracy_vs_length(curves, labels, train_max, out / f"{task}_accuracy.png",
                                     f"{task}: exact match vs length (CPU preset)")
    (out / "results.json").write_text(json.dumps(results, indent=2))
    md = to_markdown(results)
    (out / "results.md").write_text(md)
    print(md)


def to_markdown(results) -> str:
    lines = ["| task | init | stop | in-dist exact | beyond-train exact | exact at longest n | "
             "mean abs(chosen step - T(n)) | loop iterations / sample (oracle T) | "
             "train steps to 100% in-dist | train time (s) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for e in results:
        if "error" in e:
            lines.append(f"| {e['task']} | {e['init']} | — | not run: {e['error'].splitlines()[0][:120]} "
                         "| | | | | | |")
            continue
        tr = e["train"]
        first = tr.get("first_step_at_100")
        for stop, s in e["stops"].items():
            ood = "—" if s["ood"] is None else f"{s['ood']:.3f}"
            lines.append(
                f"| {e['task']} | {e['init']} | {stop} | {s['in_dist']:.3f} | {ood} | "
                f"{s['longest']:.3f} (n={s['longest_n']}) | {s['step_err']:.2f} | "
                f"{s['iters']:.1f} ({s['oracle_iters']:.1f}) | {first if first is not None else 'not reached'} "
                f"of {tr['step']} | {tr.get('wall_seconds', tr.get('seconds', 0)):.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
