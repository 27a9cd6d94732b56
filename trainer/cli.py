"""Command-line entry points for `rasp train` and `rasp eval`.

rasp/cli.py names them in its command table (imported only when they run):

    rasp train: trainer.cli.add_train_args(parser), trainer.cli.run_train(args)
    rasp eval:  trainer.cli.add_eval_args(parser),  trainer.cli.run_eval(args)

`python -m trainer train|eval|compare ...` does the same without the front end's CLI
(and is what `torchrun --nproc_per_node K -m trainer train ...` runs).
User errors raise `rasp.errors.RaspError`.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from rasp.errors import RaspError
from rasp.options import ArgumentParser
from trainer.models import MODELS, get_model_spec
from trainer.settings.hparams import HParams
from trainer.fan.presets import PRESETS, make_hparams
from trainer.benchmark.presets import parse_set
from trainer.fan.stopping import DEFAULT_RULE, RULE_HELP, RULES
from trainer.tasks import TASKS, get_task, parse_lengths
from trainer.settings import validate

# CLI flag -> HParams field (None = not given, keep the preset's value)
_HP_FLAGS = validate.HP_FLAG_TYPES     # each with its range (trainer/settings/validate.py)

SMALL_CPU = 4   # cores; at most this many: one torch thread per process by default


def add_threads_arg(p: argparse.ArgumentParser):
    p.add_argument("--threads", type=validate.THREADS, default=None, metavar="N",
                   help=f"torch CPU threads (default: 1 on machines with <= {SMALL_CPU} cores, where a second "
                        f"thread made small models up to 25x slower when another process ran; else torch's)")


def set_threads(requested) -> str:
    """Apply --threads (or the default) and say what was chosen and why."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if requested is not None:                 # in 1..MAX_THREADS (its argparse type)
        n, why = requested, "--threads"
    elif os.environ.get("OMP_NUM_THREADS"):
        n, why = torch.get_num_threads(), "OMP_NUM_THREADS"
    elif cores <= SMALL_CPU:
        n, why = 1, f"the default with {cores} cores (<= {SMALL_CPU}); --threads N to change"
    else:
        n, why = torch.get_num_threads(), f"torch's default with {cores} cores; --threads N to change"
    torch.set_num_threads(n)
    return f"threads: {n} ({why})"


def catalogue() -> str:
    """Every task and model `rasp train` knows, a line each (the --help epilog)."""
    from trainer.registry import COMPARISON, FAN
    from trainer.tasks.base import SeqTask

    def block(title, rows):
        width = max(len(name) for name, _ in rows) + 2
        return f"{title}:\n" + "\n".join(f"  {name:<{width}}{text}" for name, text in rows)
    fan = [(n, t.description) for n, t in TASKS.items() if not isinstance(t, SeqTask)]
    seq = [(n, t.description) for n, t in TASKS.items() if isinstance(t, SeqTask)]
    return "\n\n".join([
        block("Fan et al.'s tasks (a looped transformer and its baselines: --model below)", fan),
        block("models for Fan et al.'s tasks", [(n, m.specs[FAN].description) for n, m in MODELS.items()
                                                 if m.serves(FAN)]),
        block("comparison tasks (docs: trainer/README.md)", seq),
        block("models for the comparison tasks (--set KEY=VALUE sets their options)",
              [(n, m.specs[COMPARISON].description) for n, m in MODELS.items() if m.serves(COMPARISON)])])


