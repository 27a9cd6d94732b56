"""Independent plain-Python solutions of every task in programs/.

Nothing here imports rasp: each reference is written straight from the task
definition (docs/tasks.md, the program headers) with ordinary loops, so the tests
compare two independent implementations.

Token lists use the text form: ints for numbers, strings for symbols
(">", "#", "+", "*", "(", ")", ...).  A FAP reference returns the *scored*
output, i.e. the tokens from `>` to the end of the input.

Samplers: ``sample_<task>(rng, n) -> list`` of input tokens (``rng`` is a
``random.Random``), with k = (max answer length for that n) + 1 trailing
`#` unless ``k`` is given.
"""
from __future__ import annotations

import random

EOQ = ">"
EOS = "#"
PLUS = "+"
TIMES = "*"
PAD = "_"


# ---------------------------------------------------------------- helpers

def eoq_index(tokens):
    """Position of the first `>`."""
    return list(tokens).index(EOQ)


def scored(input_tokens, output_tokens):
    """The scored part of an output: the positions from `>` on."""
    p = eoq_index(input_tokens)
    return list(output_tokens)[p:]


def fap(tokens, answer):
    """Scored FAP output for an input: answer, then `#`, cut to fit."""
    k = len(tokens) - eoq_index(tokens) - 1
    out = list(answer) + [EOS] * (k + 1)
    return out[:k + 1]


def query(tokens):
    return list(tokens)[:eoq_index(tokens)]


def with_tail(q, k):
    return list(q) + [EOQ] + [EOS] * k


def bits_of(tokens):
    value = 0
    for t in tokens:
        value = value * 2 + t
    return value


# ---------------------------------------------------------- the six tasks

def parity(tokens):
    q = query(tokens)
    p = 0
    for t in q:
        if t == 1:
            p = 1 - p
    return fap(tokens, [p])


def padded_parity(tokens):
    """The parity of the bits before the padding `_` (the padding is not a bit)."""
    return parity([t for t in query(tokens) if t != PAD] + [EOQ] + list(tokens)[eoq_index(tokens) + 1:])


def copy(tokens):
    return fap(tokens, query(tokens))


def addition(tokens):
    q = query(tokens)
    plus = q.index(PLUS)
    a, b = q[:plus], q[plus + 1:]
    n = len(a)
    total = bits_of(a) + bits_of(b)
    ans = []
    for j in range(n, -1, -1):          # n+1 bits, MSB first
        ans.append((total >> j) & 1)
    return fap(tokens, ans)


def binary_sum(tokens):
    c = sum(1 for t in query(tokens) if t == 1)
    ans = []
    while c > 0:                        # LSB first, nothing for 0
        ans.append(c % 2)
        c //= 2
    return fap(tokens, ans)


def multiplication(tokens):
    q = query(tokens)
    star = q.index(TIMES)
    a, b = q[:star], q[star + 1:]
    prod = bits_of(a) * bits_of(b)
    ans = [(prod >> j) & 1 for j in range(len(a) + len(b))]   # LSB first
    return fap(tokens, ans)


def unique_set(tokens):
    seen = []
    for t in query(tokens):
        if t not in seen:
            seen.append(t)
    return fap(tokens, seen)


# --------------------------------------------------------------- classics

def histogram(tokens):
    out = []
    for i in range(len(tokens)):
        c = 0
        for j in range(i + 1):
            if tokens[j] == tokens[i]:
                c += 1
        out.append(c)
    return out


def sort_unique(tokens):
    q = query(tokens)
    return fap(tokens, sorted(q))


def mode(tokens):
    """Most frequent token of each prefix; ties: the token that reached the
    top count last."""
    out = []
    counts = {}
    best, best_count = None, 0
    for t in tokens:
        counts[t] = counts.get(t, 0) + 1
        if counts[t] >= best_count:
            best, best_count = t, counts[t]
        out.append(best)
    return out


def dyck1(tokens):
    out = []
    depth = 0
    broken = False
    for t in tokens:
        depth += 1 if t == "(" else -1
        if depth < 0:
            broken = True
        if broken:
            out.append("F")
        elif depth == 0:
            out.append("T")
        else:
            out.append("P")
    return out


def count(tokens):
    a, b = tokens[0], tokens[1]
    return fap(tokens, list(range(a, b + 1)))


def induction(tokens):
    out = []
    for i, t in enumerate(tokens):
        ans = "_"
        for j in range(i):
            if tokens[j] == t:
                ans = tokens[j + 1]
                break
        out.append(ans)
    return out


