"""Command-line entry points for `rasp train` and `rasp eval`.

rasp/cli.py names them in its command table (imported only when they run):

    rasp train: trainer.cli.add_train_args(parser), trainer.cli.run_train(args)
    rasp eval:  trainer.cli.add_eval_args(parser),  trainer.cli.run_eval(args)

`python -m trainer train|eval|compare ...` does the same without the front end's CLI
(and is what `torchrun --nproc_per_node K -m trainer train ...` runs).
The parsers (trainer/settings/args.py) are torch-free and import no task or
preset; what runs imports them, and torch, inside the functions, so a
mistyped flag is refused as fast as `rasp run` refuses one.  User errors raise `rasp.errors.RaspError`.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from rasp.errors import RaspError
from rasp.stop import DEFAULT_RULE, THRESHOLD
from trainer.settings import args as arguments, evaluation, validate

# the parsers, which rasp/cli.py's command table finds in this module
add_train_args, add_eval_args = arguments.add_train_args, arguments.add_eval_args

def run_seq_eval(args) -> int:
    from trainer.benchmark.presets import parse_set
    from trainer.settings.resolve import refuse_given
    from trainer.run.device import check_device, set_threads
    from trainer.benchmark.evaluate import evaluate_seq_run, format_table
    refuse_given(args, ("lengths", "stop", "threshold", "samples", "max_len"),
                 "not used here (a comparison run is evaluated per split: --splits a,b, -n N)")
    splits = [s.strip() for s in args.splits.split(",") if s.strip()] if args.splits else None
    print(set_threads(args.threads), file=sys.stderr)
    res = evaluate_seq_run(args.run, splits, args.n, parse_set(args.set), args.batch_size, args.seed,
                           check_device(args.device), plots=not args.no_plots, progress=not args.no_progress,
                           out_json=args.json)
    print(format_table(res))
    for line in res.get("warnings", []):
        print(line, file=sys.stderr)
    print(f"wrote {res['json']}" + (f" and {', '.join(res['plots'])}" if res.get("plots") else ""))
    return 0


def _main_rank() -> bool:
    return os.environ.get("RANK", "0") == "0"      # torchrun: one report, from rank 0


def report(summary: dict) -> str:
    """The line `rasp train` ends with: a run stopped before its step count says so."""
    w = summary.get("final_loss_steps")
    loss = (f"training loss {summary['final_loss']:.4g} (mean of steps {w[0]}-{w[1]})"
            if summary.get("final_loss") is not None else
            "no training loss logged yet" if summary.get("step") else "no training steps")
    upto = (f"to step {summary['step']}" if summary.get("finished", True) else
            f"to step {summary['step']} of {summary['steps']} (stopped early)")
    return (f"trained {summary['task']}/{summary['model']} ({summary['init']} init, {summary['n_params']:,} "
            f"parameters) {upto} in {summary['seconds']:.1f}s: {loss}; {summary['final_eval']}")


def unfinished(summary: dict, out: str, max_wall) -> str:
    """What `rasp train` says of a run that stopped before its step count ("" if it did not):
    why, where, and the command that continues it from its last checkpoint."""
    if summary.get("finished", True):
        return ""
    import shlex
    why = f"--max-wall {max_wall:g} seconds passed" if max_wall is not None else "it was stopped"
    return (f"stopped early: {why} at step {summary['step']} of {summary['steps']} (checkpointed); continue it "
            f"with: rasp train --out {shlex.quote(str(out))} --resume")


def run_train(args) -> int:
    from trainer.run import explog, loop
    from trainer.run.device import set_threads
    explog.check_available(args.log)       # before any work: the optional package is there
    threads = set_threads(args.threads)
    from trainer.start import train_kind
    kind = train_kind(args)
    if _main_rank():
        print(threads, file=sys.stderr)
    summary = loop.train(kind, args.log)
    if not _main_rank():
        return 0
    print(f"{report(summary)}; run in {kind.cfg.out}")
    if summary.get("stopped"):
        print(f"stopped early: {summary['stopped']}")
    elif unfinished(summary, kind.cfg.out, kind.cfg.max_wall):
        print(unfinished(summary, kind.cfg.out, kind.cfg.max_wall))
    if summary.get("never_checked_note"):          # a fine-tuned compiled start's sizes no input had
        print(f"warning: {summary['never_checked_note']}", file=sys.stderr)
    return 0


def run_eval(args) -> int:
    from trainer.settings.resolve import given_places, refuse_given, refuse_unused
    from trainer.settings.setting import Chosen
    from trainer.tasks.program import task_of
    from trainer.tasks import parse_lengths
    from trainer.models import get_model_spec
    from trainer.run import checkpoint
    from trainer.run.device import check_device, set_threads
    from trainer.fan.evaluate import evaluate_run, format_table
    run_dir = Path(args.run)
    if not (run_dir / "run.json").exists() and not (run_dir / "latest.json").exists():
        raise RaspError(f"{run_dir} does not exist" if not run_dir.exists() else
                        f"{run_dir} is not a training run (no run.json)")
    if checkpoint.is_seq_run_dir(run_dir):
        return run_seq_eval(args)
    refuse_given(args, ("splits", "set", "n"),
                 "not used here (a Fan-task run is evaluated by length: --lengths, --samples, --stop)")
    run = checkpoint.read_run(run_dir)
    # a baseline of fixed depth has no step to choose: its one depth is the "oracle" file
    args.stop = args.stop or (DEFAULT_RULE if get_model_spec(run["model"]).adaptive else "oracle")
    refuse_unused(given_places(args, ("threshold",)), Chosen("fan", stop=args.stop))    # it would change nothing
    args.threshold = THRESHOLD if args.threshold is None else args.threshold
    args.samples = evaluation.SAMPLES if args.samples is None else args.samples
    train_max = run["hparams"].get("max_train_n", 1)
    task = task_of(run)
    if args.lengths is None:
        # a run trained on an inputs file: the sizes its held-out inputs hold
        lengths = list(task.eval_sizes) or list(range(task.min_n, 2 * train_max + 1))
    else:
        limit = args.max_len or validate.eval_length_limit(task, train_max)
        validate.check_eval_lengths(args.lengths, limit, train_max)
        lengths = parse_lengths(args.lengths)
        missing = [n for n in lengths if task.eval_sizes and n not in task.eval_sizes]
        if missing:
            raise RaspError(f"--lengths: the run's evaluation inputs hold no input of size {missing[0]} (sizes: "
                            f"{', '.join(map(str, task.eval_sizes[:20]))})")
    print(set_threads(args.threads), file=sys.stderr)
    res = evaluate_run(run_dir, lengths, args.stop, args.samples, args.batch_size, args.threshold,
                       args.seed, check_device(args.device), out_json=args.json, plots=not args.no_plots,
                       progress=not args.no_progress)
    print(format_table(res))
    for line in res.get("warnings", []):
        print(line, file=sys.stderr)
    print(f"wrote {res['json']}" + (f" and {', '.join(res['plots'])}" if res.get("plots") else "")
          + (f" (merged with {res['kept']} earlier rows of other lengths)" if res.get("kept") else ""))
    return 0
