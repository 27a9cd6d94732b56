"""Random well-typed n-RASP-L programs, as source text, for fuzzing the compiler.

`programs()` is a hypothesis strategy; `random_program(rng)` draws the same
kind of program from a `random.Random` (reproducible by seed, no hypothesis
machinery: the CI fuzz test and `--stats` use it).  Both run one generator
through a small `Chooser` interface.

What a program may hold: the primitives of docs/language.md (full, indices,
tok_map, seq_map, select, sel_width, aggr, kqv), element-wise operators and
comparisons, the library of §5, and sometimes a `loop COUNT:` (COUNT a literal
or a param such as `len(seq)`, `count_before(seq, SYM)`), occasionally a
second loop or a nested one (a program with the symbol `>` and a count_before
param requires a `>` in its input, so that its params can compile as values).  Every value carries a loose interval `[lo, hi]`
valid for inputs up to NMAX tokens and loops of up to NMAX iterations, so
that nothing leaves int64 and operands of products stay small; and the RASP-L
index discipline (§6) is tracked so that index-derived s-ops are only
shifted by constants, compared, or used as keys/queries/indices.
Loop variables get a fixed carrier interval: every update is checked (and
clamped where needed) to stay inside it, so the interval holds at every
iteration; counters (`c = c + step`, step in [-2, 2]) get NMAX steps of room.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import strategies as st

NMAX = 1024                      # longest input (and loop count) the intervals hold for
BOUND = 2**40                    # largest |value| a generated s-op may reach
SMALL = 2**12                    # operands of products stay within this
PREDICATES = ["eq", "ne", "lt", "le", "gt", "ge", "always"]


class Chooser:
    """The generator's only source of choices."""

    def int(self, lo: int, hi: int) -> int:
        raise NotImplementedError

    def choice(self, items):
        return items[self.int(0, len(items) - 1)]

    def chance(self, p: float) -> bool:
        return self.int(0, 999) < int(p * 1000)


class RandomChooser(Chooser):
    def __init__(self, rng: random.Random):
        self.rng = rng

    def int(self, lo, hi):
        return self.rng.randint(lo, hi)


class DrawChooser(Chooser):
    """Choices from hypothesis, so failing programs shrink."""

    def __init__(self, draw):
        self.draw = draw

    def int(self, lo, hi):
        return self.draw(st.integers(lo, hi))


@dataclass(frozen=True)
class Val:
    """An expression's text, loose value interval and §6 index-derivedness."""
    text: str
    lo: int
    hi: int
    idx: bool = False

    @property
    def small(self) -> bool:
        return -SMALL <= self.lo and self.hi <= SMALL


def ok(v: Val) -> bool:
    return -BOUND <= v.lo <= v.hi <= BOUND


def hull(*vals) -> tuple:
    return min(v if isinstance(v, int) else v.lo for v in vals), max(v if isinstance(v, int) else v.hi for v in vals)


# ---- lambda bodies: (template, function on ints, allowed on index-derived operands) ----------

