"""Our trainer on the configuration of issue 15's side-by-side with Fan et
al.'s code: parity, d_model 64, 16 heads, 1 layer, 2000 steps, curriculum to
n = 10 (the `cpu` preset), one torch thread.  Reports exact match at n 1-10,
11-20 and 21-30 under oracle stopping, the paper's batch rule (`confidence`)
and the per-sample rule, plus training steps/s.

    # one seed per process (run them as separate background jobs):
    OMP_NUM_THREADS=1 python -m bench.fan_parity run --seed 0 --out runs/fan_parity
    # then the table of every finished seed (--paired TAG: the speed ratio of the
    # variant whose seeds were started together with official_fan_parity.py's):
    python -m bench.fan_parity table --out runs/fan_parity [--paired padded]
    # more stopping rules for a finished seed, without training:
    python -m bench.fan_parity eval --tag readout6 --seed 0 --rules confidence --out runs/fan_parity

`--set key=value` overrides a hyper-parameter (ablations, e.g.
`--set init_scheme=normal --set loss_reduction=sample --set weight_decay=0`),
and `--tag` names the variant.  The official code's figures from the issue
(same configuration, exact match with oracle stop): 0.98 at n 11-20 and 0.78
at n 21-30.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from rasp.readfile import read_json

RANGES = {"1-10": range(1, 11), "11-20": range(11, 21), "21-30": range(21, 31)}
RULES = ("oracle", "confidence", "confidence_sample")
OFFICIAL = {"11-20": 0.98, "21-30": 0.78}


def range_means(by_length: dict) -> dict:
    """Exact match {length: x} -> its mean over each range of RANGES."""
    return {k: sum(by_length[n] for n in ns) / len(ns) for k, ns in RANGES.items()}


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def run(args):
    import torch
    torch.set_num_threads(1)
    from trainer.fan.presets import make_hparams
    from trainer.tasks import get_task
    from trainer.fan.kind import RunConfig, train

    overrides = dict(kv.split("=", 1) for kv in args.set)
    hp = make_hparams("cpu", get_task("parity"), seed=args.seed, steps=args.steps,
                      **{k: _value(v) for k, v in overrides.items()})
    run_dir = Path(args.out) / f"{args.tag}_seed{args.seed}"
    t0 = time.perf_counter()
    summary = train(RunConfig(task="parity", out=str(run_dir), hp=hp, progress=False))
    train_s = time.perf_counter() - t0
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    sps = [r["steps_per_s"] for r in rows if "steps_per_s" in r]
    result = {"tag": args.tag, "seed": args.seed, "set": overrides, "steps": hp.steps,
              "train_seconds": train_s, "steps_per_s": hp.steps / summary["seconds"],
              "median_window_steps_per_s": sorted(sps)[len(sps) // 2] if sps else None,
              "load_before": os.getloadavg(), "final_eval_acc": summary["final_eval_acc"], "rules": {}}
    add_rules(run_dir, result, args.rules, args.samples)


def add_rules(run_dir: Path, result: dict, rules: str, samples: int):
    """Evaluate the run's final model under each stopping rule, lengths 1-30,
    into result["rules"], and write run_dir/fan_parity.json."""
    from trainer.fan.evaluate import evaluate_run, rows
    lengths = list(range(1, 31))
    for rule in rules.split(","):
        res = evaluate_run(run_dir, lengths, rule, samples=samples, batch_size=samples, seed=4321, plots=False)
        by_n = {r["length"]: r for r in rows(res)}
        exact = {n: by_n[n]["exact_match"] for n in lengths}
        result["rules"][rule] = {
            "by_length": exact,
            "chosen_minus_T": {n: by_n[n]["chosen_step"] - by_n[n]["oracle_step"] for n in lengths},
            **range_means(exact)}
    result["load_after"] = os.getloadavg()
    (run_dir / "fan_parity.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("tag", "seed", "steps_per_s")} |
                     {r: {k: round(v[k], 3) for k in RANGES} for r, v in result["rules"].items()}))


def evaluate_more(args):
    """Add stopping rules to a finished seed's fan_parity.json, without training."""
    import torch
    torch.set_num_threads(1)
    run_dir = Path(args.out) / f"{args.tag}_seed{args.seed}"
    result = read_json(run_dir / "fan_parity.json")
    add_rules(run_dir, result, args.rules, args.samples)