def reverse(tokens):
    return fap(tokens, list(reversed(query(tokens))))


def sort(tokens):
    q = list(query(tokens))
    # insertion sort, to stay independent of the sorted() used above
    out = []
    for t in q:
        pos = 0
        while pos < len(out) and out[pos] <= t:
            pos += 1
        out.insert(pos, t)
    return fap(tokens, out)


def induction_copy(tokens):
    return fap(tokens, query(tokens))


def flip_flop(tokens):
    out, bit, prev = [], 0, None
    for t in tokens:
        if prev == "w" and t in (0, 1):
            bit = t
        out.append(bit)
        prev = t
    return out


def word_s3(tokens):
    """Prefix products in S3 by composing permutations directly (element k =
    the k-th permutation of (0, 1, 2) in lexicographic order; x0 acts first)."""
    import itertools
    perms = list(itertools.permutations(range(3)))
    out, acc = [], perms[0]
    for t in tokens:
        acc = tuple(perms[t][acc[i]] for i in range(3))      # i -> t(acc(i))
        out.append(perms.index(acc))
    return out


def word_z60(tokens):
    out, acc = [], 0
    for t in tokens:
        acc = (acc + t) % 60
        out.append(acc)
    return out


def _permutations(n, even_only):
    import itertools
    perms = list(itertools.permutations(range(n)))           # lexicographic, identity first
    if even_only:
        perms = [p for p in perms if sum(p[i] > p[j] for i in range(n) for j in range(i + 1, n)) % 2 == 0]
    return perms


def _perm_prefix(perms, tokens):
    """WP convention (programs/words_*.rasp): (a . b)(i) = a(b(i)), acc <- acc . x."""
    out, acc = [], None
    for t in tokens:
        p = perms[t]
        acc = p if acc is None else tuple(acc[p[i]] for i in range(len(p)))
        out.append(perms.index(acc))
    return out


def words_z60(tokens):
    return word_z60(tokens)


def words_a5(tokens):
    return _perm_prefix(_permutations(5, True), tokens)


def words_s5(tokens):
    return _perm_prefix(_permutations(5, False), tokens)


