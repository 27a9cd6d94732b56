"""Finite groups and monoids for the word problems, built from scratch
(docs/benchmarks.md §3).

Conventions (chosen to reproduce the released WP data of Merrill et al., and
checked against its length-2 files in tests/test_tasks_words.py):

* A permutation is a tuple in one-line notation over 0..n-1.  Permutations are
  listed in lexicographic order, so the identity comes first (id 0).
* Product: `a · b` is composition with b applied first, (a · b)(i) = a(b(i)).
  `table[a][b]` is the id of a · b.  A word m_0 m_1 … is evaluated left to
  right, acc <- acc · m_t (so the prefix product is m_0 · m_1 · … · m_t).
* S5 = all 120 permutations of 0..4; A5 = the 60 even ones, in the same
  (lexicographic) order; A4 = the 12 even permutations of 0..3.
* Z60: id i = a^i, i · j = (i + j) mod 60.
* Direct product G × H: id = i · |H| + j for (g_i, h_j), multiplied
  componentwise (A4 × Z5 = 5 i + j, as in WP).
* The aperiodic monoid M^a (P2 App. C): E A B X = ids 0 1 2 3, with the Cayley
  table of docs/benchmarks.md §3.2 (row · column); E is the identity.
  The mixed task's M^a × A5 is `direct_product(APERIODIC, A5)`: id 60 m + g.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import permutations, product

import numpy as np


@dataclass(frozen=True)
class Monoid:
    name: str
    table: np.ndarray              # (n, n) int64: table[a, b] = id of a · b
    names: tuple                   # one text per element, for display
    identity: int = 0

    @property
    def order(self) -> int:
        return len(self.names)

    def mul(self, a: int, b: int) -> int:
        return int(self.table[a, b])

    def prefix_products(self, words: np.ndarray) -> np.ndarray:
        """(B, L) element ids -> (B, L) prefix products m_0 · … · m_t (unshifted)."""
        words = np.asarray(words, dtype=np.int64)
        out = np.empty_like(words)
        if words.shape[1] == 0:
            return out
        out[:, 0] = words[:, 0]
        for t in range(1, words.shape[1]):
            out[:, t] = self.table[out[:, t - 1], words[:, t]]
        return out


def compose(a: tuple, b: tuple) -> tuple:
    """(a · b)(i) = a(b(i)): b applied first."""
    return tuple(a[b[i]] for i in range(len(b)))


def is_even(p: tuple) -> bool:
    inversions = sum(1 for i in range(len(p)) for j in range(i + 1, len(p)) if p[i] > p[j])
    return inversions % 2 == 0


def permutation_group(name: str, n: int, even_only: bool = False) -> tuple:
    """(Monoid, the permutations in id order)."""
    perms = [p for p in permutations(range(n)) if not even_only or is_even(p)]   # lexicographic
    index = {p: i for i, p in enumerate(perms)}
    table = np.array([[index[compose(a, b)] for b in perms] for a in perms], dtype=np.int64)
    names = tuple("".join(map(str, p)) for p in perms)
    return Monoid(name, table, names), perms


def cyclic(n: int) -> Monoid:
    i = np.arange(n)
    return Monoid(f"Z{n}", (i[:, None] + i[None, :]) % n, tuple(str(k) for k in range(n)))


def direct_product(g: Monoid, h: Monoid, name: str = "") -> Monoid:
    ng, nh = g.order, h.order
    table = np.empty((ng * nh, ng * nh), dtype=np.int64)
    for (a, b), (c, d) in product(product(range(ng), range(nh)), repeat=2):
        table[a * nh + b, c * nh + d] = g.table[a, c] * nh + h.table[b, d]
    names = tuple(f"({x},{y})" for x in g.names for y in h.names)
    return Monoid(name or f"{g.name}x{h.name}", table, names, g.identity * nh + h.identity)


APERIODIC = Monoid("Ma", np.array([[0, 1, 2, 3],
                                   [1, 3, 3, 3],
                                   [2, 1, 2, 3],
                                   [3, 3, 3, 3]], dtype=np.int64), ("E", "A", "B", "X"))


# (name, order) of what get() builds for the word tasks, known without building it: the task
# registry is read before `rasp train` parses its flags (tests/test_tasks_words.py checks them)
SIZES = {"z60": ("Z60", 60), "a4z5": ("A4xZ5", 60), "a5": ("A5", 60), "s5": ("S5", 120), "mixed": ("MaxA5", 240)}


@lru_cache(maxsize=None)
def get(name: str) -> Monoid:
    """z60, a4z5, a5, s5, mixed (= M^a × A5), a4, z5, ma."""
    if name == "z60":
        return cyclic(60)
    if name == "z5":
        return cyclic(5)
    if name == "s5":
        return permutation_group("S5", 5)[0]
    if name == "a5":
        return permutation_group("A5", 5, even_only=True)[0]
    if name == "a4":
        return permutation_group("A4", 4, even_only=True)[0]
    if name == "a4z5":
        return direct_product(get("a4"), get("z5"), "A4xZ5")
    if name == "ma":
        return APERIODIC
    if name == "mixed":
        return direct_product(APERIODIC, get("a5"), "MaxA5")
    raise KeyError(name)


NAMES = ("z60", "a4z5", "a5", "s5", "mixed")
