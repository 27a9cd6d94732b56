"""Logical Inference (Bowman et al. 2015; docs/benchmarks.md §5, P1 §6.5).

A Python 3 port of OM `generate_neg_set_data.py`: each pair draws a random
4-variable subset of a..f (`random.sample(sorted(universe), 4)`: Python 2's
sample of a small int set saw the same order); `create_sub_statement(sub,
maxlen=12)` picks from [and, or, and, or, 0 x5] (a binary operator w.p. 4/9,
a leaf when 0 or maxlen < 2), children get `maxlen // 2` (Python 2's integer
`/`), and every node is wrapped in `not` w.p. 1/3.  Formulas true in all or
no worlds of the 2^6 are discarded.  The relation (7 MacCartney-Manning
labels) comes from the satisfying sets over the 64 worlds, as in
`compute_relation`.  The pair's group (the file number N) = min(max(#ops of
either formula), 12), #ops counting and/or/not.

Kind "pair": `input` and `input2` are the two whitespace-split formulas,
parentheses included (P1 keeps them).  Splits: P1 trains on 0..6 operators
and tests on 7..12 (P1's text says 8-12, its Table 2 shows 7-12: we report 7-12).  Generated splits draw
pairs until their group is in the split's range; `load_released(folder,
split)` reads the OM files under the same names (train0..6 with every 10th
pair as valid, as JRC process_proplog.py).
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

VARIABLES = ("a", "b", "c", "d", "e", "f")
VOCAB = ("(", ")") + VARIABLES + ("and", "or", "not")
LABELS = ("=", "<", ">", "^", "|", "v", "#")
OPERATORS = ["and", "or", "and", "or", "0", "0", "0", "0", "0"]
NEG_OR_NONE = ["not", "0", "0"]
WORLDS = 64
ALL = (1 << WORLDS) - 1
# satisfying worlds of variable i as a 64-bit mask: world w makes i true iff bit i of w is set
VAR_MASK = [sum(1 << w for w in range(WORLDS) if w >> i & 1) for i in range(len(VARIABLES))]


def create_sub_statement(r: random.Random, universe: list, maxlen: int):
    operator = r.choice(OPERATORS)
    if operator == "0" or maxlen < 2:
        temp = r.choice(universe)
    else:
        lhs = create_sub_statement(r, universe, maxlen // 2)
        rhs = create_sub_statement(r, universe, maxlen // 2)
        temp = (lhs, operator, rhs)
    if r.choice(NEG_OR_NONE) == "0":
        return temp
    return ("not", temp)


def satisfying(tree) -> int:
    """The set of satisfying worlds as a 64-bit mask."""
    if isinstance(tree, int):
        return VAR_MASK[tree]
    if tree[0] == "not":
        return ALL & ~satisfying(tree[1])
    left, op, right = tree
    a, b = satisfying(left), satisfying(right)
    return a & b if op == "and" else a | b


def relation(left: int, right: int) -> str:
    both, just_left, just_right, outside = left & right, left & ~right, right & ~left, ALL & ~(left | right)
    if both and not just_right and not just_left and outside:
        return "="
    if both and just_right and not just_left and outside:
        return "<"
    if both and not just_right and just_left and outside:
        return ">"
    if not both and just_right and just_left and not outside:
        return "^"
    if not both and just_right and just_left and outside:
        return "|"
    if both and just_right and just_left and not outside:
        return "v"
    return "#"


def n_ops(tree) -> int:
    if isinstance(tree, int):
        return 0
    return 1 + sum(n_ops(t) for t in tree if isinstance(t, (tuple, int)))


def to_tokens(tree) -> list:
    if isinstance(tree, int):
        return [VARIABLES[tree]]
    if tree[0] == "not":
        return ["(", "not"] + to_tokens(tree[1]) + [")"]
    left, op, right = tree
    return ["("] + to_tokens(left) + ["(", op] + to_tokens(right) + [")", ")"]


def parse(tokens: list):
    """The released format back to a tree; a RaspError on a malformed formula."""
    pos = 0

    def take(expected=None):
        nonlocal pos
        if pos >= len(tokens):
            raise RaspError("formula ends early")
        t = tokens[pos]
        if expected is not None and t != expected:
            raise RaspError(f"expected {expected!r} at token {pos + 1}, got {t!r}")
        pos += 1
        return t

    def node():
        t = take()
        if t in VARIABLES:
            return VARIABLES.index(t)
        if t != "(":
            raise RaspError(f"unexpected token {t!r} at token {pos}")
        if tokens[pos:pos + 1] == ["not"]:
            take()
            inner = node()
            take(")")
            return ("not", inner)
        left = node()
        take("(")
        op = take()
        if op not in ("and", "or"):
            raise RaspError(f"expected 'and' or 'or' at token {pos}, got {op!r}")
        right = node()
        take(")")
        take(")")
        return (left, op, right)

    tree = node()
    if pos != len(tokens):
        raise RaspError(f"trailing tokens after the formula at token {pos + 1}")
    return tree


def draw_pair(r: random.Random):
    """One accepted pair (lhs, rhs, relation, group) of the OM loop."""
    while True:
        sub = r.sample(sorted(range(len(VARIABLES))), 4)
        lhs = create_sub_statement(r, sub, 12)
        rhs = create_sub_statement(r, sub, 12)
        s1, s2 = satisfying(lhs), satisfying(rhs)
        if s1 in (0, ALL) or s2 in (0, ALL):
            continue
        return lhs, rhs, relation(s1, s2), min(max(n_ops(lhs), n_ops(rhs)), 12)


def encode(tokens) -> list:
    return [VOCAB.index(t) + 1 for t in tokens]


def example(lhs_tokens, rhs_tokens, rel, group) -> Example:
    return Example(input=encode(lhs_tokens), target=LABELS.index(rel), input2=encode(rhs_tokens), group=group)


def log_prob(tree, maxlen: int = 12) -> float:
    """log P(create_sub_statement draws this formula | its 4-variable subset)."""
    p = math.log(2 / 3) if not (isinstance(tree, tuple) and tree[0] == "not") else math.log(1 / 3)
    node = tree[1] if isinstance(tree, tuple) and tree[0] == "not" else tree
    if isinstance(node, int):
        return p + (math.log(5 / 9) if maxlen >= 2 else 0.0) + math.log(1 / 4)
    left, _, right = node
    return p + math.log(2 / 9) + log_prob(left, maxlen // 2) + log_prob(right, maxlen // 2)


def variables(tree) -> set:
    if isinstance(tree, int):
        return {tree}
    return set().union(*(variables(t) for t in tree if isinstance(t, (tuple, int))))


def pair_log_prob(lhs, rhs) -> float:
    """log P(one raw OM draw is this pair), summed over the subsets holding its variables."""
    k = len(variables(lhs) | variables(rhs))
    return math.log(math.comb(6 - k, 4 - k) / 15) + log_prob(lhs) + log_prob(rhs)


@lru_cache(maxsize=1)
def kept_fraction() -> float:
    """P(a raw pair survives the tautology / contradiction filter), on 20 000 draws (fixed seed)."""
    r = random.Random(12345)
    kept = 0
    for _ in range(20_000):
        sub = r.sample(range(6), 4)
        s1 = satisfying(create_sub_statement(r, sub, 12))
        s2 = satisfying(create_sub_statement(r, sub, 12))
        kept += s1 not in (0, ALL) and s2 not in (0, ALL)
    return kept / 20_000


def generate(rng: np.random.Generator, params: dict, n: int) -> list:
    """params: min_ops, max_ops (the pair's group, inclusive); pool = the OM
    loop's count of accepted pairs (500 000) whose distinct ones form the files:
    a pair of probability p is kept w.p. (1 - exp(-N p)) / (N p), so the kept pairs
    are distributed like a uniform pick from those files (small formulas recur
    in the raw draws but appear once in the files).  pool 0 = raw draws."""
    lo, hi = int(params["min_ops"]), int(params["max_ops"])
    pool = float(params.get("pool", 0))
    r = python_random(rng)

    def draw():
        lhs, rhs, rel, group = draw_pair(r)
        if not lo <= group <= hi:
            return None
        if pool:
            x = pool * math.exp(pair_log_prob(lhs, rhs)) / kept_fraction()
            if r.random() >= -math.expm1(-x) / x:
                return None
        return lhs, rhs, rel, group
    pairs = distinct(draw, n, key=lambda p: (p[0], p[1]))
    return [example(to_tokens(a), to_tokens(b), rel, g) for a, b, rel, g in pairs]


# ---- the released files: REL<TAB>formula1<TAB>formula2, N = group ----

def load_file(path, group: int | None = None) -> list:
    def parse_line(fields):
        rel, f1, f2 = fields
        if rel not in LABELS:
            raise RaspError(f"unknown relation {rel!r}")
        t1, t2 = f1.split(), f2.split()
        parse(t1)
        parse(t2)
        return example(t1, t2, rel, group)
    return read_tab_lines(path, "Logic", parse_line)


def load_released(folder, split: str) -> list:
    """train / valid = train0..6 without / with every 10th pair (index % 10 == 0);
    testN = the testN file."""
    folder = Path(folder)
    if split in ("train", "valid"):
        pairs = [ex for n in range(7) for ex in load_file(folder / f"train{n}", n)]
        return [ex for i, ex in enumerate(pairs) if (i % 10 == 0) == (split == "valid")]
    if split.startswith("test") and split[4:].isdigit() and 0 <= int(split[4:]) <= 12:
        return load_file(folder / split, int(split[4:]))
    raise RaspError(f"logic: no released split {split!r} (train, valid, test0..test12)")


def write_file(path, examples):
    lines = [f"{LABELS[e.target]}\t{' '.join(VOCAB[i - 1] for i in e.input)}\t"
             f"{' '.join(VOCAB[i - 1] for i in e.input2)}" for e in examples]
    tmp = Path(str(path) + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)


OM_POOL = 500_000                      # the OM loop: `while total < 500000`
TRAIN_LINES = [30, 2319, 12451, 23252, 30373, 34152, 32952, 26671, 18962, 12634, 8181, 4894, 4831]
TEST_LINES = [6, 410, 2198, 4104, 5361, 6027, 5816, 4707, 3347, 2230, 1444, 864, 853]

SPLITS = {
    "train": Split("train", {"min_ops": 0, "max_ops": 6, "pool": OM_POOL}, 121_976, "P1: train0..6 less every 10th pair"),
    "valid": Split("valid", {"min_ops": 0, "max_ops": 6, "pool": OM_POOL}, 13_553, "P1: every 10th pair of train0..6"),
}
for _n in range(7, 13):
    SPLITS[f"test{_n}"] = Split(f"test{_n}", {"min_ops": _n, "max_ops": _n, "pool": OM_POOL}, TEST_LINES[_n],
                                f"{_n} operators (P1 Table 2 column)")

TASK = register(SeqTask(
    name="logic", kind="pair", vocab=VOCAB, labels=LABELS, splits=SPLITS, generate=generate,
    metrics=("acc",), family="logic",
    description="Logical Inference: the relation (7 classes) between two propositional formulas (Bowman et al. 2015)",
    train_range=None,
    paper_stats={
        "source": "docs/benchmarks.md §5 (OM data/propositionallogic, P1 Table 2)",
        "train0..12 lines": TRAIN_LINES, "test0..12 lines": TEST_LINES,
        "P1 protocol": "train on train0..6 (135 529 pairs; every 10th -> dev: ~121 976 / 13 553), test on test7..12",
        "majority label": "'#' = 52.6 % of train6 (17 340 / 32 952)",
    },
))
