"""Execution traces: what `rasp run --trace` shows.

The interpreter records one `TraceEvent` per `Bind` it executes (a named
assignment from the source), at top level and at every step of every loop,
for the first input of the batch.  `format_trace` renders them as a plain
text table with one column per position, so it reads the same on a terminal
and in a pipe (no colour codes).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union, cast

from .ir import SCALAR, SELECTOR, Loc, ProgramIR


@dataclass
class TraceEvent:
    """`name` took `value` at source location `loc`.  `steps` holds the loop
    step numbers (1-based) of the enclosing loops, outermost first; () at top
    level.  `value` is a list of ints (s-op), an int (scalar), or a 0/1 matrix
    as a list of rows (selector, `value[q][k]`)."""
    name: str
    loc: Optional[Loc]
    steps: tuple
    kind: str
    value: Union[int, list[int], list[list[int]]]


def format_trace(ir: ProgramIR, result) -> str:
    """Render `result.trace` (a BatchResult from `execute(..., trace=True)`)."""
    events = result.trace or []
    if not events:
        return "(empty trace)"
    width = max((_length(e) for e in events), default=0)
    rows = [_Row("line", "step", "variable", [str(i) for i in range(width)])]
    for e in events:
        line = "" if e.loc is None else str(e.loc.line)
        step = ".".join(map(str, e.steps))
        if e.kind == SELECTOR:
            # one table row per query position; '.' for unselected keys
            for q, row in enumerate(e.value):
                cells = ["1" if v else "." for v in row]
                label = f"{e.name}[{q}]"
                rows.append(_Row(line if q == 0 else "", step if q == 0 else "", label, cells))
        elif e.kind == SCALAR or isinstance(e.value, int):
            rows.append(_Row(line, step, e.name, [f"= {_token(ir, e.value)}"], scalar=True))
        else:
            rows.append(_Row(line, step, e.name, [_token(ir, v) for v in e.value]))
    return _render(rows, width)


@dataclass
class _Row:
    line: str
    step: str
    name: str
    cells: list
    scalar: bool = False


def _length(e: TraceEvent) -> int:
    if e.kind == SELECTOR:
        return len(cast(list, e.value))     # a selector's value is its list of rows
    return len(e.value) if isinstance(e.value, list) else 0


def _token(ir: ProgramIR, v: int) -> str:
    text = ir.symbol_text(v) if v < 0 else None
    return str(v) if text is None else text


def _render(rows: list, width: int) -> str:
    w_line = max(len(r.line) for r in rows)
    w_step = max(len(r.step) for r in rows)
    w_name = max(len(r.name) for r in rows)
    cols = [max((len(r.cells[i]) for r in rows if not r.scalar and i < len(r.cells)), default=1)
            for i in range(width)]
    out = []
    for r in rows:
        head = f"{r.line:>{w_line}}  {r.step:<{w_step}}  {r.name:<{w_name}}"
        if r.scalar:
            body = r.cells[0]
        else:
            body = " ".join(f"{c:>{cols[i]}}" for i, c in enumerate(r.cells))
        out.append(f"{head}  {body}".rstrip())
    return "\n".join(out)
