"""Word problems / state tracking (docs/benchmarks.md §3; P3 §4.1, P2 §4).

Tasks words_z60, words_a4z5, words_a5, words_s5 (P3 protocol) and words_mixed
(P2: M^a × A5 under the paper's D_p).  An input is a word m_0 … m_{L-1} of
element ids (trainer/tasks/groups.py gives the ids and the product); the
target at every position t is the prefix product m_0 · … · m_t, unshifted
(docs/models.md §7.6).  Every position is scored.  Metrics: `token_acc`, and
`seq_acc` (all positions right; P3's success criterion is >= 90 %).

P3 protocol (WP main.py `get_dataset`): training at length k = the 80 % part
of the `G=k` file plus all of the `G=2` … `G=k-1` files, each file holding
min(|G|^l, 10^6) distinct words (cap 10^6, docs/benchmarks.md §3.1).  Online we draw
words uniformly with replacement, the length l with probability proportional
to that file size (x 0.8 for l = k), so the length mix is WP's.  Valid = the
held-out length k; tests at 2k … 5k and 64 … 512 (P3 Table 2 trains k = 8, the
cpu preset too).

Mixed task (P2 §4; docs/benchmarks.md §3.2: the paper's D_p, not MSI's p_code): the
monoid part uniform over E A B X, the A5 part the identity with probability
1 - p and each of the 59 other elements with p/59.  Train p = 0.1, tests
p = 0.5 (out of distribution) and 0.1, at L = 256 and 1024.

Labels come from `programs/words_<group>.rasp` (lookup-table programs written
by trainer/tasks/word_programs.py from the tables of groups.py) through
`ProgramLabeler`; the direct product `Monoid.prefix_products` and the
permutation compositions of tests/test_tasks_words.py are the independent
references.
"""
from __future__ import annotations

import csv
import io
from functools import lru_cache
from pathlib import Path

import numpy as np

from rasp.errors import RaspError
from trainer.tasks import groups
from trainer.tasks.base import PROGRAMS, Example, SeqTask, Split, register

CAP = 1_000_000                      # words per length file (WP PR #36, P3 App. B)
TRAIN_K = 8                          # P3 Table 2 and the cpu preset
TEST_SIZE = 1_000                    # not stated in P3; our choice
P3_GROUPS = {"z60": "Z60", "a4z5": "A4_x_Z5", "a5": "A5", "s5": "S5"}   # task suffix -> WP file prefix


def length_weights(order: int, min_len: int, max_len: int, cap: int = CAP) -> np.ndarray:
    """WP's share of each length l in [min_len, max_len]: min(order^l, cap), the
    longest x 0.8 (its file is split 80/20 into train/validation)."""
    lengths = np.arange(min_len, max_len + 1)
    w = np.array([float(min(order ** int(l), cap)) for l in lengths])
    if max_len > min_len:
        w[-1] *= 0.8
    return w / w.sum()


def draw_lengths(rng, params, n, order) -> np.ndarray:
    lo, hi = int(params["min_len"]), int(params["max_len"])
    if not 1 <= lo <= hi:
        raise RaspError(f"word problem: need 1 <= min_len <= max_len, got {lo}, {hi}")
    if lo == hi:
        return np.full(n, lo)
    return rng.choice(np.arange(lo, hi + 1), size=n, p=length_weights(order, lo, hi, int(params.get("cap", CAP))))


def draw_mixed(rng, L: int, p: float, n: int) -> np.ndarray:
    """D_p over M^a × A5 (id 60 m + g): m uniform, g = identity w.p. 1 - p, else
    uniform over the 59 others."""
    if not 0.0 <= p <= 1.0:
        raise RaspError(f"words_mixed: p must be in [0, 1], got {p}")
    m = rng.integers(0, 4, size=(n, L))
    hard = rng.random((n, L)) < p
    g = np.where(hard, rng.integers(1, 60, size=(n, L)), 0)
    return m * 60 + g


@lru_cache(maxsize=None)
def labeler(group_name: str):
    from trainer.tasks.labels import ProgramLabeler
    return ProgramLabeler(PROGRAMS / f"words_{group_name}.rasp")


