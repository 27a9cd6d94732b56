"""Halting rules on the same trained models (issue 24): every rule of
trainer/fan/stopping.py (but threshold, an early-exit run) applied to the same
trajectories, exact match in distribution and beyond training, against
the oracle.

    rasp train --task TASK --preset cpu --seed S --out RUNS/TASK_sS     # for each task, seed
    OMP_NUM_THREADS=1 python -m bench.halting eval RUNS/TASK_sS [...]
    python -m bench.halting table RUNS/*_s*
    python -m bench.halting load RUNS/parity_sS ...     # rasp.load(RUN)'s default rule against the oracle

`eval` writes RUN/halting_bench.json (per rule and length: exact match, the
oracle's on the same inputs, mean chosen step, iterations run; the held-in
fit; the seconds it took; the machine's load); `table` prints the Markdown
table of bench/BENCH.md: per task and rule, the mean over seeds
(with the spread, min-max) of exact match at n 1-10 / 11-20 / 21-30, the
largest shortfall against the oracle in distribution over the seeds, the
mean shortfall beyond training, the loop iterations run per input against
T(n), and whether a seed chose one step at every length.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from trainer.fan import stopping
from trainer.run.checkpoint import write_json_atomic
from trainer.fan.evaluate import load_run
from trainer.fan.halting import calibrate, trajectory
from trainer.settings.hparams import HParams
from trainer.models import get_model_spec
from trainer.fan.kind import build_data
from trainer.tasks.base import PROGRAMS
from trainer.tasks.program import task_of
from rasp.readfile import read_json
from rasp.stop import THRESHOLD

# oracle first (the reference); threshold is read off the same trajectory (what its early-exit
# run would choose), at the default and at looser confidence cross-entropies
THRESHOLDS = (THRESHOLD, 0.1, 0.3)
RULES = ("oracle", *(r for r in stopping.RULES if r not in ("oracle", "threshold")),
         *(f"threshold {t:g}" for t in THRESHOLDS))
BANDS = {"1-10": (1, 10), "11-20": (11, 20), "21-30": (21, 30)}
OUT = "halting_bench.json"


def evaluate(run_dir: Path, lengths, samples: int, seed: int) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    run, model, step = load_run(run_dir)
    spec, hp = get_model_spec(run["model"]), HParams.from_dict(run["hparams"])
    data = build_data(task_of(run), spec, hp)        # a registered task, or a run's program
    halting = calibrate(model, data, range(data.task.min_n, hp.max_train_n + 1), seed)
    t_fit, c_fit = time.perf_counter() - t0, time.process_time() - c0
    by_rule = {r: {} for r in RULES}
    for n in lengths:
        b = data.batch(np.random.default_rng([seed, n]), [n] * samples, train=False)
        t_max = int(b.steps.max()) + data.task.t_max_extra
        logits, feats = trajectory(model, b.tokens, b.mask, t_max, halting.reads)
        stats = stopping.step_stats(logits, b.targets, b.mask, feats)
        for rule in RULES:
            name, _, theta = rule.partition(" ")
            theta_ = float(theta or THRESHOLD)
            chosen = stopping.choose_steps(name, stats, b.steps, b.lengths, halting, theta_)
            ran = stopping.iterations_run(name, chosen, t_max, stats.conf_ce, theta_)
            by_rule[rule][str(n)] = {
                "exact_match": float(stopping.pick(stats, chosen)[0].float().mean()),
                "chosen_step": float(chosen.float().mean()),
                "iterations": float(ran.float().mean()),
                "oracle_step": float(b.steps.float().mean()),
                **{k: float(v.float().mean()) for k, v in
                   (("early", chosen < b.steps), ("at_t", chosen == b.steps), ("late", chosen > b.steps))}}
    summary = read_json(run_dir / "summary.json") if (run_dir / "summary.json").exists() else {}
    doc = {"run": str(run_dir), "task": run["task"], "recipe": recipe(hp), "seed": hp.seed, "step": step, "samples": samples,
           "calibration": halting.record, "fit_seconds": t_fit, "fit_cpu_seconds": c_fit,
           "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
           "train_seconds": summary.get("seconds"), "n_params": summary.get("n_params"),
           "load": os.getloadavg()[0], "rules": by_rule}
    write_json_atomic(run_dir / OUT, doc)
    return doc


def recipe(hp) -> str:
    """The training recipe a row of the table is about: Fan et al.'s, or one that
    teaches the model when it is done (issue 39: --past-t, --settle, --unsure, --halt,
    --halt-target, --halt-past, --halting-from)."""
    parts = [f"{k} {getattr(hp, k):g}" for k in ("past_t", "settle", "unsure", "halt", "halting_from")
             if getattr(hp, k, 0)]
    if getattr(hp, "halt", 0) and getattr(hp, "halt_target", "answer") != "answer":
        parts.append(hp.halt_target)
    if getattr(hp, "halt", 0) and hp.halt_past != HParams.halt_past:     # a horizon other than the default
        parts.append(f"past {hp.halt_past}")
    if getattr(hp, "halt", 0) and getattr(hp, "clock_reach", "window") != "window":
        parts.append(f"reach {hp.clock_reach}")
    return " ".join(parts) or "fan"


def band_mean(rows: dict, key: str, band) -> float:
    lo, hi = band
    vals = [r[key] for n, r in rows.items() if lo <= int(n) <= hi]
    return float(np.mean(vals)) if vals else float("nan")


def stop_shares(docs: list, rule: str) -> str:
    """'early / at / late': the shares of inputs (n 1-30, mean over seeds) stopped
    before, at and after their own T(n); '–' for evaluations made before they were counted."""
    rows = [r for d in docs for r in d["rules"][rule].values()]
    if not rows or any("early" not in r for r in rows):
        return "–"
    return " / ".join(f"{np.mean([r[k] for r in rows]):.2f}" for k in ("early", "at_t", "late"))


def table(docs: list) -> str:
    lines = ["| task | recipe | rule | seeds | n 1-10 | n 11-20 | n 21-30 | worst seed in dist. − oracle | "
             "mean beyond − oracle | iterations / T(n) | early / at T(n) / late | one step at every length |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    # runs from before issue 39 have no recipe: Fan et al.'s
    for task, rec in sorted({(d["task"], d.get("recipe", "fan")) for d in docs}):
        ds = sorted((d for d in docs if d["task"] == task and d.get("recipe", "fan") == rec), key=lambda d: d["seed"])
        for rule in RULES:
            per = {b: [band_mean(d["rules"][rule], "exact_match", r) for d in ds] for b, r in BANDS.items()}
            orc = {b: [band_mean(d["rules"]["oracle"], "exact_match", r) for d in ds] for b, r in BANDS.items()}
            cells = [f"{np.mean(v):.3f} ({min(v):.3f}–{max(v):.3f})" for v in per.values()]
            worst = min(a - o for a, o in zip(per["1-10"], orc["1-10"]))
            beyond = np.mean([np.mean([per[b][i] - orc[b][i] for b in ("11-20", "21-30")]) for i in range(len(ds))])
            its = np.mean([band_mean(d["rules"][rule], "iterations", (1, 30)) for d in ds])
            t = np.mean([band_mean(d["rules"][rule], "oracle_step", (1, 30)) for d in ds])
            same = sum(len({round(r["chosen_step"], 6) for r in d["rules"][rule].values()}) == 1 for d in ds)
            lines.append(f"| {task} | {rec} | {rule} | {','.join(str(d['seed']) for d in ds)} | {' | '.join(cells)} | "
                         f"{worst:+.3f} | {beyond:+.3f} | {its:.1f} / {t:.1f} | {stop_shares(ds, rule)} | "
                         f"{same} of {len(ds)} |")
    return "\n".join(lines)


# `load`: the text inputs of the tasks whose check the issue names, drawn here (Python's random),
# apart from the trainer's samplers; answers from the task's program
def _bits(rng, n: int) -> list:
    return [str(rng.randint(0, 1)) for _ in range(n)]


def _padded_bits(rng, n: int) -> list:
    k = rng.randint(1, n)           # k real bits, then padding to size n
    return _bits(rng, k) + ["_"] * (n - k)


TEXT_INPUTS = {"parity": _bits, "padded_parity": _padded_bits}


def through_load(run_dir: Path, task: str, per_n: int, seed: int) -> dict:
    """rasp.load(RUN) (its default rule) against rasp.load(RUN, stop="oracle") on fresh text
    inputs: exact match of the answer from `>` on, per band of n."""
    import random
    import rasp
    rng = random.Random(seed)
    program = rasp.load(str(PROGRAMS / f"{task}.rasp"))
    default, oracle = rasp.load(str(run_dir)), rasp.load(str(run_dir), stop="oracle")
    out = {"run": str(run_dir), "default_rule": default.stop}
    for band, (lo, hi) in BANDS.items():
        hits = {"default": 0, "oracle": 0}
        for n in range(lo, hi + 1):         # one length per call: rasp.load bounds one call's work
            xs = [" ".join(TEXT_INPUTS[task](rng, n) + [">", "#", "#"]) for _ in range(per_n)]
            want = program(xs)
            for name, model in (("default", default), ("oracle", oracle)):
                hits[name] += sum(a == w for a, w in zip(model(xs), want))
        out[band] = {k: v / (per_n * (hi - lo + 1)) for k, v in hits.items()}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("eval")
    e.add_argument("runs", nargs="+", type=Path)
    e.add_argument("--samples", type=int, default=128)
    e.add_argument("--lengths", default="1:30")
    e.add_argument("--seed", type=int, default=1234)
    t = sub.add_parser("table")
    t.add_argument("runs", nargs="+", type=Path)
    ld = sub.add_parser("load", help="rasp.load(RUN)'s default rule against the oracle on fresh text inputs")
    ld.add_argument("runs", nargs="+", type=Path)
    ld.add_argument("--per-n", type=int, default=100)
    ld.add_argument("--seed", type=int, default=777)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    if a.cmd == "load":
        for r in a.runs:
            task = read_json(r / "run.json")["task"]
            if task not in TEXT_INPUTS:
                sys.exit(f"{r}: task {task}: `load` draws inputs of {', '.join(TEXT_INPUTS)} only")
            d = through_load(r, task, a.per_n, a.seed)
            print(f"{r} ({task}, default {d['default_rule']}): " + "; ".join(
                f"n {b} {d[b]['default']:.3f} / oracle {d[b]['oracle']:.3f}" for b in BANDS))
    elif a.cmd == "eval":
        lo, hi = (int(x) for x in a.lengths.split(":"))
        for r in a.runs:
            d = evaluate(r, range(lo, hi + 1), a.samples, a.seed)
            print(f"{r}: {d['seconds']:.0f} s (fit {d['fit_seconds']:.1f} s), load {d['load']:.1f}", file=sys.stderr)
    else:
        docs = [read_json(r / OUT) for r in a.runs if (r / OUT).exists()]
        print(table(docs))
        loads = [d["load"] for d in docs]
        print(f"\n{len(docs)} runs; 1-minute load during the evaluations {min(loads):.1f}–{max(loads):.1f}; "
              f"training {min(d['train_seconds'] or 0 for d in docs):.0f}–"
              f"{max(d['train_seconds'] or 0 for d in docs):.0f} s per run (summary.json: a resumed run's last "
              f"session only); held-in fit "
              f"{min(d['fit_seconds'] for d in docs):.1f}–{max(d['fit_seconds'] for d in docs):.1f} s wall"
              + (f" ({min(d['fit_cpu_seconds'] for d in docs):.1f}–{max(d['fit_cpu_seconds'] for d in docs):.1f} "
                 f"CPU-s, model loading included)" if all("fit_cpu_seconds" in d for d in docs) else "") + "; "
              f"halting head {docs[0]['calibration']['head']['parameters']} parameters")


if __name__ == "__main__":
    main()
