"""Logical Inference (docs/benchmarks.md §5): relations from truth tables, released files, generator."""
import itertools
import random
from pathlib import Path

import numpy as np
import pytest

from rasp.errors import RaspError
from trainer.tasks import TASKS
from trainer.tasks import logic as L

TASK = TASKS["logic"]
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "logic"


def truth_table_relation(f1, f2):
    """Independent: evaluate both formulas in each of the 2^6 worlds as booleans."""
    def ev(tree, world):
        if isinstance(tree, int):
            return world[tree]
        if tree[0] == "not":
            return not ev(tree[1], world)
        a, b = ev(tree[0], world), ev(tree[2], world)
        return (a and b) if tree[1] == "and" else (a or b)
    rows = [(ev(f1, w), ev(f2, w)) for w in itertools.product([False, True], repeat=6)]
    both, left, right, out = (any(x and y for x, y in rows), any(x and not y for x, y in rows),
                              any(y and not x for x, y in rows), any(not x and not y for x, y in rows))
    table = {(1, 0, 0, 1): "=", (1, 0, 1, 1): "<", (1, 1, 0, 1): ">", (0, 1, 1, 0): "^",
             (0, 1, 1, 1): "|", (1, 1, 1, 0): "v"}
    return table.get((both, left, right, out), "#")


def _check_file(path, n, every=1):
    """Every label from the 64-world satisfying sets; every `every`-th also by boolean evaluation."""
    exs = L.load_file(path, n)
    for k, ex in enumerate(exs):
        f1 = L.parse([L.VOCAB[i - 1] for i in ex.input])
        f2 = L.parse([L.VOCAB[i - 1] for i in ex.input2])
        assert L.LABELS[ex.target] == L.relation(L.satisfying(f1), L.satisfying(f2))
        if k % every == 0:
            assert L.LABELS[ex.target] == truth_table_relation(f1, f2)
        assert min(max(L.n_ops(f1), L.n_ops(f2)), 12) == n
    return len(exs)


@pytest.mark.skipif(not DATA.exists(), reason="released Logic data not present")
def test_relations_recomputed_equal_every_released_test_label():
    counts = [_check_file(DATA / f"test{n}", n, every=25) for n in range(13)]
    assert counts == L.TEST_LINES


@pytest.mark.slow
@pytest.mark.skipif(not DATA.exists(), reason="released Logic data not present")
def test_relations_recomputed_equal_every_released_train_label():
    assert [_check_file(DATA / f"train{n}", n) for n in range(13)] == L.TRAIN_LINES


@pytest.mark.slow
@pytest.mark.skipif(not DATA.exists(), reason="released Logic data not present")
def test_released_protocol_splits():
    valid = L.load_released(DATA, "valid")
    assert len(valid) == 13_553 and len(L.load_released(DATA, "test12")) == 853
    with pytest.raises(RaspError):
        L.load_released(DATA, "test13")


def test_bitmask_relation_equals_truth_tables():
    r = random.Random(0)
    for _ in range(300):
        lhs, rhs, rel, group = L.draw_pair(r)
        assert rel == truth_table_relation(lhs, rhs)
        assert L.parse(L.to_tokens(lhs)) == lhs and L.parse(L.to_tokens(rhs)) == rhs
        assert len(L.variables(lhs) | L.variables(rhs)) <= 4


def test_generated_groups_and_labels_follow_the_release():
    exs = TASK.generate(np.random.default_rng(0), TASK.splits["train"].params, 1500)
    lines = np.array(L.TRAIN_LINES[:7]) + np.array(L.TEST_LINES[:7])
    p_rel = lines / lines.sum()
    counts = np.bincount([e.group for e in exs], minlength=7)
    for c, p in zip(counts, p_rel):
        assert abs(c - 1500 * p) <= 3 * np.sqrt(1500 * p * (1 - p)) + 2
    assert 0.45 < np.mean([L.LABELS[e.target] == "#" for e in exs]) < 0.6     # majority '#', ~52.6 %
    test = TASK.generate(np.random.default_rng(1), TASK.splits["test9"].params, 50)
    assert {e.group for e in test} == {9} and all(e.input2 for e in test)


def test_same_seed_same_data_and_distinct_pairs():
    a = TASK.generate(np.random.default_rng(5), TASK.splits["train"].params, 100)
    b = TASK.generate(np.random.default_rng(5), TASK.splits["train"].params, 100)
    assert [(e.input, e.input2, e.target) for e in a] == [(e.input, e.input2, e.target) for e in b]
    assert len({(tuple(e.input), tuple(e.input2)) for e in a}) == 100
    assert TASK.kind == "pair" and len(TASK.labels) == 7
    assert set(TASK.splits) == {"train", "valid"} | {f"test{n}" for n in range(7, 13)}


def test_file_round_trip_and_errors(tmp_path):
    exs = TASK.generate(np.random.default_rng(2), TASK.splits["test7"].params, 20)
    L.write_file(tmp_path / "test7", exs)
    back = L.load_file(tmp_path / "test7", 7)
    assert [(e.input, e.input2, e.target, e.group) for e in back] == \
        [(e.input, e.input2, e.target, e.group) for e in exs]
    (tmp_path / "bad").write_text("=\t( a ( and b )\tc\n")
    with pytest.raises(RaspError, match="bad:1"):
        L.load_file(tmp_path / "bad")