def prefix_targets(group_name: str, words: np.ndarray) -> list:
    """The program's outputs (programs/words_<group>.rasp) = the prefix products."""
    outputs, _ = labeler(group_name)([list(map(int, w)) for w in words])
    return outputs


def _examples(group_name, words) -> list:
    words = np.asarray(words, dtype=np.int64)
    targets = prefix_targets(group_name, words)
    return [Example(input=[int(v) + 1 for v in w], target=[int(v) for v in t]) for w, t in zip(words, targets)]


def generator(group_name: str):
    def generate(rng: np.random.Generator, params: dict, n: int) -> list:
        order = groups.get(group_name).order        # built on first use, not at registration
        if group_name == "mixed":
            return _examples("mixed", draw_mixed(rng, int(params["L"]), float(params["p"]), n))
        lengths = draw_lengths(rng, params, n, order)
        out = [None] * n
        for L in np.unique(lengths):          # one vectorised draw per length, in a fixed order
            rows = np.flatnonzero(lengths == L)
            for r, ex in zip(rows, _examples(group_name, rng.integers(0, order, size=(len(rows), int(L))))):
                out[r] = ex
        return out
    return generate


def p3_splits(order: int, k: int = TRAIN_K) -> dict:
    sizes = [min(order ** l, CAP) for l in range(2, k + 1)]
    train_size = int(sum(sizes[:-1]) + 0.8 * sizes[-1])
    splits = {
        "train": Split("train", {"min_len": 2, "max_len": k}, train_size,
                       f"P3: length {k} (80 %) with all lengths 2..{k - 1} mixed in, <= 10^6 words per length"),
        "valid": Split("valid", {"min_len": k, "max_len": k}, int(0.2 * sizes[-1]),
                       f"the held-out 20 % at the training length {k}"),
        # P2 trains at one length (Fig. 1: L = 32 only); the implicit models'
        # cpu preset uses it (trainer/models/implicit.py, bench/implicit.md).
        "train_k": Split("train_k", {"min_len": k, "max_len": k}, int(0.8 * sizes[-1]),
                         f"length k = {k} only (P2's single training length): the G={k} file's 80 %"),
    }
    for L in [m * k for m in range(2, 6)] + [64, 128, 256, 512]:
        splits[f"test_{L}"] = Split(f"test_{L}", {"min_len": L, "max_len": L}, TEST_SIZE,
                                    f"{L // k}X the training length" if L % k == 0 and L <= 5 * k else
                                    "P3 Table 2 long test")
    return splits


def mixed_splits() -> dict:
    s = {
        "train": Split("train", {"L": 256, "p": 0.1}, 512 * 16_384, "P2: L = 256, p = 0.1 (512 x 16 384 words)"),
        "valid": Split("valid", {"L": 256, "p": 0.1}, 4_096, "in distribution"),
        "train_64": Split("train_64", {"L": 64, "p": 0.1}, 512 * 16_384, "cpu-sized training length"),
        # the compare suite's cpu runs (suites/words.toml): an implicit step at L = 64
        # costs ~10x one at L = 16 on one core (bench/implicit.md)
        "train_16": Split("train_16", {"L": 16, "p": 0.1}, 512 * 16_384, "cpu-sized training length (words suite)"),
        "valid_16": Split("valid_16", {"L": 16, "p": 0.1}, 4_096, "cpu-sized, in distribution"),
        # every word task has a `train_k` (one training length); here it is `train`'s
        "train_k": Split("train_k", {"L": 256, "p": 0.1}, 512 * 16_384, "P2: L = 256, p = 0.1 (as train)"),
    }
    for L, p in [(256, 0.5), (1024, 0.5), (256, 0.1), (1024, 0.1), (64, 0.5), (128, 0.5), (16, 0.5), (32, 0.5)]:
        name = f"test_{L}_p{p:g}"
        s[name] = Split(name, {"L": L, "p": p}, 4_096,
                        "P2/MSI test" if L >= 256 else "cpu-sized test")
    return s


