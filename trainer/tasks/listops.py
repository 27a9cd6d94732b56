"""ListOps (Nangia & Bowman 2018; docs/benchmarks.md §4, P1 §6.4).

Generator: the NB `generate_tree` exactly, calling Python's `random` in the
original order (random() for the leaf/operator draw, randint(2, MAX_ARGS) for
the arity, the children, then choice(OPERATORS); a leaf is choice(0..9)),
VALUE_P = 0.25, depth starting at 1 and forced leaves at MAX_DEPTH.  Only
distinct trees are kept.  Length filters (LTL bins, BTRC 100..1000 tokens,
P1's <= 100) count tokens of the bracket-stripped sequence the model reads,
`[SM 6 5 ]` (= leaves + 2 per operator, also LRA's length).  A tree that
grows past the split's longest length is abandoned as soon as it does: the
filter would reject it anyway, so the accepted trees are distributed exactly as
generate-then-filter, and the long splits cost time linear in their length.

Value: MIN, MAX, SM = sum mod 10, MED = int(numpy.median(args)) (even count:
the mean of the two middle values, truncated), computed here on the sorted
arguments; the test checks it against numpy on the released labels.

Kind "classify": 10 classes (the root value).  `Example.group` = the length
bin (100 * (tokens // 100)).
"""
from __future__ import annotations

import math
import random
from functools import lru_cache
from pathlib import Path

import numpy as np

from rasp.errors import RaspError
from trainer.tasks.base import Example, SeqTask, Split, register
from trainer.tasks.common import distinct, python_random, read_tab_lines

MIN, MAX, MED, SM, END = "[MIN", "[MAX", "[MED", "[SM", "]"
OPERATORS = [MIN, MAX, MED, SM]                 # NB order (random.choice draws from it)
VALUES = list(range(10))
VALUE_P = 0.25
VOCAB = tuple(str(v) for v in VALUES) + (MIN, MAX, MED, SM, END)
LABELS = tuple(str(v) for v in VALUES)


class TooLong(Exception):
    pass


def generate_tree(r: random.Random, max_args: int, max_depth: int, budget: int = 0):
    """NB's tree as nested tuples (op, child, ...); a leaf is an int.  With
    budget > 0, raise TooLong once the stripped token count passes it.
    Returns (tree, log of its probability under the generator)."""
    count, logp = [0], [0.0]
    op_log = math.log(VALUE_P / ((max_args - 1) * len(OPERATORS)))

    def grow(depth):
        rnd = r.random() if depth < max_depth else 1
        if rnd > VALUE_P:
            count[0] += 1
            if budget and count[0] > budget:
                raise TooLong
            logp[0] += LOG_LEAF[depth < max_depth]
            return r.choice(VALUES)
        n = r.randint(2, max_args)
        count[0] += 2                       # the operator and its `]`
        logp[0] += op_log
        children = [grow(depth + 1) for _ in range(n)]
        return (r.choice(OPERATORS), *children)

    return grow(1), logp[0]


LOG_LEAF = (math.log(1 / len(VALUES)), math.log((1 - VALUE_P) / len(VALUES)))   # at MAX_DEPTH, above it


@lru_cache(maxsize=16)
def size_tables(max_args: int, max_depth: int, hi: int) -> tuple:
    """Exact size distributions of NB subtrees, for sampling conditioned on a
    length bin.  P[d][n] = P(a subtree grown at depth d has n tokens), n <= hi;
    C[d][k] = the k-fold convolution of P[d] (k children at depth d)."""
    P = np.zeros((max_depth + 2, hi + 1))
    C = np.zeros((max_depth + 2, max_args + 1, hi + 1))
    for d in range(max_depth, 0, -1):
        if d >= max_depth:
            P[d, 1] = 1.0
        else:
            P[d, 1] = 1 - VALUE_P
            for k in range(2, max_args + 1):
                P[d, 2:] += VALUE_P / (max_args - 1) * C[d + 1, k, :hi - 1]
        C[d, 0, 0] = 1.0
        for k in range(1, max_args + 1):
            C[d, k] = np.convolve(C[d, k - 1], P[d])[:hi + 1]
    return P, C


