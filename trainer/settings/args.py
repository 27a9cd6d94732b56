"""The arguments of `rasp train` and `rasp eval`, from torch-free tables
(the fields' Settings, the presets' values, the task and stopping-rule
names), so that a mistyped flag is refused as fast as one of `rasp run`:
torch is imported only once the arguments are parsed.

`rasp train --help` shows the common flags (TRAIN_COMMON) and the tasks and
models by name (trainer/registry.py's tables: no torch), so it appears at
once; `--help-all` shows every flag in its group and a line on each task and
model, an epilog built only then (the models' lines import torch)."""
from __future__ import annotations

import argparse
import textwrap

from rasp.stop import DEFAULT_RULE, RULE_HELP, RULES, THRESHOLD
from trainer.run import explog
from trainer.registry import COMPARISON, FAN, MODEL_NAMES, TASK_NAMES
from trainer.run.device import SMALL_CPU
from trainer.settings import evaluation, runfile, trainhelp, validate
from trainer.settings.hparams import DEFAULT_RECIPE, PRESET_NAMES, RECIPE_NAMES


def add_threads_arg(p: argparse.ArgumentParser):
    p.add_argument("--threads", type=validate.THREADS, default=None, metavar="N",
                   help=f"torch CPU threads (default: 1 on machines with <= {SMALL_CPU} cores, where a second "
                        f"thread made small models up to 25x slower when another process ran; else torch's)")


# the flags `rasp train --help` shows, in this order (--help-all: every flag, in groups)
TRAIN_COMMON = ("--task", "--program", "--model", "--out", "--preset", "--recipe", "--init", "--resume", "--config",
                "--steps", "--d-model", "--seed", "--set", "--device", "--threads", "--max-wall")

# what each --recipe value does (--help-all lists them below the groups)
RECIPE_HELP = {
    "clock": "a looped network of its own (one block 32 wide, taught on every 6th step), with a BOS position "
             "and attention to the two positions before each (one head a running maximum over every earlier "
             "position where the loop's count depends on the content, then taught on every step), taught at every "
             "position the step from which the program's loop no longer waits on it (docs/tasks.md), beside an "
             "answering model trained as fan's",
    "marker": "a 'done' unit taught at every position whether a marker moved one position per step has passed "
              "it; --stop head reads it",
    "halting": "the answer at T(n) and the steps after it, no commitment before T(n); a confidence threshold "
               "stops each input",
    "fan": "Fan et al.'s loss at T(n) only",
}


def entries(title: str, rows: dict) -> str:
    """A titled block of `  name  text` entries, the text wrapped under itself."""
    width = max(map(len, rows)) + 2
    return f"{title}:\n" + "\n".join(
        textwrap.fill(text, 100, initial_indent=f"  {name:<{width}}", subsequent_indent=" " * (width + 2))
        for name, text in rows.items())


def names_epilog() -> str:
    """The end of `rasp train --help`: the tasks and models by name, and where the rest is."""
    def names(title, items):
        return textwrap.fill(f"{title}: {', '.join(items)}", 100, subsequent_indent="    ")
    return "\n".join([
        names("Fan et al.'s tasks (--task)", TASK_NAMES[FAN]), names("  their models (--model)", MODEL_NAMES[FAN]),
        names("comparison tasks (--task)", TASK_NAMES[COMPARISON]),
        names("  their models (--model)", MODEL_NAMES[COMPARISON]), "",
        textwrap.fill("The defaults shown are the cpu preset's for Fan et al.'s tasks.  Every flag in its group "
                      "(model size, optimiser, curriculum, recipe switches, halting, ...) and a line on each "
                      "recipe, task and model: %(prog)s --help-all", 100)])


def catalogue() -> str:
    """Every task and model `rasp train` knows, a line each (the --help-all epilog)."""
    from trainer.models import MODELS
    from trainer.tasks import TASKS
    from trainer.tasks.base import SeqTask

    fan = {n: t.description for n, t in TASKS.items() if not isinstance(t, SeqTask)}
    seq = {n: t.description for n, t in TASKS.items() if isinstance(t, SeqTask)}
    return "\n\n".join([
        entries("Fan et al.'s tasks (a looped transformer and its baselines: --model below)", fan),
        entries("models for Fan et al.'s tasks", {n: m.specs[FAN].description for n, m in MODELS.items()
                                                   if m.serves(FAN)}),
        entries("comparison tasks (docs: trainer/README.md)", seq),
        entries("models for the comparison tasks (--set KEY=VALUE sets their options)",
                {n: m.specs[COMPARISON].description for n, m in MODELS.items() if m.serves(COMPARISON)})])


def score_type(text: str) -> str:
    """--score: all, last or after:TOKEN (the token is checked against the program later)."""
    if text in ("all", "last") or (text.startswith("after:") and len(text) > 6 and " " not in text):
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: all, last or after:TOKEN (e.g. after:>)")


