"""BENCHMARKS.md §4 probes with the reference models, through the CLI a user
runs (`rasp train` / `rasp eval`, cpu preset), and the table of results
beside the published numbers: bench/comparison_reference.md.

    python bench/reference_models.py --out runs/reference [--only lstm_flipflop,...] [--jobs 1]

Each probe trains once (a finished run in --out is reused; delete it to
train again) and is evaluated on the splits listed.  One torch thread per
process; `--jobs 2` runs two probes side by side.
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

FF_SPLITS = [f"test_{T}_p{p}" for T in (128, 256) for p in (0.1, 0.8, 0.98)]

# name: (task, model, train args, eval splits, eval -n, what the paper / probe says)
# CHECKS[name](splits of eval.json) -> (passed, the BENCHMARKS.md §4 claim it checks)
PROBES = {
    "lstm_flipflop": (
        "flipflop", "lstm", [], FF_SPLITS, 1000,
        "BENCHMARKS.md §4.2 probe: 100 % all reads and last read at T=128 and 256, p_i 0.1/0.8/0.98 "
        "(254 steps); 1-layer LSTM is Liu et al.'s solver (not in P1's tables)"),
    "transformer_flipflop": (
        "flipflop", "transformer_rope", [], FF_SPLITS, 1000,
        "probe: T=128 p_i 0.1/0.8/0.98 -> last read 1.00/1.00/0.888, T=256 1.00/0.988/0.75; "
        "P1 Table 3 (6x512, T=512/1024): 100/100/90, 100/100/87"),
    "gru_words_z60": (
        "words_z60", "gru", [], ["valid", "test_16", "test_24", "test_32", "test_64"], 1000,
        "probe: L8 seq 0.987, L16 0.624, L24 0.243, L32 0.102 (1 200 steps); "
        "P3 Table 2: GRU Z60 k=8 >= 90 % up to 5X, fails at 64+"),
    "rnn8_counting": (
        "counting", "rnn", [], ["valid", "test_long_iti", "test_two_isi", "test_double_isi"], 500,
        "probe: val offset score 0.935, longer ITI 0.988; P3 Table 4: hidden-8 RNN solves L=200/600/1000"),
}


def _m(e, split, metric):
    return e[split]["metrics"][metric]["mean"]


CHECKS = {
    "lstm_flipflop": lambda e: (all(_m(e, s, "last_read_acc") == 1.0 and _m(e, s, "acc") == 1.0 for s in FF_SPLITS),
                                "100 % (all reads and last read) at T = 128 and 256"),
    "transformer_flipflop": lambda e: (min(_m(e, s, "acc") for s in ("test_128_p0.1", "test_128_p0.8")) >= 0.98
                                       and _m(e, "test_128_p0.98", "last_read_acc") < 0.95,
                                       "learns dense/normal reads at T = 128 but fails on sparse p_i = 0.98"),
    "gru_words_z60": lambda e: (_m(e, "valid", "seq_acc") > 0.9, "> 90 % sequence accuracy at k = 8"),
    "rnn8_counting": lambda e: (_m(e, "valid", "offset_acc") >= 0.95, "hidden-8 RNN predicts the ISI offsets"),
}


def rasp(*args, log=None) -> int:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "rasp.cli", *args]
    with open(log, "a") if log else open(os.devnull, "w") as f:
        f.write("$ rasp " + " ".join(args) + "\n")
        f.flush()
        return subprocess.call(["nice", "-n", "10", *cmd], cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)


def run_probe(name: str, out: Path) -> dict:
    task, model, train_args, splits, n, paper = PROBES[name]
    d = out / name
    log = out / f"{name}.log"
    t0 = time.time()
    summary = d / "summary.json"
    if not (summary.exists() and json.loads(summary.read_text()).get("finished")):
        args = ["train", "--task", task, "--model", model, "--preset", "cpu", "--no-progress", *train_args,
                "--out", str(d)]
        if (d / "latest.json").exists():
            args.append("--resume")
        if rasp(*args, log=log):
            return {"name": name, "error": f"training failed, see {log}"}
    ev = ["eval", str(d), "-n", str(n), "--no-progress"] + (["--splits", ",".join(splits)] if splits else [])
    if not _evaluated(d, splits, n) and rasp(*ev, log=log):
        return {"name": name, "error": f"evaluation failed, see {log}"}
    return {"name": name, "task": task, "model": model, "paper": paper, "seconds": time.time() - t0,
            "summary": json.loads(summary.read_text()), "eval": json.loads((d / "eval.json").read_text())}


def _evaluated(d: Path, splits, n: int) -> bool:
    """eval.json already holds these splits, n examples each, of the final checkpoint."""
    try:
        res = json.loads((d / "eval.json").read_text())
        step = json.loads((d / "summary.json").read_text())["step"]
    except (OSError, ValueError, KeyError):
        return False
    got = res.get("splits", {})
    return res.get("step") == step and bool(splits) and all(got.get(s, {}).get("n") == n for s in splits)


def _fmt(v):
    return "-" if v is None else f"{v:.3f}"


NOTES = """## Notes

