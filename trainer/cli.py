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
from trainer.fan.rules import DEFAULT_RULE, THRESHOLD
from trainer.settings import args as arguments, evaluation, validate
from trainer.settings.hparams import HParams

# the parsers, which rasp/cli.py's command table finds in this module
add_train_args, add_eval_args = arguments.add_train_args, arguments.add_eval_args

def _program_run(args, run):
    """--resume of a run: the program flags must name what it trained on (its program unchanged)."""
    from trainer.settings.resolve import PROGRAM_FLAGS, refuse_given
    from trainer.tasks.program import check_unchanged
    record = run.get("program")
    if record is None:
        if args.program:
            raise RaspError(f"--resume: --program {args.program}, but the run trains the task {run['task']}")
        refuse_given(args, PROGRAM_FLAGS, "for --program runs")
        return None
    refuse_given(args, PROGRAM_FLAGS, "a resumed run keeps its inputs and scored positions: leave them out")
    check_unchanged(record, args.program)
    return record


def config_from_args(args):
    from trainer.settings.resolve import PROGRAM_FLAGS, fan_flags, fresh_hparams, refuse_changed_run, refuse_given
    from trainer.run import checkpoint
    from trainer.run.device import check_device
    from trainer.fan.kind import RunConfig
    out = Path(args.out)
    if args.resume and checkpoint.has_run(out):
        # A resumed run keeps its own settings (only --steps may extend it).
        run = checkpoint.read_checked_run(out)     # an edited run.json is refused
        refuse_changed_run(args, run)
        program = _program_run(args, run)
        hp = checkpoint.resumed_hparams(HParams.from_dict(run["hparams"]), fan_flags(args))
        return RunConfig(task=run["task"], out=str(out), model=run["model"], init=run["init"],
                         compress=run.get("compress"), compress_method=run.get("compress_method", "pca"),
                         preset=run["preset"], device=check_device(args.device), hp=hp, resume=True,
                         progress=not args.no_progress, max_wall=args.max_wall, config=run.get("config"),
                         program=program)
    program = task = None
    if args.program:
        from trainer.tasks.program import program_record, program_task
        if args.task:
            raise RaspError(f"--task {args.task} and --program {args.program}: give one")
        program = program_record(args.program, args.score, args.inputs, args.eval_inputs)
        task = program_task(program)
    else:
        refuse_given(args, PROGRAM_FLAGS, "only with --program P.rasp")
    hp = fresh_hparams(args, task)
    if "compress_method" in getattr(args, "given", ()) and args.compress is None:
        raise RaspError("--compress-method: not used without --compress D")
    return RunConfig(task=task.name if task else args.task, out=str(out), model=args.model, init=args.init,
                     compress=args.compress, compress_method=args.compress_method, preset=args.preset,
                     device=check_device(args.device), hp=hp, resume=args.resume,
                     progress=not args.no_progress, max_wall=args.max_wall,
                     config=getattr(args, "config_settings", None), program=program)


def seq_run_config(args):
    """The SeqRunConfig of `rasp train ARGS` on a comparison task (a resumed
    run keeps its own settings; --steps may extend it)."""
    from trainer.benchmark.presets import parse_set
    from trainer.settings.resolve import refuse_changed_run, refuse_fan_only, seq_flags, seq_hparams
    from trainer.run import checkpoint
    from trainer.run.device import check_device
    from trainer.benchmark.kind import SeqRunConfig, seq_task
    out = Path(args.out)
    if args.resume and checkpoint.has_run(out):
        refuse_fan_only(args)                # (a new run's seq_hparams refuses them too)
        run = checkpoint.read_checked_run(out)         # a resumed run keeps its settings; --steps may extend it
        refuse_changed_run(args, run)
        hp = checkpoint.resumed_hparams(HParams.from_dict(run["hparams"], "seq"), seq_flags(args, parse_set(args.set)))
        return SeqRunConfig(run["task"], run["model"], str(out), run["preset"], hp.validate(), run.get("data"),
                            check_device(args.device), True, not args.no_progress, args.max_wall,
                            run.get("init", "random"), run.get("config"))
    task = seq_task(args.task)
    hp = seq_hparams(args)
    if args.data and not Path(args.data).is_file():
        raise RaspError(f"--data {args.data}: no such file")
    return SeqRunConfig(task.name, args.model, str(out), args.preset, hp,
                        str(Path(args.data).resolve()) if args.data else None, check_device(args.device),
                        args.resume, not args.no_progress, args.max_wall, args.init,
                        getattr(args, "config_settings", None))


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