class Given(argparse.Action):
    """Stores the value and notes that the flag was given (`args.given`), so
    a setting that a run already has can be told from a default."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.given = getattr(namespace, "given", frozenset()) | {self.dest}


# what names a run (run.json), and so cannot change on --resume
RUN_SETTINGS = ("task", "model", "init", "compress", "compress_method", "preset", "data")


def refuse_changed_run(args, run: dict):
    """--resume with a run-level flag that names something else than the run is."""
    given = getattr(args, "given", frozenset())
    changed = [k for k in RUN_SETTINGS if k in given and getattr(args, k) != run.get(k)
               and not (k == "data" and run.get(k) and Path(args.data).resolve() == Path(run[k]))]
    if changed:
        raise RaspError("--resume: " + ", ".join(f"--{k.replace('_', '-')} {getattr(args, k)} (the run has "
                                                 f"{run.get(k)})" for k in changed)
                        + "; a resumed run keeps what it is: leave them out, or start a new run with another --out")


def add_train_args(p: argparse.ArgumentParser):
    from trainer.run import explog
    from trainer.settings import trainhelp
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.usage = "%(prog)s --task TASK --out DIR [--model MODEL] [--preset {paper,cpu}] [options]"
    p.epilog = trainhelp.RECIPE_NOTE + "\n\n" + catalogue()
    p.add_argument("--task", action=Given, help="the task (listed below)")
    p.add_argument("--model", action=Given, default="looped", help="the model (listed below; default looped)")
    p.add_argument("--out", required=True, metavar="DIR", help="the run directory (created; --resume continues it)")
    p.add_argument("--preset", action=Given, default="cpu", choices=list(PRESETS),
                   help="the recipe: cpu (minutes on 2 cores) or paper (the papers' sizes and steps); default cpu")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    p.add_argument("--log", action="append", default=[], choices=list(explog.LOGGERS),
                   help=f"also log the metrics to {', '.join(explog.LOGGERS)} in DIR/ (pip install -e '.[log]'); "
                        "repeatable")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto (default cpu)")
    add_threads_arg(p)
    p.add_argument("--max-wall", type=validate.MAX_WALL, default=None, metavar="SECONDS",
                   help="stop after this many seconds, checkpointed (--resume goes on)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (there is none anyway when stderr is not a terminal)")
    start = p.add_argument_group("the starting weights")
    start.add_argument("--init", action=Given, default="random", choices=["random", "compiled"],
                       help="random, or compiled from the task's RASP program (exact before training); default random")
    start.add_argument("--compress", action=Given, type=validate.COMPRESS, default=None, metavar="D",
                       help="with --init compiled: project the compiled model into width D")
    start.add_argument("--compress-method", action=Given, default="merge", choices=["merge", "pca", "random"],
                       help="with --compress: merge (share coordinates between dims that are never live together, "
                            "exact, then PCA below that width), pca or random; default merge")
    start.add_argument("--guard", default="auto", choices=["auto", "on", "off"],
                       help="reject steps that raise the batch loss or break the guard sample "
                            "(auto: on for --init compiled)")
    start.add_argument("--freeze-fragile", default="auto", choices=["auto", "on", "off"],
                       help="freeze the compiled start's length-fragile tensors (auto: on for --init compiled)")
    seq = p.add_argument_group("comparison tasks")
    seq.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="any hyper-parameter or model option (EncoderConfig.extra), repeatable")
    seq.add_argument("--data", action=Given, default=None, metavar="FILE.jsonl",
                     help="train on this file (from `rasp data`) instead of generating online")
    trainhelp.add_recipe_flags(p, _HP_FLAGS, SHARED_FLAGS)
    return p


def is_seq_train(args) -> bool:
    """Does this `rasp train` run a comparison task (trainer/benchmark/kind.py)?"""
    from trainer.run import checkpoint
    from trainer.tasks.base import SeqTask
    if args.resume and checkpoint.is_seq_run_dir(args.out):
        return True
    return bool(args.task) and isinstance(TASKS.get(args.task), SeqTask)


def check_device(name: str) -> str:
    """--device, checked: cpu, cuda[:N] (when there is one) or auto."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RaspError("--device cuda: no CUDA device is available")
    if not (name == "cpu" or name.startswith("cuda")):
        raise RaspError(f"unknown --device {name!r} (cpu, cuda or auto)")
    return name


