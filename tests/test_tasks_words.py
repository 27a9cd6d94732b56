"""Word problems (docs/benchmarks.md §3): group tables, prefix products, splits, the WP loader."""
import itertools
from pathlib import Path

import numpy as np
import pytest

from rasp.errors import RaspError
from trainer.tasks import TASKS, groups, words
from trainer.tasks.scoring import score

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "words"   # released data, tests only


@pytest.mark.parametrize("name", ["z60", "a4z5", "a5", "s5", "a4", "z5"])
def test_group_axioms(name):
    g = groups.get(name)
    t, n = g.table, g.order
    assert g.identity == 0
    assert (t[0] == np.arange(n)).all() and (t[:, 0] == np.arange(n)).all()
    # associativity, exhaustively: (a.b).c == a.(b.c) for all triples (vectorised)
    left = t[t[:, :, None], np.arange(n)[None, None, :]]          # (a.b).c
    right = t[np.arange(n)[:, None, None], t[None, :, :]]         # a.(b.c)
    assert (left == right).all()
    # inverses: every row and column is a permutation (a Latin square) with the identity in it
    assert all(sorted(row) == list(range(n)) for row in t.tolist())
    assert all(sorted(col) == list(range(n)) for col in t.T.tolist())


def test_monoid_is_aperiodic_not_a_group():
    m = groups.APERIODIC.table
    n = 4
    left = m[m[:, :, None], np.arange(n)[None, None, :]]
    right = m[np.arange(n)[:, None, None], m[None, :, :]]
    assert (left == right).all() and (m[0] == np.arange(4)).all()
    assert m[3].tolist() == [3] * 4                                 # X absorbs
    for a in range(4):                                              # aperiodic: a^2 == a^3
        assert m[m[a, a], a] == m[a, a]
    mixed = groups.get("mixed")
    assert mixed.order == 240 and mixed.mul(60 * 1 + 5, 60 * 2 + 7) == 60 * 3 + groups.get("a5").mul(5, 7)


def test_a5_is_the_even_half_of_s5_and_orders():
    s5, s5_perms = groups.permutation_group("S5", 5)
    a5, a5_perms = groups.permutation_group("A5", 5, even_only=True)
    assert s5_perms == sorted(itertools.permutations(range(5))) and s5_perms[0] == (0, 1, 2, 3, 4)
    assert a5_perms == [p for p in s5_perms if groups.is_even(p)] and len(a5_perms) == 60
    idx = {p: i for i, p in enumerate(s5_perms)}
    emb = np.array([idx[p] for p in a5_perms])
    assert (s5.table[emb[:, None], emb[None, :]] == emb[a5.table]).all()   # a subgroup, same product
    # index 2: the odd permutations are the other coset
    odd = [p for p in s5_perms if not groups.is_even(p)]
    assert len(odd) == 60 and all(not groups.is_even(groups.compose(p, q)) for p in odd[:5] for q in a5_perms)
    assert {g: groups.get(g).order for g in groups.NAMES} == {"z60": 60, "a4z5": 60, "a5": 60, "s5": 120,
                                                              "mixed": 240}
    assert not (groups.get("a5").table == groups.get("a5").table.T).all()   # non-abelian
    assert (groups.get("z60").table == groups.get("z60").table.T).all()


