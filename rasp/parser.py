"""Source text -> AST, with located syntax errors."""
from __future__ import annotations

import os
import re
import stat
import sys
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import cast

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import (UnexpectedCharacters, UnexpectedEOF, UnexpectedInput,
                             UnexpectedToken, VisitError)
from lark.indenter import DedentError, Indenter

from . import ast as A
from .errors import RaspError
from .ir import Loc


class _Indenter(Indenter):
    NL_type = "_NL"
    OPEN_PAREN_types = ["LPAR", "LBRACE", "LSQB"]
    CLOSE_PAREN_types = ["RPAR", "RBRACE", "RSQB"]
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 8


_LARK_OPTIONS = dict(parser="lalr", propagate_positions=True, maybe_placeholders=True)


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rasp"


def grammar_cache_file(grammar: str) -> Path:
    """Where the analysed LALR tables of `grammar` are kept between processes:
    one file per grammar, Lark and Python version (Lark checks the same hash
    inside the file before it trusts it).  A per-user directory, not the
    shared temp directory, since the file is unpickled (see _private)."""
    import hashlib
    import lark
    key = f"{grammar}{sorted(_LARK_OPTIONS.items())}{lark.__version__}{sys.version_info[:2]}"
    return _cache_dir() / f"grammar-{hashlib.sha256(key.encode()).hexdigest()[:16]}.lark"


def _private(st: os.stat_result) -> bool:
    """Owned by this user and writable by no one else (as pip and Python's
    own caches require before they unpickle anything)."""
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _trusted_cache(cache: Path) -> str:
    """'load' when `cache` may be unpickled (a plain file, not a link, owned
    by this user and writable only by them, in such a directory); 'write'
    when it is absent or untrusted but the directory is private (a fresh
    file replaces it); 'none' when the directory is not private: then the
    tables are built in memory and nothing there is read or written."""
    d = cache.parent
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(d)
    except OSError:
        return "none"
    if not stat.S_ISDIR(st.st_mode) or not _private(st):
        return "none"
    try:
        st = os.lstat(cache)
    except OSError:
        return "write"
    return "load" if stat.S_ISREG(st.st_mode) and _private(st) else "write"


@lru_cache(maxsize=1)
def _lark() -> Lark:
    """Built once per process; across processes the LALR analysis (most of a
    ~0.1-1 s build) is loaded from grammar_cache_file instead of recomputed,
    when that file and its directory can be trusted (_trusted_cache)."""
    grammar = resources.files(__package__).joinpath("grammar.lark").read_text()
    cache = grammar_cache_file(grammar)
    trust = _trusted_cache(cache)
    if trust == "load":
        return Lark(grammar, postlex=_Indenter(), cache=str(cache), **_LARK_OPTIONS)
    if trust == "none":     # no private cache directory: build every time
        return Lark(grammar, postlex=_Indenter(), **_LARK_OPTIONS)
    # Lark writes its cache in place; write a private file and rename it, so
    # a concurrent `rasp` never reads half of one
    tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
    parser = Lark(grammar, postlex=_Indenter(), cache=str(tmp), **_LARK_OPTIONS)
    try:
        os.chmod(tmp, 0o600)
        os.replace(tmp, cache)
    except OSError:
        pass
    return parser


def _pos(meta_or_token):
    return meta_or_token.line, meta_or_token.column


_MAX_DIGITS = 19          # every int64 has at most 19 digits
MAX_NESTING = 200         # levels of the syntax tree; deeper programs would exhaust Python's stack
# tokens of one program, counted before parsing: the LALR parser takes ~40 us a token (the largest
# shipped program, words_s5.rasp with its 120 x 120 table, has 29,000); a table of N entries is ~2N
MAX_TOKENS = 100_000
_TOKEN_RE = re.compile(r'"[^"\n]*"?|#[^\n]*|\w+|[^\w\s]')


def _check_size(text: str, path, source):
    """Refuse a program of more than MAX_TOKENS tokens before the parser runs,
    located at the first token past the limit (a huge table constant)."""
    if len(text) <= MAX_TOKENS:             # every token takes a character at least
        return
    n = 0
    for m in _TOKEN_RE.finditer(text):
        if m.group().startswith("#"):
            continue
        n += 1
        if n > MAX_TOKENS:
            line = text.count("\n", 0, m.start()) + 1
            column = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
            raise RaspError(f"the program has more than {MAX_TOKENS:,} tokens (a lookup table of N entries "
                            "is about 2N); use a smaller table", Loc(path, line, column), source)


class _Located(Exception):
    """A problem found while building the AST, at (line, column)."""

    def __init__(self, message, line, column):
        super().__init__(message)
        self.message, self.line, self.column = message, line, column