def config_from_args(args):
    from trainer.run import checkpoint          # here, not at the top: it loads the compiler's file checks
    from trainer.fan.kind import RunConfig
    out = Path(args.out)
    if args.resume and checkpoint.has_run(out):
        # A resumed run keeps its own settings (only --steps may extend it).
        run = checkpoint.read_checked_run(out)     # an edited run.json is refused
        refuse_changed_run(args, run)
        hp = checkpoint.resumed_hparams(HParams.from_dict(run["hparams"]), fan_flags(args))
        return RunConfig(task=run["task"], out=str(out), model=run["model"], init=run["init"],
                         compress=run.get("compress"), compress_method=run.get("compress_method", "pca"),
                         preset=run["preset"], device=check_device(args.device), hp=hp, resume=True,
                         progress=not args.no_progress, max_wall=args.max_wall)
    hp = fresh_hparams(args)
    if "compress_method" in getattr(args, "given", ()) and args.compress is None:
        raise RaspError("--compress-method: not used without --compress D")
    return RunConfig(task=args.task, out=str(out), model=args.model, init=args.init,
                     compress=args.compress, compress_method=args.compress_method, preset=args.preset,
                     device=check_device(args.device), hp=hp, resume=args.resume,
                     progress=not args.no_progress, max_wall=args.max_wall)


def fresh_hparams(args) -> HParams:
    """The hyper-parameters a new Fan-task run of these arguments trains with."""
    if not args.task:
        raise RaspError("--task is required (one of: " + ", ".join(TASKS) + ")")
    task = get_task(args.task)
    get_model_spec(args.model)      # a user error naming the models of Fan et al.'s tasks
    if args.freeze_fragile == "on" and args.init != "compiled":
        raise RaspError("--freeze-fragile on: only a compiled start (--init compiled) has length-fragile tensors")
    return make_hparams(args.preset, task, args.init, **fan_flags(args))


def fan_flags(args) -> dict:
    """The hyper-parameters given as flags (None: not given)."""
    given = {k: getattr(args, k, None) for k in _HP_FLAGS}
    # the descent guard keeps a compiled start exact (trainer/run/guard.py)
    given["guard"] = on_off(args.guard)
    given["freeze_fragile"] = on_off(args.freeze_fragile)
    return given


def on_off(value: str):
    """--guard / --freeze-fragile: on, off, or auto (None: the preset decides)."""
    return {"on": True, "off": False}.get(value)


def planned_hparams(train_argv: list) -> dict:
    """The hyper-parameters `python -m trainer train TRAIN_ARGV` would give a
    new run, without training (`rasp compare` checks a finished run against
    them: a preset edited since the run makes it stale).  RaspError if the
    arguments are wrong."""
    parser = ArgumentParser(prog="python -m trainer train", add_help=False)
    add_train_args(parser)
    try:
        args = parser.parse_args(train_argv)
    except SystemExit:
        raise RaspError(f"cannot parse the train arguments {' '.join(train_argv)}") from None
    args.resume = False
    if is_seq_train(args):
        return seq_hparams(args).to_dict()
    return fresh_hparams(args).to_dict()


# ---- comparison-task runs -------------------------------------------------------------

# Fan-trainer flags that mean the same for a comparison run (others are refused)
SHARED_FLAGS = ("steps", "batch_size", "lr", "weight_decay", "warmup", "d_model", "n_layer", "n_head", "grad_clip",
                "ckpt_every", "log_every", "eval_every", "eval_samples", "seed")


def _refuse_fan_only(args):
    refuse_given(args, [k for k in _HP_FLAGS if k not in SHARED_FLAGS] + ["compress", "freeze_fragile"],
                 "Fan-task options, not used by comparison tasks (set model settings with --set KEY=VALUE)")


def seq_flags(args, sets=None) -> dict:
    """The hyper-parameters given as flags (None: not given), and --set's."""
    return {k: getattr(args, k, None) for k in SHARED_FLAGS} | {"guard": on_off(getattr(args, "guard", "auto"))} \
        | (sets or {})


def seq_hparams(args):
    """The hyper-parameters a new comparison run of these arguments trains with."""
    from trainer.models import get_encoder_spec
    from trainer.benchmark.presets import make_seq_hparams
    from trainer.benchmark.kind import seq_task
    _refuse_fan_only(args)
    task, init = seq_task(args.task), getattr(args, "init", "random")
    if init == "compiled" and args.model != "looped":
        raise RaspError(f"--init compiled builds the looped model; --model {args.model} has no compiled form")
    spec = get_encoder_spec(args.model)
    hp = make_seq_hparams(args.preset, task, spec, seq_flags(args), parse_set(args.set), init)
    if init == "compiled":
        from trainer.benchmark.compiled import resolve_hparams
        resolve_hparams(task, hp)
    return hp


