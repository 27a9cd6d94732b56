"""The `sample` statement (docs/language.md §9b): the program's own generator of
inputs, so the trainer can draw fresh inputs of any size n
(length generalization: train on sizes LO..HI, evaluate beyond).

    sample n in 1..20: {0, 1}[n] EOQ EOS[n + 1]

An input of size n is its segments in order; a segment is a token or a set of
tokens `{...}` (the syntax of `input`), drawn uniformly and independently,
`[LEN]` times (one without it) or `[A..B]` times (a count drawn uniformly).
Lengths are built from n, ints, int consts, `+ - * //`, `min`, `max`.

`lower_sample` checks a statement while the program is lowered (so `rasp
check` reports every problem, located); `Sampler.draw` draws one input.
Drawn inputs are checked against the program's `require` lines by the trainer
(trainer/tasks/program.py), which redraws a bounded number of times.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from . import ast as A
from . import ir
from .errors import RaspError
from .limits import DEFAULT_MAX_LEN

MAX_N = 10_000              # the largest HI (every n of LO..HI is checked when the program is lowered)
MAX_LEN = DEFAULT_MAX_LEN   # the longest input a sampler may draw (the interpreter's default --max-len)
_OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "floordiv": lambda a, b: a // b if b else None}


@dataclass(frozen=True)
class Segment:
    values: tuple           # the token values drawn from
    low: object             # a length expression (see _length); None: exactly one token
    high: object            # None: exactly `low` tokens
    loc: ir.Loc


@dataclass(frozen=True)
class Sampler:
    var: str
    lo: int
    hi: int
    segments: tuple
    loc: ir.Loc
    source: str = ""

    def error(self, message: str, loc: Optional[ir.Loc] = None) -> RaspError:
        return RaspError(message, loc or self.loc, self.source)

    def counts(self, n: int, seg: Segment) -> tuple:
        """(fewest, most) tokens of `seg` at size n; refused when negative or reversed."""
        if seg.low is None:
            return 1, 1
        lo = _eval(seg.low, n)
        hi = lo if seg.high is None else _eval(seg.high, n)
        if lo is None or hi is None:
            raise self.error(f"at n = {n} this length divides by zero", seg.loc)
        if lo < 0 or hi < lo:
            raise self.error(f"at n = {n} this segment's length is {lo}" + ("" if seg.high is None else f"..{hi}")
                             + ": lengths must be >= 0 and LOW <= HIGH", seg.loc)
        return lo, hi

    def check_size(self, n: int):
        """Refuse a size whose inputs could be empty or longer than MAX_LEN, before drawing."""
        if n < self.lo:
            raise self.error(f"size n = {n} is below this sampler's smallest size {self.lo}")
        most = fewest = 0
        for seg in self.segments:
            lo, hi = self.counts(n, seg)
            fewest, most = fewest + lo, most + hi
            if most > MAX_LEN:
                raise self.error(f"at n = {n} an input could have more than {MAX_LEN} tokens (the input length "
                                 "limit); use smaller lengths or sizes")
        if fewest == 0:
            raise self.error(f"at n = {n} an input could be empty (every segment of length 0)")

    def draw(self, rng, n: int) -> list:
        """One input of size n (token values), from `rng` (numpy Generator)."""
        out: list = []
        for seg in self.segments:
            lo, hi = self.counts(n, seg)
            k = lo if lo == hi else int(rng.integers(lo, hi + 1))
            if len(seg.values) == 1:
                out += [seg.values[0]] * k
            else:
                out += [seg.values[int(i)] for i in rng.integers(0, len(seg.values), size=k)]
        if not out or len(out) > MAX_LEN:
            self.check_size(n)          # the located reason
        return out


def _eval(expr, n: int):
    """A length expression at size n (None: a division by zero)."""
    kind = expr[0]
    if kind == "n":
        return n
    if kind == "num":
        return expr[1]
    if kind == "neg":
        v = _eval(expr[1], n)
        return None if v is None else -v
    a, b = _eval(expr[1], n), _eval(expr[2], n)
    if a is None or b is None:
        return None
    if kind in ("min", "max"):
        return min(a, b) if kind == "min" else max(a, b)
    return _OPS[kind](a, b)


LENGTH_HELP = "a sample length is built from the size name, ints, int consts, + - * //, min and max"


def _length(low, node, var: str):
    """The AST of a length -> a small tuple tree (consts folded by `low`, the lowering)."""
    if isinstance(node, A.Name) and node.id == var:
        return ("n",)
    if isinstance(node, A.BinOp) and node.op in _OPS:
        return (node.op, _length(low, node.left, var), _length(low, node.right, var))
    if isinstance(node, A.UnaryOp) and node.op in ("neg", "pos"):
        inner = _length(low, node.operand, var)
        return ("neg", inner) if node.op == "neg" else inner
    if isinstance(node, A.Call) and isinstance(node.func, A.Name) and node.func.id in ("min", "max") \
            and len(node.args) == 2 and not node.keywords:
        return (node.func.id, _length(low, node.args[0], var), _length(low, node.args[1], var))
    if isinstance(node, (A.Num, A.Name)) and not (isinstance(node, A.Name) and node.id in low.symbol_names):
        try:
            value = low.expr(node, low.global_scope)
        except RaspError:
            value = None
        if isinstance(value, ir.Const):
            return ("num", int(value.value))
    raise low.error(LENGTH_HELP, node)


def _token(low, item: A.VocabItem) -> list:
    """The token values of one item of a segment's set (a symbol string, an int, a const, or LOW..HIGH)."""
    def one(node) -> int:
        if isinstance(node, A.Str):
            if node.text not in low.symbols:
                raise low.error(f"{node.text!r} is not a declared symbol (declare it: const NAME = "
                                f"{node.text!r})", node)
            return low.symbols[node.text]
        return low.vocab_value(node, low.global_scope)
    a = one(item.low)
    b = a if item.high is None else one(item.high)
    if b < a:
        raise low.error(f"empty range {a}..{b}", item)
    if b - a >= MAX_LEN * 16:
        raise low.error(f"the range {a}..{b} is larger than the input vocabulary can be", item)
    return list(range(a, b + 1))


