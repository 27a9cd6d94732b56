"""`rasp help [NAME]`: the reference entry of a builtin, library function,
predicate, reduction or statement.

This table is the one source of those entries: docs/language.md's tables are
generated from it (`python -m rasp.help --write-docs docs/language.md`, checked by
tests/test_docs.py), signatures come from rasp/builtins.py and rasp/lib.rasp
themselves, and every example is run through the interpreter by the tests.

An entry's example is an expression over the input `x` (tokens -20..20; 0..20 with
the symbols `>` `#` for the host functions), the input, and the output the
interpreter gives; a scalar result (e.g. `len(x)`) shows as one number.
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys
from dataclasses import dataclass
from typing import Optional, cast

from . import ast as A


@dataclass(frozen=True)
class Entry:
    name: str
    group: str          # one of GROUPS
    type: str           # argument types -> result type
    result: str         # what it computes (one line)
    example: str = ""   # an expression over the input x ...
    given: str = ""     # ... on this input ...
    gives: str = ""     # ... gives this (an s-op, or one number for a scalar)
    usage: str = ""     # the form, for statements, predicates and reductions


GROUPS = {
    "core": "Core primitives",
    "library": "Library (defined in rasp/lib.rasp from the core primitives)",
    "elementwise": "Element-wise builtins",
    "host": "Host functions (ints computed from the raw input)",
    "predicate": "Predicates (for select and kqv)",
    "reduction": "Reductions (for aggr and kqv)",
    "statement": "Statements",
}

X = "3 1 4 1 5"
ENTRIES = [
    # ---- core primitives
    Entry("full", "core", "s-op, int -> s-op", "the s-op holding `c` at every position",
          "full(x, 7)", X, "7 7 7 7 7"),
    Entry("indices", "core", "s-op -> s-op", "the positions `0, 1, ..., n-1`",
          "indices(x)", X, "0 1 2 3 4"),
    Entry("tok_map", "core", "s-op, lambda a | table -> s-op",
          "`f(x[i])` at every position (`f` is a lambda, or a 1-D lookup table `T`: `T[x[i]]`)",
          "tok_map(x, lambda a: a * a + 1)", X, "10 2 17 2 26"),
    Entry("seq_map", "core", "s-op, s-op, lambda a, b | table -> s-op",
          "`f(x[i], y[i])` at every position (or a 2-D lookup table `T`: `T[x[i]][y[i]]`)",
          "seq_map(x, indices(x), lambda a, b: a - b)", X, "3 0 2 -2 1"),
    Entry("select", "core", "s-op, s-op, predicate -> selector",
          "the causal matrix `A[i, j] = pred(k[j], q[i])` for `j <= i`, else 0 (row i: query, column j: key)",
          "sel_width(select(x, x, le))", X, "1 1 3 2 5"),
    Entry("sel_width", "core", "selector -> s-op", "how many keys row `i` selects (`j = i` included when selected)",
          "sel_width(select(x, x, eq))", X, "1 1 1 2 1"),
    Entry("aggr", "core", "selector, s-op, int, reduction -> s-op",
          "reduce `v` over the keys row `i` selects: mean (truncated toward zero), max or min; "
          "`default` where none is selected",
          "aggr(select(x, x, lt), x, -1, max)", X, "-1 -1 3 -1 4"),
    Entry("kqv", "core", "s-op, s-op, s-op, predicate, int, reduction -> s-op",
          "`aggr(select(k, q, pred), v, default, reduction)` in one call",
          "kqv(x, x, indices(x), eq, reduction=min)", X, "0 1 2 1 4"),
    # ---- library
    Entry("shift_right", "library", "s-op, int, int -> s-op", "`x[i-s]`, or `default` for `i < s`",
          "shift_right(x, 2)", X, "0 0 3 1 4"),
    Entry("cumsum", "library", "s-op -> s-op", "how many `j <= i` have `b[j] != 0`",
          "cumsum(x > 2)", X, "1 1 2 2 3"),
    Entry("mask", "library", "s-op, s-op, int -> s-op", "`x[i]` where `m[i] != 0`, else `mask_val`",
          "mask(x, x > 2)", X, "3 0 4 0 5"),
    Entry("maximum", "library", "s-op -> s-op", "running maximum of `x[0..i]`",
          "maximum(x)", X, "3 3 4 4 5"),
    Entry("minimum", "library", "s-op -> s-op", "running minimum of `x[0..i]`",
          "minimum(x)", X, "3 1 1 1 1"),
    Entry("argmax", "library", "s-op -> s-op", "the largest `j <= i` with `x[j] == maximum(x)[i]`",
          "argmax(x)", "3 1 3 1 2", "0 0 2 2 2"),
    Entry("argmin", "library", "s-op -> s-op", "`argmax(-x)`: the largest `j <= i` holding the running minimum",
          "argmin(x)", X, "0 1 1 3 3"),
    Entry("num_prev", "library", "s-op, s-op -> s-op", "how many `j <= i` have `x[j] == q[i]`",
          "num_prev(x, x)", X, "1 1 1 2 1"),
    Entry("has_seen", "library", "s-op, s-op -> s-op", "1 if some `j <= i` has `x[j] == q[i]`, else 0",
          "has_seen(x, 4)", X, "0 0 1 1 1"),
    Entry("firsts", "library", "s-op, s-op, int -> s-op",
          "the smallest `j <= i` with `x[j] == q[i]`, else `default`",
          "firsts(x, 1)", X, "-1 1 1 1 1"),
    Entry("lasts", "library", "s-op, s-op, int -> s-op",
          "the largest `j <= i` with `x[j] == q[i]`, else `default`",
          "lasts(x, 1)", X, "-1 1 1 3 3"),
    Entry("index_select", "library", "s-op, s-op, int -> s-op",
          "`x[idx[i]]` if `0 <= idx[i] <= i`, else `default`",
          "index_select(x, indices(x) - 1, 9)", X, "9 3 1 4 1"),
    Entry("first_true", "library", "s-op, int -> s-op", "the smallest `j <= i` with `x[j] == 1`, else `default`",
          "first_true(x == 1)", X, "-1 1 1 1 1"),
    Entry("mode", "library", "s-op -> s-op",
          "the value with the highest running count in `x[0..i]`; on a tie the latest to reach it",
          "mode(x)", "2 5 5 2 7 2", "2 5 5 2 2 2"),
    Entry("binary_mode", "library", "s-op -> s-op", "1 if `x[0..i]` holds more ones than zeros, else 0",
          "binary_mode(x)", "1 0 0 1 1", "1 0 0 0 1"),
    Entry("induct", "library", "s-op, s-op, int, int -> s-op",
          "`index_select(k, firsts(shift_right(k, offset, -999), q, -999), default)`: the token `offset` "
          "places after the first earlier `q[i]` in `k` (an induction head)",
          "induct(x, x, 1)", "3 5 7 3 9 5 3", "0 0 0 5 0 7 5"),
    # ---- element-wise builtins (besides the operators)
    Entry("where", "elementwise", "s-op, s-op, s-op -> s-op", "`x[i]` where `c[i] != 0`, else `y[i]`",
          "where(x > 2, x, -x)", X, "3 -1 4 -1 5"),
    Entry("min", "elementwise", "s-op, s-op -> s-op", "element-wise minimum (of two ints: an int)",
          "min(x, 2)", X, "2 1 2 1 2"),
    Entry("max", "elementwise", "s-op, s-op -> s-op", "element-wise maximum (of two ints: an int)",
          "max(x, 2)", X, "3 2 4 2 5"),
    Entry("abs", "elementwise", "s-op -> s-op", "element-wise absolute value",
          "abs(x - 3)", X, "0 2 1 2 2"),
    # ---- host functions
    Entry("len", "host", "input -> int", "the input's length (first argument: the input itself)",
          "len(x)", "1 0 1 > # #", "6"),
    Entry("count", "host", "input, token -> int", "how many times the token occurs in the input",
          "count(x, 1)", "1 0 1 > # #", "2"),
    Entry("count_before", "host", "input, token -> int",
          "the index of the first occurrence of the token, or the length if it is absent",
          "count_before(x, EOQ)", "1 0 1 > # #", "3"),
    # ---- predicates
    *[Entry(p, "predicate", "predicate", f"`select(k, q, {p})` selects key j for query i when {rule}",
            usage=f"select(k, q, {p})")
      for p, rule in [("eq", "`k[j] == q[i]`"), ("ne", "`k[j] != q[i]`"), ("lt", "`k[j] < q[i]`"),
                      ("le", "`k[j] <= q[i]`"), ("gt", "`k[j] > q[i]`"), ("ge", "`k[j] >= q[i]`"),
                      ("always", "always (every `j <= i`)")]],
    # ---- reductions
    Entry("mean", "reduction", "reduction",
          "sum of the selected values divided by their count, truncated toward zero (the default)",
          usage="aggr(A, v, reduction=mean)"),
    Entry("max", "reduction", "reduction", "the largest selected value", usage="aggr(A, v, reduction=max)"),
    Entry("min", "reduction", "reduction", "the smallest selected value", usage="aggr(A, v, reduction=min)"),
    # ---- statements
    Entry("const", "statement", "statement",
          "a symbol token (`const EOQ = \">\"`: codes -1, -2, ... in order), an int constant, or a "
          "lookup table for tok_map / seq_map", usage='const NAME = "TEXT"  |  const NAME = INT-EXPR  |  '
          'const NAME = [v, ...]  |  const NAME = [[v, ...], ...]'),
    Entry("table", "statement", "statement",
          "a lookup table: a list of ints (1-D, for `tok_map(x, T)` = `T[x[i]]`) or a rectangular list of "
          "rows (2-D, for `seq_map(x, y, T)` = `T[x[i]][y[i]]`); entries are int literals, consts or "
          "symbols; it may span lines. An index outside 0..len-1 is an error: from the checker when the "
          "input's declared values make it possible, else at run time",
          usage="const T = [[0, 1], [1, 0]]   then   seq_map(x, y, T)"),
    Entry("input", "statement", "statement", "the input s-op and every token value it may hold (exactly one)",
          usage="input NAME: {v, lo..hi, SYMBOL, ...}"),
    Entry("param", "statement", "statement",
          "an int computed on the host from the raw input before the program runs; `--param NAME=INT` "
          "overrides it", usage="param NAME = HOSTEXPR"),
    Entry("require", "statement", "statement",
          "the input contract: CONDITION (over the input, consts and params) must be nonzero at every "
          "position, or the input is rejected with MESSAGE (exit status 2)",
          usage='require CONDITION, "MESSAGE"'),
    Entry("sample", "statement", "statement",
          "the program's own input sampler, for `rasp train --program`: an input of size n is its segments in "
          "order, each a token or a set {...} drawn uniformly, [LEN] or [A..B] times (lengths from n, ints, "
          "consts, + - * //, min, max); n runs over LO..HI in training, beyond it in evaluation",
          usage='sample n in LO..HI: {0, 1}[n] EOQ EOS[n + 1]'),
    Entry("def", "statement", "statement", "a function (no recursion); calls are inlined",
          usage="def NAME(a, b=DEFAULT):\n    ...\n    return e1, e2"),
    Entry("loop", "statement", "statement",
          "run the body COUNT times (a host expression, per input); with `until stable`, stop after the "
          "first iteration that changes no variable", usage="loop COUNT [until stable]:\n    BODY"),
    Entry("output", "statement", "statement", "the program's output s-op (exactly one, at top level)",
          usage="output EXPR"),
    Entry("lambda", "statement", "expression",
          "an element-wise function over ints, only as the function of tok_map / seq_map",
          usage="lambda a: EXPR  |  lambda a, b: EXPR"),
]

def example_program(entry: Entry) -> str:
    """The program an entry's example runs in (tests/test_docs.py runs it).
    Symbols are declared only for the host examples: a value equal to a
    symbol's code would print as the symbol."""
    if entry.group == "host":
        return ('const EOQ = ">"\nconst EOS = "#"\ninput x: {0..20, EOQ, EOS}\n'
                f"output full(x, {entry.example})\n")
    return f"input x: {{-20..20}}\noutput {entry.example}\n"


