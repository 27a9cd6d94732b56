"""Lookup-table consts (`const T = [[...], ...]`, docs/language.md §2): the
interpreter against plain Python, the checker's located errors, value-set
inference, and compiled group-word programs exact at every length up to
4 x their compile length."""
from __future__ import annotations

import functools
import itertools
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import rasp
import references as R
from rasp.errors import RaspError, RaspRuntimeError

ROOT = Path(__file__).resolve().parents[1]

SETTINGS = dict(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def table_text(table) -> str:
    if isinstance(table[0], list):
        return "[" + ",\n     ".join("[" + ", ".join(map(str, r)) + "]" for r in table) + "]"
    return "[" + ", ".join(map(str, table)) + "]"


# ---- the interpreter against plain Python ---------------------------------------------

@settings(**SETTINGS)
@given(data=st.data(), rows=st.integers(1, 7), cols=st.integers(1, 7))
def test_seq_map_table_matches_python(data, rows, cols):
    """seq_map(x, y, T) = T[x[i]][y[i]], with y a shifted copy of another lookup."""
    entries = st.integers(-50, 50)
    table = data.draw(st.lists(st.lists(entries, min_size=cols, max_size=cols), min_size=rows, max_size=rows))
    col_of = data.draw(st.lists(st.integers(0, cols - 1), min_size=rows, max_size=rows))   # 1-D: x -> column
    src = (f"const T = {table_text(table)}\nconst C = {table_text(col_of)}\n"
           f"input seq: {{0..{rows - 1}}}\n"
           "y = shift_right(tok_map(seq, C), 1)\n"
           "output seq_map(seq, y, T)\n")
    prog = rasp.loads(src)
    batch = data.draw(st.lists(st.lists(st.integers(0, rows - 1), min_size=1, max_size=12), min_size=1, max_size=6))
    got = prog.run_batch(batch).outputs
    for x, out in zip(batch, got):
        y = [0] + [col_of[v] for v in x[:-1]]
        assert list(out) == [table[a][b] for a, b in zip(x, y)]


@settings(**SETTINGS)
@given(data=st.data())
def test_tok_map_table_in_loop_matches_python(data):
    """A 1-D table applied t times in a loop (value sets through the loop)."""
    size = data.draw(st.integers(1, 9))
    perm = data.draw(st.lists(st.integers(0, size - 1), min_size=size, max_size=size))
    steps = data.draw(st.integers(0, 5))
    prog = rasp.loads(f"const P = {table_text(perm)}\ninput seq: {{0..{size - 1}}}\nx = seq\n"
                      f"loop {steps}:\n    x = tok_map(x, P)\noutput x\n")
    batch = data.draw(st.lists(st.lists(st.integers(0, size - 1), min_size=1, max_size=8), min_size=1, max_size=4))
    for x, out in zip(batch, prog.run_batch(batch).outputs):
        want = list(x)
        for _ in range(steps):
            want = [perm[v] for v in want]
        assert list(out) == want


def test_word_s3_against_permutation_composition():
    prog = rasp.load(ROOT / "programs" / "word_s3.rasp")
    for n in range(1, 5):               # every word up to length 4
        words = [list(w) for w in itertools.product(range(6), repeat=n)]
        for w, out in zip(words, prog.run_batch(words).outputs):
            assert list(out) == R.word_s3(w)


def test_group_table_is_a_group():
    """The S3 table in programs/word_s3.rasp: identity 0, associative, inverses."""
    T = rasp.load(ROOT / "programs" / "word_s3.rasp").ir.tables["MUL"].rows
    G = range(6)
    assert all(T[0][a] == a == T[a][0] for a in G)
    assert all(T[T[a][b]][c] == T[a][T[b][c]] for a in G for b in G for c in G)
    assert all(any(T[a][b] == 0 for b in G) for a in G)
    assert any(T[a][b] != T[b][a] for a in G for b in G)        # S3 is not abelian


def test_multiline_table_and_alias():
    prog = rasp.loads("const A = [\n  [1, 2],\n  [3, 4],\n]\nconst B = A\ninput seq: {0, 1}\n"
                      "output seq_map(seq, 1 - seq, B)\n")
    assert list(prog.run([0, 1, 1])) == [2, 3, 3]


def test_constant_lookup_folds():
    prog = rasp.loads("const T = [7, 8, 9]\ninput seq: {0}\noutput tok_map(full(seq, 2), T) + seq\n")
    assert list(prog.run([0, 0])) == [9, 9]


# ---- the checker: located errors ------------------------------------------------------

@pytest.mark.parametrize("src, line, column, words", [
    ("const T = [[0, 1], [1]]\ninput seq: {0, 1}\noutput seq_map(seq, seq, T)\n", 1, 20, "ragged"),
    ("const T = [0, [1]]\ninput seq: {0, 1}\noutput tok_map(seq, T)\n", 1, 15, "mix"),
    ("const T = []\ninput seq: {0, 1}\noutput tok_map(seq, T)\n", 1, 11, "at least one"),
    ("const T = [[[0]]]\ninput seq: {0}\noutput tok_map(seq, T)\n", 1, 13, "two dimensions"),
    ("input seq: {0, 1}\nparam n = len(seq)\nconst T = [0, n]\noutput tok_map(seq, T)\n", 3, 15, "must be an int"),
    ("const T = [0, 1]\ninput seq: {0..2}\noutput tok_map(seq, T)\n", 3, 16, "can be 2"),
    ('const E = ">"\nconst T = [[0, 1], [1, 0]]\ninput seq: {0, 1, E}\n'
     "output seq_map(seq, shift_right(seq, 1), T)\n", 4, 16, "symbol '>'"),
    ("const T = [0, 1, 2]\ninput seq: {0, 1}\noutput seq_map(seq, seq, T)\n", 3, 26, "1-D"),
    ("const T = [[0]]\ninput seq: {0}\noutput tok_map(seq, T)\n", 3, 21, "2-D"),
    ("const T = [0, 1]\ninput seq: {0, 1}\nx = [1, 2]\noutput x\n", 3, 5, "only allowed as the value of a const"),
    ("const T = [0, 1]\ninput seq: {0, 1}\noutput T + seq\n", 3, 8, "lookup table 'T'"),
    ("const T = [0, 1, 2]\ninput seq: {0..2}\noutput tok_map(tok_map(seq, T) + 1, T)\n", 3, 16, "can be 3"),
])
def test_checker_errors_are_located(src, line, column, words):
    with pytest.raises(RaspError) as e:
        rasp.loads(src, "t.rasp")
    assert (e.value.loc.line, e.value.loc.column) == (line, column), e.value.message
    assert words in e.value.message


def test_unknowable_index_is_a_located_runtime_error():
    prog = rasp.loads("const T = [0, 1]\ninput seq: {0, 1}\noutput tok_map(seq + cumsum(seq), T)\n", "t.rasp")
    assert list(prog.run([0, 0])) == [0, 0]
    with pytest.raises(RaspRuntimeError) as e:
        prog.run([0, 1])
    assert e.value.loc.line == 3 and "position 1 reads [2]" in e.value.message


# ---- compiler: value sets and exact compiled group words ------------------------------

def test_value_set_is_the_reachable_entries():
    from compiler.values import ValueSets
    prog = rasp.loads("const T = [[5, 6, 7], [8, 9, 10], [11, 12, 13]]\ninput seq: {0, 2}\n"
                      "output seq_map(seq, shift_right(seq, 1), T)\n")
    sets = ValueSets(prog.ir, 8, {})
    assert sets.get(prog.ir.output) == {5, 7, 11, 13}


def _exact_up_to(prog, cm, top, per_length, rng, vocab):
    for n in range(1, top + 1):
        batch = [[rng.choice(vocab) for _ in range(n)] for _ in range(per_length)]
        want = prog.run_batch(batch).outputs
        for x, g, w in zip(batch, cm.run_batch(batch), want):
            assert list(g) == list(w), f"length {n}: {x}"


def test_word_s3_compiles_exactly_to_4x():
    from compiler import compile_program
    prog = rasp.load(ROOT / "programs" / "word_s3.rasp")
    cm = compile_program(prog, max_len=8)
    _exact_up_to(prog, cm, 32, 6, random.Random(3), list(range(6)))


def test_60_element_table_compiles_exactly_to_4x():
    """A 60 x 60 table (Z60 as a list): one categorical lookup MLP."""
    from compiler import compile_program
    prog = rasp.loads(R.table_word_source(R.z60_table()), "<z60 table>")
    cm = compile_program(prog, max_len=6)
    assert cm.sizes()["mlp"] < 10_000
    _exact_up_to(prog, cm, 24, 3, random.Random(4), list(range(60)))
    x = [random.Random(5).randrange(60) for _ in range(24)]
    assert list(cm.run_batch([x])[0]) == R.word_z60(x)


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted((ROOT / "programs").glob("word*.rasp")), ids=lambda p: p.stem)
def test_group_word_programs_exact_to_4x_slow(path):
    """Every group-word program in programs/ (the data helper's words_*.rasp
    included), compiled at 16, exact at every length up to 64."""
    from compiler import compile_program
    prog = rasp.load(path)
    cm = compile_program(prog, max_len=16)
    _exact_up_to(prog, cm, 64, 2, random.Random(6), list(prog.ir.vocab))