def words_a4z5(tokens):
    """id 5 i + j: A4 part by composition, Z5 part by addition."""
    a4 = _perm_prefix(_permutations(4, True), [t // 5 for t in tokens])
    z5 = [sum(t % 5 for t in tokens[:k + 1]) % 5 for k in range(len(tokens))]
    return [5 * i + j for i, j in zip(a4, z5)]


APERIODIC = [[0, 1, 2, 3], [1, 3, 3, 3], [2, 1, 2, 3], [3, 3, 3, 3]]   # E A B X (docs/benchmarks.md §3.2)


def words_mixed(tokens):
    """id 60 m + g: M^a by its Cayley table, A5 by composition."""
    g = words_a5([t % 60 for t in tokens])
    out, m = [], 0
    for k, t in enumerate(tokens):
        m = APERIODIC[m][t // 60]
        out.append(60 * m + g[k])
    return out


def copying(tokens):
    """The tokens before the indicator ':' at the slots after it (programs/copying.rasp)."""
    at = tokens.index(":")
    out = ["_"] * len(tokens)
    for j in range(len(tokens) - at - 1):
        out[at + 1 + j] = tokens[j] if j < at else "_"
    return out


def max_running(tokens):
    out = []
    best = None
    for t in tokens:
        if best is None or t > best:
            best = t
        out.append(best)
    return out


def ones_mod3(tokens):
    return fap(tokens, [query(tokens).count(1) % 3])


def unary_ones(tokens):
    return fap(tokens, [1] * query(tokens).count(1))


def increment(tokens):
    n = len(tokens)
    value = sum(b << i for i, b in enumerate(tokens)) + 1
    return [(value >> i) & 1 for i in range(n)]


def spread(tokens):
    return [max(tokens[:i + 1]) for i in range(len(tokens))]


def longest_run(tokens):
    best = run = 0
    for b in query(tokens):
        run = run + 1 if b == 1 else 0
        best = max(best, run)
    return fap(tokens, [best % 2])


# --------------------------------------------------------------- samplers

def _bits(rng, n):
    return [rng.randint(0, 1) for _ in range(n)]


def sample_parity(rng, n, k=None):
    return with_tail(_bits(rng, n), 2 if k is None else k)


def sample_ones_mod3(rng, n, k=None):
    return sample_parity(rng, n, k)


def sample_padded_parity(rng, n, k=None):
    """n tokens before `>`: b uniform on 0..n real bits, then n - b padding `_`."""
    b = rng.randint(0, n)
    return with_tail(_bits(rng, b) + [PAD] * (n - b), 2 if k is None else k)


def sample_copy(rng, n, k=None):
    return with_tail(_bits(rng, n), n + 1 if k is None else k)


def sample_addition(rng, n, k=None):
    q = _bits(rng, n) + [PLUS] + _bits(rng, n)
    return with_tail(q, n + 2 if k is None else k)


def sample_binary_sum(rng, n, k=None):
    return with_tail(_bits(rng, n), n.bit_length() + 1 if k is None else k)


def sample_multiplication(rng, n, k=None, n1=None):
    """n = n2 (bits of the second factor); n1 in {1, 2} unless given."""
    if n1 is None:
        n1 = rng.randint(1, 2)
    q = _bits(rng, n1) + [TIMES] + _bits(rng, n)
    return with_tail(q, n1 + n + 1 if k is None else k)


def sample_unique_set(rng, n, k=None):
    # draw from a random-size alphabet so that repeats are common
    alpha = rng.randint(1, 50)
    toks = rng.sample(range(50), alpha)
    q = [rng.choice(toks) for _ in range(n)]
    return with_tail(q, n + 1 if k is None else k)


def sample_histogram(rng, n):
    hi = rng.randint(0, 9)
    return [rng.randint(0, hi) for _ in range(n)]


def sample_sort_unique(rng, n, k=None):
    n = min(n, 100)
    return with_tail(rng.sample(range(100), n), n + 1 if k is None else k)


def sample_mode(rng, n):
    return sample_histogram(rng, n)


def sample_dyck1(rng, n):
    bias = rng.choice([0.5, 0.6, 0.7])
    return ["(" if rng.random() < bias else ")" for _ in range(n)]


def sample_count(rng, n, k=None):
    """n = length of the count a..b (a > b when n is 0)."""
    if n == 0:
        b = rng.randint(0, 98)
        a = rng.randint(b + 1, 99)
    else:
        n = min(n, 100)
        a = rng.randint(0, 100 - n)
        b = a + n - 1
    return with_tail([a, b], n + 1 if k is None else k)


def sample_induction(rng, n):
    return sample_histogram(rng, n)


def sample_reverse(rng, n, k=None):
    return with_tail([rng.randint(0, 9) for _ in range(n)], n + 1 if k is None else k)


def sample_sort(rng, n, k=None):
    hi = rng.randint(0, 19)
    return with_tail([rng.randint(0, hi) for _ in range(n)], n + 1 if k is None else k)


def sample_induction_copy(rng, n, k=None):
    n = min(n, 100)
    return with_tail(rng.sample(range(100), n), n + 1 if k is None else k)


def sample_unary_ones(rng, n, k=None):
    return with_tail([1] + _bits(rng, n - 1), n + 1 if k is None else k)


def sample_increment(rng, n):
    return _bits(rng, n)


def sample_spread(rng, n):
    return [rng.randint(0, 3) for _ in range(n)]


def sample_longest_run(rng, n, k=None):
    return sample_parity(rng, n, k)


def sample_flip_flop(rng, n, p_i=None):
    """n instruction-bit pairs starting with `w`; reads return the latest
    written bit (a valid flip-flop string)."""
    if p_i is None:
        p_i = rng.choice([0.1, 0.5, 0.8, 0.98])
    out, bit = [], 0
    for j in range(n):
        u = rng.random()
        op = "w" if j == 0 or u < (1 - p_i) / 2 else ("r" if u < 1 - p_i else "i")
        if op == "w":
            bit = rng.randint(0, 1)
            out += ["w", bit]
        elif op == "r":
            out += ["r", bit]
        else:
            out += ["i", rng.randint(0, 1)]
    return out


def sample_word_z60(rng, n):
    return [rng.randint(0, 59) for _ in range(n)]


def table_word_source(table, name="MUL"):
    """A group-word program over the multiplication table `table` (rows of
    ints, identity 0): the running product, looped as programs/word_z60.rasp."""
    rows = ",\n    ".join("[" + ", ".join(map(str, row)) + "]" for row in table)
    return (f"const {name} = [{rows}]\n"
            f"input seq: {{0..{len(table) - 1}}}\nparam n = len(seq)\nacc = seq\nolder = seq\n"
            f"loop max(n - 1, 0):\n    older = shift_right(older, 1)\n    acc = seq_map(older, acc, {name})\n"
            "output acc\n")


def z60_table():
    return [[(a + b) % 60 for b in range(60)] for a in range(60)]


def sample_word_s3(rng, n):
    return [rng.randint(0, 5) for _ in range(n)]


def sample_words_z60(rng, n):
    return [rng.randint(0, 59) for _ in range(n)]


sample_words_a5 = sample_words_a4z5 = sample_words_z60


def sample_words_s5(rng, n):
    return [rng.randint(0, 119) for _ in range(n)]


def sample_words_mixed(rng, n):
    return [rng.randint(0, 239) for _ in range(n)]


def sample_copying(rng, n):
    """S symbols, T - 1 blanks, ':', S output slots (length T + 2S = n when n >= 3)."""
    S = max(1, n // 3)
    T = max(1, n - 2 * S)
    return [rng.randint(0, 7) for _ in range(S)] + ["_"] * (T - 1) + [":"] + ["_"] * S


def sample_max_running(rng, n):
    return [rng.randint(-9, 9) for _ in range(n)]


# T(n) of the six tasks, read from the input tokens
def loop_count(task, tokens):
    if task == "increment":         # the carry chain, and the step that changes nothing
        r = (list(tokens) + [0]).index(0)
        return min(r, len(tokens) - 1) + 1
    if task == "spread":            # the farthest a running maximum travels, and the step that changes nothing
        last = farthest = 0
        for i, t in enumerate(tokens):
            if t >= max(tokens[:i + 1]):
                last = i                # the latest occurrence of the running maximum
            farthest = max(farthest, i - last)
        return min(farthest, len(tokens) - 1) + 1
    q = query(tokens)
    if task in ("parity", "copy", "binary_sum", "unique_set"):
        return len(q)
    if task == "padded_parity":
        return sum(t != PAD for t in q)
    if task == "addition":
        return q.index(PLUS) + 1
    if task == "multiplication":
        n1 = q.index(TIMES)
        return n1 * (len(q) - n1 - 1)
    if task == "unary_ones":
        return q.count(1)
    if task == "longest_run":
        runs = "".join(map(str, q)).split("0")
        return max(map(len, runs)) + 1
    raise KeyError(task)


REFERENCES = {
    "parity": parity, "padded_parity": padded_parity, "copy": copy, "addition": addition,
    "binary_sum": binary_sum, "multiplication": multiplication,
    "unique_set": unique_set, "histogram": histogram,
    "sort_unique": sort_unique, "mode": mode, "dyck1": dyck1,
    "count": count, "induction": induction, "reverse": reverse,
    "max_running": max_running, "sort": sort, "induction_copy": induction_copy,
    "flip_flop": flip_flop, "word_z60": word_z60, "word_s3": word_s3,
    "words_z60": words_z60, "words_a4z5": words_a4z5, "words_a5": words_a5, "words_s5": words_s5,
    "words_mixed": words_mixed, "copying": copying, "ones_mod3": ones_mod3,
    "unary_ones": unary_ones, "increment": increment, "longest_run": longest_run, "spread": spread,
}

SAMPLERS = {name: globals()["sample_" + name] for name in REFERENCES}

# tasks whose output is scored from `>` on (the others: every position)
FAP_TASKS = {"parity", "padded_parity", "copy", "addition", "binary_sum", "multiplication",
             "unique_set", "sort_unique", "count", "reverse", "sort",
             "induction_copy", "ones_mod3", "unary_ones", "longest_run"}
TASKS_WITH_T = ("parity", "padded_parity", "copy", "addition", "binary_sum", "multiplication",
                "unique_set", "unary_ones", "increment", "longest_run", "spread")


if __name__ == "__main__":          # a quick look at a few samples
    rng = random.Random(0)
    for name in REFERENCES:
        x = SAMPLERS[name](rng, 5)
        print(name, " ".join(map(str, x)), "->", " ".join(map(str, REFERENCES[name](x))))


def sampled_inputs(prog, name, count, max_n, max_len, seed):
    """`count` inputs of program `name` parsed by `prog`, drawn by its sampler at
    sizes 1..max_n (a seeded stream), keeping those of at most `max_len` tokens."""
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        x = prog.parse_input(" ".join(map(str, SAMPLERS[name](rng, rng.randint(1, max_n)))))
        if len(x) <= max_len:
            out.append(x)
    return out