def seq_run_config(args):
    """The SeqRunConfig of `rasp train ARGS` on a comparison task (a resumed
    run keeps its own settings; --steps may extend it)."""
    from trainer.run import checkpoint
    from trainer.benchmark.kind import SeqRunConfig, seq_task
    out = Path(args.out)
    if args.resume and checkpoint.has_run(out):
        _refuse_fan_only(args)                # (a new run's seq_hparams refuses them too)
        run = checkpoint.read_checked_run(out)         # a resumed run keeps its settings; --steps may extend it
        refuse_changed_run(args, run)
        hp = checkpoint.resumed_hparams(HParams.from_dict(run["hparams"], "seq"), seq_flags(args, parse_set(args.set)))
        return SeqRunConfig(run["task"], run["model"], str(out), run["preset"], hp.validate(), run.get("data"),
                            check_device(args.device), True, not args.no_progress, args.max_wall,
                            run.get("init", "random"))
    task = seq_task(args.task)
    hp = seq_hparams(args)
    if args.data and not Path(args.data).is_file():
        raise RaspError(f"--data {args.data}: no such file")
    return SeqRunConfig(task.name, args.model, str(out), args.preset, hp,
                        str(Path(args.data).resolve()) if args.data else None, check_device(args.device),
                        args.resume, not args.no_progress, args.max_wall, args.init)


def run_seq_eval(args) -> int:
    from trainer.cli import check_device, set_threads
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
    if is_seq_train(args):
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


def refuse_given(args, names, reason: str):
    """Refuse the flags among `names` that were given (None, [], False and
    "auto" are their not-given defaults): they do not apply to this run."""
    given = [("-n" if k == "n" else "--" + k.replace("_", "-")) for k in names if getattr(args, k, None)
             not in (None, [], False, "auto")]
    if given:
        raise RaspError(f"{', '.join(given)}: {reason}")


def add_eval_args(p: argparse.ArgumentParser):
    p.add_argument("run", help="run directory written by `rasp train`")
    p.add_argument("--lengths", default=None, help="e.g. 1:40, 5,10,20 or 1:40:3 (default 1:2x training)")
    p.add_argument("--stop", default=None, choices=list(RULES),
                   help=f"Fan-task runs: when the loop stops (default {DEFAULT_RULE}; oracle for fixed-depth "
                        "baselines): " + "; ".join(f"{k}: {v}" for k, v in RULE_HELP.items()))
    p.add_argument("--threshold", type=validate.THRESHOLD, default=None,
                   help="--stop threshold: confidence CE to exit at (default 0.01)")
    p.add_argument("--samples", type=validate.EVAL_SAMPLES, default=None,
                   help="Fan-task runs: test inputs per length (default 256)")
    p.add_argument("--batch-size", type=validate.EVAL_BATCH, default=128)
    p.add_argument("--seed", type=validate.SEED, default=1234)
    p.add_argument("--max-len", type=validate.EVAL_MAX_LEN, default=None, metavar="N",
                   help="longest --lengths accepted (default: 4x the training range, at least the task's "
                        "test length)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", type=validate.out_file, default=None, help="where to write the results (default RUN/eval_STOP.json)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--splits", default=None, help="comparison runs: splits to evaluate, e.g. test,ood (default all)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="comparison runs: test-time model options (iteration caps, tolerances)")
    p.add_argument("-n", type=validate.EVAL_EXAMPLES, default=None,
                   help="comparison runs: examples per split (default up to 1000)")
    add_threads_arg(p)
    return p


def run_eval(args) -> int:
    from trainer.run import checkpoint
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
    args.threshold = 0.01 if args.threshold is None else args.threshold
    args.samples = 256 if args.samples is None else args.samples
    train_max = run["hparams"].get("max_train_n", 1)
    if args.lengths is None:
        lengths = list(range(1, 2 * train_max + 1))
    else:
        limit = args.max_len or validate.eval_length_limit(get_task(run["task"]), train_max)
        validate.check_eval_lengths(args.lengths, limit, train_max)
        lengths = parse_lengths(args.lengths)
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
