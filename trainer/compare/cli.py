"""`rasp compare SUITE`: run a comparison suite's grid and write the report
beside the published numbers; `rasp compare --report DIR` rebuilds the
report from the runs already in DIR without training.

    rasp compare fan --preset cpu --seeds 1 --tasks parity --jobs 2 --out runs/compare
    rasp compare flipflop --dry-run            # the command lines, nothing run
    rasp compare --report runs/compare
"""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import time
from pathlib import Path

from rasp.errors import RaspError
from trainer.compare import estimate as E
from trainer.compare import grid as G
from trainer.compare import report as R
from trainer.compare import runner
from trainer.compare.schema import MAX_FIRST_SEED, MAX_SEEDS, PRESETS
from trainer.compare.suite import available_suites, load_suite
from trainer.settings.validate import int_in

MAX_JOBS = 256


def _names(text):
    if text is None:
        return None
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise RaspError("--models/--tasks: give comma-separated names")
    return names


def add_arguments(p: argparse.ArgumentParser):
    # grouped as `rasp train --help` is: what to run, where it runs, checking first, the report
    p.add_argument("suite", nargs="?", help=f"a suite name ({', '.join(available_suites())}) or a .toml file")
    what = p.add_argument_group("what to run")
    what.add_argument("--preset", default="cpu", choices=list(PRESETS),
                      help="every run's recipe: cpu (minutes on 2 cores) or paper (the papers'); default cpu")
    what.add_argument("--seeds", type=int_in(1, MAX_SEEDS), default=None, metavar="K",
                      help=f"seeds 0..K-1, 1..{MAX_SEEDS} (default: the suite's)")
    what.add_argument("--first-seed", type=int_in(0, MAX_FIRST_SEED), default=0, metavar="S",
                      help="seeds S..S+K-1 instead: a rerun with other seeds, into its own --out (default 0)")
    what.add_argument("--models", default=None, help="comma-separated model entries of the suite (default: all)")
    what.add_argument("--tasks", default=None, help="comma-separated task entries of the suite (default: all)")
    where = p.add_argument_group("where and how the runs go")
    where.add_argument("--out", default=None, metavar="DIR", help="output directory (default: runs/compare)")
    where.add_argument("--jobs", type=int_in(1, MAX_JOBS), default=1, metavar="N",
                       help=f"runs at a time, one torch thread each, 1..{MAX_JOBS} (default 1)")
    where.add_argument("--executor", default="local", choices=["local", "slurm"],
                       help="local processes, or Slurm jobs through submitit (default local)")
    where.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE",
                       help="a submitit parameter for --executor slurm (e.g. slurm_partition=gpu, timeout_min=600); "
                            "repeatable (default: none)")
    where.add_argument("--no-wait", action="store_true",
                       help="--executor slurm: submit and return (rebuild the report later with --report DIR); "
                            "default: wait for the jobs")
    where.add_argument("--launcher", default=None, metavar="CMD",
                       help="run training with CMD instead of `python -m trainer` (the default), e.g. "
                            "\"torchrun --standalone --nproc_per_node 4 -m trainer\" (one large run on several "
                            "processes)")
    check = p.add_argument_group("checking before running")
    check.add_argument("--dry-run", action="store_true",
                       help="print each run's state, command lines and estimated wall time; train nothing "
                            "(default: run)")
    check.add_argument("--probe", type=int, default=None, metavar="STEPS",
                       help="--dry-run: time STEPS training steps of each task x model with no measured speed "
                            f"(1-{E.MAX_PROBE_STEPS}), to estimate from (default: no probe)")
    report = p.add_argument_group("the report")
    report.add_argument("--report", default=None, metavar="DIR",
                        help="rebuild DIR/report.md and report.json only, from the runs in DIR (default: run the "
                             "suite, then report)")
    report.add_argument("--no-plots", action="store_true", help="no plots in the report (default: plots)")
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


def _launcher(text) -> tuple:
    if not text:
        return ()
    try:
        words = tuple(shlex.split(text))
    except ValueError as e:          # an unclosed quote
        raise RaspError(f"--launcher {text!r}: {e}") from None
    if not words:
        raise RaspError("--launcher: give a command (e.g. \"torchrun --standalone -m trainer\")")
    return words


def _out_dir(text: str) -> Path:
    """--out: a directory, or a name to create; never a file or a dangling link."""
    out = Path(text)
    if not text:
        raise RaspError("--out: give a directory")
    if out.is_symlink() and not out.exists():
        raise RaspError(f"--out {out}: a symbolic link to nothing ({os.readlink(out)}); "
                        "give a directory")
    if out.exists() and not out.is_dir():
        raise RaspError(f"--out {out}: not a directory")
    return out