def acceptance(params: dict) -> float:
    """P(a raw NB tree has min_tokens..max_tokens tokens), exactly."""
    hi = int(params["max_tokens"])
    P, _ = size_tables(int(params["max_args"]), int(params["max_depth"]), hi)
    return float(P[1, int(params.get("min_tokens", 1)):hi + 1].sum())


def conditional_tree(rng: np.random.Generator, max_args: int, max_depth: int, lo: int, hi: int):
    """A tree distributed as NB's generator conditioned on lo <= tokens <= hi,
    drawn top-down from the exact size tables (used where rejection is slow)."""
    P, C = size_tables(max_args, max_depth, hi)

    def draw(weights):
        w = np.asarray(weights, dtype=float)
        return int(rng.choice(len(w), p=w / w.sum()))

    def grow(depth, n):
        if n == 1:
            return int(rng.integers(len(VALUES)))
        m = n - 2                                        # tokens for the children
        k = 2 + draw([C[depth + 1, k, m] for k in range(2, max_args + 1)])
        children = []
        for left in range(k, 0, -1):                     # sizes one child at a time
            if left == 1:
                size = m
            else:
                size = draw(P[depth + 1, :m + 1] * C[depth + 1, left - 1, m::-1])
            children.append(grow(depth + 1, size))
            m -= size
        return (OPERATORS[int(rng.integers(len(OPERATORS)))], *children)

    return grow(1, lo + draw(P[1, lo:hi + 1]))


def tokens(tree) -> list:
    if isinstance(tree, int):
        return [str(tree)]
    out = [tree[0]]
    for child in tree[1:]:
        out += tokens(child)
    return out + [END]


def apply(op: str, args: list) -> int:
    if op == MIN:
        return min(args)
    if op == MAX:
        return max(args)
    if op == SM:
        return sum(args) % 10
    if op == MED:
        s, n = sorted(args), len(args)
        return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) // 2   # int(np.median), args >= 0
    raise RaspError(f"unknown ListOps operator {op!r}")


def value(toks) -> int:
    """Value of a bracket-stripped token sequence (stack evaluation)."""
    stack = [[None, []]]
    for position, t in enumerate(toks, 1):
        if t in OPERATORS:
            stack.append([t, []])
        elif t == END:
            if len(stack) < 2:
                raise RaspError(f"ListOps: unmatched ']' at token {position}")
            op, args = stack.pop()
            if not args:
                raise RaspError(f"ListOps: operator {op} without arguments at token {position}")
            stack[-1][1].append(apply(op, args))
        elif t.isdigit() and len(t) == 1:
            stack[-1][1].append(int(t))
        else:
            raise RaspError(f"ListOps: unknown token {t!r} at token {position}")
    if len(stack) != 1 or len(stack[0][1]) != 1:
        raise RaspError("ListOps: the expression is not one complete tree")
    return stack[0][1][0]


def bracketed(tree) -> str:
    """The released files' binary-bracketed form: `( ( ( [SM 6 ) 5 ) ] )`."""
    if isinstance(tree, int):
        return str(tree)
    t = f"( {tree[0]} {bracketed(tree[1])} )"
    for child in tree[2:]:
        t = f"( {t} {bracketed(child)} )"
    return f"( {t} {END} )"


def strip_brackets(text: str) -> list:
    return [t for t in text.split() if t not in ("(", ")")]