# ---- group tables as permutations (compiler/groups.py) ------------------------------------

@functools.lru_cache(maxsize=None)
def _words(name):
    """programs/NAME.rasp, parsed once for the tests below (the S5 table takes a second)."""
    return rasp.load(ROOT / "programs" / f"{name}.rasp")


@pytest.mark.parametrize("name, table, degree", [("words_s5", "PRODUCT", 5), ("words_a5", "PRODUCT", 5),
                                                 ("words_z60", "PRODUCT", 12), ("words_a4z5", "PRODUCT", 9),
                                                 ("words_mixed", "A5", 5)])
def test_group_table_acts_faithfully_on_few_points(name, table, degree):
    """The action the compiler finds is a homomorphism (a product's images are
    its factors' images composed) and its base points tell every element apart."""
    from compiler.groups import group_action
    T = _words(name).ir.tables[table].rows
    act = group_action(T)
    n, im = len(T), act.images
    assert act.points == degree
    assert all(im[T[a][b]][p] == im[a][im[b][p]] for a in range(n) for b in range(n) for p in range(degree))
    assert len({tuple(im[g][p] for p in act.base) for g in range(n)}) == n


def test_tables_that_are_not_groups_get_no_action():
    from compiler.groups import group_action
    z8 = [[(a + b) % 8 for b in range(8)] for a in range(8)]
    assert group_action(tuple(map(tuple, z8))).points == 8            # Z8: the cosets of {0}
    loop = [list(r) for r in z8]
    loop[1][2], loop[1][6], loop[5][2], loop[5][6] = 7, 3, 3, 7     # a flipped 2x2 subsquare
    assert all(sorted(r) == list(range(8)) for r in loop + [list(c) for c in zip(*loop)])   # still Latin
    assert all(loop[0][a] == a == loop[a][0] for a in range(8))                            # identity 0
    assert any(loop[loop[a][b]][c] != loop[a][loop[b][c]] for a in range(8) for b in range(8) for c in range(8))
    for table in (loop, [[(a - b) % 8 for b in range(8)] for a in range(8)],
                  [[max(a, b) for b in range(8)] for a in range(8)]):
        assert group_action(tuple(map(tuple, table))) is None


def test_s5_word_program_compiles_small_and_exact():
    """The S5 table (14,400 entries) as permutations of 5 points: within twice its
    entries times its output width, exact at every position up to 4x."""
    from compiler import compile_program
    prog = _words("words_s5")
    cm = compile_program(prog, max_len=4)
    assert sum(p.numel() for p in cm.model.parameters()) <= 2 * 120 * 120 * 120
    assert any("[group: product]" in line for layer in cm.layout["body"] for line in layer)
    _exact_up_to(prog, cm, 16, 4, random.Random(8), list(range(120)))
