"""`rasp` command line: run, check, graph, compile, help, train, eval, data, export, compare.

The subcommands live in their own modules, named in COMMANDS (as pip does);
a module is imported only when its subcommand runs, so `rasp run x.rasp`,
`rasp check`, `rasp graph` and `rasp --help` never load PyTorch, the
compiler or the trainer.  This package imports nothing above it: those
packages are reached by module *name* through importlib.

Every user error prints located text on stderr and exits with status 2;
no Python traceback is ever shown (set RASP_DEBUG=1 to see one for a crash).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import NamedTuple, Optional

from .errors import RaspError
from .options import ArgumentParser

EXIT_USAGE = 2


class Command(NamedTuple):
    """A subcommand: `module.<add>(parser)` registers its options and
    `module.<run>(args) -> int` runs it.  `on_directory` = (module, run) for
    when the PROGRAM argument is a compiled model directory."""
    module: str
    help: str
    add: str = "add_arguments"
    run: str = "run"
    on_directory: Optional[tuple] = None


COMMANDS = {
    "run": Command("rasp.commands", "run a program, a compiled or exported model, or a training run on inputs",
                   "add_run_arguments", "run_program", on_directory=("rasp.loaders", "run_directory")),
    "check": Command("rasp.commands", "check a program without running it", "add_check_arguments", "run_check"),
    "graph": Command("rasp.commands", "draw the dataflow graph (or a compiled model's layers)",
                     "add_graph_arguments", "run_graph", on_directory=("compiler.cli", "graph_compiled")),
    "compile": Command("compiler.cli", "compile a program into looped transformer weights"),
    "help": Command("rasp.help", "the reference entry of a builtin, library function or statement "
                                 "(all names without NAME)"),
    "train": Command("trainer.cli", "train a looped transformer on a task", "add_train_args", "run_train"),
    "eval": Command("trainer.cli", "evaluate a training run", "add_eval_args", "run_eval"),
    "data": Command("trainer.datacli", "write a comparison task's split as JSON lines, or print its statistics",
                    "add_data_args", "run_data"),
    "export": Command("trainer.trained.export", "write a training run's model as a self-contained directory with a "
                                        "model card", "add_export_args", "run_export"),
    "compare": Command("trainer.compare.cli", "run a comparison suite and report it beside the published numbers"),
}


def _function(module: str, name: str, command: str):
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as e:
        raise RaspError(f"`rasp {command}` is unavailable: {e}") from None


def _version() -> str:
    import rasp
    return rasp.__version__             # the distribution's, or pyproject.toml's in a checkout never installed


def _build_parser(chosen: Optional[str]) -> argparse.ArgumentParser:
    """Every subcommand is listed (for --help and for argparse's choice check),
    but only `chosen`'s module is imported to register its options."""
    parser = ArgumentParser(prog="rasp",
                                     description="n-RASP-L: run, check, draw, compile and train programs")
    parser.add_argument("--version", action="version", version=f"rasp {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.help)
        if name == chosen:
            _function(cmd.module, cmd.add, name)(p)
    return parser


def _glue_input_values(argv: list) -> list:
    """`--input "-1 0 > #"` would look like an option to argparse: glue it."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "--input" and i + 1 < len(argv):
            out.append(f"--input={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def _runner(args):
    cmd = COMMANDS[args.command]
    if cmd.on_directory and Path(args.program).is_dir():
        return _function(*cmd.on_directory, args.command)
    return _function(cmd.module, cmd.run, args.command)


def main(argv=None) -> int:
    argv = _glue_input_values(list(sys.argv[1:] if argv is None else argv))
    chosen = argv[0] if argv and argv[0] in COMMANDS else None
    try:
        parser = _build_parser(chosen)
    except RaspError as e:   # its module cannot be imported (e.g. no PyTorch)
        print(e.format(), file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    try:
        status = _runner(args)(args) or 0
    except RaspError as e:
        print(e.format(), file=sys.stderr)
        status = EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        status = 130
    except BrokenPipeError:
        status = 0
    except RecursionError:
        print("error: the program is nested too deeply to handle", file=sys.stderr)
        status = EXIT_USAGE
    except MemoryError:
        print("error: out of memory (try fewer or shorter inputs)", file=sys.stderr)
        status = EXIT_USAGE
    except Exception as e:  # a bug in rasp itself: say so briefly, no traceback
        if os.environ.get("RASP_DEBUG"):
            raise
        print(f"internal error: {type(e).__name__}: {e} (set RASP_DEBUG=1 for a traceback; please report)",
              file=sys.stderr)
        status = 1
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