def draw_tree(r: random.Random, params: dict, pool: float = 0.0):
    """One raw NB tree meeting the split's length filter, or None (rejected).
    With pool = N > 0 a tree of probability p is kept with probability
    (1 - exp(-N p)) / (N p): the kept trees are then distributed like a uniform
    pick from the distinct trees among N draws, which is what NB's files are
    (75 % of raw draws are single digits; a distinct set holds ten of them)."""
    lo, hi = int(params.get("min_tokens", 1)), int(params.get("max_tokens", 0))
    try:
        tree, logp = generate_tree(r, int(params["max_args"]), int(params["max_depth"]), hi)
    except TooLong:
        return None
    toks = tokens(tree)
    if len(toks) < lo:
        return None
    if pool:
        x = pool * math.exp(logp)
        if r.random() >= (-math.expm1(-x) / x if x > 1e-12 else 1.0):
            return None
    return tree, toks


@lru_cache(maxsize=16)
def pool_size(max_args: int, max_depth: int, n_distinct: int) -> float:
    """N raw draws whose distinct trees number n_distinct: solves
    sum_t (1 - exp(-N p_t)) = n_distinct, the sum estimated on 20 000 raw
    trees as the mean of (1 - exp(-N p)) / p (fixed seed, about 1 %)."""
    r = random.Random(12345)
    probs = np.array([math.exp(generate_tree(r, max_args, max_depth)[1]) for _ in range(20_000)])
    tiny = probs < 1e-200                      # underflowed: (1 - e^{-Np}) / p -> N

    def distinct_count(N):
        safe = np.where(tiny, 1.0, probs)
        return float(np.mean(np.where(tiny, N, -np.expm1(-N * safe) / safe)))
    lo, hi = float(n_distinct), 1e3 * n_distinct
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if distinct_count(mid) < n_distinct else (lo, mid)
    return lo


