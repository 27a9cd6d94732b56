"""The `rasp compile`, `rasp run DIR` and `rasp graph DIR` commands (rasp/cli.py
names them in its command table: `add_arguments`/`run` for compile,
`run_compiled` and `graph_compiled` for a compiled model directory)."""
from __future__ import annotations

import sys

from rasp.inputs import parse_params, read_inputs
from rasp.errors import RaspError


def add_arguments(p):
    p.add_argument("program", help="PROGRAM.rasp")
    p.add_argument("--to", default="torch", choices=["torch"],
                   help="target: PyTorch weights of a looped transformer (the only one, the default)")
    p.add_argument("--max-len", type=int, default=64, help="compile-time length (default 64)")
    p.add_argument("--steps", type=int, default=None, help="fixed loop count instead of the params")
    p.add_argument("--no-clock", action="store_true",
                   help="leave out the halting clock (the output margin that peaks at step T(n), "
                        "so that confidence stopping finds T)")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="directory to write (config.json, model.safetensors, program.rasp, manifest.json); "
                        "without it only --report is printed and nothing is saved")
    p.add_argument("--report", action="store_true", help="print layers, heads, widths, parameters, time")


def run(args) -> int:
    """rasp compile"""
    from rasp.program import load
    from .compiled import compile_program
    if args.to != "torch":
        raise RaspError(f"unknown target {args.to!r} (only 'torch')")
    prog = load(args.program)
    for w in prog.warnings:
        print(w.format(), file=sys.stderr)
    cm = compile_program(prog, args.max_len, steps=args.steps, clock=not getattr(args, "no_clock", False))
    if not args.output and not args.report:
        raise RaspError(f"{args.program} compiles, but nothing was written: give -o DIR to save the model "
                        "(--report prints its layers)")
    if args.output:
        cm.save(args.output)
        from .validate import COMPILED_FILES
        # every file save() writes, from the one list the manifest and the loader use
        print(f"wrote {args.output}: {', '.join(COMPILED_FILES)}, manifest.json", file=sys.stderr)
    else:
        print("nothing was written (no -o DIR): only the report is printed", file=sys.stderr)
    if args.report:
        print(cm.report())
    return 0


def run_compiled(args) -> int:
    """rasp run DIR (options: rasp.commands.add_run_arguments)"""
    from rasp.options import refuse_flags, run_limits
    from .compiled import load_compiled
    refuse_flags(args, ("stop", "threshold", "device"), "for models trained by `rasp train` (a compiled model runs its "
                                              "program's loop count; --steps N to fix it)")
    cm = load_compiled(args.program)
    if getattr(args, "trace", False):
        raise RaspError("--trace is for programs; a compiled model has no named variables to trace")
    from .limits import check_steps_flag
    limits = run_limits(args)
    check_steps_flag(args.steps, limits.max_steps)
    if args.steps is not None:
        cm.fixed_steps = args.steps
    where, lines = read_inputs(args.input, args.inputs)
    batch = cm.checked_batch(lines, where, parse_params(args.param), limits, getattr(args, "max_work", None),
                             config_path=f"{args.program}/config.json")
    longer = cm.beyond_design(batch)
    if longer:
        print(f"warning: {cm.beyond_design_message(batch, longer)}", file=sys.stderr)
    outs = cm.run_batch(batch, parse_params(args.param), beyond_design="run")     # warned above
    for values in outs:
        sys.stdout.write(cm.program.format_output(values) + "\n")
    return 0


def graph_compiled(args) -> int:
    """rasp graph DIR"""
    from .compiled import load_compiled
    from .draw import draw_layers
    print(draw_layers(load_compiled(args.program), args.output))
    return 0


# the names compiler/__init__.py exports
cli_compile, cli_run_compiled, cli_graph_compiled = run, run_compiled, graph_compiled
