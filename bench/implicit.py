"""Benchmark: implicit vs explicit Mamba2 and Llama beside the GRU, LSTM and
NoPE Transformer (issue 12's evidence), made by `rasp compare` with the cpu preset.

    python -m bench.implicit --run      # the compare runs, one process at a time, then the tables
    python -m bench.implicit            # the tables only, from the finished runs

The runs are exactly

    rasp compare words --preset cpu --seeds 1 --jobs 1 --models M... --tasks z60_k8,a5_k8,mixed --out WORDS
    rasp compare counting --preset cpu --seeds 1 --jobs 1 --models implicit_*_h8 --tasks short --out COUNTING

(suites trainer/compare/suites/words.toml and counting.toml; a finished run
is not run again), then the token-by-token ("sequential") order on the two
Z60 implicit runs: `rasp eval RUN --set eval_mode=sequential --json
RUN/eval_sequential.json`.  This file only reads their run directories — eval.json
for the scores and the solver's iterations and residual per length,
compare_run.json for the wall time — and writes the tables between the
markers of bench/implicit.md, leaving the hand-written notes around them.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from trainer.run.checkpoint import write_text_atomic
from trainer.compare.grid import run_id
from rasp.readfile import read_json

ROOT = Path(__file__).resolve().parents[1]

WORDS_MODELS = ["mamba2", "implicit_mamba2", "llama", "implicit_llama", "gru", "lstm", "transformer"]
WORDS_TASKS = ["z60_k8", "a5_k8", "mixed"]
COUNTING_MODELS = ["implicit_mamba2_h8", "implicit_llama_h8"]
SEQUENTIAL = "eval_sequential.json"
BEGIN, END = "<!-- bench/implicit.py: begin -->", "<!-- bench/implicit.py: end -->"

# The published / probe figures shown beside our cells: docs/benchmarks.md §9
# (one-seed CPU probes, sequence accuracy) and P3 Table 2 (✓ = >= 90 %, 5 seeds;
# its A5 block as extracted, docs/benchmarks.md §3.1).
REFERENCE = {
    ("z60_k8", "implicit_mamba2"): {"valid": "probe: 0.992", "test_16": "probe: 0.904", "test_32": "probe: 0.558"},
    ("z60_k8", "mamba2"): {"valid": "probe: 0.0", "test_16": "P2: ✗", "test_32": "P2: ✗"},
    ("z60_k8", "gru"): {"valid": "probe: 0.987; P3 ✓", "test_16": "probe: 0.624; P3 ✓", "test_32": "probe: 0.102; P3 ✓"},
    ("z60_k8", "lstm"): {"valid": "P3 ✓", "test_16": "P3 ✓", "test_32": "P3 ✓"},
    ("z60_k8", "transformer"): {"valid": "P3 ✓", "test_16": "P3 ✗", "test_32": "P3 ✗"},
    ("a5_k8", "implicit_mamba2"): {"valid": "probe: 0.044 (1 531 steps)"},
    ("a5_k8", "gru"): {"valid": "probe: 0.89 (4 600 steps); P3 ✓", "test_16": "probe: 0.369; P3 ✓", "test_32": "P3 ✓"},
    ("a5_k8", "lstm"): {"valid": "P3 ✓", "test_16": "P3 ✓", "test_32": "P3 ✓"},
    ("a5_k8", "transformer"): {"valid": "P3 ✗ (shifted?)", "test_16": "P3 ✓ (shifted?)", "test_32": "P3 ✗"},
    ("mixed", "mamba2"): {"test_16_p0.5": "P2 (L 256): chance", "test_32_p0.5": "P2 (L 256): chance"},
    ("mixed", "implicit_mamba2"): {"test_16_p0.5": "P2 (L 256): generalises",
                                   "test_32_p0.5": "P2 (L 256): generalises"},
    ("short", "implicit_mamba2_h8"): {"valid": "— (P3's Mamba-1: ✗)"},
}


def compare(suite: str, models: list, tasks: list, out: Path) -> None:
    cmd = [sys.executable, "-m", "rasp.cli", "compare", suite, "--preset", "cpu", "--seeds", "1", "--jobs", "1",
           "--models", ",".join(models), "--tasks", ",".join(tasks), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    subprocess.run(["nice", "-n", "10"] + cmd, env=env, check=True)


def runs(out: Path, tasks: list, models: list) -> list:
    """(task entry, model entry, run dir) of the finished, evaluated runs, in table order."""
    found = []
    for t in tasks:
        for m in models:
            d = out / run_id(t, m, "cpu", 0)
            if (d / "eval.json").exists() and (d / "summary.json").exists():
                found.append((t, m, d))
    return found


def fmt(x, digits=3):
    return "—" if x is None else f"{x:.{digits}f}"


def split_rows(task: str, model: str, run: Path, file: str = "eval.json", label: str = "") -> list:
    ev = read_json(run / file)
    rows = []

    def order(item):            # by length, then p (each split here has one length)
        params = item[1].get("params", {})
        return (params.get("L") or params.get("max_len") or params.get("length") or 0, params.get("p", 0), item[0])
    for name, s in sorted(ev["splits"].items(), key=order):
        m = s["metrics"]
        main = m.get("seq_acc") or m.get("offset_acc") or next(iter(m.values()))
        second = m.get("token_acc")
        it, res = s.get("stats", {}).get("iterations"), s.get("stats", {}).get("residual")
        params = s.get("params", {})
        length = params.get("L") or params.get("max_len") or params.get("length") or "—"
        where = f"L {length}" + (f", p {params['p']:g}" if "p" in params else "")
        rows.append("| " + " | ".join([
            task, model + label, f"{name} ({where})", f"{fmt(main['mean'])} ± {fmt(main['se'])}",
            fmt(second["mean"]) if second else "—", str(s["n"]),
            f"{it['mean']:.1f} / {it['max']:.0f}" if it else "—", fmt(res["mean"]) if res else "—",
            REFERENCE.get((task, model), {}).get(name, "—")]) + " |")
    return rows


def cost_row(task: str, model: str, run: Path) -> str:
    summary = read_json(run / "summary.json")
    spec = read_json(run / "run.json") if (run / "run.json").exists() else {}
    hp = spec.get("hparams", spec)
    steps = {s["step"]: s.get("seconds") for s in read_json(run / "compare_run.json")["steps"]} \
        if (run / "compare_run.json").exists() else {}
    ev_s = sum(v or 0 for k, v in steps.items() if k.startswith("eval"))
    return "| " + " | ".join([
        task, model, str(summary.get("n_params", "—")), str(hp.get("train_split", "—")), str(hp.get("batch_size", "—")),
        str(summary.get("step", "—")), f"{steps.get('train', summary.get('seconds', 0)):.0f}", f"{ev_s:.0f}"]) + " |"


def tables(words: Path, counting: Path) -> str:
    found = runs(words, WORDS_TASKS, WORDS_MODELS) + runs(counting, ["short"], COUNTING_MODELS)
    if not found:
        return "(no finished runs yet)"
    head = ("| task | model | split | seq acc ± se (counting: offset acc) | token acc | n | "
            "iterations mean / max | residual | reference |\n|---|---|---|---|---|---|---|---|---|")
    body = [r for t, m, d in found for r in split_rows(t, m, d)]
    # the token-by-token order (`rasp eval RUN --set eval_mode=sequential --json RUN/eval_sequential.json`)
    body += [r for t, m, d in found if (d / SEQUENTIAL).exists()
             for r in split_rows(t, m, d, SEQUENTIAL, " (sequential)")]
    cost = ("| task | model | params | train split | batch | steps | train s | eval s |\n"
            "|---|---|---|---|---|---|---|---|")
    return "\n".join([head] + body + ["", cost] + [cost_row(t, m, d) for t, m, d in found])


def write(md: Path, text: str) -> None:
    old = md.read_text() if md.exists() else f"# Implicit models (bench/implicit.py)\n\n{BEGIN}\n{END}\n"
    if BEGIN not in old or END not in old:
        old = old.rstrip() + f"\n\n{BEGIN}\n{END}\n"
    before, rest = old.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    write_text_atomic(md, f"{before}{BEGIN}\n{text}\n{END}{after}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="store_true", help="run the compare grids first (skips finished runs)")
    ap.add_argument("--words", type=Path, default=ROOT / "runs" / "compare" / "words")
    ap.add_argument("--counting", type=Path, default=ROOT / "runs" / "compare" / "counting")
    ap.add_argument("--md", type=Path, default=ROOT / "bench" / "implicit.md")
    args = ap.parse_args(argv)
    if args.run:
        compare("words", WORDS_MODELS, WORDS_TASKS, args.words)
        compare("counting", COUNTING_MODELS, ["short"], args.counting)
        for model in ("implicit_mamba2", "implicit_llama"):
            run = args.words / run_id("z60_k8", model, "cpu", 0)
            subprocess.run(["nice", "-n", "10", sys.executable, "-m", "trainer", "eval", str(run), "--splits",
                            "valid,test_16,test_32", "-n", "128", "--set", "eval_mode=sequential", "--json",
                            str(run / SEQUENTIAL), "--no-plots", "--no-progress"],
                           env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}, check=True)
    write(args.md, tables(args.words, args.counting))
    print(f"wrote {args.md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
