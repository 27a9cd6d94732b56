"""Programs ported to n-RASP-L from other RASP code bases, each with an
independent plain-Python reference of that code base's semantics (issue 8).

Sources (facts taken from them, no code copied):

* **Tracr** (google-deepmind/tracr, `tracr/compiler/lib.py` and the programs
  of `tracr/compiler/test_cases.py`), evaluated the way Tracr's
  `causal_eval.CausalEvaluator` does: every selector is masked to `j <= i`.
  Tracr's numerical `Aggregate` is a float mean; n-RASP-L values are ints, so
  a fraction is ported as `1000 * bools` and the mean truncated toward zero
  (the reference computes `int(1000 * fraction)` exactly, with Fractions).
  Tracr's `default=None` becomes an explicit sentinel.  Programs that need the
  whole input at every position (`length`, `make_count` under non-causal
  evaluation: `len(seq)` / `count(seq, TOK)` used as values) are written with
  the host functions and must be *refused* by the causal compiler.
* **Zhou et al. 2024, RASP-L** (apple/ml-np-rasp: `np_rasp/core.py`,
  `np_rasp/lib.py`, `examples/count.py`, `examples/add.py`): causal selects,
  mean = `astype(int)` of the float mean (truncation toward zero), aggregate
  default 0 unless given, `null_val = -999` in the induction helpers.  The
  published `argmax` calls `kqv` without a predicate (a TypeError in NumPy),
  so `mode`/`argmax` follow docs/language.md §5 (the library) instead and are not ported here.
* **Fan et al. 2024** appendix programs are `programs/*.rasp`
  (checked by tests/test_programs.py and tests/test_compiler.py).

Each `Port` has: the n-RASP-L source, `reference(tokens) -> outputs` (token
codes in, codes out, every position), an input sampler `sample(rng, n)`
(inputs of length n the original code base is meant for; the tests also use
random inputs over the whole declared vocabulary), the `max_len` to compile
at in CI, and `refuse`: a substring of the expected located refusal, or None.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Optional

NULL = -999          # Zhou et al.'s null_val


@dataclass(frozen=True)
class Port:
    name: str
    origin: str
    source: str
    reference: Callable[[list], list]
    sample: Optional[Callable[[random.Random, int], list]] = None
    max_len: int = 4
    refuse: Optional[str] = None
    heavy: bool = False      # a large model (tens of millions of weights): fewer CI inputs


# ---------------------------------------------------------------- plain-Python helpers
# Written from the definitions (loops over j <= i), not from either code base.

def tmean(vals) -> int:
    """Mean truncated toward zero, exactly."""
    return int(Fraction(sum(vals), len(vals)))


def running(xs, f):
    return [f(xs[:i + 1], i) for i in range(len(xs))]


def shift(xs, s, default):
    return [xs[i - s] if i >= s else default for i in range(len(xs))]


def has_seen(xs, tok):
    return running(xs, lambda p, i: int(tok in p))


def firsts(xs, qs, default):
    return [next((j for j in range(i + 1) if xs[j] == qs[i]), default) for i in range(len(xs))]


def lasts(xs, qs, default):
    return [next((j for j in range(i, -1, -1) if xs[j] == qs[i]), default) for i in range(len(xs))]


def index_select(xs, idx, default=0):
    return [xs[idx[i]] if 0 <= idx[i] <= i else default for i in range(len(xs))]


def induct(k, q, offset, default=0):
    return index_select(k, firsts(shift(k, offset, NULL), q, NULL), default)


def induct_prev(k, q, offset, default=0):
    return index_select(k, [f + offset for f in firsts(k, q, NULL)], default)


def cumsum(bs):
    return running(bs, lambda p, i: sum(1 for b in p if b))


def frac_prevs(bools):
    """Tracr make_frac_prevs, times 1000, truncated: int(1000 * #true / (i + 1))."""
    return running(bools, lambda p, i: int(Fraction(1000 * sum(p), i + 1)))


def uniform(vocab):
    vocab = sorted(vocab)
    return lambda rng, n: [rng.choice(vocab) for _ in range(n)]


def sort_by_key(vals, keys):
    """Tracr make_sort_unique under causal evaluation: position i takes the mean
    of vals[j] over the j <= i whose key has exactly i smaller keys among
    positions <= j (categorical Aggregate: one match in Tracr's intended use)."""
    target = [sum(1 for k in range(j + 1) if keys[k] < keys[j]) for j in range(len(keys))]
    out = []
    for i in range(len(vals)):
        sel = [vals[j] for j in range(i + 1) if target[j] == i]
        out.append(tmean(sel) if sel else 0)
    return out


# ---------------------------------------------------------------- Tracr

LP, RP, LB, RB = -1, -2, -3, -4      # "(" ")" "{" "}" in declaration order

TRACR = [
    Port("tracr_length", "tracr lib.make_length (causal: SelectorWidth of Select(TRUE))",
         "input seq: {0..3}\noutput sel_width(select(seq, seq, always))\n",
         lambda x: [i + 1 for i in range(len(x))]),
    Port("tracr_length_whole", "tracr lib.make_length (non-causal: the whole input's length)",
         "input seq: {0..3}\nparam n = len(seq)\noutput full(seq, n)\n",
         lambda x: [len(x)] * len(x), refuse="knows only at the last position"),
    Port("tracr_reverse_whole", "tracr lib.make_reverse (non-causal: opp_idx = length - indices - 1)",
         "input seq: {0..3}\nparam n = len(seq)\n"
         "output aggr(select(indices(seq), n - indices(seq) - 1, eq), seq)\n",
         # the interpreter is causal: the key n - 1 - i is visible only from the middle on
         lambda x: [x[len(x) - 1 - i] if len(x) - 1 - i <= i else 0 for i in range(len(x))],
         refuse="knows only at the last position"),
    Port("tracr_reverse_causal", "tracr lib.make_reverse under causal evaluation (length = i + 1)",
         "input seq: {0..3}\nlength = sel_width(select(seq, seq, always))\n"
         "output aggr(select(indices(seq), length - indices(seq) - 1, eq), seq)\n",
         lambda x: [x[0]] * len(x)),
    Port("tracr_hist", "tracr lib.make_hist (causal: running count of x[i])",
         "input seq: {0..3}\noutput sel_width(select(seq, seq, eq))\n",
         lambda x: running(x, lambda p, i: p.count(p[-1]))),
    Port("tracr_sort_unique", "tracr lib.make_sort_unique(tokens, tokens)",
         "input seq: {0..9}\ntarget = sel_width(select(seq, seq, lt))\n"
         "output aggr(select(target, indices(seq), eq), seq)\n",
         lambda x: sort_by_key(x, x),
         sample=lambda rng, n: rng.sample(range(10), min(n, 10)) + [rng.randrange(10) for _ in range(n - 10)]),
    Port("tracr_sort_unique_neg_index", "tracr test_cases sort_unique_2: keys = 1 - indices",
         "input seq: {0..3}\nkeys = 1 - indices(seq)\ntarget = sel_width(select(keys, keys, lt))\n"
         "output aggr(select(target, indices(seq), eq), seq)\n",
         lambda x: sort_by_key(x, [1 - i for i in range(len(x))])),
    Port("tracr_sort", "tracr lib.make_sort(tokens, tokens, max_seq_len=16, min_key=1): "
         "keys x + i/16 ported as 16 x + i (the same order)",
         "input seq: {1..4}\nkeys = seq * 16 + indices(seq)\ntarget = sel_width(select(keys, keys, lt))\n"
         "output aggr(select(target, indices(seq), eq), seq)\n",
         lambda x: sort_by_key(x, [Fraction(v) + Fraction(i, 16) for i, v in enumerate(x)])),
    Port("tracr_sort_freq", "tracr lib.make_sort_freq(max_seq_len=16): keys -hist + i/16",
         "input seq: {1..4}\nhist = -1 * sel_width(select(seq, seq, eq))\n"
         "keys = hist * 16 + indices(seq)\ntarget = sel_width(select(keys, keys, lt))\n"
         "output aggr(select(target, indices(seq), eq), seq)\n",
         lambda x: sort_by_key(x, [Fraction(-h) + Fraction(i, 16) for i, h in
                                   enumerate(running(x, lambda p, i: p.count(p[-1])))])),
    Port("tracr_shift_by_2", "tracr lib.shift_by(2, tokens) (default None -> -5)",
         "input seq: {0..3}\noutput kqv(indices(seq) + 2, indices(seq), seq, eq, -5)\n",
         lambda x: shift(x, 2, -5)),
    Port("tracr_detect_pattern_abc", "tracr lib.detect_pattern(tokens, 'abc') (a, b, c = 0, 1, 2; None -> 0)",
         "input seq: {0..3}\nd0 = seq == 2\nd1 = kqv(indices(seq) + 1, indices(seq), seq == 1, eq)\n"
         "d2 = kqv(indices(seq) + 2, indices(seq), seq == 0, eq)\noutput d2 & d1 & d0\n",
         lambda x: [int(i >= 2 and x[i - 2:i + 1] == [0, 1, 2]) for i in range(len(x))]),
    Port("tracr_count_less_freq", "tracr lib.make_count_less_freq(2) (causal)",
         "input seq: {0..3}\nhist = sel_width(select(seq, seq, eq))\n"
         "output sel_width(select(hist <= 2, full(seq, 1), eq))\n",
         lambda x: cumsum([int(h <= 2) for h in running(x, lambda p, i: p.count(p[-1]))])),
    Port("tracr_count", "tracr lib.make_count(tokens, 'a') (causal: running count of a = 0)",
         "input seq: {0..2}\noutput sel_width(select(seq == 0, full(seq, 1), eq))\n",
         lambda x: cumsum([int(v == 0) for v in x])),
    Port("tracr_count_whole", "tracr lib.make_count(tokens, 'a') (non-causal: the whole input's count)",
         "input seq: {0..2}\nparam c = count(seq, 0)\noutput full(seq, c)\n",
         lambda x: [x.count(0)] * len(x), refuse="knows only at the last position"),
    Port("tracr_nary_sequencemap", "tracr lib.make_nary_sequencemap(x + y - z, tokens, tokens, indices)",
         "input seq: {1..3}\n"
         "output seq_map(seq_map(seq, seq, lambda a, b: a + b), indices(seq), lambda a, b: a - b)\n",
         lambda x: [2 * v - i for i, v in enumerate(x)]),
    Port("tracr_frac_prevs", "tracr lib.make_frac_prevs(tokens == 'l') x 1000",
         "input seq: {0..3}\noutput aggr(select(indices(seq), indices(seq), le), 1000 * (seq == 2))\n",
         lambda x: frac_prevs([int(v == 2) for v in x])),
    Port("tracr_pair_balance", "tracr lib.make_pair_balance(tokens, '(', ')') x 1000 (numerical "
         "LinearSequenceMap of two frac_prevs)",
         'const LP = "("\nconst RP = ")"\ninput seq: {LP, RP, 0}\n'
         "prevs = select(indices(seq), indices(seq), le)\n"
         "output aggr(prevs, 1000 * (seq == LP)) - aggr(prevs, 1000 * (seq == RP))\n",
         lambda x: [a - b for a, b in zip(frac_prevs([int(v == LP) for v in x]),
                                          frac_prevs([int(v == RP) for v in x]))]),
]


def shuffle_dyck2_ref(x, any_neg):
    b1 = [a - b for a, b in zip(frac_prevs([int(v == LP) for v in x]), frac_prevs([int(v == RP) for v in x]))]
    b2 = [a - b for a, b in zip(frac_prevs([int(v == LB) for v in x]), frac_prevs([int(v == RB) for v in x]))]
    neg = [int(p < 0 or q < 0) for p, q in zip(b1, b2)]
    has_neg = running(neg, lambda p, i: any_neg(p))
    last_zero = [int(p == 0 and q == 0) for p, q in zip(b1, b2)]    # select_last: length - 1 = i
    return [z & ~h for z, h in zip(last_zero, has_neg)]


SHUFFLE_DYCK2 = '''const LP = "("
const RP = ")"
const LB = "{"
const RB = "}"
input seq: {LP, RP, LB, RB}
prevs = select(indices(seq), indices(seq), le)
b1 = aggr(prevs, 1000 * (seq == LP)) - aggr(prevs, 1000 * (seq == RP))
b2 = aggr(prevs, 1000 * (seq == LB)) - aggr(prevs, 1000 * (seq == RB))
neg = (b1 < 0) | (b2 < 0)
has_neg = aggr(select(indices(seq), indices(seq), always), neg, 0, REDUCTION)
length = sel_width(select(seq, seq, always))
last_zero = aggr(select(indices(seq), length - 1, eq), (b1 == 0) & (b2 == 0))
output last_zero & ~has_neg
'''

TRACR += [
    # Tracr's has_neg is a numerical mean of 0/1 (a fraction), then `~`: ported twice,
    # as the truncated mean (1 only when every prefix position was negative) and as max.
    Port("tracr_shuffle_dyck2_mean", "tracr lib.make_shuffle_dyck(['()', '{}']) (causal; has_neg = mean)",
         SHUFFLE_DYCK2.replace("REDUCTION", "mean"), lambda x: shuffle_dyck2_ref(x, lambda p: tmean(p))),
    Port("tracr_shuffle_dyck2_max", "tracr lib.make_shuffle_dyck(['()', '{}']) (causal; had_neg = max, "
         "the RASP paper's `aggregate(select_all, negative) > 0`)",
         SHUFFLE_DYCK2.replace("REDUCTION", "max"), lambda x: shuffle_dyck2_ref(x, max)),
]


# ---------------------------------------------------------------- Zhou et al. (np_rasp)

S, END = -1, -2          # count.py: START_TOK, END_TOK


def zhou_count_ref(x):
    """examples/count.py `count`: start_idx = max index of the latest START
    (default 0), numbers read by mean kqv (default 0)."""
    n = len(x)
    start = [max((j for j in range(i + 1) if x[j] == S), default=0) for i in range(n)]
    start_nums = [next((x[j] for j in range(i + 1) if j == start[i] + 1), 0) for i in range(n)]
    end_nums = [next((x[j] for j in range(i + 1) if j == start[i] + 2), 0) for i in range(n)]
    out = []
    for i in range(n):
        nxt = END if x[i] == end_nums[i] else x[i] + 1
        out.append(start_nums[i] if i == start[i] + 2 else nxt)
    return out


def zhou_count_lib_ref(x):
    """examples/count.py `count_lib`: lasts (default -1), index_select (default 0)."""
    n = len(x)
    start = lasts(x, [S] * n, -1)
    start_nums = index_select(x, [s + 1 for s in start])
    end_nums = index_select(x, [s + 2 for s in start])
    out = []
    for i in range(n):
        first = int(i == start[i] + 2)
        final = (~first) & int(x[i] == end_nums[i])
        out.append(start_nums[i] if first else (END if final else x[i] + 1))
    return out


def count_sample(rng, n):
    """Autoregressive count sequences: START a b a a+1 ... (b END), repeated."""
    out = []
    while len(out) < n:
        a = rng.randrange(0, 12)
        b = min(15, a + rng.randrange(0, 6))
        out += [S, a, b] + list(range(a, b + 1)) + [END]
    return out[:n]


ZHOU_COUNT = '''const START = "S"
const END = "E"
input seq: {0..15, START, END}
start_idx = kqv(seq, full(seq, START), indices(seq), eq, 0, max)
start_nums = kqv(indices(seq), start_idx + 1, seq, eq)
end_nums = kqv(indices(seq), start_idx + 2, seq, eq)
is_first_pos = indices(seq) == start_idx + 2
is_highest_num = seq == end_nums
incr_with_eos = where(is_highest_num, END, seq + 1)
output where(is_first_pos, start_nums, incr_with_eos)
'''

ZHOU_COUNT_LIB = '''const START = "S"
const END = "E"
input seq: {0..15, START, END}
start_idx = lasts(seq, full(seq, START))
start_nums = index_select(seq, start_idx + 1)
end_nums = index_select(seq, start_idx + 2)
pred_first_pos = indices(seq) == start_idx + 2
pred_final_pos = (~pred_first_pos) & (seq == end_nums)
output where(pred_first_pos, start_nums, where(pred_final_pos, END, seq + 1))
'''

# examples/add.py: START_PROMPT -1, PLUS -2, EQUALS_SIGN -3, END_RESPONSE -5,
# NONE -88, index hints -100 - i before every digit.
A_START, A_PLUS, A_EQ, A_END, A_NONE = -1, -2, -3, -5, -88


def zhou_add_ref(x, reverse):
    n = len(x)
    seen_eq = has_seen(x, A_EQ)
    prompt = [v if not s else 0 for v, s in zip(x, seen_eq)]
    second = [int(a and not b) for a, b in zip(has_seen(x, A_PLUS), seen_eq)]
    other = induct(prompt, shift(prompt, 1, 0), 1)
    pairsums = [v + o if v >= 0 else v for v, o in zip(x, other)]
    pairsums = [p if m else A_NONE for p, m in zip(pairsums, second)]
    pairsums_nh = [p if v >= 0 else A_NONE for p, v in zip(pairsums, x)]
    cur_out = shift(x, 1, 0)
    cur_pairsum = induct(pairsums, shift(x, 2, 0), 1)
    next_pairsum = induct(pairsums, x, 1)
    if reverse:
        carry = [int(c > 9) | (int(c == 9) & int(o == 0)) for c, o in zip(cur_pairsum, cur_out)]
        final_hint = [-100] * n
        first_hint = induct_prev(x, [A_EQ] * n, -2)
        next_hint = [v + 1 for v in shift(x, 1, 0)]
        eos = [int(a > b) for a, b in zip(next_hint, final_hint)]
    else:
        gives = [int(p > 9) for p in pairsums_nh]
        z = cumsum([int(p != 9 and p != A_NONE) for p in pairsums_nh])
        u = [zz if g else A_NONE for zz, g in zip(z, gives)]
        chain_end = firsts(z, [v - 1 for v in u], A_NONE)
        got = [int(c % 10 != o) for c, o in zip(cur_pairsum, cur_out)]
        inside = [int(p == 9) & g for p, g in zip(next_pairsum, got)]
        idx = []
        for i in range(n):
            sel = [j for j in range(i + 1) if pairsums[j] == x[i]]
            idx.append((tmean(sel) if sel else 0) + 1)
        ends = [int(any(chain_end[j] == idx[i] for j in range(i + 1))) for i in range(n)]
        carry = [a | b for a, b in zip(inside, ends)]
        final_hint = induct_prev(x, [A_EQ] * n, -2)
        first_hint = [-100] * n
        next_hint = [v - 1 for v in shift(x, 1, 0)]
        eos = [int(a < b) for a, b in zip(next_hint, final_hint)]
    out = []
    for i in range(n):
        tok = (next_pairsum[i] + carry[i]) % 10
        is_hint = int(x[i] > -100)
        if is_hint:
            tok = next_hint[i]
        if eos[i] & is_hint:
            tok = A_END
        if x[i] == A_EQ:
            tok = first_hint[i]
        out.append(tok)
    return out


ADD_PAD = 4          # digits per summand (with the carry slot): hints -100 .. -103


def add_sample(reverse):
    def sample(rng, n):
        """A prompt `S h0 d0 h1 d1 ... + ... =` and a prefix of its answer, made
        autoregressively by the reference, cut or padded (with answer steps) to n."""
        p = ADD_PAD
        a, b = rng.randrange(10 ** (p - 1)), rng.randrange(10 ** (p - 1))

        def digits(v):
            out = []
            for i, d in enumerate(str(v).rjust(p, "0")):
                out += [-100 - i, int(d)]
            return out
        seq = [A_START] + digits(a) + [A_PLUS] + digits(b) + [A_EQ]
        while len(seq) < n and seq[-1] != A_END:
            seq.append(zhou_add_ref(seq, reverse)[-1])
        return seq[:n]
    return sample


def zhou_add_source(reverse: bool) -> str:
    head = '''const START_PROMPT = "S"
const PLUS = "+"
const EQUALS_SIGN = "="
const UNUSED = "?"
const END_RESPONSE = "E"
const NONE = -88
input seq: {0..9, START_PROMPT, PLUS, EQUALS_SIGN, END_RESPONSE, -103..-100}

def induct_prev(k, q, offset, default=0):
    return index_select(k, firsts(k, q, -999) + offset, default)

def mask_between_tokens(s, tok0, tok1):
    return seq_map(has_seen(s, tok0), has_seen(s, tok1), lambda a, b: a and not b)

seen_eq = has_seen(seq, EQUALS_SIGN)
prompt = mask(seq, 1 - seen_eq)
second_summand = mask_between_tokens(seq, PLUS, EQUALS_SIGN)
other_digit = induct(prompt, shift_right(prompt, 1), 1)
pairsums = where(seq >= 0, seq + other_digit, seq)
pairsums = mask(pairsums, second_summand, NONE)
pairsums_nh = mask(pairsums, seq >= 0, NONE)
cur_out = shift_right(seq, 1)
cur_pairsum = induct(pairsums, shift_right(seq, 2), 1)
next_pairsum = induct(pairsums, seq, 1)
'''
    if reverse:
        body = '''carry = (cur_pairsum > 9) | ((cur_pairsum == 9) & (cur_out == 0))
final_hint = full(seq, -100)
first_hint = induct_prev(seq, full(seq, EQUALS_SIGN), -2)
next_hint = shift_right(seq, 1) + 1
eos = next_hint > final_hint
'''
    else:
        body = '''gives_carry = tok_map(pairsums_nh, lambda a: a > 9)
z = cumsum((pairsums_nh != 9) & (pairsums_nh != NONE))
u = mask(z, gives_carry, NONE)
chain_end_idxs = firsts(z, u - 1, NONE)
got_carry = (cur_pairsum % 10) != cur_out
inside_chain = (next_pairsum == 9) & got_carry
next_tok_idx = kqv(pairsums, seq, indices(seq), eq) + 1
chain_end = kqv(chain_end_idxs, next_tok_idx, full(seq, 1), eq, 0)
carry = inside_chain | chain_end
final_hint = induct_prev(seq, full(seq, EQUALS_SIGN), -2)
first_hint = full(seq, -100)
next_hint = shift_right(seq, 1) - 1
eos = next_hint < final_hint
'''
    tail = '''next_tok = (next_pairsum + carry) % 10
is_hint = seq > -100
next_tok = where(is_hint, next_hint, next_tok)
next_tok = where(eos & is_hint, END_RESPONSE, next_tok)
output where(seq == EQUALS_SIGN, first_hint, next_tok)
'''
    return head + body + tail


ZHOU_LIB = '''const NULLV = -999
input seq: {0..4}
def induct_prev(k, q, offset, default=0):
    return index_select(k, firsts(k, q, NULLV) + offset, default)
def induct_kqv(k, q, v, offset, default=0):
    return index_select(v, firsts(shift_right(k, offset, NULLV), q, NULLV), default)
'''

ZHOU = [
    Port("zhou_count", "ml-np-rasp examples/count.py count", ZHOU_COUNT, zhou_count_ref,
         sample=count_sample, max_len=6),
    Port("zhou_count_lib", "ml-np-rasp examples/count.py count_lib", ZHOU_COUNT_LIB, zhou_count_lib_ref,
         sample=count_sample, max_len=6),
    Port("zhou_add_reverse", "ml-np-rasp examples/add.py next_tok_addition(reverse=True)",
         zhou_add_source(True), lambda x: zhou_add_ref(x, True), sample=add_sample(True), max_len=8,
         heavy=True),
    Port("zhou_add_forward", "ml-np-rasp examples/add.py next_tok_addition(reverse=False)",
         zhou_add_source(False), lambda x: zhou_add_ref(x, False), sample=add_sample(False), max_len=8,
         heavy=True),
    Port("zhou_induct_prev", "ml-np-rasp lib.induct_prev(seq, seq, -1)",
         ZHOU_LIB + "output induct_prev(seq, seq, -1)\n", lambda x: induct_prev(x, x, -1)),
    Port("zhou_induct_kqv", "ml-np-rasp lib.induct_kqv(seq, seq, indices, 2)",
         ZHOU_LIB + "output induct_kqv(seq, seq, indices(seq), 2)\n",
         lambda x: index_select(list(range(len(x))), firsts(shift(x, 2, NULL), x, NULL), 0)),
    Port("zhou_where_seq_map", "ml-np-rasp lib.where (three seq_maps) and minimum = -maximum(-x)",
         ZHOU_LIB + "c = seq > 1\nxm = seq_map(seq, c, lambda a, m: a * (m != 0))\n"
         "ym = seq_map(-maximum(-seq), c, lambda a, m: a * (m == 0))\n"
         "output seq_map(xm, ym, lambda a, b: a * (b == 0) + b)\n",
         lambda x: [v if v > 1 else min(x[:i + 1]) for i, v in enumerate(x)]),
    Port("zhou_first_true", "ml-np-rasp lib.first_true (seen_true, first_occ, kqv mean)",
         ZHOU_LIB + "b = seq == 2\nseen = kqv(b, full(seq, 1), full(seq, 1), eq, 0)\n"
         "first_occ = seq_map(seen, shift_right(seen, 1), lambda c, p: c and not p)\n"
         "output kqv(first_occ, full(seq, 1), indices(seq), eq, -1)\n",
         lambda x: firsts(x, [2] * len(x), -1)),
    Port("zhou_binary_mode", "ml-np-rasp lib.binary_mode",
         "input seq: {0, 1}\nones = sel_width(select(seq, full(seq, 1), eq))\n"
         "zeros = sel_width(select(seq, full(seq, 0), eq))\noutput ones > zeros\n",
         lambda x: running(x, lambda p, i: int(p.count(1) > p.count(0)))),
]

PORTS = TRACR + ZHOU
BY_NAME = {p.name: p for p in PORTS}
