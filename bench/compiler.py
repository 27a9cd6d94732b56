"""Benchmark the compiler on every program in programs/.

Per program: compile time, layers, heads, residual width, MLP width,
parameters, the largest exact length (searched upward: max-len, 2x, 4x, ...
until an input disagrees with the interpreter or --search-to is reached), and
forward throughput of the compiled model against the interpreter on the same
batch.

    python -m bench.compiler                      # --max-len 64, search to 4x
    python -m bench.compiler --max-len 16 --search-to 1024 programs/parity.rasp
    python -m bench.compiler --coverage -o compiler/COVERAGE.md   # markdown coverage table

    python -m bench.compiler --sizes                              # size table (issue 27)

--sizes: parameters and compile time of every program in programs/ and every ported
program (tests/ported_programs.py) at --max-len 16, 64 and 256 (each compile in its
own process, killed after --time-limit seconds; --jobs programs at a time), with the growth exponent
log(params at 256 / params at 64) / log 4 (1 = linear in the length), as markdown.

--coverage: every program in programs/, every library function of docs/language.md
section 5 used alone, and the shapes issue 8 names, as one markdown table:
compiled or refused (the reason's first line), size, and the largest length
checked exact (lengths max-len, 2x, ... up to --search-to, default 4x).
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

import rasp
from compiler import compile_program
from rasp.errors import RaspError, RaspRequireError
from rasp.atomic import write_text_atomic

ROOT = Path(__file__).resolve().parents[1]

try:
    from tests import references as R  # task samplers
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
    """Every position agrees (`rasp run DIR` prints them all); only the scored
    ones for a program that uses a param as a value (the model knows it from
    `>` on: compiler/params.py)."""
    ref = prog.run_batch(batch).outputs
    got = cm.run_batch(batch)
    scored_only = bool(cm.config.extra["compiler"]["value_params"])
    start = (lambda x: prog.scored_start(x)) if scored_only else (lambda x: 0)
    return all(r[start(x):] == g[start(x):] for x, r, g in zip(batch, ref, got))


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


# the library of docs/language.md, each used alone on the input (vocabulary, expression)
LIBRARY = {
    "shift_right": ("{0..3}", "shift_right(seq, 1)"),
    "cumsum": ("{0..3}", "cumsum(seq == 1)"),
    "where": ("{0..3}", "where(seq == 1, 3, seq)"),
    "mask": ("{0..3}", "mask(seq, seq > 1)"),
    "maximum": ("{0..3}", "maximum(seq)"),
    "minimum": ("{0..3}", "minimum(seq)"),
    "argmax": ("{0..3}", "argmax(seq)"),
    "argmin": ("{0..3}", "argmin(seq)"),
    "num_prev": ("{0..3}", "num_prev(seq, seq)"),
    "has_seen": ("{0..3}", "has_seen(seq, 2)"),
    "firsts": ("{0..3}", "firsts(seq, seq)"),
    "lasts": ("{0..3}", "lasts(seq, 1)"),
    "index_select": ("{0..3}", "index_select(seq, seq)"),
    "first_true": ("{0..3}", "first_true(seq == 1)"),
    "mode": ("{0..3}", "mode(seq)"),
    "binary_mode": ("{0, 1}", "binary_mode(seq)"),
    "induct": ("{0..3}", "induct(seq, seq, 1)"),
}

# the shapes issue 8 names (ported from Tracr's lib.py and the RASP-L addition programs)
ISSUE_SHAPES = {
    "frac_prevs": "input seq: {0, 1}\n"
                  "output aggr(select(indices(seq), indices(seq), le), 1000 * (seq == 1))\n",
    "pair_balance": 'const L = "("\nconst R = ")"\ninput seq: {L, R}\n'
                    "output aggr(select(indices(seq), indices(seq), le), 1000 * ((seq == L) - (seq == R)))\n",
    "argmax_of_counts": "input seq: {0..3}\noutput argmax(num_prev(seq, seq))\n",
    "firsts_cumsum": "input seq: {0, 1, 2}\noutput firsts(cumsum(seq == 1), cumsum(seq == 2))\n",
    "sort_by_value_lt": "input seq: {0..3}\nc = cumsum(seq == 1)\n"
                        "output sel_width(select(c, c, lt))\n",
    "two_loops": "input seq: {0, 1}\nx = seq\nloop len(seq):\n    x = 1 - x\n"
                 "loop 2:\n    x = shift_right(x, 1)\noutput x\n",
    "nested_loops": "input seq: {0, 1}\nx = seq\nloop 2:\n    loop 2:\n        x = shift_right(x, 1, 1)\n"
                    "output x\n",
    "pointer_reverse": 'const EOQ = ">"\ninput seq: {0, 1, 2, EOQ}\nparam n = count_before(seq, EOQ)\n'
                       "prompt = 1 - has_seen(seq, EOQ)\nptr = indices(seq) + 1\nloop n:\n"
                       "    ptr = where(prompt, indices(seq) + 1, shift_right(ptr, 1, -1) - 1)\n"
                       "output index_select(seq, ptr, 9)\n",
}


# lookup tables (issue 10): a one-operand table and a 60 x 60 group table, built from lists
def lookup_shapes() -> dict:
    if R is None:
        return {}
    return {"tok_map_table": "const SQ = [0, 1, 4, 9]\ninput seq: {0..3}\n"
                             "output tok_map(seq, SQ) + tok_map(shift_right(seq, 1), SQ)\n",
            "word_z60_table (60 x 60)": R.table_word_source(R.z60_table())}


def library_source(name) -> str:
    vocab, expr = LIBRARY[name]
    return f"input seq: {vocab}\noutput {expr}\n"


def accepted(prog, batch: list) -> list:
    """The inputs of `batch` that meet the program's `require` contract (a
    prefix of a task input often does not: it is outside the program's range)."""
    try:
        prog.check_requires(batch)
    except RaspRequireError as e:
        rejected = set(e.input_indices)
        return [x for i, x in enumerate(batch) if i not in rejected]
    return batch


