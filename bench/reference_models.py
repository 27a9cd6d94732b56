"""The CPU probes of docs/benchmarks.md §9 with the reference models, through the CLI a user
runs (`rasp train` / `rasp eval`, cpu preset): the grid is the suite
bench/reference.toml, run by `rasp compare`'s runner (a finished run is
skipped, an interrupted one resumed, a failure recorded in its failed.json),
and this script writes the table of results beside the probes' claims:
bench/comparison_reference.md (`rasp compare bench/reference.toml` gives the
same runs and a report.md).

    python -m bench.reference_models --out runs/reference [--only lstm_flipflop,...] [--jobs 1]

One torch thread per process; `--jobs 2` runs two probes side by side.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rasp.readfile import read_json

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "bench" / "reference.toml"

FF_SPLITS = [f"test_{T}_p{p}" for T in (128, 256) for p in (0.1, 0.8, 0.98)]

# probe: (task entry, model entry of bench/reference.toml, what the paper / probe says)
# CHECKS[name](splits of eval.json) -> (passed, the claim of docs/benchmarks.md §9 it checks)
PROBES = {
    "lstm_flipflop": (
        "flipflop", "lstm",
        "100 % all reads and last read at T=128 and 256, p_i 0.1/0.8/0.98 "
        "(254 steps); 1-layer LSTM is Liu et al.'s solver (not in P1's tables)"),
    "transformer_flipflop": (
        "flipflop", "transformer_rope",
        "probe: T=128 p_i 0.1/0.8/0.98 -> last read 1.00/1.00/0.888, T=256 1.00/0.988/0.75; "
        "P1 Table 3 (6x512, T=512/1024): 100/100/90, 100/100/87"),
    "gru_words_z60": (
        "words_z60", "gru",
        "probe: L8 seq 0.987, L16 0.624, L24 0.243, L32 0.102 (1 200 steps); "
        "P3 Table 2: GRU Z60 k=8 >= 90 % up to 5X, fails at 64+"),
    "rnn8_counting": (
        "counting", "rnn",
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


def run_probes(names: list, out: Path, jobs: int) -> list:
    """Train and evaluate the probes' runs (what is not done yet) and collect them."""
    from trainer.compare import grid as G
    from trainer.compare import report as R
    from trainer.compare import runner
    from trainer.compare.suite import load_suite
    suite = load_suite(str(SUITE))
    runs = {(r.task_entry, r.model_entry): r for r in G.expand(suite, "cpu")}
    chosen = [runs[PROBES[n][:2]] for n in names]
    R.record_selection(out, suite, "cpu", None, sorted({r.model_entry for r in chosen}),
                       sorted({r.task_entry for r in chosen}))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    records = {rec["run_id"]: rec for rec in runner.run_local(chosen, out, jobs, progress=print)}
    results = []
    for name, spec in zip(names, chosen):
        d, rec = out / spec.run_id, records.get(spec.run_id, {})
        if runner.state(spec, d) != "done":
            why = rec.get("note") or f"{rec.get('status', 'not finished')}, see {d}/failed.json or its logs"
            results.append({"name": name, "error": why})
            continue
        results.append({"name": name, "task": spec.task, "model": spec.model, "paper": PROBES[name][2],
                        "splits": spec.evals[0].options["splits"].split(","),
                        "summary": read_json(d / "summary.json"),
                        "eval": read_json(d / "eval.json")})
    R.write_report(out, plots=False)
    return results


def _fmt(v):
    return "-" if v is None else f"{v:.3f}"


NOTES = """## Notes

* The Transformer (2 layers, d 64, RoPE) also loses the last read at 2x length on p_i = 0.8 (0.57),
  against the CPU probe's 0.988: the seed spread of RoPE's extrapolation, not a defect.  Seeds 0-2
  of the same command give 0.61 / 0.82 / 0.94, each exact at T = 128, and 0.999 when each query
  sees only the last 128 keys (no relative distance unseen in training): bench/anomalies.md §2.
  P1's 6x512 xPos model is not run here (`--preset paper`).
* Counting: the hidden-8 RNN gets every offset of the training setting and 0.90 of them with
  the longer ITI (probe 0.988); the double-ISI phase test (P3 Table 5: RNN hidden 8 passes) is
  at 0.5 offset accuracy: one of the two offsets is missed in every sequence.
* GRU x Z60: 1500 steps gave 0.919 sequence accuracy at k = 8 (too close to the 90 % line), so
  the gru/words cpu preset trains 2000 steps; beyond k the sequence accuracy falls as in the probe.
"""


def table(results: list, load: str) -> str:
    from trainer.tasks import TASKS
    lines = ["# Reference models at the cpu preset (docs/benchmarks.md §9)", "",
             "Produced by `python -m bench.reference_models` (the suite bench/reference.toml through "
             "`rasp compare`'s runner: `rasp train --preset cpu` with the probe's budget, then `rasp eval`); "
             "each row is one split, mean ± standard error over its examples.  Single seed (0), one torch "
             f"thread per run on the shared 2-core machine ({load}).", "",
             "| probe | claim of the CPU probe | reproduced |", "|---|---|---|"]
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
        order = r["splits"]
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
    unknown = [n for n in names if n not in PROBES]
    if unknown:
        ap.error(f"--only: unknown probe(s) {', '.join(unknown)} (known: {', '.join(PROBES)})")
    results = run_probes(names, out, args.jobs)
    load = "load average %.1f / %.1f / %.1f when the table was written" % os.getloadavg()
    Path(args.table).write_text(table(results, load))
    print(f"wrote {args.table}")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