def entries(name: str) -> list:
    return [e for e in ENTRIES if e.name == name]


# ---- signatures: from the implementation itself ------------------------------------

def _default_text(node) -> str:
    if isinstance(node, A.Num):
        return str(node.value)
    if isinstance(node, A.UnaryOp) and node.op == "neg":
        return "-" + _default_text(node.operand)
    if isinstance(node, A.Name):
        return node.id
    return "..."


def signature(entry: Entry) -> str:
    """`name(a, b=default)` from rasp/builtins.py or rasp/lib.rasp."""
    if entry.usage:
        return entry.usage
    from .builtins import _SIGNATURES
    from .lower import _library_module
    if entry.group == "library":
        for d in _library_module().body:
            if isinstance(d, A.Def) and d.name == entry.name:
                params = [p.name if p.default is None else f"{p.name}={_default_text(p.default)}"
                          for p in d.params]
                return f"{entry.name}({', '.join(params)})"
    params = [n if d is None else f"{n}={d}" for n, d in _SIGNATURES[entry.name]]
    return f"{entry.name}({', '.join(params)})"


def library_source(name: str) -> Optional[str]:
    """The definition of a library function, as written in rasp/lib.rasp."""
    from importlib import resources
    lines = resources.files(__package__).joinpath("lib.rasp").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"def {name}("):
            body = [line]
            for more in lines[i + 1:]:
                if more and not more[0].isspace():
                    break
                body.append(more)
            return "\n".join(body).rstrip()
    return None