def train_kind(args):
    """The run `rasp train ARGS` asks for, as a kind of run of the one
    training loop (trainer/run/loop.py): a Fan task's or a comparison task's."""
    from trainer.settings.resolve import PROGRAM_FLAGS, is_seq_train, refuse_given
    if is_seq_train(args):
        refuse_given(args, ("program",) + PROGRAM_FLAGS, "Fan-style runs only (a comparison task has its own data)")
        from trainer.benchmark.kind import SeqKind
        return SeqKind(seq_run_config(args))
    if args.set or args.data:
        raise RaspError("--set/--data are for comparison tasks; Fan tasks take the hyper-parameter flags")
    from trainer.fan.kind import FanKind
    return FanKind(config_from_args(args))


def report(summary: dict) -> str:
    """The line `rasp train` ends with."""
    w = summary.get("final_loss_steps")
    loss = (f"training loss {summary['final_loss']:.4g} (mean of steps {w[0]}-{w[1]})"
            if summary.get("final_loss") is not None else "no training steps")
    return (f"trained {summary['task']}/{summary['model']} ({summary['init']} init, {summary['n_params']:,} "
            f"parameters) to step {summary['step']} in {summary['seconds']:.1f}s: {loss}; {summary['final_eval']}")


def run_train(args) -> int:
    from trainer.run import explog, loop
    from trainer.run.device import set_threads
    explog.check_available(args.log)       # before any work: the optional package is there
    threads = set_threads(args.threads)
    kind = train_kind(args)
    if _main_rank():
        print(threads, file=sys.stderr)
    summary = loop.train(kind, args.log)
    if not _main_rank():
        return 0
    print(f"{report(summary)}; run in {kind.cfg.out}")
    if summary.get("stopped"):
        print(f"stopped early: {summary['stopped']}")
    return 0


def run_eval(args) -> int:
    from trainer.settings.resolve import refuse_given
    from trainer.tasks.program import task_of
    from trainer.tasks import parse_lengths
    from trainer.models import get_model_spec
    from trainer.run import checkpoint
    from trainer.run.device import check_device, set_threads
    from trainer.fan.evaluate import evaluate_run, format_table
    run_dir = Path(args.run)
    if not (run_dir / "run.json").exists() and not (run_dir / "latest.json").exists():
        raise RaspError(f"{run_dir} does not exist" if not Path(run_dir).exists() else
                        f"{run_dir} is not a training run (no run.json)")
    if checkpoint.is_seq_run_dir(run_dir):
        return run_seq_eval(args)
    refuse_given(args, ("splits", "set", "n"),
                 "not used here (a Fan-task run is evaluated by length: --lengths, --samples, --stop)")
    run = checkpoint.read_run(run_dir)
    # a baseline of fixed depth has no step to choose: its one depth is the "oracle" file
    args.stop = args.stop or (DEFAULT_RULE if get_model_spec(run["model"]).adaptive else "oracle")
    if args.threshold is not None and args.stop != "threshold":     # it would change nothing
        raise RaspError(f"--threshold: only with --stop threshold (this evaluation's rule is {args.stop})")
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
    if args.samples < 1 or args.batch_size < 1:
        raise RaspError("--samples and --batch-size must be positive")
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
