"""ListOps (docs/benchmarks.md §4): values, released labels, generator statistics, splits, loader."""
import random
from pathlib import Path

import numpy as np
import pytest

from rasp.errors import RaspError
from trainer.tasks import TASKS
from trainer.tasks import listops as lo

TASK = TASKS["listops"]
RELEASED = Path(__file__).resolve().parents[2] / "shared" / "data" / "listops" / "test_d20s.tsv"


def numpy_value(tree):
    """Independent evaluation on the tree, MED as int(numpy.median) (the NB definition)."""
    if isinstance(tree, int):
        return tree
    args = [numpy_value(c) for c in tree[1:]]
    return {lo.MIN: min, lo.MAX: max, lo.SM: lambda a: sum(a) % 10,
            lo.MED: lambda a: int(np.median(a))}[tree[0]](args)


def parse_bracketed(text):
    """The released binary-bracketed form back to a tree (independent of strip_brackets)."""
    toks = text.split()
    pos = 0

    def node():
        nonlocal pos
        t = toks[pos]
        pos += 1
        if t != "(":
            return t
        items = []
        while toks[pos] != ")":
            items.append(node())
        pos += 1
        return items
    flat = []

    def walk(x):
        if isinstance(x, list):
            for y in x:
                walk(y)
        else:
            flat.append(x)
    walk(node())
    stack = [[]]
    for t in flat:
        if t in lo.OPERATORS:
            stack.append([t])
        elif t == lo.END:
            done = tuple(stack.pop())
            stack[-1].append(done)
        else:
            stack[-1].append(int(t))
    return stack[0][0]


@pytest.mark.skipif(not RELEASED.exists(), reason="released ListOps data not present")
def test_values_recomputed_equal_every_released_label():
    lines = RELEASED.read_text().splitlines()
    assert len(lines) == 10_000
    exs = lo.load_tsv(RELEASED)
    for line, ex in zip(lines, exs):
        label, expr = line.split("\t")
        toks = lo.strip_brackets(expr)
        assert lo.value(toks) == int(label) == ex.target
        assert ex.input == [lo.VOCAB.index(t) + 1 for t in toks]
    for line in lines[:2000]:                        # and numpy's median on the parsed tree
        label, expr = line.split("\t")
        tree = parse_bracketed(expr)
        assert numpy_value(tree) == int(label) and lo.bracketed(tree) == expr


@pytest.mark.skipif(not RELEASED.exists(), reason="released ListOps data not present")
def test_generated_near_iid_statistics_match_the_release():
    rel = lo.load_tsv(RELEASED)
    ex = TASK.generate(np.random.default_rng(0), TASK.splits["test_iid"].params, 2000)
    for stat in (lambda L: L <= 100, lambda L: L <= 10, lambda L: L == 5):
        p_rel = np.mean([stat(len(e.input)) for e in rel])
        p_gen = np.mean([stat(len(e.input)) for e in ex])
        se = np.sqrt(p_rel * (1 - p_rel) * (1 / len(rel) + 1 / len(ex)))
        assert abs(p_gen - p_rel) <= 3 * se + 1e-3, (p_gen, p_rel)


def test_generator_is_nb_and_values_agree():
    r = random.Random(0)
    for _ in range(300):
        tree, _ = lo.generate_tree(r, 5, 6)
        toks = lo.tokens(tree)
        assert lo.value(toks) == numpy_value(tree)
        assert lo.strip_brackets(lo.bracketed(tree)) == toks
        assert parse_bracketed(lo.bracketed(tree)) == tree


def test_med_is_numpy_median_truncated():
    rng = np.random.default_rng(0)
    for _ in range(500):
        args = list(rng.integers(0, 10, size=int(rng.integers(1, 16))))
        assert lo.apply(lo.MED, args) == int(np.median(args))


def test_splits_lengths_and_distinct():
    for name, n in (("test_200_300", 30), ("test_900_1000", 4), ("test_arg10", 20), ("train_cpu", 200)):
        p = TASK.splits[name].params
        exs = TASK.generate(np.random.default_rng(1), p, n)
        lengths = [len(e.input) for e in exs]
        assert min(lengths) >= p["min_tokens"] and max(lengths) <= p["max_tokens"]
        assert len({tuple(e.input) for e in exs}) == n
        assert all(lo.value([lo.VOCAB[i - 1] for i in e.input]) == e.target for e in exs)
        assert all(e.group == 100 * (len(e.input) // 100) for e in exs)
    assert TASK.splits["test_300_400"].params["min_tokens"] == 301            # LTL: MIN < n < MAX
    assert TASK.splits["test_arg15"].params == {"max_args": 15, "max_depth": 9, "min_tokens": 100,
                                                "max_tokens": 1000, "distinct_of": 0}
    assert TASK.kind == "classify" and len(TASK.labels) == 10 and TASK.metrics == ("acc",)


def test_conditional_sampler_matches_rejection():
    """Two independent routes to NB-conditioned-on-length: same size and root-arity statistics."""
    params = {"max_args": 5, "max_depth": 6, "min_tokens": 20, "max_tokens": 40}
    r = random.Random(3)
    rej = []
    while len(rej) < 600:
        t = lo.draw_tree(r, params)
        if t:
            rej.append(t[0])
    rng = np.random.default_rng(3)
    con = [lo.conditional_tree(rng, 5, 6, 20, 40) for _ in range(600)]
    for stat in (lambda t: len(lo.tokens(t)) <= 28, lambda t: len(t) - 1 == 2, lambda t: len(t) - 1 >= 4):
        a, b = np.mean([stat(t) for t in rej]), np.mean([stat(t) for t in con])
        p = (a + b) / 2
        assert abs(a - b) <= 3 * np.sqrt(2 * p * (1 - p) / 600) + 1e-3
    # the exact size table's acceptance agrees with rejection's hit rate
    r = random.Random(5)
    hits = sum(lo.draw_tree(r, params) is not None for _ in range(20_000))
    p = lo.acceptance(params)
    assert abs(hits - 20_000 * p) <= 3 * np.sqrt(20_000 * p * (1 - p)) + 1


def test_same_seed_same_data():
    p = TASK.splits["train_cpu"].params
    a = TASK.generate(np.random.default_rng(7), p, 40)
    b = TASK.generate(np.random.default_rng(7), p, 40)
    assert [(e.input, e.target) for e in a] == [(e.input, e.target) for e in b]


def test_tsv_round_trip_and_errors(tmp_path):
    r = random.Random(1)
    trees = [lo.generate_tree(r, 5, 5)[0] for _ in range(50)]
    lo.write_tsv(tmp_path / "x.tsv", trees)
    back = lo.load_tsv(tmp_path / "x.tsv")
    assert [e.input for e in back] == [[lo.VOCAB.index(t) + 1 for t in lo.tokens(tr)] for tr in trees]
    assert [e.target for e in back] == [numpy_value(t) for t in trees]
    (tmp_path / "bad.tsv").write_text("3\t( [SM 1 2 )\n")
    with pytest.raises(RaspError, match="bad.tsv:1"):
        lo.load_tsv(tmp_path / "bad.tsv")