def lower_sample(low, stmt: A.Sample) -> Sampler:
    """Check a `sample` statement against the program (`low`: the Lowering, after `input`)."""
    if low.sampler is not None:
        raise low.error("a program has at most one 'sample' statement", stmt)
    bounds = []
    for node in (stmt.low, stmt.high):
        value = low.expr(node, low.global_scope) if not isinstance(node, A.Str) else None
        if not isinstance(value, ir.Const) or node_is_symbol(low, node):
            raise low.error("the size range LO..HI is made of ints (or int consts)", node)
        bounds.append(int(value.value))
    lo, hi = bounds
    if not 1 <= lo <= hi <= MAX_N:
        raise low.error(f"the size range {lo}..{hi} must satisfy 1 <= LO <= HI <= {MAX_N}", stmt)
    vocab = set(low.vocab)
    segments = []
    for seg in stmt.segments:
        values: list = []
        for item in seg.items:
            for v in _token(low, item):
                if v not in vocab:
                    text = next((t for t, c in low.symbols.items() if c == v), str(v))
                    raise low.error(f"token {text!r} is not in the input vocabulary (the 'input' statement)", item)
                if v not in values:
                    values.append(v)
        lengths = [None if node is None else _length(low, node, stmt.var) for node in (seg.low, seg.high)]
        segments.append(Segment(tuple(values), lengths[0], lengths[1], low.loc(seg)))
    sampler = Sampler(stmt.var, lo, hi, tuple(segments), low.loc(stmt), low.source)
    for n in range(lo, hi + 1):         # every training size: a located error now, not mid-training
        sampler.check_size(n)
    return sampler


def node_is_symbol(low, node) -> bool:
    return isinstance(node, A.Str) or (isinstance(node, A.Name) and node.id in low.symbol_names)