def _check_nesting(tree, path, source):
    """Refuse a syntax tree deeper than MAX_NESTING (the AST builder, the
    checker and the compiler all recurse over it), located at the first
    place too deep.  Iterative: it must not recurse itself."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, Tree):
            continue
        if depth > MAX_NESTING:
            line, column = _first_position(node)
            raise RaspError(f"nested too deeply (more than {MAX_NESTING} levels of expressions and blocks); "
                            "split it into several statements", Loc(path, line, column), source)
        stack.extend((child, depth + 1) for child in reversed(node.children))


def _first_position(tree):
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, Token) and node.line is not None:
            return node.line, node.column
        if isinstance(node, Tree):
            stack.extend(reversed(node.children))
    return 1, 1


def _binop(op: str):
    """A _ToAst method that builds a BinOp `op` (v_args(meta=True) applies to it)."""
    def build(self, meta, c):
        return A.BinOp(*_pos(meta), op, c[0], c[1])
    return build


def _unop(op: str):
    """A _ToAst method that builds a UnaryOp `op`."""
    def build(self, meta, c):
        return A.UnaryOp(*_pos(meta), op, c[0])
    return build


@v_args(meta=True)
class _ToAst(Transformer):
    """Builds rasp.ast nodes; keeps line/column on each."""

    def start(self, meta, stmts):
        return A.Module(1, 1, [s for s in stmts if s is not None])

    # statements
    def const_stmt(self, meta, c):
        return A.ConstStmt(*_pos(meta), str(c[0]), c[1])

    def input_stmt(self, meta, c):
        return A.InputStmt(*_pos(meta), str(c[0]), [i for i in c[1:] if i is not None])

    def vocab_item(self, meta, c):
        return A.VocabItem(*_pos(meta), c[0], c[1])

    def param_stmt(self, meta, c):
        return A.ParamStmt(*_pos(meta), str(c[0]), c[1])

    def assign_stmt(self, meta, c):
        return A.Assign(*_pos(meta), [str(t) for t in c[:-1]], c[-1])

    def return_stmt(self, meta, c):
        return A.Return(*_pos(meta), list(c))

    def output_stmt(self, meta, c):
        return A.Output(*_pos(meta), c[0])

    def require_stmt(self, meta, c):
        message = None if c[1] is None else str(c[1])[1:-1]
        return A.Require(*_pos(meta), c[0], message)

    def sample_stmt(self, meta, c):
        return A.Sample(*_pos(meta), str(c[0]), c[1], c[2], list(c[3:]))

    def sample_seg(self, meta, c):
        items = c[0] if isinstance(c[0], list) else [A.VocabItem(c[0].line, c[0].column, c[0], None)]
        return A.SampleSeg(*_pos(meta), items, c[1], c[2])

    def sample_set(self, meta, c):
        return [i for i in c if i is not None]

    def def_stmt(self, meta, c):
        name, *params, body = c
        return A.Def(*_pos(meta), str(name), [p for p in params if p is not None], body)

    def def_param(self, meta, c):
        return A.DefParam(*_pos(meta), str(c[0]), c[1])

    def loop_stmt(self, meta, c):
        return A.LoopStmt(*_pos(meta), c[0], c[1] is not None, c[2])

    def suite(self, meta, stmts):
        return list(stmts)

    # expressions
    def lambda_expr(self, meta, c):
        return A.Lambda(*_pos(meta), [str(t) for t in c[:-1]], c[-1])

    or_op, and_op = _binop("or"), _binop("and")
    bitor, bitxor, bitand = _binop("bitor"), _binop("bitxor"), _binop("bitand")
    add, sub, mul = _binop("add"), _binop("sub"), _binop("mul")
    floordiv, mod, truediv = _binop("floordiv"), _binop("mod"), _binop("truediv")

    not_op, neg, pos, invert = _unop("not"), _unop("neg"), _unop("pos"), _unop("invert")

    def comparison(self, meta, c):
        return A.Compare(*_pos(meta), [str(t) for t in c[1::2]], list(c[0::2]))

    def call(self, meta, c):
        func, *args = c
        args = [a for a in args if a is not None]
        positional = [a for a in args if not isinstance(a, A.Keyword)]
        keywords = [a for a in args if isinstance(a, A.Keyword)]
        return A.Call(*_pos(meta), func, positional, keywords)

    def keyword(self, meta, c):
        return A.Keyword(*_pos(meta), str(c[0]), c[1])

    def name(self, meta, c):
        return A.Name(*_pos(c[0]), str(c[0]))

    def number(self, meta, c):
        digits = str(c[0]).lstrip("0")
        if len(digits) > _MAX_DIGITS:      # int() itself refuses past 4300 digits
            raise _Located(f"the integer literal has {len(digits)} digits: it does not fit in a "
                           "64-bit int", *_pos(c[0]))
        return A.Num(*_pos(c[0]), int(c[0]))

    def list_lit(self, meta, c):
        return A.ListLit(*_pos(meta), [i for i in c if i is not None])

    def string(self, meta, c):
        return A.Str(*_pos(c[0]), str(c[0])[1:-1])


_READABLE = {
    "_NL": "end of line", "_INDENT": "an indented block", "_DEDENT": "end of block",
    "$END": "end of file", "NAME": "a name", "INT": "a number", "STRING": "a string",
    "COMP_OP": "a comparison", "UNTIL_STABLE": "'until stable'",
}


def _describe(expected) -> str:
    if "_INDENT" in expected:
        return " (expected an indented block)"
    if {"NAME", "INT"} <= set(expected):
        return " (expected an expression)"
    names = []
    for term in sorted(expected):
        if term in _READABLE:
            names.append(_READABLE[term])
            continue
        try:
            pattern = _lark().get_terminal(term).pattern
            names.append(repr(pattern.value) if pattern.type == "str" else term.lower())
        except KeyError:
            names.append(term.lower())
    names = sorted(set(names))
    if len(names) > 1 and "end of line" in names:
        names.remove("end of line")  # inside brackets newlines are ignored
    if len(names) > 8:
        return ""
    return " (expected " + ", ".join(names) + ")"


def _token_text(tok: Token) -> str:
    if tok.type == "_NL":
        return "end of line"
    if tok.type == "$END":
        return "end of file"
    if tok.type in ("_INDENT", "_DEDENT"):
        return "a change of indentation"
    return repr(str(tok))


def parse(source: str, path: str = "<string>") -> A.Module:
    """Parse a program.  Raises RaspError located at the first problem."""
    text = source if source.endswith("\n") else source + "\n"
    _check_size(text, path, source)
    try:
        tree = _lark().parse(text)
        _check_nesting(tree, path, source)
        return _ToAst().transform(tree)
    except RecursionError:
        raise RaspError("nested too deeply (more than Python's stack allows); split it into several "
                        "statements", Loc(path, 1, 1), source) from None
    except UnexpectedCharacters as e:
        pos = cast(int, e.pos_in_stream)        # Optional on UnexpectedInput; always set here
        ch = text[pos] if pos < len(text) else ""
        msg = f"unexpected character {ch!r}"
        if ch in "\"'":
            msg = "unterminated string (strings end on the same line)"
        if ch == "\t" or ch == " ":
            msg = "unexpected indentation"
        raise RaspError(msg, Loc(path, e.line, e.column), source) from None
    except UnexpectedToken as e:
        tok = e.token
        line = tok.line if tok.line is not None else len(text.splitlines())
        col = tok.column if tok.column is not None else 1
        if tok.type == "_INDENT":
            msg = "unexpected indentation"
            line, col = _next_code_line(text, line), 1
        elif _after_colon(text, line, col):
            msg = "expected an indented block after ':'"
        else:
            msg = f"unexpected {_token_text(tok)}{_describe(e.expected)}"
        if tok.type == "$END":
            line, col = _last_line(text)
        raise RaspError(msg, Loc(path, line, col), source) from None
    except UnexpectedEOF as e:
        line, col = _last_line(text)
        raise RaspError(f"unexpected end of file{_describe(e.expected)}", Loc(path, line, col), source) from None
    except DedentError as e:
        line = _dedent_line(text, str(e))
        raise RaspError("inconsistent indentation: this line does not match any outer block",
                        Loc(path, line, 1), source) from None
    except UnexpectedInput as e:  # any other lark complaint
        raise RaspError("syntax error", Loc(path, getattr(e, "line", 1) or 1,
                                               getattr(e, "column", 1) or 1), source) from None
    except VisitError as e:
        if isinstance(e.orig_exc, _Located):
            raise RaspError(e.orig_exc.message, Loc(path, e.orig_exc.line, e.orig_exc.column), source) from None
        raise RaspError(f"syntax error: {e.orig_exc}", Loc(path, 1, 1), source) from None


def _code(raw: str) -> str:
    return raw.split("#", 1)[0].rstrip()


def _next_code_line(text: str, line: int) -> int:
    lines = text.splitlines()
    for number in range(line + 1, len(lines) + 1):
        if _code(lines[number - 1]).strip():
            return number
    return line


def _after_colon(text: str, line: int, col: int) -> bool:
    """Is (line, col) the first token of a line that follows a block header?"""
    lines = text.splitlines()
    if not 1 <= line <= len(lines) or lines[line - 1][:col - 1].strip():
        return False
    previous = [_code(l) for l in lines[:line - 1] if _code(l).strip()]
    return bool(previous) and previous[-1].endswith(":")


def _last_line(text: str):
    lines = text.rstrip("\n").splitlines() or [""]
    return len(lines), len(lines[-1]) + 1


def _dedent_line(text: str, message: str) -> int:
    """Lark's DedentError has no position; find the first line whose indent
    matches no enclosing block."""
    stack = [0]
    for number, raw in enumerate(text.splitlines(), 1):
        body = raw.split("#", 1)[0]
        if not body.strip():
            continue
        indent = len(raw.expandtabs(8)) - len(raw.expandtabs(8).lstrip())
        if indent > stack[-1]:
            stack.append(indent)
        else:
            while indent < stack[-1]:
                stack.pop()
            if indent != stack[-1]:
                return number
    return 1