def _load(result) -> str:
    load = (result.get("load_before") or [float("nan")])[0]
    return "—" if load != load else f"{load:.1f}"


def table(args):
    files = sorted(Path(args.out).glob("*_seed*/fan_parity.json"))
    res = [read_json(f) for f in files]
    lines = ["| variant | seed | rule | n 1-10 | n 11-20 | n 21-30 | train steps/s | load (1 min) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(res, key=lambda r: (r["tag"], r["seed"])):
        for rule in [x for x in RULES if x in r["rules"]]:
            v = r["rules"][rule]
            lines.append(f"| {r['tag']} | {r['seed']} | {rule} | {v['1-10']:.3f} | {v['11-20']:.3f} | "
                         f"{v['21-30']:.3f} | {r['steps_per_s']:.2f} | {_load(r)} |")
    for tag in sorted({r["tag"] for r in res}):
        rs = [r for r in res if r["tag"] == tag]
        for rule in [x for x in RULES if all(x in r["rules"] for r in rs)]:
            m = {k: sum(r["rules"][rule][k] for r in rs) / len(rs) for k in RANGES}
            lo = {k: min(r["rules"][rule][k] for r in rs) for k in RANGES}
            lines.append(f"| **{tag} mean of {len(rs)}** | | {rule} | {m['1-10']:.3f} (min {lo['1-10']:.3f}) | "
                         f"{m['11-20']:.3f} (min {lo['11-20']:.3f}) | {m['21-30']:.3f} (min {lo['21-30']:.3f}) "
                         f"| {sum(r['steps_per_s'] for r in rs) / len(rs):.2f} | |")
    lines.append(f"| official code (issue 15) | 3 | oracle | | {OFFICIAL['11-20']:.2f} | {OFFICIAL['21-30']:.2f} | | |")
    lines += ["", *speed_ratios(res, args.paired)] if args.paired else []
    print("\n".join(lines))


def speed_ratios(res, tag: str) -> list:
    """Our steps/s over the official code's, per seed, for the variant `tag` whose
    runs were started together with official_fan_parity.py's of the same seed
    (the same load for both: only such pairs say anything about speed)."""
    official = {r["seed"]: r for r in res if r["tag"] == "official"}
    pairs = [(r["tag"], r["seed"], r["steps_per_s"] / official[r["seed"]]["steps_per_s"])
             for r in res if r["tag"] == tag and r["seed"] in official]
    if not pairs:
        return []
    return ["| variant | seed | steps/s, ours / official |", "|---|---|---|",
            *[f"| {tag} | {seed} | {ratio:.2f} |" for tag, seed, ratio in sorted(pairs)]]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", default="runs/fan_parity")
    r.add_argument("--tag", default="paper_recipe")
    r.add_argument("--steps", type=int, default=2000)
    r.add_argument("--samples", type=int, default=512, help="test inputs per length (one batch, as Fan et al.)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    r.add_argument("--rules", default=",".join(RULES), help="stopping rules to evaluate")
    e = sub.add_parser("eval", help="add stopping rules to a finished seed (no training)")
    for name, default in (("--seed", 0), ("--samples", 512)):
        e.add_argument(name, type=int, default=default)
    e.add_argument("--out", default="runs/fan_parity")
    e.add_argument("--tag", default="paper_recipe")
    e.add_argument("--rules", default=",".join(RULES))
    t = sub.add_parser("table")
    t.add_argument("--out", default="runs/fan_parity")
    t.add_argument("--paired", metavar="TAG", help="also print the steps/s ratio to the official code for the "
                   "variant whose seeds ran side by side with official_fan_parity.py")
    args = ap.parse_args(argv)
    {"run": run, "eval": evaluate_more, "table": table}[args.cmd](args)


if __name__ == "__main__":
    main()
