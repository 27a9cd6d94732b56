"""`rasp` command line: run, check, graph, compile, train, eval.

Every user error prints located text on stderr and exits with status 2;
no Python traceback is ever shown (set RASP_DEBUG=1 to see one for a crash).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .errors import RaspError, RaspInputError

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with a one-line error (its default already does)."""


def _add_limits(p):
    p.add_argument("--max-len", type=int, default=None, metavar="N",
                   help="longest input accepted (default 8192 tokens)")
    p.add_argument("--max-steps", type=int, default=None, metavar="N",
                   help="most iterations any loop may run per input (default 10000)")
    p.add_argument("--max-work", type=int, default=None, metavar="N",
                   help="most element operations one input may cost, all loops together "
                        "(default 10**10)")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rasp", description="n-RASP-L: run, check, draw, compile and train programs")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a program (or a compiled model directory) on inputs")
    run.add_argument("program", help="PROGRAM.rasp, or a directory written by `rasp compile`")
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help='one input, tokens separated by spaces, e.g. "1 0 1 > # #"')
    source.add_argument("--inputs", metavar="FILE", help="a file with one input per line ('-' for stdin)")
    run.add_argument("--trace", action="store_true", help="print every variable per statement and loop step")
    run.add_argument("--param", action="append", default=[], metavar="NAME=INT", help="override a param")
    run.add_argument("--steps", type=int, default=None, help="compiled models: loop iterations to run")
    _add_limits(run)

    check = sub.add_parser("check", help="check a program without running it")
    check.add_argument("program", help="PROGRAM.rasp")
    check.add_argument("--strict", action="store_true", help="RASP-L discipline warnings become errors")

    graph = sub.add_parser("graph", help="draw the dataflow graph (or a compiled model's layers)")
    graph.add_argument("program", help="PROGRAM.rasp or a compiled model directory")
    graph.add_argument("-o", "--output", required=True, help="out.svg / out.png / out.pdf / out.dot")

    compile_ = sub.add_parser("compile", help="compile a program into looped transformer weights")
    compile_.add_argument("program", help="PROGRAM.rasp")
    compile_.add_argument("--to", default="torch", choices=["torch"],
                          help="target: PyTorch weights of a looped transformer (the only one, the default)")
    compile_.add_argument("--max-len", type=int, default=64, help="compile-time length (default 64)")
    compile_.add_argument("--steps", type=int, default=None, help="fixed loop count instead of the params")
    compile_.add_argument("--no-clock", action="store_true",
                          help="leave out the halting clock (the output margin that peaks at step T(n), "
                               "so that confidence stopping finds T)")
    compile_.add_argument("-o", "--output", metavar="DIR",
                          help="directory to write (config.json, model.safetensors, program.rasp); "
                               "without it only --report is printed and nothing is saved")
    compile_.add_argument("--report", action="store_true", help="print layers, heads, widths, parameters, time")

    from . import help as help_cmd
    help_cmd.add_arguments(sub.add_parser("help", help="the reference entry of a builtin, library "
                                          "function or statement (all names without NAME)"))

    try:
        from trainer import cli as trainer_cli
    except ImportError:  # the trainer is optional for the language itself
        trainer_cli = None
    if trainer_cli is not None:
        trainer_cli.add_train_args(sub.add_parser("train", help="train a looped transformer on a task"))
        trainer_cli.add_eval_args(sub.add_parser("eval", help="evaluate a training run"))
    return parser


# ---- commands -------------------------------------------------------------------

from .inputs import parse_params as _params  # noqa: E402


def _read_inputs(args):
    """[(line number or None, text)]"""
    from .inputs import read_inputs
    return read_inputs(args.input, args.inputs)[1]


def _limits(args):
    from .program import RunLimits
    limits = RunLimits()
    if getattr(args, "max_len", None) is not None:
        limits.max_len = args.max_len
    if getattr(args, "max_steps", None) is not None:
        limits.max_steps = args.max_steps
    if getattr(args, "max_work", None) is not None:
        limits.max_work = args.max_work
    return limits


def cmd_run(args) -> int:
    from .program import load
    if Path(args.program).is_dir():
        from compiler import cli_run_compiled
        return cli_run_compiled(args)
    program = load(args.program)
    _print_warnings(program.warnings)
    where = args.inputs if args.inputs is not None else "input"
    batch = [program.parse_input(text, line, where) for line, text in _read_inputs(args)]
    result = program.run_batch(batch, _params(args.param), trace=args.trace, limits=_limits(args),
                               where=where)
    if args.trace:
        from .trace import format_trace
        print(format_trace(program.ir, result))
    out = sys.stdout
    for values in result.outputs:
        out.write(program.format_output(values) + "\n")
    return 0


def _print_warnings(warnings):
    for w in warnings:
        print(w.format(), file=sys.stderr)


def cmd_check(args) -> int:
    from .program import load
    program = load(args.program)
    if args.strict and program.warnings:
        for w in program.warnings:
            print(RaspError(w.message, w.loc, w.source).format(), file=sys.stderr)
        return EXIT_USAGE
    _print_warnings(program.warnings)
    ir = program.ir
    n_loops = len(ir.loops)
    print(f"{args.program}: ok ({n_loops} loop{'s' * (n_loops != 1)}, {len(ir.params)} param"
          f"{'s' * (len(ir.params) != 1)}, {len(program.warnings)} warning{'s' * (len(program.warnings) != 1)})")
    return 0


def cmd_graph(args) -> int:
    if Path(args.program).is_dir():
        from compiler import cli_graph_compiled
        return cli_graph_compiled(args)
    from .draw import draw_program
    from .program import load
    program = load(args.program)
    print(draw_program(program.ir, args.output))
    return 0


def cmd_compile(args) -> int:
    from compiler import cli_compile
    return cli_compile(args)


def cmd_help(args) -> int:
    from . import help as help_cmd
    return help_cmd.run(args)


def cmd_train(args) -> int:
    from trainer import cli as trainer_cli
    return trainer_cli.run_train(args) or 0


def cmd_eval(args) -> int:
    from trainer import cli as trainer_cli
    return trainer_cli.run_eval(args) or 0


COMMANDS = {"run": cmd_run, "check": cmd_check, "graph": cmd_graph, "compile": cmd_compile,
            "train": cmd_train, "eval": cmd_eval, "help": cmd_help}


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


def main(argv=None) -> int:
    parser = _build_parser()
    args = parser.parse_args(_glue_input_values(list(sys.argv[1:] if argv is None else argv)))
    try:
        status = COMMANDS[args.command](args)
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