def example(toks) -> Example:
    return Example(input=[VOCAB.index(t) + 1 for t in toks], target=value(toks), group=100 * (len(toks) // 100))


def generate(rng: np.random.Generator, params: dict, n: int) -> list:
    """params: max_args, max_depth, min_tokens, max_tokens (inclusive; 0 = no
    cap), distinct_of (imitate a file of that many distinct trees; 0 = off).
    Splits whose length filter keeps under 1 % of raw trees are drawn from the
    exact conditional sampler instead of by rejection."""
    lo, hi = int(params.get("min_tokens", 1)), int(params.get("max_tokens", 0))
    args, depth = int(params["max_args"]), int(params["max_depth"])
    if hi and acceptance(params) < 0.01:
        draw = lambda: (lambda t: (t, tokens(t)))(conditional_tree(rng, args, depth, lo, hi))  # noqa: E731
    else:
        r = python_random(rng)
        pool = pool_size(args, depth, int(params["distinct_of"])) if params.get("distinct_of") else 0.0
        draw = lambda: draw_tree(r, params, pool)  # noqa: E731
    trees = distinct(draw, n, key=lambda tt: tuple(tt[1]), max_tries=2_000 * n + 100_000)
    return [example(toks) for _, toks in trees]


# ---- the released format: LABEL<TAB>bracketed expression ----

def load_tsv(path) -> list:
    """Examples from a NB/OM `.tsv` file; bad lines are RaspErrors naming PATH:LINE."""
    def parse_line(fields):
        label, expr = fields
        ex = example(strip_brackets(expr))
        ex.target = int(label)
        if not 0 <= ex.target <= 9:
            raise ValueError(f"label {label} is not a digit")
        return ex
    return read_tab_lines(path, "ListOps", parse_line)


def write_tsv(path, trees):
    lines = [f"{value(tokens(t))}\t{bracketed(t)}" for t in trees]
    tmp = Path(str(path) + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)


# NB's released files hold ~100 000 distinct trees (90 000 train + 10 000 test; test_d20s.tsv has
# 51 of the 400 possible 4-token trees, so about 1 in 8 of them is in the test part)
NB_DISTINCT = 100_000


def _split(name, size, description, max_args=5, max_depth=20, min_tokens=1, max_tokens=0, distinct_of=0):
    return Split(name, {"max_args": max_args, "max_depth": max_depth, "min_tokens": min_tokens,
                        "max_tokens": max_tokens, "distinct_of": distinct_of}, size, description)


SPLITS = {
    "train": _split("train", 90_000, "NB generator (MAX_ARGS 5, MAX_DEPTH 20), P1 keeps <= 100 tokens; "
                    "size = the NB release's train file (not in the mirror)", max_tokens=100,
                    distinct_of=NB_DISTINCT),
    "valid": _split("valid", 1_000, "P1: the first 1 000 lines of train", max_tokens=100,
                    distinct_of=NB_DISTINCT),
    "test_iid": _split("test_iid", 10_000, "near-IID, as test_d20s.tsv (<= 1 000 tokens)",
                       max_tokens=1000, distinct_of=NB_DISTINCT),
}
for _lo in range(200, 1000, 100):      # LTL: keep if MIN < #tokens < MAX
    SPLITS[f"test_{_lo}_{_lo + 100}"] = _split(f"test_{_lo}_{_lo + 100}", 2_000, "LTL length bin",
                                               min_tokens=_lo + 1, max_tokens=_lo + 99)
for _a in (10, 15):                    # BTRC (its generators also cap the depth at 9)
    SPLITS[f"test_arg{_a}"] = _split(f"test_arg{_a}", 2_000, f"BTRC: MAX_ARGS {_a}, MAX_DEPTH 9, 100..1000 tokens",
                                     max_args=_a, max_depth=9, min_tokens=100, max_tokens=1000)
SPLITS["test_lra"] = _split("test_lra", 2_000, "LRA: MAX_ARGS 10, MAX_DEPTH 10, 500 < length < 2000",
                            max_args=10, max_depth=10, min_tokens=501, max_tokens=1999)
# cpu preset: shallow trees, <= 50 tokens; a longer test for length generalization
SPLITS["train_cpu"] = _split("train_cpu", 50_000, "cpu: MAX_DEPTH 6, <= 50 tokens", max_depth=6, max_tokens=50,
                                distinct_of=60_000)
SPLITS["valid_cpu"] = _split("valid_cpu", 1_000, "cpu: as train_cpu", max_depth=6, max_tokens=50,
                                distinct_of=60_000)
SPLITS["test_cpu_51_100"] = _split("test_cpu_51_100", 1_000, "cpu: MAX_DEPTH 6, 51..100 tokens",
                                   max_depth=6, min_tokens=51, max_tokens=100)
# the cpu suite's test splits: P1's near-IID and length bins scaled to the cpu training length (at 200
# steps every model is near chance on the paper's 200..2000-token splits; docs/benchmarks.md §4)
SPLITS["test_cpu_iid"] = _split("test_cpu_iid", 1_000, "cpu: near-IID, as train_cpu", max_depth=6, max_tokens=50,
                                distinct_of=60_000)
SPLITS["test_cpu_101_200"] = _split("test_cpu_101_200", 1_000, "cpu: MAX_DEPTH 6, 101..200 tokens",
                                    max_depth=6, min_tokens=101, max_tokens=200)

TASK = register(SeqTask(
    name="listops", kind="classify", vocab=VOCAB, labels=LABELS, splits=SPLITS, generate=generate,
    metrics=("acc",), family="listops",
    description="ListOps: the value (0-9) of a nested MIN/MAX/MED/SM expression (Nangia & Bowman 2018)",
    train_range=(1, 100),
    paper_stats={
        "source": "docs/benchmarks.md §4 (NB, LTL, BTRC, LRA; P1 Table 1)",
        "near-IID test (test_d20s.tsv)": "10 000; lengths <= 939; 8 933 have <= 100 tokens",
        "length bins": "2 000 per bin, 200-300 ... 900-1000",
        "argument splits": "2 000 each, MAX_ARGS 10 / 15, MAX_DEPTH 9, 100..1000 tokens",
        "LRA": "96 000 / 2 000 / 2 000; 500 < length < 2 000",
        "labels": "10 classes; most frequent in test_d20s: 9 (11.4 %)",
    },
))
