"""Benchmark the compiler on every program in programs/.

Per program: compile time, layers, heads, residual width, MLP width,
parameters, the largest exact length (searched upward: max-len, 2x, 4x, ...
until an input disagrees with the interpreter or --search-to is reached), and
forward throughput of the compiled model against the interpreter on the same
batch.

    python bench/compiler.py                      # --max-len 64, search to 4x
    python bench/compiler.py --max-len 16 --search-to 1024 programs/parity.rasp
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import rasp  # noqa: E402
from compiler import compile_program  # noqa: E402
from rasp.errors import RaspError  # noqa: E402

try:
    import references as R  # noqa: E402  (task samplers)
except ImportError:
    R = None


def inputs(prog, path, rng, length, count):
    """Task-format inputs of exactly `length` tokens when a sampler exists
    (padded with its end symbol), else uniformly random vocabulary tokens."""
    sampler = getattr(R, f"sample_{Path(path).stem}", None) if R else None
    out = []
    vocab = list(prog.ir.vocab)
    tries = 0
    while sampler is not None and len(out) < count and tries < 20 * count:
        tries += 1
        try:
            toks = sampler(rng, rng.randint(1, max(1, length // 2)))
        except Exception:
            break
        x = prog.parse_input(" ".join(map(str, toks)))
        if len(x) > length:
            continue
        pad = x[-1]
        out.append(x + [pad] * (length - len(x)))
    while len(out) < count:
        out.append([rng.choice(vocab) for _ in range(length)])
    ok = []
    for x in out:
        try:
            prog.run(x)
            ok.append(x)
        except RaspError:
            pass
    return ok


def exact(prog, cm, batch):
    ref = prog.run_batch(batch).outputs
    got = cm.run_batch(batch)
    return all(r[prog.scored_start(x):] == g[prog.scored_start(x):] for x, r, g in zip(batch, ref, got))


def bench(path, max_len, search_to, n_check, n_batch, seed):
    prog = rasp.load(str(path))
    t0 = time.perf_counter()
    cm = compile_program(prog, max_len)
    compile_s = time.perf_counter() - t0
    s = cm.sizes()
    rng = random.Random(seed)
    largest, length = 0, max_len
    while length <= search_to:
        if not exact(prog, cm, inputs(prog, path, rng, length, n_check)):
            break
        largest = length
        length *= 2
    batch = inputs(prog, path, rng, max_len, n_batch)
    t0 = time.perf_counter()
    prog.run_batch(batch)
    t_interp = time.perf_counter() - t0
    t0 = time.perf_counter()
    cm.run_batch(batch)
    t_model = time.perf_counter() - t0
    return dict(program=Path(path).stem, compile_s=compile_s, layers=s["layers"], heads=s["heads"],
                residual=s["residual"], mlp=s["mlp"], params=s["params"],
                exact=(f">={largest}" if largest >= search_to else str(largest)),
                model_seq_s=len(batch) / t_model, interp_seq_s=len(batch) / t_interp)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("programs", nargs="*", help="default: programs/*.rasp")
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--search-to", type=int, default=None, help="largest length to check (default 4x max-len)")
    ap.add_argument("--check", type=int, default=8, help="inputs per length in the exactness search")
    ap.add_argument("--batch", type=int, default=32, help="inputs in the throughput batch")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    paths = args.programs or sorted(str(p) for p in (ROOT / "programs").glob("*.rasp"))
    search_to = args.search_to or 4 * args.max_len
    head = (f"{'program':16} {'compile':>8} {'layers':>6} {'heads':>5} {'resid':>6} {'mlp':>6} "
            f"{'params':>11} {'exact to':>9} {'model seq/s':>11} {'interp seq/s':>12}")
    print(f"--max-len {args.max_len}; exactness searched at {args.max_len}, {2 * args.max_len}, ... "
          f"<= {search_to} ({args.check} inputs each); throughput on {args.batch} inputs of length "
          f"{args.max_len} (CPU, loops run to each input's own T)")
    print(head)
    print("-" * len(head))
    for path in paths:
        try:
            r = bench(path, args.max_len, search_to, args.check, args.batch, args.seed)
        except RaspError as e:
            print(f"{Path(path).stem:16} does not compile: {e.message}")
            continue
        print(f"{r['program']:16} {r['compile_s']:7.3f}s {r['layers']:6d} {r['heads']:5d} {r['residual']:6d} "
              f"{r['mlp']:6d} {r['params']:11,d} {r['exact']:>9} {r['model_seq_s']:11.1f} "
              f"{r['interp_seq_s']:12.1f}", flush=True)


if __name__ == "__main__":
    main()