def coverage_row(name, prog, path, max_len, search_to, n_check, seed) -> str:
    """One markdown row: compiled (sizes, largest exact length) or refused (why)."""
    try:
        t0 = time.perf_counter()
        cm = compile_program(prog, max_len)
        compile_s = time.perf_counter() - t0
    except RaspError as e:
        where = f"line {e.loc.line}" if e.loc else "no location"
        kind = "**internal error**" if "internal" in e.message else "refused"
        return f"| {name} | {kind} ({where}): {e.message.splitlines()[0]} | | | | |"
    except Exception as e:        # an internal error: the table must show it, not hide it
        return f"| {name} | **internal error**: {type(e).__name__}: {e} | | | | |"
    s = cm.sizes()
    rng = random.Random(seed)
    largest, length, wrong = 0, max_len, ""
    try:
        while length <= search_to:
            batch = inputs(prog, path, rng, length, n_check)
            batch = accepted(prog, batch + [x[:rng.randint(1, length)] for x in batch])   # prefixes too
            if not exact(prog, cm, batch):
                wrong = f" **wrong at {length}**"
                break
            largest = length
            length *= 2
    except Exception as e:
        wrong = f" **internal error running**: {type(e).__name__}"
    shown = f"≥ {largest}" if largest >= search_to else str(largest)
    return (f"| {name} | compiled ({compile_s:.2f}s){wrong} | {s['layers']} | {s['residual']} | "
            f"{s['params']:,} | {shown} |")


def coverage(max_len, search_to, n_check, seed, command) -> str:
    rows = ["# Compiler coverage (generated)",
            "",
            f"Generated by `{command}`; do not edit by hand.",
            f"Compiled at `--max-len {max_len}`; 'exact to' is the largest of the lengths {max_len}, "
            f"{2 * max_len}, ... <= {search_to} at which every checked input ({n_check} of that length, "
            "task-format where programs/ has a sampler, plus a random prefix of each) gives the "
            "interpreter's outputs at every position (at the scored ones where a param is used as a "
            "value: the model knows it from `>` on); 0 means wrong already at the compile length.",
            ""]
    head = "| program | result | layers | residual | parameters | exact to |\n|---|---|---|---|---|---|"
    sections = [("Programs (programs/)", [(Path(p).stem, rasp.load(str(p)), str(p))
                                            for p in sorted((ROOT / "programs").glob("*.rasp"))]),
                ("Library functions used alone (the library of docs/language.md)",
                 [(f"`{LIBRARY[n][1]}`", rasp.loads(library_source(n), f"<{n}>"), f"<{n}>")
                  for n in LIBRARY]),          # "<name>": random vocabulary inputs, never programs/' samplers
                ("Shapes named in issue 8", [(n, rasp.loads(src, f"<{n}>"), f"<{n}>")
                                             for n, src in ISSUE_SHAPES.items()]),
                ("Lookup tables (issue 10; group-word programs are in programs/)",
                 [(n, rasp.loads(src, f"<{n}>"), f"<{n}>") for n, src in lookup_shapes().items()])]
    for title, entries in sections:
        rows += [f"## {title}", "", head]
        for name, prog, path in entries:
            rows.append(coverage_row(name, prog, path, max_len, search_to, n_check, seed))
            print(rows[-1], file=sys.stderr, flush=True)
        rows.append("")
    return "\n".join(rows)