def _direct_prefix(name, word):
    """Prefix products by composing actual permutations / integers (not the tables)."""
    if name == "z60":
        return list(np.cumsum(word) % 60)
    if name in ("a5", "s5"):
        perms = [p for p in itertools.permutations(range(5)) if name == "s5" or groups.is_even(p)]
        out, acc = [], None
        for x in word:
            acc = perms[x] if acc is None else tuple(acc[perms[x][i]] for i in range(5))
            out.append(perms.index(acc))
        return out
    if name == "a4z5":
        a4 = [p for p in itertools.permutations(range(4)) if groups.is_even(p)]
        out, acc, z = [], None, 0
        for x in word:
            p, j = a4[x // 5], x % 5
            acc = p if acc is None else tuple(acc[p[i]] for i in range(4))
            z = (z + j) % 5
            out.append(5 * a4.index(acc) + z)
        return out
    raise KeyError(name)


@pytest.mark.parametrize("name", ["z60", "a4z5", "a5", "s5"])
def test_prefix_products_equal_direct_composition(name):
    task = TASKS[f"words_{name}"]
    exs = task.generate(np.random.default_rng(1), task.splits["test_24"].params, 30)
    for ex in exs:
        word = [i - 1 for i in ex.input]
        assert ex.target == [int(v) for v in _direct_prefix(name, word)]


def test_mixed_prefix_products_componentwise():
    task = TASKS["words_mixed"]
    a5 = groups.get("a5")
    for ex in task.generate(np.random.default_rng(2), task.splits["test_64_p0.5"].params, 20):
        m_acc, g_acc = 0, 0
        for x, y in zip(ex.input, ex.target):
            m, g = divmod(x - 1, 60)
            m_acc, g_acc = groups.APERIODIC.mul(m_acc, m), a5.mul(g_acc, g)
            assert y == 60 * m_acc + g_acc


def test_mixed_distribution_is_the_papers_d_p():
    task = TASKS["words_mixed"]
    for p in (0.1, 0.5):
        exs = task.generate(np.random.default_rng(3), {"L": 256, "p": p}, 40)
        x = np.array([e.input for e in exs]) - 1
        n, hard = x.size, ((x % 60) != 0).sum()
        assert abs(hard - n * p) <= 3 * np.sqrt(n * p * (1 - p))
        m_counts = np.bincount((x // 60).ravel(), minlength=4)
        assert all(abs(c - n / 4) <= 3 * np.sqrt(n * 0.25 * 0.75) for c in m_counts)
        assert set(np.unique(x[(x % 60) != 0] % 60)) <= set(range(1, 60))


def test_training_lengths_mix_like_wp():
    task = TASKS["words_z60"]
    exs = task.generate(np.random.default_rng(4), task.splits["train"].params, 4000)
    lengths = np.array([len(e.input) for e in exs])
    w = words.length_weights(60, 2, 8)
    assert lengths.min() >= 2 and lengths.max() == 8
    for L, p in zip(range(2, 9), w):
        k = (lengths == L).sum()
        assert abs(k - 4000 * p) <= 3 * np.sqrt(4000 * p * (1 - p)) + 1, (L, k, 4000 * p)
    # WP file sizes: 3 600, 216 000, then 10^6 per length; the 8's file split 80/20
    assert task.splits["train"].size == 3600 + 216_000 + 4 * 10 ** 6 + 800_000


def test_splits_and_metrics():
    for name in ("words_z60", "words_a4z5", "words_a5", "words_s5"):
        t = TASKS[name]
        assert t.kind == "per_position" and t.metrics == ("token_acc", "seq_acc")
        assert {f"test_{L}" for L in (16, 24, 32, 40, 64, 128, 256, 512)} <= set(t.splits)
        assert t.splits["valid"].params == {"min_len": 8, "max_len": 8}
        assert t.splits["train_k"].params == {"min_len": 8, "max_len": 8}      # P2's single length
        ex = t.generate(np.random.default_rng(0), t.splits["test_16"].params, 1)[0]
        assert len(ex.input) == 16 and all(v >= 0 for v in ex.target)     # every position scored
    m = TASKS["words_mixed"]
    assert m.splits["train"].params == {"L": 256, "p": 0.1} and m.splits["test_256_p0.5"].params["p"] == 0.5
    assert m.splits["train_k"].params == m.splits["train"].params
    target = [3, 5, 7]
    assert score("token_acc", [3, 5, 0], target) == pytest.approx(2 / 3)
    assert score("seq_acc", [3, 5, 0], target) == 0.0 and score("seq_acc", target, target) == 1.0


def test_same_seed_same_data():
    t = TASKS["words_a5"]
    a = t.generate(np.random.default_rng(9), t.splits["train"].params, 50)
    b = t.generate(np.random.default_rng(9), t.splits["train"].params, 50)
    assert [e.input for e in a] == [e.input for e in b]


@pytest.mark.skipif(not DATA.exists(), reason="released WP data not present")
@pytest.mark.parametrize("stem,group", [("Z60", "z60"), ("A5", "a5"), ("A4_x_Z5", "a4z5")])
def test_released_wp_files_match_our_tables(stem, group):
    exs = words.load_wp_csv(DATA / f"{stem}=2.csv")
    assert len(exs) == 3600
    assert len({tuple(e.input) for e in exs}) == 3600                   # all pairs
    x = np.array([e.input for e in exs]) - 1
    assert (groups.get(group).prefix_products(x) == np.array([e.target for e in exs])).all()
    assert words.prefix_targets(group, x) == [e.target for e in exs]          # and the program's labels


def test_wp_csv_round_trip_and_errors(tmp_path):
    t = TASKS["words_a4z5"]
    exs = t.generate(np.random.default_rng(0), t.splits["train"].params, 20)
    words.write_wp_csv(tmp_path / "A4_x_Z5=8.csv", exs, seed=5)
    back = words.load_wp_csv(tmp_path / "A4_x_Z5=8.csv")
    assert [(e.input, e.target) for e in back] == [(e.input, e.target) for e in exs]
    (tmp_path / "bad.csv").write_text("seed,input,target\n1,0 1,0\n")
    with pytest.raises(RaspError, match="bad.csv:2"):
        words.load_wp_csv(tmp_path / "bad.csv")


def test_word_programs_source_has_the_table():
    from trainer.tasks import word_programs
    src = word_programs.source("a5")
    assert "const PRODUCT = [" in src and "seq_map(older, acc, PRODUCT)" in src
    rows = src.split("const PRODUCT = [\n")[1].split("\n]")[0].split(",\n")
    assert len(rows) == 60 and [int(v) for v in rows[7].strip(" []").split(", ")] == \
        groups.get("a5").table[7].tolist()


def test_programs_are_up_to_date_and_label_like_the_tables():
    from trainer.tasks import word_programs
    assert word_programs.main(["--check"]) == 0
    rng = np.random.default_rng(8)
    for name in groups.NAMES:
        x = rng.integers(0, groups.get(name).order, size=(20, 17))
        assert words.prefix_targets(name, x) == groups.get(name).prefix_products(x).tolist()


def test_the_registry_knows_each_word_groups_name_and_order_without_building_it():
    """trainer/tasks/groups.py SIZES: what the registry reads before flags are parsed."""
    from trainer.tasks import groups
    for key, (name, order) in groups.SIZES.items():
        g = groups.get(key)
        assert (g.name, g.order) == (name, order), key
