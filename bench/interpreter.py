"""Interpreter throughput: `prog.run_batch` against a naive per-sequence
RASP-L evaluator and against hand-written NumPy for the same task, and the
same batch through the command line (`rasp run PROGRAM --inputs FILE`).

    python -m bench.interpreter [--inputs 1000] [--naive-inputs 20] [--naive-seconds 5] [--n 16 64 256]

For parity, copy and addition at each n: 1000 random inputs (all of length
for that n).  All three implementations must agree on every full output
sequence before anything is timed.  The naive evaluator is timed on a subset
-- up to --naive-inputs inputs, stopping once --naive-seconds have passed
(at least one input; it takes many seconds per input at n = 256) -- and
scaled per input.  Both the
interpreter and the hand-written version take lists of token lists and return
lists of token lists, so conversions are counted on both sides.  The cli
column is a whole `python -m rasp.cli run ... --inputs FILE` process (start-up,
parsing the text file, printing every output; best of 3 after a warm-up), its
printed outputs checked against run_batch's; --no-cli leaves it out.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import rasp
from rasp.interpreter import execute

from bench.naive_rasp import run_naive

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


# ---- inputs (token codes; symbols from the program) ---------------------------------

def make_inputs(prog, task, n, count, rng):
    sym = prog.ir.symbols
    eoq, eos = sym[">"], sym["#"]
    bits = rng.integers(0, 2, size=(count, n))
    if task == "parity":            # b1..bn > # #
        rows = np.concatenate([bits, np.full((count, 1), eoq), np.full((count, 2), eos)], axis=1)
    elif task == "copy":            # b1..bn > then n+1 #
        rows = np.concatenate([bits, np.full((count, 1), eoq), np.full((count, n + 1), eos)], axis=1)
    else:                           # a1..an + b1..bn > then n+2 #
        other = rng.integers(0, 2, size=(count, n))
        rows = np.concatenate([bits, np.full((count, 1), sym["+"]), other, np.full((count, 1), eoq),
                               np.full((count, n + 2), eos)], axis=1)
    return rows.tolist()


# ---- hand-written NumPy: the programs' full output sequences ---------------------------

def hand_parity(batch, n, eos):
    """Position i <= n holds the XOR of bits 0..i-1 (the program's running
    answer); `#` after `>`."""
    x = np.array(batch, dtype=np.int64)
    out = np.full_like(x, eos)
    out[:, 0] = 0
    out[:, 1:n + 1] = np.bitwise_xor.accumulate(x[:, :n], axis=1)
    return out.tolist()


def hand_copy(batch, n, eos):
    """0 before position n, then the n bits, then `#`."""
    x = np.array(batch, dtype=np.int64)
    out = np.full_like(x, eos)
    out[:, :n] = 0
    out[:, n:2 * n] = x[:, :n]
    return out.tolist()


def hand_addition(batch, n, eos):
    """0 up to position 2n, the n+1 sum bits (MSB first), then `#`.  Carries
    by generate/propagate: the carry out of digit i is the generate bit of the
    nearest digit at or below i that does not propagate."""
    x = np.array(batch, dtype=np.int64)
    a = x[:, n - 1::-1]                     # LSB first
    b = x[:, 2 * n:n:-1]
    g, p = a & b, a ^ b
    idx = np.arange(n)
    last = np.maximum.accumulate(np.where(p == 0, idx, -1), axis=1)
    carry = np.where(last >= 0, np.take_along_axis(g, np.maximum(last, 0), axis=1), 0)
    digits = p ^ np.concatenate([np.zeros((len(x), 1), np.int64), carry[:, :-1]], axis=1)
    out = np.full_like(x, eos)
    out[:, :2 * n + 1] = 0
    out[:, 2 * n + 1] = carry[:, -1]
    out[:, 2 * n + 2:3 * n + 2] = digits[:, ::-1]
    return out.tolist()


HAND = {"parity": hand_parity, "copy": hand_copy, "addition": hand_addition}


# ---- timing ---------------------------------------------------------------------------

def best_time(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def time_naive(ir, batch, max_inputs, budget_s):
    """(outputs, seconds per input) over a prefix of `batch`."""
    outs, start = [], time.perf_counter()
    for tokens in batch[:max_inputs]:
        outs += run_naive(ir, [tokens])
        if time.perf_counter() - start > budget_s:
            break
    return outs, (time.perf_counter() - start) / len(outs)


def time_cli(prog, path, batch, outputs, repeat=3):
    """Seconds for one `rasp run PROGRAM --inputs FILE` process on `batch`
    (best of `repeat`, after a warm-up that also checks its outputs)."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("".join(prog.format_output(x) + "\n" for x in batch))
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "rasp.cli", "run", path, "--inputs", f.name]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        if done.stdout.splitlines() != [prog.format_output(y) for y in outputs]:
            raise SystemExit(f"{path}: `rasp run --inputs` printed other outputs than run_batch")
        return best_time(lambda: subprocess.run(cmd, env=env, capture_output=True, check=True), repeat)
    finally:
        os.unlink(f.name)