# ---- formatting ----------------------------------------------------------------------

def format_entry(entry: Entry) -> str:
    lines = [signature(entry), f"  {GROUPS[entry.group]}", f"  type:    {entry.type}",
             f"  result:  {entry.result.replace('`', '')}"]
    if entry.example:
        lines += [f"  example: x = {entry.given}", f"           {entry.example}  ->  {entry.gives}"]
    if entry.group == "library":
        source = cast(str, library_source(entry.name))     # a library entry is defined there
        lines += ["  defined in rasp/lib.rasp as:"] + ["    " + l for l in source.splitlines()]
    return "\n".join(lines)


def _md_cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def markdown_table(group: str) -> str:
    """The docs/language.md table of one group."""
    if group in ("predicate", "reduction", "statement"):
        rows = ["| form | meaning |", "|---|---|"]
        for e in ENTRIES:
            if e.group == group:
                rows.append(f"| `{_md_cell(e.usage)}` | {_md_cell(e.result)} |")
        return "\n".join(rows)
    rows = ["| call | type | result | example: x = ..., expression → result |", "|---|---|---|---|"]
    for e in ENTRIES:
        if e.group == group:
            rows.append(f"| `{signature(e)}` | {_md_cell(e.type)} | {_md_cell(e.result)} | "
                        f"`{e.given}`: `{_md_cell(e.example)}` → `{e.gives}` |")
    return "\n".join(rows)