SIZE_LENGTHS = (16, 64, 256)


def size_entries() -> list:
    """(name, how to load it in a child process) for programs/ and the ported programs."""
    out = [(Path(p).stem, f"path:{p}") for p in sorted((ROOT / "programs").glob("*.rasp"))]
    from tests import ported_programs as P
    return out + [(f"ported `{p.name}`", f"port:{p.name}") for p in P.PORTS]


class _Timeout(Exception):
    pass


def size_one(spec: str, lengths, limit: float) -> list:
    """Compile one entry at each length (in this process, each compile stopped after
    `limit` seconds) and return its sizes, or why not."""
    import signal

    def alarm(*_):
        raise _Timeout()
    signal.signal(signal.SIGALRM, alarm)
    kind, name = spec.split(":", 1)
    if kind == "path":
        prog = rasp.load(name)
    else:
        from tests import ported_programs as P
        prog = rasp.loads(P.BY_NAME[name].source, f"<{name}>")
    out = []
    for n in lengths:
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            c0 = time.process_time()
            cm = compile_program(prog, n)
            # CPU seconds of this one-thread process: the target, whatever else the machine runs
            out.append({"params": cm.model.num_params(), "compile_cpu_s": time.process_time() - c0})
        except _Timeout:
            out.append({"timeout": limit})
        except RaspError as e:
            out.append({"refused": e.message.splitlines()[0]})
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return out


def size_cells(spec: str, limit: float) -> list:
    import json
    import subprocess
    cmd = [sys.executable, "-m", "bench.compiler", "--size-one", spec, str(limit)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",      # CPU time = one thread's work
           "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=len(SIZE_LENGTHS) * (limit + 30))
    except subprocess.TimeoutExpired:
        return [{"error": "killed"}] * len(SIZE_LENGTHS)
    if r.returncode != 0:
        return [{"error": (r.stderr.strip().splitlines() or ["?"])[-1]}] * len(SIZE_LENGTHS)
    return json.loads(r.stdout.strip().splitlines()[-1])


def growth(a: dict, b: dict, ratio: float):
    import math
    if "params" in a and "params" in b:
        return math.log(b["params"] / a["params"]) / math.log(ratio)
    return None


def sizes_table(limit: float, only=None, jobs: int = 1) -> str:
    def show(c):
        if "params" in c:
            return f"{c['params']:,} ({c['compile_cpu_s']:.2f}s)"
        if "timeout" in c:
            return f"> {c['timeout']:.0f}s (stopped)"
        if "refused" in c:
            return f"refused: {c['refused'][:70]}"
        return f"**error**: {c['error'][:60]}"
    head = ("| program | " + " | ".join(f"--max-len {n}" for n in SIZE_LENGTHS)
            + " | growth 64 -> 256 |\n|---|" + "---|" * (len(SIZE_LENGTHS) + 1))
    rows = [head]
    meet, miss, faster, big, slow = [], [], [], [], []
    from concurrent.futures import ThreadPoolExecutor
    entries = [(name, spec) for name, spec in size_entries() if not only or any(o in name for o in only)]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:      # each compile is its own process
        results = list(pool.map(lambda e: size_cells(e[1], limit), entries))
    for (name, _spec), cells in zip(entries, results):
        g = growth(cells[1], cells[2], SIZE_LENGTHS[2] / SIZE_LENGTHS[1])
        rows.append(f"| {name} | " + " | ".join(show(c) for c in cells)
                    + f" | {'' if g is None else f'{g:.2f}'} |")
        print(rows[-1], file=sys.stderr, flush=True)
        at64 = cells[1]
        if "params" in at64:
            ok = at64["params"] <= TARGET_PARAMS and at64["compile_cpu_s"] <= TARGET_SECONDS
            (meet if ok else miss).append(name)
            if at64["params"] > TARGET_PARAMS:
                big.append(f"{name} ({at64['params'] / 1e6:.1f}M)")
            if at64["compile_cpu_s"] > TARGET_SECONDS:
                slow.append(name)
        if g is not None and g > 1.1:
            faster.append(f"{name} ({g:.2f})")
    summary = (f"\n\nAt --max-len {SIZE_LENGTHS[1]}: {len(meet)} of {len(meet) + len(miss)} compiled entries "
               f"meet <= {TARGET_PARAMS:,} parameters and <= {TARGET_SECONDS} s of CPU; not met: "
               + (", ".join(miss) or "none") + f".  Over {TARGET_PARAMS:,} parameters: {len(big)} ("
               + (", ".join(big) or "none") + f"); over {TARGET_SECONDS} s of CPU: {len(slow)}.  Growth above 1.1 between "
               f"{SIZE_LENGTHS[1]} and {SIZE_LENGTHS[2]}: " + (", ".join(faster) or "none") + ".")
    return "\n".join(rows) + summary


TARGET_PARAMS, TARGET_SECONDS = 2_000_000, 0.5      # issue 27's targets at --max-len 64

SIZES_MARK = "## Sizes (issue 27; `python -m bench.compiler --sizes -o FILE`)"


def sizes_section(table: str, jobs: int = 1, load_before: float = float("nan")) -> str:
    when = time.strftime("%Y-%m-%d %H:%M")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{SIZES_MARK}\n\nParameters (compile time) at each --max-len; growth = log(params 256 / params 64) "
            f"/ log 4 (1: linear). Measured {when}, {jobs} program(s) at a time, load average {load_before:.1f} "
            f"at the start and {load:.1f} at the end on {os.cpu_count()} cores "
            "(compile times are CPU seconds of the compiling process, at one torch thread, so the load barely "
            "moves them).\n\n" + table + "\n")


