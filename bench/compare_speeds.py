"""Reference speeds for `rasp compare --dry-run`: time every cell (task x
model) of the named suites at one preset and write them into
trainer/compare/reference_speeds.json, which the dry run falls back to
where its output folder has measured nothing.

    nice -n 5 python -m bench.compare_speeds fan listops logic [--preset cpu] [--steps 20]

Per cell (trainer/compare/estimate.py, reference_measurement): STEPS
training steps of the cell's own settings, seed 0, with its length
curriculum compressed into them; the seconds per step from the training
loop's own log (steps_per_s), one validation (the loop's time after its last
log row), and every evaluation of the suite timed at 1 and at 1/16 of its
size (--eval-fraction), extrapolated linearly.  Everything runs in this one
process, one torch thread, so that a cell costs seconds and not a dozen
interpreter starts; the start of a fresh process (importing torch and the
trainer) is timed once here and added to each train and eval process of the
estimate.

The figures are CPU seconds of the one thread, not wall time: on a shared
machine (the 2-core one they were measured on ran other jobs, load 4-11)
they are the wall time a run takes with a core to itself, which is what
`--jobs N` on N otherwise idle cores gives.  The table says the machine and
the 1-minute load average per cell all the same: contention for caches makes
CPU time somewhat larger under load.  Cells of other
suites, or of other presets, already in the table are kept.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

from rasp import atomic
from rasp.errors import RaspError
from trainer.compare import estimate as E
from trainer.compare import grid as G
from trainer.compare.suite import PRESETS, available_suites, load_suite

ABOUT = ("Reference speeds of `rasp compare` cells (task x model x preset): seconds per training step, per "
         "validation and per run's evaluations, and a fresh process's start-up; the dry run uses them where "
         "its output folder has no measured run.  Regenerate: nice -n 5 python -m bench.compare_speeds SUITE...")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()}-core {cpu}, CPU seconds of one thread"


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def process_startup(runs: int = 3) -> float:
    """Median CPU seconds of a fresh `python -m trainer train --help-all`
    (importing torch and the trainer, for its lines on the models): what each
    run's processes pay first."""
    times = []
    for _ in range(runs):
        c = children_cpu()
        subprocess.run([sys.executable, "-m", "trainer", "train", "--help-all"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)
        times.append(children_cpu() - c)
    return sorted(times)[len(times) // 2]


def in_process(argv: list) -> int:
    """`python -m trainer ARGV` in this process, its output swallowed."""
    from trainer.__main__ import main
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(argv)
    if code != 0:
        print(err.getvalue()[-2000:], file=sys.stderr)
    return code


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("suites", nargs="+", help=f"suite names ({', '.join(available_suites())})")
    p.add_argument("--preset", default="cpu", choices=list(PRESETS))
    p.add_argument("--steps", type=int, default=20, help="training steps per cell (default 20)")
    p.add_argument("--eval-fraction", type=int, default=16,
                   help="time each evaluation at 1 and at 1/K of its size (default 16)")
    p.add_argument("--models", default=None, help="comma-separated model entries (default: all)")
    p.add_argument("--tasks", default=None, help="comma-separated task entries (default: all)")
    p.add_argument("--out", default=str(E.REFERENCE), help="the table to update (default: the shipped one)")
    args = p.parse_args(argv)
    if not 2 <= args.steps <= E.MAX_PROBE_STEPS:
        p.error(f"--steps must be from 2 to {E.MAX_PROBE_STEPS}")
    names = lambda s: [x for x in s.split(",") if x] if s else None   # noqa: E731
    out = Path(args.out)
    where = machine()
    startup = process_startup()
    print(f"{where}; a fresh process starts in {startup:.1f} s (load {os.getloadavg()[0]:.2f})", flush=True)
    with tempfile.TemporaryDirectory(prefix="compare_speeds_") as work:
        for name in args.suites:
            suite = load_suite(name)
            for spec in G.expand(suite, args.preset, 1, names(args.models), names(args.tasks)):
                key = E.cell_key(spec)
                try:
                    m = E.reference_measurement(spec, Path(work), args.steps, in_process, startup, where,
                                                args.eval_fraction)
                except RaspError as e:
                    print(f"{key}: {e}", file=sys.stderr, flush=True)
                    continue
                speed = f"{1 / m['per_step_s']:.3g} steps/s" if m["per_step_s"] > 0 else "no steps"
                print(f"{key}: {speed}, validation {m['valid_s']:.2f} s, "
                      f"evaluation {m['eval_s']:.1f} s (load {m['load']:g})", flush=True)
                # read again (another bench may have written cells meanwhile), written after every
                # cell (an interrupted bench keeps its work)
                cells = {**E.reference_speeds(out), key: m}
                atomic.write_json_atomic(out, {"about": ABOUT, "cells": dict(sorted(cells.items()))}, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