def unavailable(runs: list) -> list:
    """(run, reason) for the runs whose task or model this trainer does not
    have (yet): they would only fail."""
    from trainer.models import MODELS
    from trainer.registry import COMPARISON, FAN
    from trainer.tasks import TASKS
    from trainer.tasks.base import SeqTask
    out = []
    for r in runs:
        # a program (checked when the suite was read) is a Fan-style task
        task = None if r.program else TASKS.get(r.task) if hasattr(TASKS, "get") else None
        if task is None and not r.program:
            out.append((r, f"task {r.task!r}"))
        elif r.model not in MODELS or not MODELS[r.model].serves(COMPARISON if isinstance(task, SeqTask) else FAN):
            out.append((r, f"model {r.model!r}"))
    return out


def _check_available(runs: list, suite) -> None:
    missing = unavailable(runs)
    if not missing:
        return
    what = sorted({why for _, why in missing})
    raise RaspError(f"suite {suite.name}: {len(missing)} of {len(runs)} runs need what this trainer does not have: "
                    f"{', '.join(what)}; choose the others with --models/--tasks (--dry-run lists the runs)")


def dry_run(runs: list, out: Path, commands, jobs: int, probe_steps) -> int:
    """Each run's state, command lines and estimated wall time (and the
    source of its speed), then the total."""
    lacking = unavailable(runs)
    for r, why in lacking:
        print(f"note: {r.run_id} needs {why}, which this trainer does not have")
    states = {r.run_id: runner.state(r, out / r.run_id) for r in runs}
    speeds, reference = E.known_speeds(out, runs), E.reference_speeds()
    if probe_steps is not None:
        skip = {r.run_id for r, _ in lacking}
        for r in runs:
            if states[r.run_id] != "done" and r.run_id not in skip and not speeds.get(E.cell_key(r)):
                print(f"probing {E.cell_key(r)}: {probe_steps} steps ...", flush=True)
                speeds.setdefault(E.cell_key(r), []).append(E.probe(r, out, probe_steps, commands))
    total, by_source = 0.0, {}
    for r in runs:
        st = states[r.run_id]
        why = (f" ({'; '.join(runner.stale_settings(r, out / r.run_id))}; set aside as .staleK and trained anew)"
               if st == "stale" else "")
        est = E.estimate_run(r, st, speeds, reference)
        by_source.setdefault(est.source, []).append(est.seconds)
        total += est.seconds or 0.0
        print(f"{r.run_id}: {st}{why}; estimated {E.duration(est.seconds)} [{est.source}: {est.note}]")
        for _, c in runner.planned_commands(r, out / r.run_id, commands):
            print("    " + " ".join(c))
    names = {"done": "finished", "measured": "from measured runs", "probe": "from probes",
             "reference": "from the shipped reference speeds", "none": "without an estimate (not in the total)"}
    parts = [f"{len(by_source[k])} {names[k]}" for k in names if by_source.get(k)]
    print(f"{len(runs)} runs in {out}: estimated {E.duration(total)} of runs"
          + (f", about {E.duration(total / jobs)} wall with --jobs {jobs} if the runs share the cores evenly"
             if jobs > 1 else "")
          + f" ({', '.join(parts)}) (dry run: nothing trained)")
    return 0


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
    runs = G.expand(suite, args.preset, args.seeds, models, tasks, args.first_seed)
    out = _out_dir(args.out or "runs/compare")
    commands = runner.TrainerCommands(train_launcher=_launcher(args.launcher))
    if args.probe is not None and not args.dry_run:
        raise RaspError("--probe goes with --dry-run (it times a few steps to estimate from)")
    slurm = _slurm_params(args.slurm) if args.executor == "slurm" else None
    if slurm is not None:
        runner.check_slurm_params(slurm)            # before anything is written
    if args.dry_run:
        return dry_run(runs, out, commands, args.jobs, args.probe)
    _check_available(runs, suite)
    for r in runs:                  # before anything is written
        runner.check_run_dir(out / r.run_id)
    out.mkdir(parents=True, exist_ok=True)
    R.record_selection(out, suite, args.preset, args.seeds, models, tasks, args.first_seed)
    say = lambda s: print(s, file=sys.stderr, flush=True)   # noqa: E731
    t0 = time.time()
    # `kill PID` stops the children and leaves their runs resumable, as Ctrl-C does; so does
    # `kill -INT PID` even where the shell started us with SIGINT ignored (`cmd &` in a script)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    try:
        if args.executor == "slurm":
            records = runner.run_slurm(runs, out, slurm, commands=commands,
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
    for rec in records:              # the speeds the next --dry-run estimates from
        spec = next((r for r in runs if r.run_id == rec.get("run_id")), None)
        if spec is not None and rec.get("status") == "finished":
            E.record_speed(out, spec, rec)
    failed = [r for r in records if r.get("status") == "failed"]
    busy = [r for r in records if r.get("status") == "busy"]
    doc = R.write_report(out, plots=not args.no_plots)
    print(f"{len(records)} runs worked on in {time.time() - t0:.0f} s, {len(failed)} failed"
          + (f", {len(busy)} left to another process still working on them" if busy else "")
          + f"; wrote {out / 'report.md'} ({R.summary_line(doc)})")
    return 1 if failed else 0
