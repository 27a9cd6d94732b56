"""Counting / timing (docs/benchmarks.md §7; P3 §3 "Counting Memory", §4.3, App. G).

A 0/1 sequence alternates an `off` run of random length (the ITI, numpy
`randint(lo, hi)`, hi exclusive as in CNT) and an `on` run of fixed length
(the ISI), starting with an ITI, cut at the sequence length.  Settings:
short / medium / long = length 200 / 600 / 1000, ISI 10 / 30 / 50, ITI
[20, 40) / [60, 120) / [100, 200).

Target = the next input (autoregressive), so the last position has none (-1):
a sequence cut inside an ISI therefore has no artificial 1 -> 0 "offset".
Metrics (trainer/tasks/scoring.py): `offset_acc` = fraction of ISI ends
predicted (the last `on` input predicts 0 next and the one before it 1),
`offset_seq` = all of a sequence's offsets, `acc` = every next input
(onsets are unpredictable, so it stays below 1).

Phase-alignment tests for models trained on the short setting (P3 Fig. 3,
Table 5; the exact gaps are not in the paper, chosen here):
* `test_two_isi`: ITI, ISI, a long gap of 2..4 x the longest training ITI,
  ISI, then 20 zeros;
* `test_double_isi`: ITI, ISI, a short gap of 1..ISI/2 zeros, ISI, 20 zeros.
  The cpu version (`test_double_isi_cpu`, ISI 2) draws its gap from 1..3
  zeros instead, every gap shorter than the shortest training ITI (4): with
  1..ISI/2 its gap was always one zero, so its 100 examples were 4 distinct
  sequences (only the first ITI varied) and every model scored one of a few
  values; now 12 (4 ITIs x 3 gaps).
"""
from __future__ import annotations

import numpy as np

from rasp.errors import RaspError
from trainer.tasks.base import Example, SeqTask, Split, register

SETTINGS = {"short": (200, 10, (20, 40)), "medium": (600, 30, (60, 120)), "long": (1000, 50, (100, 200))}
# The cpu preset's settings: P3's three at 1/5 of every length (the same ISI : ITI : length
# ratios, ~5 ISIs a sequence).  At full length the counting suite's 42 cpu runs took ~31 h of
# training on 2 shared cores (a length-1000 step of Mamba h64 was 8.5 s); see trainer/benchmark/presets.py.
CPU_SCALE = 5
SETTINGS.update({f"{k}_cpu": (L // CPU_SCALE, isi // CPU_SCALE, (lo // CPU_SCALE, hi // CPU_SCALE))
                 for k, (L, isi, (lo, hi)) in list(SETTINGS.items())})
TAIL = 20


def signal(rng: np.random.Generator, params: dict) -> list:
    L, isi, (lo, hi) = int(params["length"]), int(params["isi"]), params["iti"]
    if L < 2 or isi < 1 or not 1 <= lo < hi:
        raise RaspError(f"counting: bad parameters length {L}, isi {isi}, iti [{lo}, {hi})")
    test = params.get("test", "")
    if test:
        first = [0] * int(rng.integers(lo, hi)) + [1] * isi
        if test == "two_isi":
            gap = int(rng.integers(2 * hi, 4 * hi))
        else:                               # [1, ISI/2] unless the split gives its own range
            g_lo, g_hi = params.get("gap", (1, max(isi // 2, 1) + 1))
            gap = int(rng.integers(g_lo, g_hi))
        return first + [0] * gap + [1] * isi + [0] * TAIL
    out = []
    while len(out) < L:
        out += [0] * int(rng.integers(lo, hi)) + [1] * isi
    return out[:L]


def example(x: list) -> Example:
    return Example(input=[v + 1 for v in x], target=x[1:] + [-1], group=None)


def generate(rng: np.random.Generator, params: dict, n: int) -> list:
    """params: length, isi, iti = [lo, hi) and optionally test = two_isi | double_isi
    (double_isi: gap = [lo, hi) zeros between its two ISIs, default [1, ISI/2 + 1))."""
    return [example(signal(rng, params)) for _ in range(n)]


def _p(setting, **extra):
    L, isi, iti = SETTINGS[setting]
    return {"length": L, "isi": isi, "iti": list(iti), "test": "", **extra}


SPLITS = {"train": Split("train", _p("short"), 900, "short setting (900 / 100 sequences as the CPU probe)"),
          "valid": Split("valid", _p("short"), 100, "short setting")}
for _s in ("medium", "long"):
    SPLITS[f"train_{_s}"] = Split(f"train_{_s}", _p(_s), 900, f"{_s} setting")
    SPLITS[f"valid_{_s}"] = Split(f"valid_{_s}", _p(_s), 100, f"{_s} setting")
SPLITS["test_long_iti"] = Split("test_long_iti", {**_p("short"), "length": 600, "iti": [60, 120]}, 100,
                                "short ISI with the medium ITI (the CPU probe's longer-ITI test)")
SPLITS["test_two_isi"] = Split("test_two_isi", _p("short", test="two_isi"), 100, "phase alignment (a)")
SPLITS["test_double_isi"] = Split("test_double_isi", _p("short", test="double_isi"), 100, "phase alignment (b)")
# the cpu preset's: train_cpu / valid_cpu (short_cpu), train_medium_cpu, ..., test_two_isi_cpu, ...
SPLITS["train_cpu"] = Split("train_cpu", _p("short_cpu"), 900, "cpu preset: the short setting at 1/5 length")
SPLITS["valid_cpu"] = Split("valid_cpu", _p("short_cpu"), 100, "cpu preset: the short setting at 1/5 length")
for _s in ("medium", "long"):
    SPLITS[f"train_{_s}_cpu"] = Split(f"train_{_s}_cpu", _p(f"{_s}_cpu"), 900, f"cpu preset: {_s} at 1/5 length")
    SPLITS[f"valid_{_s}_cpu"] = Split(f"valid_{_s}_cpu", _p(f"{_s}_cpu"), 100, f"cpu preset: {_s} at 1/5 length")
SPLITS["test_two_isi_cpu"] = Split("test_two_isi_cpu", _p("short_cpu", test="two_isi"), 100,
                                   "phase alignment of the cpu preset's short setting")
# gap 1..ITI_lo - 1 (1..3), not 1..ISI/2 (always 1 at ISI 2: a split of 4 distinct sequences)
SPLITS["test_double_isi_cpu"] = Split(
    "test_double_isi_cpu", _p("short_cpu", test="double_isi", gap=[1, SETTINGS["short_cpu"][2][0]]), 100,
    "phase alignment of the cpu preset's short setting (gap 1..3 zeros: every gap below the shortest ITI)")

TASK = register(SeqTask(
    name="counting", kind="per_position", vocab=("0", "1"), labels=("0", "1"), splits=SPLITS,
    generate=generate, metrics=("offset_acc", "offset_seq", "acc"), family="counting",
    description="counting memory (P3): predict the next 0/1 input; scored on the end of each ISI",
    train_range=(200, 200),
    paper_stats={"source": "docs/benchmarks.md §7 (P3 §4.3, Tables 4-5)",
                 "settings": "length 200 / 600 / 1000, ISI 10 / 30 / 50, ITI U[20,40) / U[60,120) / U[100,200)",
                 "solved": "offset predicted, in >= 3 of 5 seeds; hidden-8 RNN solves all three",
                 "on fraction (expected)": "ISI / (ISI + mean ITI): short 10/39.5 = 0.25"},
))