def keep_head(path) -> str:
    """The file up to its sizes section (which --sizes -o replaces)."""
    old = Path(path).read_text() if Path(path).exists() else ""
    return old.split(SIZES_MARK)[0].rstrip("\n") + "\n\n" if old else ""


NOTES_MARK = "## Notes (hand-written"


def keep_tail(path) -> str:
    """The hand-written notes and the sizes section of the file (kept when
    --coverage -o rewrites the generated tables before them)."""
    old = Path(path).read_text() if Path(path).exists() else ""
    at = [i for i in (old.find(NOTES_MARK), old.find(SIZES_MARK)) if i >= 0]
    return "\n" + old[min(at):] if at else ""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("programs", nargs="*", help="default: programs/*.rasp")
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--search-to", type=int, default=None, help="largest length to check (default 4x max-len)")
    ap.add_argument("--check", type=int, default=8, help="inputs per length in the exactness search")
    ap.add_argument("--batch", type=int, default=32, help="inputs in the throughput batch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--coverage", action="store_true", help="print the markdown coverage table instead")
    ap.add_argument("--sizes", action="store_true", help="print the size table (issue 27) instead")
    ap.add_argument("--time-limit", type=float, default=60.0, help="with --sizes: seconds per compile")
    ap.add_argument("--jobs", type=int, default=1, help="with --sizes: programs compiled at a time")
    ap.add_argument("--size-one", nargs=2, metavar=("SPEC", "LIMIT"), help=argparse.SUPPRESS)
    ap.add_argument("-o", "--out", help="with --coverage: also write the table to this file; with --sizes: "
                    "replace the file's sizes section")
    args = ap.parse_args(argv)
    if args.size_one:
        import json
        print(json.dumps(size_one(args.size_one[0], SIZE_LENGTHS, float(args.size_one[1]))))
        return
    if args.sizes:
        load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        text = sizes_table(args.time_limit, args.programs or None, args.jobs)
        print(text)
        if args.out:
            write_text_atomic(args.out, keep_head(args.out) + sizes_section(text, args.jobs, load_before))
        return
    if args.coverage:
        max_len = args.max_len if "--max-len" in (argv or sys.argv) else 16
        search_to = args.search_to or 4 * max_len
        command = "python -m bench.compiler --coverage" + (f" --max-len {max_len}" if max_len != 16 else "") \
            + (f" --search-to {args.search_to}" if args.search_to else "") + (f" -o {args.out}" if args.out else "")
        text = coverage(max_len, search_to, args.check, args.seed, command)
        print(text)
        if args.out:
            write_text_atomic(args.out, text + "\n" + keep_tail(args.out))
        return
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
