"""A run from its command line: which kind of run `rasp train ARGS` asks for
(a Fan task's, a program's or a comparison task's) and its config, fresh or
resumed.  trainer/cli.py parses the arguments and calls `train_kind`; bench
scripts and tests that start runs in-process call it too."""
from __future__ import annotations

from pathlib import Path

from rasp.errors import RaspError
from trainer.settings.hparams import HParams


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
        from trainer.tasks.program import program_record, task_of_record
        if args.task:
            raise RaspError(f"--task {args.task} and --program {args.program}: give one")
        program = program_record(args.program, args.score, args.inputs, args.eval_inputs)
        task = task_of_record(program)
    else:
        refuse_given(args, PROGRAM_FLAGS, "only with --program P.rasp")
    hp = fresh_hparams(args, task)
    return RunConfig(task=task.name if task else args.task, out=str(out), model=args.model, init=args.init,
                     compress=args.compress, compress_method=args.compress_method or "merge", preset=args.preset,
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


def train_kind(args):
    """The run `rasp train ARGS` asks for, as a kind of run of the one
    training loop (trainer/run/loop.py): a Fan task's or a comparison task's."""
    from trainer.settings.resolve import PROGRAM_FLAGS, is_seq_train, refuse_given
    from trainer.run.device import refuse_compile_off_cuda
    if is_seq_train(args):
        refuse_given(args, ("program",) + PROGRAM_FLAGS, "Fan-style runs only (a comparison task has its own data)")
        from trainer.benchmark.kind import SeqKind
        cfg = seq_run_config(args)
        refuse_compile_off_cuda(cfg.hp, cfg.device, getattr(args, "compile", None) is not None)
        return SeqKind(cfg)
    if args.set or args.data:
        raise RaspError("--set/--data are for comparison tasks; Fan tasks take the hyper-parameter flags")
    from trainer.fan.kind import FanKind
    cfg = config_from_args(args)
    refuse_compile_off_cuda(cfg.hp, cfg.device, getattr(args, "compile", None) is not None)
    return FanKind(cfg)