def bench(task, n, count, naive_count, naive_seconds, rng, cli=True):
    path = os.path.join(ROOT, "programs", f"{task}.rasp")
    prog = rasp.load(path)
    batch = make_inputs(prog, task, n, count, rng)
    eos = prog.ir.symbols["#"]
    hand = HAND[task]

    got = prog.run_batch(batch).outputs
    want = hand(batch, n, eos)
    if got != want:
        bad = next(i for i in range(count) if got[i] != want[i])
        raise SystemExit(f"{task} n={n}: interpreter and hand-written NumPy disagree on input {bad}:\n"
                         f"  {got[bad]}\n  {want[bad]}")
    naive, t_naive = time_naive(prog.ir, batch, naive_count, naive_seconds)
    if naive != got[:len(naive)]:
        raise SystemExit(f"{task} n={n}: naive evaluator disagrees with the interpreter")

    repeat = 7 if n <= 64 else 3
    t_run = best_time(lambda: prog.run_batch(batch), repeat) / count
    t_exec = best_time(lambda: execute(prog.ir, batch), repeat) / count
    t_hand = best_time(lambda: hand(batch, n, eos), repeat) / count
    t_cli = time_cli(prog, path, batch, got) / count if cli else float("nan")
    return dict(task=task, n=n, run=1 / t_run, exec=1 / t_exec, naive=1 / t_naive, hand=1 / t_hand, cli=1 / t_cli,
                naive_inputs=len(naive),
                vs_naive=t_naive / t_run, vs_hand=t_run / t_hand, exec_vs_hand=t_exec / t_hand)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=1000)
    ap.add_argument("--naive-inputs", type=int, default=20)
    ap.add_argument("--naive-seconds", type=float, default=5.0)
    ap.add_argument("--n", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--tasks", nargs="+", default=["parity", "copy", "addition"])
    ap.add_argument("--no-cli", action="store_true", help="leave out the command-line column")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{args.inputs} random inputs per row; throughput in inputs/s (best of 3-7 runs).")
    print(f"naive: bench/naive_rasp.py, one sequence at a time, every select rebuilt with Python loops "
          f"at each use (as RASP-L's kqv);\n       timed on the first k inputs (column k: up to "
          f"{args.naive_inputs}, fewer once {args.naive_seconds:g} s have passed) and scaled per input.")
    print("hand: hand-written NumPy of the same full output sequences.  Both sides take and return "
          "lists of token lists.")
    print("run_batch includes its input validation; execute is the interpreter alone.")
    print("cli: the same inputs as a text file through one `rasp run PROGRAM --inputs FILE` process "
          "(start-up and printing included).\n")
    head = (f"{'task':<9}{'n':>5}{'run_batch/s':>13}{'execute/s':>12}{'naive/s':>10}{'k':>4}{'hand/s':>12}"
            f"{'x naive':>10}{'slower than hand':>18}{'(execute)':>11}{'cli/s':>10}")
    print(head)
    print("-" * len(head))
    for task in args.tasks:
        for n in args.n:
            r = bench(task, n, args.inputs, args.naive_inputs, args.naive_seconds, rng, cli=not args.no_cli)
            print(f"{r['task']:<9}{r['n']:>5}{r['run']:>13,.0f}{r['exec']:>12,.0f}{r['naive']:>10,.2f}"
                  f"{r['naive_inputs']:>4}"
                  f"{r['hand']:>12,.0f}{r['vs_naive']:>9,.0f}x{r['vs_hand']:>17.1f}x"
                  f"{r['exec_vs_hand']:>10.1f}x{r['cli']:>10,.0f}", flush=True)


if __name__ == "__main__":
    main()
