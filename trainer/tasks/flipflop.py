"""Flip-flop language modelling (Liu et al. 2023; docs/benchmarks.md §2, P1 §6.6).

Generator (exact, JRC preprocess/process_flipflop.py): a sequence of length T is
T/2 (instruction, bit) pairs.  Instruction 0 is `w`; the others are `i` with
probability p_i and `w` / `r` with (1 - p_i)/2 each, except the instruction at
position T-2, forced to `r` (so the last token is a read answer).  After `w`
and `i` comes a uniform bit; after `r` the memory (the latest written bit).
Only distinct sequences are kept (JRC also keeps only those with an `r`, which
the forced read guarantees).  Vocabulary in JRC id order: w i r 0 1.

Scoring.  JRC trains a causal LM on `[SOS] + seq[:-1]`, so the model output
at position t predicts token t and only read answers are scored.  Here the
input is the sequence itself and the target sits one position earlier, at the
`r` instruction whose next token is the answer: the same information is
visible at the same output (the `r` and everything before it), without the
SOS token.  Every other position has target -1.  Targets come from
`programs/flip_flop.rasp` (the latest written bit at each position) through
`ProgramLabeler`; the generator's own read bits are the independent check
(tests/test_tasks_flipflop.py).

Metrics: `acc` over all reads (JRC `accuracy`), `last_read_acc` = the final
read of each sequence (P1 Table 3; JRC logs both).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from rasp.errors import RaspError
from trainer.tasks.base import PROGRAMS, Example, SeqTask, Split, register
from trainer.tasks.common import derive_split, pick

VOCAB = ("w", "i", "r", "0", "1")           # JRC ids w 0, i 1, r 2, 0 3, 1 4 (ours: + 1)
W, I, R, ZERO, ONE = range(5)              # indices into VOCAB
PROGRAM = PROGRAMS / "flip_flop.rasp"

PAPER_TRAIN_SIZE = 160_000
PAPER_TEST_SIZE = 10_000
PAPER_VALID_SIZE = 1_000                   # per distribution


def split_name(T: int, p_i: float, prefix: str = "test") -> str:
    return f"{prefix}_{T}_p{p_i:g}"


def check_params(T: int, p_i: float):
    if T < 4 or T % 2:
        raise RaspError(f"flipflop: T must be an even length >= 4, got {T}")
    if not 0.0 <= p_i < 1.0:
        raise RaspError(f"flipflop: p_i must be in [0, 1), got {p_i}")


def generate_sequences(rng: np.random.Generator, T: int, p_i: float, n: int) -> np.ndarray:
    """n sequences (n, T) of VOCAB indices, not yet de-duplicated."""
    check_params(T, p_i)
    pairs = T // 2
    p_wr = (1.0 - p_i) / 2
    instr = rng.choice(np.array([W, I, R]), size=(n, pairs), p=[p_wr, p_i, p_wr])
    instr[:, 0] = W
    instr[:, -1] = R                                      # position T - 2
    bits = rng.integers(0, 2, size=(n, pairs))
    # memory = bit of the latest `w` at or before each pair (forward fill)
    write_at = np.where(instr == W, np.arange(pairs), 0)
    latest = np.maximum.accumulate(write_at, axis=1)
    memory = np.take_along_axis(bits, latest, axis=1)
    bits = np.where(instr == R, memory, bits)
    seqs = np.empty((n, T), dtype=np.int8)
    seqs[:, 0::2] = instr
    seqs[:, 1::2] = ZERO + bits
    return seqs


@lru_cache(maxsize=1)
def labeler():
    from trainer.tasks.labels import ProgramLabeler
    return ProgramLabeler(PROGRAM, need_loop=False)


def program_tokens(seq, symbols: dict) -> list:
    code = {W: symbols["w"], I: symbols["i"], R: symbols["r"], ZERO: 0, ONE: 1}
    return [code[int(t)] for t in seq]


def targets_from_program(seqs) -> list:
    """Per-position targets: the program's latest-written bit at each `r`, -1 elsewhere."""
    lab = labeler()
    outputs, _ = lab([program_tokens(s, lab.symbols) for s in seqs])
    return [[int(o) if int(t) == R else -1 for t, o in zip(s, out)] for s, out in zip(seqs, outputs)]


def _one_distribution(rng, T, p_i, n) -> list:
    out, seen, drawn = [], set(), 0
    while len(out) < n:
        batch = min(max(n - len(out), 16), 4096)
        if drawn > 1000 * n + 10_000:
            raise RaspError(f"flipflop: only {len(out)} distinct sequences of {n} found at T = {T}, "
                            f"p_i = {p_i}; ask for fewer")
        drawn += batch
        for seq in generate_sequences(rng, T, p_i, batch):
            key = seq.tobytes()
            if key not in seen and len(out) < n:
                seen.add(key)
                out.append(seq)
    return out