class Given(argparse.Action):
    """Stores the value and notes that the flag was given (`args.given`), so
    a setting that a run already has can be told from a default."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.given = getattr(namespace, "given", frozenset()) | {self.dest}


def add_train_args(p: argparse.ArgumentParser):
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.usage = ("%(prog)s (--task TASK | --program P.rasp) --out DIR [--model MODEL] [--preset {paper,cpu}] "
               "[options]")
    # rasp.options: built for --help-all only
    p.epilog = lambda: "\n\n".join([trainhelp.RECIPE_NOTE, entries("recipes (--recipe)", RECIPE_HELP), catalogue()])
    p.add_argument("--task", action=Given, help="the task (listed below)")
    prog = p.add_argument_group("training on a program of your own (docs/tutorial.md)")
    prog.add_argument("--program", action=Given, default=None, metavar="P.rasp",
                      help="train on this program instead of a --task: targets and the loop count T(n) from the "
                           "interpreter, inputs from its `sample` statement or --inputs")
    prog.add_argument("--inputs", action=Given, default=None, metavar="FILE",
                      help="with --program: the training inputs, one a line (default: the program's `sample`)")
    prog.add_argument("--eval-inputs", action=Given, default=None, metavar="FILE",
                      help="with --inputs: held-out inputs for evaluation (default: the --inputs file, whose sizes "
                           "above --max-train-n are never trained on)")
    prog.add_argument("--score", action=Given, type=score_type, default=None, metavar="all|last|after:TOKEN",
                      help="with --program: the scored positions (default after:> when the program has '>', "
                           "else all)")
    p.add_argument("--model", action=Given, default="looped", help="the model (listed below; default looped)")
    p.add_argument("--out", required=True, type=validate.out_dir, metavar="DIR",
                   help="the run directory (created; --resume continues it)")
    p.add_argument("--preset", action=Given, default="cpu", choices=list(PRESET_NAMES),
                   help="the recipe: cpu (parity: 122 s on 2 idle cores) or paper (the papers' sizes and steps); default cpu")
    p.add_argument("--recipe", action=Given, default=None, choices=list(RECIPE_NAMES),
                   help=f"how a looped model learns when it is done (--help-all says what each does); "
                        f"default {DEFAULT_RECIPE}")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    runfile.add_config(p)
    p.add_argument("--log", action="append", default=[], choices=list(explog.LOGGERS),
                   help=f"also log the metrics to {', '.join(explog.LOGGERS)} in DIR/ (pip install -e '.[log]'); "
                        "repeatable")
    p.add_argument("--device", default="auto",
                   help="cpu, cuda[:N] or auto (default: cuda where there is one, else cpu; run.json records which)")
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
    start.add_argument("--compress-method", action=Given, default=None, choices=["merge", "pca", "random"],
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
    trainhelp.add_recipe_flags(p)
    p.split_help(TRAIN_COMMON, names_epilog)
    return p


def rules_epilog() -> str:
    """The stopping rules, one entry each (the --help epilog of `rasp eval`)."""
    return entries("stopping rules (--stop; trainer/README.md)", {r: RULE_HELP[r] for r in RULES})


def add_eval_args(p: argparse.ArgumentParser):
    # grouped as `rasp train --help` is: the flags of Fan-task runs, of comparison runs, and of both
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = rules_epilog()
    p.add_argument("run", help="run directory written by `rasp train`")
    fan = p.add_argument_group("Fan-task runs (parity, copy, addition, ...)")
    fan.add_argument("--lengths", default=None,
                     help="lengths to test, e.g. 1:40, 5,10,20 or 1:40:3 (default 1 to 2x the training range)")
    fan.add_argument("--stop", default=None, choices=list(RULES), metavar="RULE",
                     help=f"when the loop stops: {', '.join(RULES)} (listed below; default {DEFAULT_RULE}, "
                          "oracle for fixed-depth baselines)")
    fan.add_argument("--threshold", type=validate.THRESHOLD, default=None, metavar="CE",
                     help=f"--stop threshold: confidence cross-entropy to exit at (default {THRESHOLD:g})")
    fan.add_argument("--samples", type=validate.EVAL_SAMPLES, default=None, metavar="N",
                     help=f"test inputs per length (default {evaluation.SAMPLES})")
    fan.add_argument("--max-len", type=validate.EVAL_MAX_LEN, default=None, metavar="N",
                     help="longest --lengths accepted (default: 4x the training range, at least the task's "
                          "test length)")
    seq = p.add_argument_group("comparison-task runs (flipflop, words_*, listops, ...)")
    seq.add_argument("--splits", default=None, help="splits to evaluate, e.g. test,ood (default: all)")
    seq.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="test-time model options (iteration caps, tolerances), repeatable (default: the run's)")
    seq.add_argument("-n", type=validate.EVAL_EXAMPLES, default=None,
                     help="examples per split (default: up to 1000)")
    common = p.add_argument_group("both kinds")
    common.add_argument("--batch-size", type=validate.EVAL_BATCH, default=evaluation.BATCH, metavar="N",
                        help=f"inputs evaluated together (default {evaluation.BATCH})")
    common.add_argument("--seed", type=validate.SEED, default=evaluation.SEED, metavar="S",
                        help=f"seed of the test inputs (default {evaluation.SEED})")
    common.add_argument("--device", default="auto", help="cpu, cuda[:N] or auto (default: cuda where there is one)")
    common.add_argument("--json", type=validate.out_file, default=None, metavar="FILE",
                        help="where to write the results (default RUN/eval_RULE.json; comparison runs RUN/eval.json)")
    common.add_argument("--no-plots", action="store_true", help="write no plots (default: plots beside the results)")
    common.add_argument("--no-progress", action="store_true", help="no progress bar (default: one on a terminal)")
    add_threads_arg(common)
    return p
