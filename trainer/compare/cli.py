"""`rasp compare SUITE`: run a comparison suite's grid and write the report
beside the published numbers; `rasp compare --report DIR` rebuilds the
report from the runs already in DIR without training.

    rasp compare fan --preset cpu --seeds 1 --tasks parity --jobs 2 --out runs/compare
    rasp compare flipflop --dry-run            # the command lines, nothing run
    rasp compare --report runs/compare
"""
from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from pathlib import Path

from rasp.errors import RaspError
from trainer.compare import grid as G
from trainer.compare import report as R
from trainer.compare import runner
from trainer.compare.suite import PRESETS, available_suites, load_suite


def _names(text):
    if text is None:
        return None
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise RaspError("--models/--tasks: give comma-separated names")
    return names


def add_arguments(p: argparse.ArgumentParser):
    p.add_argument("suite", nargs="?", help=f"a suite name ({', '.join(available_suites())}) or a .toml file")
    p.add_argument("--preset", default="cpu", choices=list(PRESETS),
                   help="every run's recipe: cpu (minutes on 2 cores) or paper (the papers'); default cpu")
    p.add_argument("--seeds", type=int, default=None, metavar="K", help="seeds 0..K-1 (default: the suite's)")
    p.add_argument("--models", default=None, help="comma-separated model entries of the suite (default: all)")
    p.add_argument("--tasks", default=None, help="comma-separated task entries of the suite (default: all)")
    p.add_argument("--out", default=None, help="output directory (default: runs/compare)")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="runs at a time, one torch thread each (default 1)")
    p.add_argument("--executor", default="local", choices=["local", "slurm"],
                   help="local processes, or Slurm jobs through submitit")
    p.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE",
                   help="a submitit parameter for --executor slurm (e.g. slurm_partition=gpu, timeout_min=600)")
    p.add_argument("--no-wait", action="store_true",
                   help="--executor slurm: submit and return (rebuild the report later with --report DIR)")
    p.add_argument("--launcher", default=None, metavar="CMD",
                   help="run training with CMD instead of `python -m trainer`, e.g. "
                        "\"torchrun --standalone --nproc_per_node 4 -m trainer\" (one large run on several processes)")
    p.add_argument("--dry-run", action="store_true", help="print each run's state and command lines; run nothing")
    p.add_argument("--report", default=None, metavar="DIR", help="rebuild DIR/report.md and report.json only")
    p.add_argument("--no-plots", action="store_true")
    return p


def _slurm_params(items: list) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise RaspError(f"--slurm {item!r}: expected KEY=VALUE")
        try:
            out[key] = int(value)
        except ValueError:
            out[key] = value
    return out


def unavailable(runs: list) -> list:
    """(run, reason) for the runs whose task or model this trainer does not
    have (yet): they would only fail."""
    from trainer.models import ENCODERS, MODELS
    from trainer.tasks import TASKS
    from trainer.tasks.base import SeqTask
    out = []
    for r in runs:
        task = TASKS.get(r.task) if hasattr(TASKS, "get") else None
        if task is None:
            out.append((r, f"task {r.task!r}"))
        elif r.model not in (ENCODERS if isinstance(task, SeqTask) else MODELS):
            out.append((r, f"model {r.model!r}"))
    return out


def _check_available(runs: list, suite) -> None:
    missing = unavailable(runs)
    if not missing:
        return
    what = sorted({why for _, why in missing})
    raise RaspError(f"suite {suite.name}: {len(missing)} of {len(runs)} runs need what this trainer does not have: "
                    f"{', '.join(what)}; choose the others with --models/--tasks (--dry-run lists the runs)")


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def run(args) -> int:
    if args.report:
        if args.suite:
            raise RaspError("--report DIR rebuilds a report; give no SUITE with it")
        out = Path(args.report)
        if not out.is_dir():
            raise RaspError(f"--report {out}: no such directory")
        doc = R.write_report(out, plots=not args.no_plots)
        print(f"wrote {out / 'report.md'} and report.json ({R.summary_line(doc)})")
        return 0
    if not args.suite:
        raise RaspError(f"give a SUITE ({', '.join(available_suites())}) or --report DIR")
    suite = load_suite(args.suite)
    models, tasks = _names(args.models), _names(args.tasks)
    runs = G.expand(suite, args.preset, args.seeds, models, tasks)
    out = Path(args.out or "runs/compare")
    commands = runner.TrainerCommands(train_launcher=tuple(shlex.split(args.launcher)) if args.launcher else ())
    if args.dry_run:
        for r, why in unavailable(runs):
            print(f"note: {r.run_id} needs {why}, which this trainer does not have")
        for r in runs:
            cmds = runner.planned_commands(r, out / r.run_id, commands)
            st = runner.state(r, out / r.run_id)
            why = (f" ({'; '.join(runner.stale_settings(r, out / r.run_id))}; set aside as .staleK and trained anew)"
                   if st == "stale" else "")
            print(f"{r.run_id}: {st}{why}")
            for _, c in cmds:
                print("    " + " ".join(c))
        print(f"{len(runs)} runs in {out} (dry run: nothing started)")
        return 0
    _check_available(runs, suite)
    out.mkdir(parents=True, exist_ok=True)
    R.record_selection(out, suite, args.preset, args.seeds, models, tasks)
    say = lambda s: print(s, file=sys.stderr, flush=True)   # noqa: E731
    t0 = time.time()
    # `kill PID` stops the children and leaves their runs resumable, as Ctrl-C does; so does
    # `kill -INT PID` even where the shell started us with SIGINT ignored (`cmd &` in a script)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    try:
        if args.executor == "slurm":
            records = runner.run_slurm(runs, out, _slurm_params(args.slurm), commands=commands,
                                       wait=not args.no_wait, progress=say)
            if args.no_wait:
                print(f"submitted {len(records)} jobs; `rasp compare --report {out}` once they are done")
                return 0
        else:
            records = runner.run_local(runs, out, args.jobs, commands, progress=say)
    except KeyboardInterrupt:
        doc = R.write_report(out, plots=not args.no_plots)
        say(f"interrupted after {time.time() - t0:.0f} s; the report so far is in {out / 'report.md'} "
            f"({R.summary_line(doc)}); run the same command again to resume")
        raise
    failed = [r for r in records if r.get("status") == "failed"]
    busy = [r for r in records if r.get("status") == "busy"]
    doc = R.write_report(out, plots=not args.no_plots)
    print(f"{len(records)} runs worked on in {time.time() - t0:.0f} s, {len(failed)} failed"
          + (f", {len(busy)} left to another process still working on them" if busy else "")
          + f"; wrote {out / 'report.md'} ({R.summary_line(doc)})")
    return 1 if failed else 0
