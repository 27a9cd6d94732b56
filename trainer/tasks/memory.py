"""Copying and denoising (selective copying) (docs/benchmarks.md §6; P3 §3, §4.2, App. D-F).

Vocabulary: 8 data symbols 0..7, the blank `_`, the indicator `:`.
* copying: S data symbols, T - 1 blanks, the indicator, S blank output slots
  (length T + 2S; docs/benchmarks.md §6).
* denoising: the S symbols scattered over S + T slots (the rest blank; the
  symbols' order is kept), the indicator, S output slots (length T + 2S + 1, as
  docs/benchmarks.md §6 describes it).
Targets: the S symbols in order at the S output slots, -1 elsewhere (P3 scores
only those; the causal model at output slot j has seen the indicator and the
earlier slots).  Metrics `acc` over the output slots, `seq_acc` all S right.

Training mixtures: (a) S = 10, T in {10..50 step 10} (`train`); (b) T = 50,
S in {2..10 step 2} (`train_s`).  Extrapolation sweeps: (a) T up to 500 with
S = 10 (`test_T100` … `test_T500`); (b) S up to 100 with T = 50 (`test_S20` …
`test_S100`).  Test sizes are not in P3 (1 000 here).

Copying labels come from `programs/copying.rasp` through `ProgramLabeler`
(`reference_targets` below is the independent check).  Denoising has no
program yet (output slot j needs the j-th non-blank symbol, a rank-based
gather not written so far); its labels are the plain-Python
`reference_targets`.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from rasp.errors import RaspError
from trainer.tasks.base import PROGRAMS, Example, SeqTask, Split, register
from trainer.tasks.common import pick

SYMBOLS = tuple(str(i) for i in range(8))
BLANK, INDICATOR = "_", ":"
VOCAB = SYMBOLS + (BLANK, INDICATOR)
B_ID, I_ID = VOCAB.index(BLANK) + 1, VOCAB.index(INDICATOR) + 1
TEST_SIZE = 1_000


def layout(kind: str, data: list, T: int, positions=None) -> list:
    """Input ids (data = symbol indices 0..7)."""
    S = len(data)
    if kind == "copying":
        body = [d + 1 for d in data] + [B_ID] * (T - 1)
    else:
        body = [B_ID] * (S + T)
        for p, d in zip(positions, data):
            body[p] = d + 1
    return body + [I_ID] + [B_ID] * S


def reference_targets(ids: list) -> list:
    """The symbols before the indicator, in order, at the slots after it; -1 elsewhere."""
    at = ids.index(I_ID)
    symbols = [i - 1 for i in ids[:at] if i != B_ID]
    out = [-1] * len(ids)
    out[at + 1:at + 1 + len(symbols)] = symbols
    return out


@lru_cache(maxsize=1)
def copying_labeler():
    from trainer.tasks.labels import ProgramLabeler
    return ProgramLabeler(PROGRAMS / "copying.rasp")


def program_targets(batch: list) -> list:
    """programs/copying.rasp's outputs at the S output slots, -1 elsewhere."""
    lab = copying_labeler()
    code = {B_ID: lab.symbols[BLANK], I_ID: lab.symbols[INDICATOR]}
    outputs, _ = lab([[code.get(i, i - 1) for i in ids] for ids in batch])
    out = []
    for ids, o in zip(batch, outputs):
        at = ids.index(I_ID)
        S = len(ids) - at - 1
        out.append([-1] * (at + 1) + [int(v) for v in o[at + 1:at + 1 + S]])
    return out


def generator(kind: str):
    def generate(rng: np.random.Generator, params: dict, n: int) -> list:
        out = []
        for _ in range(n):
            S, T = int(pick(rng, params["S"])), int(pick(rng, params["T"]))
            if S < 1 or T < 1:
                raise RaspError(f"{kind}: S and T must be >= 1, got S = {S}, T = {T}")
            data = [int(v) for v in rng.integers(0, len(SYMBOLS), size=S)]
            positions = sorted(rng.choice(S + T, size=S, replace=False).tolist()) if kind == "denoising" else None
            ids = layout(kind, data, T, positions)
            out.append(Example(input=ids, target=None, group=S))
        targets = (program_targets([e.input for e in out]) if kind == "copying"
                   else [reference_targets(e.input) for e in out])
        for e, t in zip(out, targets):
            e.target = t
        return out
    return generate


def splits() -> dict:
    s = {
        "train": Split("train", {"S": 10, "T": [10, 20, 30, 40, 50]}, 0, "P3 mixture (a): S = 10, T <= 50"),
        "valid": Split("valid", {"S": 10, "T": [10, 20, 30, 40, 50]}, TEST_SIZE, "as train"),
        "train_s": Split("train_s", {"S": [2, 4, 6, 8, 10], "T": 50}, 0, "P3 mixture (b): T = 50, S <= 10"),
        "valid_s": Split("valid_s", {"S": [2, 4, 6, 8, 10], "T": 50}, TEST_SIZE, "as train_s"),
        "train_cpu": Split("train_cpu", {"S": 5, "T": [5, 10, 15, 20]}, 0, "cpu plan: S = 5, T 5..20"),
        "valid_cpu": Split("valid_cpu", {"S": 5, "T": [5, 10, 15, 20]}, TEST_SIZE, "as train_cpu"),
        "test_cpu_T40": Split("test_cpu_T40", {"S": 5, "T": 40}, TEST_SIZE, "cpu: 2x the blank interval"),
        "test_cpu_T80": Split("test_cpu_T80", {"S": 5, "T": 80}, TEST_SIZE, "cpu: 4x the blank interval"),
    }
    for T in (100, 200, 300, 400, 500):
        s[f"test_T{T}"] = Split(f"test_T{T}", {"S": 10, "T": T}, TEST_SIZE, "sweep (a): longer blank interval")
    for S in (20, 40, 60, 80, 100):
        s[f"test_S{S}"] = Split(f"test_S{S}", {"S": S, "T": 50}, TEST_SIZE, "sweep (b): longer pattern")
    return s


STATS = {
    "source": "docs/benchmarks.md §6 (P3 §4.2, App. D, Table 3)",
    "mixtures": "(a) S = 10, T in {10..50}; (b) T = 50, S in {2..10}",
    "sweeps": "(a) T up to 500 (S = 10); (b) S up to 100 (T = 50)",
    "learned": "reaches the signal within 150K steps (batch 2048), stop at 99 %",
    "chance": "1/8 per output slot",
}

for _kind, _desc in (("copying", "S symbols, T - 1 blanks, indicator: output the S symbols"),
                     ("denoising", "S symbols scattered in S + T slots, indicator: output them in order")):
    register(SeqTask(name=_kind, kind="per_position", vocab=VOCAB, labels=SYMBOLS, splits=splits(),
                     generate=generator(_kind), metrics=("acc", "seq_acc"), family="memory",
                     description=f"{_kind} (P3): {_desc}",
                     train_range=(30 + (_kind == "denoising"), 70 + (_kind == "denoising")), paper_stats=STATS))