* The Transformer (2 layers, d 64, RoPE) also loses the last read at 2x length on p_i = 0.8 (0.57),
  worse than the §4.2 probe (0.988): RoPE beyond the trained positions; P1's 6x512 xPos model is
  not run here (`--preset paper`).
* Counting: the hidden-8 RNN gets every offset of the training setting and 0.90 of them with
  the longer ITI (probe 0.988); the double-ISI phase test (P3 Table 5: RNN hidden 8 passes) is
  at 0.5 offset accuracy: one of the two offsets is missed in every sequence.
* GRU x Z60: 1500 steps gave 0.919 sequence accuracy at k = 8 (too close to the 90 % line), so
  the gru/words cpu preset trains 2000 steps; beyond k the sequence accuracy falls as in the probe.
"""


def table(results: list, load: str) -> str:
    from trainer.tasks import TASKS
    lines = ["# Reference models at the cpu preset (BENCHMARKS.md §4)", "",
             "Produced by `python bench/reference_models.py` (`rasp train --preset cpu`, then `rasp eval`); "
             "each row is one split, mean ± standard error over its examples.  Single seed (0), one torch "
             f"thread per run on the shared 2-core machine ({load}).", "",
             "| probe | BENCHMARKS.md §4 claim | reproduced |", "|---|---|---|"]
    for r in results:
        ok, claim = CHECKS[r["name"]](r["eval"]["splits"]) if "error" not in r else (False, r["error"])
        lines.append(f"| {r['name']} | {claim} | {'yes' if ok else '**no**'} |")
    lines.append("")
    for r in results:
        lines.append(f"## {r['name']}")
        if "error" in r:
            lines += ["", f"**{r['error']}**", ""]
            continue
        s = r["summary"]
        lines += ["", f"`rasp train --task {r['task']} --model {r['model']} --preset cpu`: {s['n_params']} "
                  f"parameters, {s['step']} steps in {s['seconds']:.0f} s.", "",
                  f"Paper / probe: {r['paper']}", ""]
        splits = r["eval"]["splits"]
        metrics = list(TASKS[r["task"]].metrics)
        order = PROBES[r["name"]][3] or list(splits)
        lines.append("| split | n | " + " | ".join(metrics) + " |")
        lines.append("|---|---|" + "---|" * len(metrics))
        for name in order:
            e = splits[name]
            cells = [f"{_fmt(e['metrics'][m]['mean'])} ± {_fmt(e['metrics'][m]['se'])}" for m in metrics]
            lines.append(f"| {name} | {e['n']} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines) + "\n" + NOTES


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/reference")
    ap.add_argument("--only", default=None, help="comma-separated probe names (default all): " + ", ".join(PROBES))
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--table", default=str(ROOT / "bench" / "comparison_reference.md"))
    args = ap.parse_args(argv)
    names = args.only.split(",") if args.only else list(PROBES)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(args.jobs) as ex:
        results = list(ex.map(lambda n: run_probe(n, out), names))
    load = "load average %.1f / %.1f / %.1f when the table was written" % os.getloadavg()
    sys.path.insert(0, str(ROOT))
    Path(args.table).write_text(table(results, load))
    print(f"wrote {args.table}")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
