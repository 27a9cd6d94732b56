"""The interpreter's subcommands: `rasp run`, `rasp check`, `rasp graph` on a
.rasp file.  Each has `add_*_arguments(parser)` and `run_*(args) -> int`;
rasp/cli.py finds them by name in its command table.

Nothing here imports above the language package: `rasp run DIR` and
`rasp graph DIR` (compiled models) are routed to compiler.cli by the table.
The option sets of `run` and `graph` are shared with those directory forms;
both read --param and --input/--inputs through rasp.inputs.
"""
from __future__ import annotations

import sys

from .errors import RaspError
from .inputs import parse_params, read_inputs
from .options import refuse_flags, run_limits
from .stop import CALIBRATED, DEFAULT_RULE, THRESHOLD, rules_text

EXIT_USAGE = 2


def _print_warnings(warnings):
    for w in warnings:
        print(w.format(), file=sys.stderr)


# ---- rasp run -------------------------------------------------------------------

def add_run_arguments(p):
    p.add_argument("program", help="PROGRAM.rasp, or a directory: a compiled model (`rasp compile`), a training "
                                   "run (`rasp train`) or an exported model (`rasp export`)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help='one input, tokens separated by spaces, e.g. "1 0 1 > # #"')
    source.add_argument("--inputs", metavar="FILE", help="a file with one input per line ('-' for stdin; a pipe such as <(generate) too)")
    p.add_argument("--trace", action="store_true", help="print every variable per statement and loop step")
    p.add_argument("--param", action="append", default=[], metavar="NAME=INT", help="override a param")
    p.add_argument("--steps", type=int, default=None, help="compiled models: loop iterations to run")
    p.add_argument("--stop", default=None, metavar="RULE",
                   help=f"trained looped models (Fan et al.'s tasks): when to stop looping: {rules_text()} "
                        f"(default {DEFAULT_RULE}; `rasp eval --help` says what each does; {' and '.join(CALIBRATED)} "
                        "use the fit saved in the run or export, made once when missing)")
    p.add_argument("--threshold", type=float, default=None, metavar="CE",
                   help=f"--stop threshold: the confidence cross-entropy to stop at (default {THRESHOLD:g})")
    p.add_argument("--device", default=None,
                   help="trained models: where the model runs: cpu, cuda[:N] or auto (cuda where there is one; "
                        "default cpu)")
    p.add_argument("--max-len", type=int, default=None, metavar="N",
                   help="longest input accepted (default 8192 tokens)")
    p.add_argument("--max-steps", type=int, default=None, metavar="N",
                   help="most iterations any loop may run per input (default 10000)")
    p.add_argument("--max-work", type=int, default=None, metavar="N",
                   help="most element operations one input may cost, all loops together "
                        "(default 10**10)")


def run_program(args) -> int:
    from .program import load
    refuse_flags(args, ("stop", "threshold", "device"), "for models trained by `rasp train` (a program runs its own "
                                                        "loops)")
    program = load(args.program)
    _print_warnings(program.warnings)
    where, lines = read_inputs(args.input, args.inputs)
    batch = [program.parse_input(text, line, where) for line, text in lines]
    result = program.run_batch(batch, parse_params(args.param), trace=args.trace, limits=run_limits(args),
                               where=where)
    if args.trace:
        from .trace import format_trace
        print(format_trace(program.ir, result))
    sys.stdout.write("".join(program.format_output(values) + "\n" for values in result.outputs))
    return 0


# ---- rasp check -----------------------------------------------------------------

def add_check_arguments(p):
    p.add_argument("program", help="PROGRAM.rasp")
    p.add_argument("--strict", action="store_true", help="RASP-L discipline warnings become errors")


def run_check(args) -> int:
    from .program import load
    program = load(args.program)
    if args.strict and program.warnings:
        for w in program.warnings:
            print(RaspError(w.message, w.loc, w.source).format(), file=sys.stderr)
        return EXIT_USAGE
    _print_warnings(program.warnings)
    ir = program.ir
    n_loops, n_params, n_warn = len(ir.loops), len(ir.params), len(program.warnings)
    print(f"{args.program}: ok ({n_loops} loop{'s' * (n_loops != 1)}, {n_params} param"
          f"{'s' * (n_params != 1)}, {n_warn} warning{'s' * (n_warn != 1)})")
    return 0


# ---- rasp graph -----------------------------------------------------------------

def add_graph_arguments(p):
    p.add_argument("program", help="PROGRAM.rasp or a compiled model directory")
    p.add_argument("-o", "--output", required=True, help="out.svg / out.png / out.pdf / out.dot")


def run_graph(args) -> int:
    from .draw import draw_program
    from .program import load
    program = load(args.program)
    print(draw_program(program.ir, args.output))
    return 0