WP_STATS = {
    "source": "docs/benchmarks.md §3.1 (P3 §4.1, App. B; WP generate_data.py, main.py)",
    "train": "k = 8: the G=8 file's 80 % + all of G=2..7; <= 10^6 words per length",
    "tests": "2k..5k = 16, 24, 32, 40 and 64, 128, 256, 512",
    "success": ">= 90 % sequence accuracy (5 seeds averaged)",
    "targets": "uniform over the group (prefix products of uniform words are uniform)",
}

for _suffix, _wp in P3_GROUPS.items():
    _name, _order = groups.SIZES[_suffix]
    _splits = p3_splits(_order)
    if _suffix == "s5":      # P2 Fig. 1: S5 trained at L = 32, tested up to 128
        _splits["train_32"] = Split("train_32", {"min_len": 32, "max_len": 32}, CAP,
                                      "P2 Fig. 1: length 32 only (size not stated; 10^6 as P3)")
    register(SeqTask(
        name=f"words_{_suffix}", kind="per_position", vocab=tuple(str(i) for i in range(_order)),
        labels=tuple(str(i) for i in range(_order)), splits=_splits, generate=generator(_suffix),
        metrics=("token_acc", "seq_acc"), family="words",
        description=f"word problem over {_name} ({_order} elements): the prefix product at every position",
        train_range=(2, TRAIN_K), paper_stats={**WP_STATS, "group order": _order},
        program=str(PROGRAMS / f"words_{_suffix}.rasp")))

_mixed_order = groups.SIZES["mixed"][1]
register(SeqTask(
    name="words_mixed", kind="per_position", vocab=tuple(str(i) for i in range(_mixed_order)),
    labels=tuple(str(i) for i in range(_mixed_order)), splits=mixed_splits(), generate=generator("mixed"),
    metrics=("token_acc", "seq_acc"), family="words",
    description="A5 x the aperiodic monoid under D_p (P2 §4): the prefix product at every position",
    train_range=(256, 256),
    paper_stats={"source": "docs/benchmarks.md §3.2 (P2 §4, App. C, D.1)", "elements": 240,
                 "train": "512 x 16 384 words, L = 256, p = 0.1", "tests": "4 096 words, L = 256 and 1 024, p = 0.5 (OOD)",
                 "hard tokens": "non-identity A5 part, probability p each position",
                 "result": "explicit Mamba2 at chance on p = 0.5; implicit Mamba2 generalises (figures only)"},
    program=str(PROGRAMS / "words_mixed.rasp")))


# ---- the WP release format: `seed,input,target`, space-separated ids ----

def read_wp_csv(path) -> tuple:
    """-> (seeds, words, targets) as lists; a malformed line is a RaspError naming it."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise RaspError(f"{path}: cannot read ({e})") from None
    rows = csv.reader(io.StringIO(text))
    header = next(rows, None)
    if header != ["seed", "input", "target"]:
        raise RaspError(f"{path}:1: expected the header 'seed,input,target', got {header}")
    seeds, words, targets = [], [], []
    for line, row in enumerate(rows, 2):
        try:
            seed, x, y = row
            x, y = [int(v) for v in x.split()], [int(v) for v in y.split()]
            if len(x) != len(y) or not x:
                raise ValueError("input and target lengths differ")
        except ValueError as e:
            raise RaspError(f"{path}:{line}: bad row ({e})") from None
        seeds.append(seed)
        words.append(x)
        targets.append(y)
    return seeds, words, targets


def load_wp_csv(path) -> list:
    """Examples (input ids = element id + 1, targets = the file's prefix products)."""
    _, words, targets = read_wp_csv(path)
    return [Example(input=[v + 1 for v in x], target=list(y)) for x, y in zip(words, targets)]


def write_wp_csv(path, examples, seed: int = 0):
    lines = ["seed,input,target"]
    for ex in examples:
        lines.append(f"{seed},{' '.join(str(v - 1) for v in ex.input)},{' '.join(map(str, ex.target))}")
    tmp = Path(str(path) + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