def markdown_tables() -> dict:
    return {group: markdown_table(group) for group in GROUPS}


# ---- the subcommand -------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", metavar="NAME",
                        help="a builtin, library function, predicate, reduction or statement "
                             "(without it: list them all)")


def listing() -> str:
    lines = []
    for group, title in GROUPS.items():
        names = [e.name for e in ENTRIES if e.group == group]
        lines.append(f"{title}:\n  " + " ".join(names))
    lines.append("\n`rasp help NAME` prints one entry; docs/language.md is the whole reference.")
    return "\n".join(lines)


def run(args) -> int:
    from .errors import RaspError
    if not args.name:
        print(listing())
        return 0
    found = entries(args.name)
    if not found:
        hint = difflib.get_close_matches(args.name, sorted({e.name for e in ENTRIES}), n=1)
        extra = f"; did you mean '{hint[0]}'?" if hint else " (`rasp help` lists every name)"
        raise RaspError(f"no entry for '{args.name}'{extra}")
    print("\n\n".join(format_entry(e) for e in found))
    return 0


_TABLE = re.compile(r"(<!-- table:(\w+) -->\n).*?(<!-- end table -->)", re.S)
_GRAMMAR = re.compile(r"(## 14\. Grammar.*?```\n).*?(```)", re.S)


def fill_docs(text: str) -> str:
    """docs/language.md with its generated parts (the tables between
    `<!-- table:GROUP -->` and `<!-- end table -->`, and the grammar) filled
    in from this module and rasp/grammar.lark."""
    from importlib import resources
    tables = markdown_tables()
    text = _TABLE.sub(lambda m: m.group(1) + tables[m.group(2)] + "\n" + m.group(3), text)
    grammar = resources.files(__package__).joinpath("grammar.lark").read_text()
    return _GRAMMAR.sub(lambda m: m.group(1) + grammar + m.group(2), text)


if __name__ == "__main__":
    # python -m rasp.help --write-docs docs/language.md  (regenerates its tables)
    if len(sys.argv) == 3 and sys.argv[1] == "--write-docs":
        from pathlib import Path
        path = Path(sys.argv[2])
        path.write_text(fill_docs(path.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        from .options import ArgumentParser
        parser = ArgumentParser(prog="rasp help")
        add_arguments(parser)
        sys.exit(run(parser.parse_args()))