UNARY = [
    ("a + {c}", lambda a, c: a + c, True),
    ("a - {c}", lambda a, c: a - c, True),
    ("a == {c}", lambda a, c: int(a == c), True),
    ("a > {c}", lambda a, c: int(a > c), True),
    ("a <= {c}", lambda a, c: int(a <= c), True),
    ("{c} - a", lambda a, c: c - a, False),
    ("a * {c}", lambda a, c: a * c, False),
    ("(a + {c}) % {m}", None, False),
    ("a % {m}", None, False),
    ("min(a, {c})", lambda a, c: min(a, c), False),
    ("max(a, {c})", lambda a, c: max(a, c), False),
    ("abs(a - {c})", lambda a, c: abs(a - c), False),
    ("a // 2", lambda a, c: a // 2, False),
    ("1 - a", lambda a, c: 1 - a, False),
]
BINARY = [
    ("a + b", "add", False), ("a - b", "sub", False), ("a * b", "mul", False),
    ("(a + b) % {m}", "mod", False), ("max(a, b)", "max", False), ("min(a, b)", "min", False),
    ("a == b", "cmp", True), ("a < b", "cmp", True), ("a >= b", "cmp", True), ("a != b", "cmp", True),
    ("a & b", "bit", False), ("a | b", "bit", False), ("a ^ b", "bit", False), ("a * {c} + b", "lin", False),
]


def interval_of(fn, v: Val, c: int) -> tuple:
    """Bounds of a unary function that is monotone or bounded on pieces: its
    values at the ends and at the (few) kinks, which are at c or 0."""
    pts = [v.lo, v.hi] + [p for p in (c, c - 1, c + 1, 0, -1, 1) if v.lo <= p <= v.hi]
    ys = [fn(p, c) for p in pts]
    return min(ys), max(ys)


def bitwise_bound(a: Val, b: Val) -> tuple:
    m = max(abs(a.lo), abs(a.hi), abs(b.lo), abs(b.hi), 1)
    top = 2 ** m.bit_length()
    lo = 0 if min(a.lo, b.lo) >= 0 else -top
    return lo, top - 1


class Gen:
    """One program.  `env` holds the s-op variables in scope: name -> Val."""

    def __init__(self, ch: Chooser):
        self.ch = ch
        self.lines: list = []
        self.count = 0
        self.symbol = ch.choice([None, None, ">", "#"])
        top = ch.choice([1, 2, 3, 3])
        self.vocab = list(range(top + 1)) + ([-1] if self.symbol else [])
        self.seq = Val("seq", min(self.vocab), max(self.vocab))
        self.env = {"seq": self.seq}
        self.params: dict = {}          # name -> (lo, hi)
        self.last = None                # the latest top-level (or loop-carried) variable

    # -- small pieces --
    def const(self, lo=-3, hi=5) -> int:
        """A small int, now and then a large one (scaled means such as Tracr's frac_prevs)."""
        if self.ch.chance(0.08):
            return self.ch.choice([10, 100, 1000, -1000])
        return self.ch.int(lo, hi)

    def fresh(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def operand(self, allow_idx=True, depth=0) -> Val:
        """A variable in scope, or (less often) a nested expression."""
        if depth < 2 and self.ch.chance(0.3):
            v = self.expr(depth + 1)
            if allow_idx or not v.idx:
                return v
        names = [n for n, v in self.env.items() if allow_idx or not v.idx]
        return self.env[self.ch.choice(names)]

    # -- expressions: each returns a Val, or None when the draw does not fit --
    def expr(self, depth=0) -> Val:
        for _ in range(8):
            maker = self.ch.choice(self.MAKERS)
            v = maker(self, depth)
            if v is not None and ok(v):
                return v
        return self.env[self.ch.choice(list(self.env))]

    def e_full(self, depth):
        c = self.const()
        return Val(f"full(seq, {c})", c, c)

    def e_indices(self, depth):
        c = self.ch.choice([0, 0, 1, -1, 2])
        text = "indices(seq)" if c == 0 else f"(indices(seq) {'+' if c > 0 else '-'} {abs(c)})"
        return Val(text, c, NMAX - 1 + c, True)

    def e_tok_map(self, depth):
        x = self.operand(depth=depth)
        pool = [u for u in UNARY if u[2] or not x.idx]
        tmpl, fn, keeps_idx = self.ch.choice(pool)
        c, m = self.const(), self.ch.int(2, 5)
        body = tmpl.format(c=c, m=m)
        if fn is None:                                   # the modulo templates
            lo, hi = 0, m - 1
        else:
            if "*" in tmpl and not x.small:
                return None
            lo, hi = interval_of(fn, x, c)
        idx = x.idx and tmpl in ("a + {c}", "a - {c}")
        return Val(f"tok_map({x.text}, lambda a: {body})", lo, hi, idx)

    def e_seq_map(self, depth):
        x, y = self.operand(depth=depth), self.operand(depth=depth)
        pool = [b for b in BINARY if b[2] or not (x.idx or y.idx)]
        tmpl, kind, _ = self.ch.choice(pool)
        c, m = self.const(), self.ch.int(2, 5)
        body = tmpl.format(c=c, m=m)
        return self._binary(f"seq_map({x.text}, {y.text}, lambda a, b: {body})", kind, x, y, c, m)

    def _binary(self, text, kind, x, y, c=0, m=2):
        if kind == "add":
            lo, hi = x.lo + y.lo, x.hi + y.hi
        elif kind == "sub":
            lo, hi = x.lo - y.hi, x.hi - y.lo
        elif kind == "mul":
            if not (x.small and y.small):
                return None
            ps = [x.lo * y.lo, x.lo * y.hi, x.hi * y.lo, x.hi * y.hi]
            lo, hi = min(ps), max(ps)
        elif kind == "lin":
            if not x.small:
                return None
            ps = [x.lo * c, x.hi * c]
            lo, hi = min(ps) + y.lo, max(ps) + y.hi
        elif kind == "mod":
            lo, hi = 0, m - 1
        elif kind in ("max", "min"):
            lo, hi = hull(x, y)
        elif kind == "cmp":
            lo, hi = 0, 1
        elif kind == "bit":
            lo, hi = bitwise_bound(x, y)
        else:
            raise AssertionError(kind)
        return Val(text, lo, hi, False)

    def e_operator(self, depth):
        """Infix and prefix operators (and, or, not, comparisons, arithmetic)."""
        x = self.operand(depth=depth)
        if self.ch.chance(0.4):                         # with a constant
            c = self.const()
            op = self.ch.choice(["==", "!=", "<", ">=", "+", "-", "*", "%", "&"])
            if x.idx and op in ("*", "%", "&"):
                op = "+"
            if op in ("==", "!=", "<", ">="):
                return Val(f"({x.text} {op} {c})", 0, 1)
            if op == "*":
                return Val(f"({x.text} * {c})", *sorted((x.lo * c, x.hi * c))) if x.small else None
            if op == "%":
                m = self.ch.int(2, 4)
                return Val(f"({x.text} % {m})", 0, m - 1)
            if op == "&":
                return Val(f"({x.text} & {abs(c)})", 0, abs(c))
            c = c if op == "+" else -c
            return Val(f"({x.text} + {c})", x.lo + c, x.hi + c, x.idx)
        if self.ch.chance(0.2) and not x.idx:             # prefix
            op = self.ch.choice(["-", "~", "not "])
            if op == "not ":
                return Val(f"(not {x.text})", 0, 1)
            return Val(f"({op}{x.text})", -x.hi - (op == "~"), -x.lo - (op == "~"))
        y = self.operand(depth=depth)
        if self.params and self.ch.chance(0.1):          # a param used as a value
            name = self.ch.choice(sorted(self.params))
            y = Val(name, *self.params[name])
        if x.idx or y.idx:
            op = self.ch.choice(["==", "!=", "<", "<=", ">", ">="])
        else:
            op = self.ch.choice(["==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "&", "|", "^", "and", "or"])
        kind = {"+": "add", "-": "sub", "*": "mul", "&": "bit", "|": "bit", "^": "bit"}.get(op, "cmp")
        return self._binary(f"({x.text} {op} {y.text})", kind, x, y)

    def e_where(self, depth):
        cond, x, y = self.operand(depth=depth), self.operand(depth=depth), self.operand(depth=depth)
        if self.ch.chance(0.3):
            d = self.const()
            return Val(f"mask({x.text}, {cond.text}, {d})", *hull(x, d), x.idx or cond.idx)
        return Val(f"where({cond.text}, {x.text}, {y.text})", *hull(x, y), cond.idx or x.idx or y.idx)

    def e_shift(self, depth):
        x = self.operand(depth=depth)
        s, d = self.ch.choice([1, 1, 2, 3, 0]), self.const()
        return Val(f"shift_right({x.text}, {s}, {d})", *hull(x, d), x.idx)

    def select(self, depth) -> str:
        k, q = self.operand(depth=depth), self.operand(depth=depth)
        return f"select({k.text}, {q.text}, {self.ch.choice(PREDICATES)})"

    def e_aggr(self, depth):
        v = self.operand(depth=depth)
        d = self.const()
        red = self.ch.choice(["mean", "max", "min"])
        if self.ch.chance(0.5):
            k, q = self.operand(depth=depth), self.operand(depth=depth)
            text = f"kqv({k.text}, {q.text}, {v.text}, {self.ch.choice(PREDICATES)}, {d}, {red})"
        else:
            text = f"aggr({self.select(depth)}, {v.text}, {d}, {red})"
        return Val(text, *hull(v, d), v.idx)

    def e_sel_width(self, depth):
        return Val(f"sel_width({self.select(depth)})", 0, NMAX)

    def e_library(self, depth):
        x, q = self.operand(depth=depth), self.operand(depth=depth)
        d = self.const()
        name = self.ch.choice(["cumsum", "maximum", "minimum", "argmax", "argmin", "num_prev", "has_seen",
                               "firsts", "lasts", "index_select", "first_true", "mode", "binary_mode",
                               "induct"])
        if name == "cumsum":
            return Val(f"cumsum({x.text})", 0, NMAX)
        if name in ("maximum", "minimum", "mode"):
            return Val(f"{name}({x.text})", x.lo, x.hi, x.idx)
        if name == "argmax" or (name == "argmin" and not x.idx):
            return Val(f"{name}({x.text})", 0, NMAX - 1, True)
        if name in ("num_prev", "has_seen"):
            return Val(f"{name}({x.text}, {q.text})", 0, 1 if name == "has_seen" else NMAX)
        if name in ("firsts", "lasts"):
            return Val(f"{name}({x.text}, {q.text}, {d})", min(0, d), max(NMAX - 1, d), True)
        if name == "index_select":
            return Val(f"index_select({x.text}, {q.text}, {d})", *hull(x, d), x.idx)
        if name == "first_true":
            return Val(f"first_true({x.text}, {d})", min(0, d), max(NMAX - 1, d), True)
        if name == "binary_mode":
            return Val(f"binary_mode({x.text})", 0, 1)
        if name == "induct":
            off = self.ch.int(0, 2)
            return Val(f"induct({x.text}, {q.text}, {off}, {d})", *hull(x, d), x.idx)
        return None

    MAKERS = [e_full, e_indices, e_tok_map, e_tok_map, e_seq_map, e_operator, e_operator, e_where, e_shift,
              e_aggr, e_sel_width, e_library, e_library, e_library]

    # -- statements --
    def emit(self, line: str, indent: int):
        self.lines.append("    " * indent + line)

    def assign(self, indent: int, name=None) -> str:
        v = self.expr()
        name = name or self.fresh()
        self.emit(f"{name} = {v.text}", indent)
        self.env[name] = Val(name, v.lo, v.hi, v.idx)
        if indent == 0:
            self.last = name
        return name

    def host_count(self) -> str:
        options = ["len(seq)", "len(seq) - 1", "min(len(seq), 3)", "count(seq, 1)", str(self.ch.int(0, 3))]
        if self.symbol:
            options.append(f"count_before(seq, {self.symbol_name})")
        return self.ch.choice(options)

    @property
    def symbol_name(self):
        return {">": "EOQ", "#": "EOS"}[self.symbol]

    def loop(self, indent: int, budget: int):
        """A loop over 1-2 variables that exist before it, plus temporaries;
        temporaries leave scope after the loop (a 0-iteration loop would
        leave them unbound)."""
        count = self.host_count()
        if not count.isdigit() and self.ch.chance(0.6):
            name = f"n{len(self.params) + 1}"
            self.lines.insert(self.param_at, f"param {name} = {count}")
            self.param_at += 1
            self.params[name] = (0, NMAX)
            count = name
        names = [n for n in self.env if n != "seq"]
        if not names:
            names = [self.assign(indent)]
        carried = [self.ch.choice(names)]
        if len(names) > 1 and self.ch.chance(0.3):
            carried.append(self.ch.choice([n for n in names if n != carried[0]]))
        counters = {n for n in carried if not self.env[n].idx and self.ch.chance(0.3)}
        for n in counters:                         # room for NMAX steps of size <= 2
            v = self.env[n]
            self.env[n] = Val(n, v.lo - 2 * NMAX, v.hi + 2 * NMAX)
        outer = dict(self.env)
        self.emit(f"loop {count}:", indent)
        temps = self.ch.int(0, max(0, budget - len(carried)))
        for _ in range(temps):
            if indent == 0 and budget > 3 and self.ch.chance(0.1):
                self.loop(indent + 1, 2)
            else:
                self.assign(indent + 1)
        for n in carried:
            self.update(n, n in counters, indent + 1)
        self.env = outer

    def update(self, name: str, counter: bool, indent: int):
        carrier = self.env[name]
        if counter:
            step = self.expr()
            if not (-2 <= step.lo and step.hi <= 2) or step.idx:
                step = Val(f"({step.text} > 0)", 0, 1)
            self.emit(f"{name} = {name} + {step.text}", indent)
            if indent == 1:
                self.last = name
            return
        v = self.expr()
        if self.ch.chance(0.5):                       # make it depend on its old value
            v = self.ch.choice([
                lambda: Val(f"where({v.text}, {name}, shift_right({name}, 1, {carrier.lo}))", carrier.lo,
                            carrier.hi, carrier.idx or v.idx),
                lambda: self._binary(f"max({name}, {v.text})", "max", carrier, v) if not (v.idx or carrier.idx)
                else None,
                lambda: Val(f"shift_right({name}, {self.ch.int(1, 2)}, {carrier.lo})", carrier.lo, carrier.hi,
                            carrier.idx),
            ])() or v
        if not (carrier.lo <= v.lo and v.hi <= carrier.hi) or v.idx != carrier.idx:
            if carrier.idx or v.idx:
                v = Val(f"shift_right({name}, 1, {carrier.lo})", carrier.lo, carrier.hi, carrier.idx)
            else:                                     # clamp into the carrier
                v = Val(f"min(max({v.text}, {carrier.lo}), {carrier.hi})", carrier.lo, carrier.hi)
        self.emit(f"{name} = {v.text}", indent)
        if indent == 1:
            self.last = name

    def program(self) -> str:
        head = []
        if self.symbol:
            head.append(f'const {self.symbol_name} = "{self.symbol}"')
        toks = [str(t) for t in self.vocab if t >= 0] + ([self.symbol_name] if self.symbol else [])
        head.append("input seq: {" + ", ".join(toks) + "}")
        self.lines = head
        self.param_at = len(head)
        statements = self.ch.int(1, 8)
        has_loop = self.ch.chance(0.45)
        loop_at = self.ch.int(0, statements - 1) if has_loop else -1
        i = 0
        while i < statements:
            if i == loop_at:
                budget = self.ch.int(1, 3)
                self.loop(0, budget)
                i += budget
                if self.ch.chance(0.15):               # a second loop in sequence
                    self.loop(0, 1)
            else:
                self.assign(0)
                i += 1
        out = self.env[self.last] if self.last and self.ch.chance(0.7) else self.expr()
        self.lines.append(f"output {out.text}")
        if self.symbol == ">" and any(ln.startswith("param ") and "count_before" in ln for ln in self.lines):
            # the input contract under which a compiled model can know count_before(seq, >) at every
            # scored position (compiler/params.py); drawn from no chooser, so other programs are unchanged
            at = next(i for i, ln in enumerate(self.lines) if ln.startswith("input "))
            self.lines.insert(at + 1, 'require count(seq, EOQ) >= 1, "the input needs a >"')
        return "\n".join(self.lines) + "\n"


def generate(ch: Chooser) -> str:
    return Gen(ch).program()


def random_program(rng: random.Random) -> str:
    """A random program's source text, drawn from `rng`."""
    return generate(RandomChooser(rng))


@st.composite
def programs(draw) -> str:
    """Hypothesis strategy: a random program's source text."""
    return generate(DrawChooser(draw))