def generate(rng: np.random.Generator, params: dict, n: int) -> list:
    """params: T and p_i (each a value or a list to draw from per example), or
    `mix` = [[T, p_i], ...] for JRC's mixed dev set (equal shares, in order)."""
    if "mix" in params:
        parts = params["mix"]
        counts = [n // len(parts) + (k < n % len(parts)) for k in range(len(parts))]
        return [ex for (T, p_i), c in zip(parts, counts) for ex in generate(rng, {"T": T, "p_i": p_i}, c)]
    seqs = []
    if isinstance(params["T"], (list, tuple)) or isinstance(params["p_i"], (list, tuple)):
        for _ in range(n):
            seqs += _one_distribution(rng, int(pick(rng, params["T"])), float(pick(rng, params["p_i"])), 1)
    else:
        seqs = _one_distribution(rng, int(params["T"]), float(params["p_i"]), n)
    targets = targets_from_program(seqs)
    return [Example(input=[int(t) + 1 for t in s], target=tg) for s, tg in zip(seqs, targets)]


def last_write_reference(seq) -> list:
    """Plain-Python reference (independent of the program): at each `r`, the bit of the latest `w`."""
    out, memory = [], None
    for t, tok in enumerate(seq):
        if t % 2 == 1 and seq[t - 1] == W:
            memory = tok - ZERO
        out.append(memory if tok == R else -1)
    return out


def _split(name, T, p_i, size, description=""):
    return Split(name, {"T": T, "p_i": p_i}, size, description)


PAPER_TESTS = [(T, p) for T in (512, 1024) for p in (0.1, 0.8, 0.98)]
CPU_TESTS = [(T, p) for T in (128, 256) for p in (0.1, 0.8, 0.98)]

SPLITS = {
    "train": _split("train", 512, 0.8, PAPER_TRAIN_SIZE, "JRC/P1: 160 000 at T = 512, p_i = 0.8"),
    "valid": Split("valid", {"mix": [[512, 0.8]] + [list(tp) for tp in PAPER_TESTS]}, 7 * PAPER_VALID_SIZE,
                   "JRC 'mixed' dev: 1 000 from each of the 7 distributions"),
    "test_normal": _split("test_normal", 512, 0.8, PAPER_TEST_SIZE, "JRC 'normal' test (= test_512_p0.8)"),
    "train_128": _split("train_128", 128, 0.8, PAPER_TRAIN_SIZE, "cpu preset"),
    "valid_128": Split("valid_128", {"mix": [[128, 0.8]] + [list(tp) for tp in CPU_TESTS]}, 7 * PAPER_VALID_SIZE,
                       "cpu preset: mixed dev over the cpu test distributions"),
}
for _T, _p in PAPER_TESTS:
    SPLITS[split_name(_T, _p)] = _split(split_name(_T, _p), _T, _p, PAPER_TEST_SIZE, "P1 Table 3 column")
for _T, _p in CPU_TESTS:
    SPLITS[split_name(_T, _p)] = _split(split_name(_T, _p), _T, _p, PAPER_TEST_SIZE, "cpu preset")

TASK = register(SeqTask(
    name="flipflop", kind="per_position", vocab=VOCAB, labels=("0", "1"), splits=SPLITS,
    generate=generate, metrics=("acc", "last_read_acc"), family="flipflop",
    description="flip-flop language FFL(p_i): predict the bit after every `r` (Liu et al. 2023)",
    train_range=(512, 512),
    paper_stats={
        "source": "docs/benchmarks.md §2 (JRC process_flipflop.py, P1 §6.6)",
        "train": "160 000 sequences, T = 512, p_i = 0.8",
        "tests": "10 000 per (T, p_i), T in {512, 1024}, p_i in {0.1, 0.8, 0.98}",
        "valid": "1 000 per distribution (7 distributions, 'mixed')",
        "instruction probabilities": "P(i) = p_i, P(w) = P(r) = (1 - p_i)/2; position T-2 forced to r",
        "reads per sequence (expected)": "1 + (T/2 - 2)(1 - p_i)/2: T=512 p_i=0.8 -> 26.4",
    },
))


def make_split(task: SeqTask = TASK, T: int = 512, p_i: float = 0.8, size: int = PAPER_TEST_SIZE,
               name: str = "") -> Split:
    """A test split at any T, p_i (named like the paper's: test_2048_p0.9)."""
    check_params(int(T), float(p_i))
    return derive_split(task, "test_512_p0.8", name=name or split_name(int(T), float(p_i)), size=size,
                        T=int(T), p_i=float(p_i))
