"""What each comparison-task metric name means, per example.

`score(name, prediction, target)` gives one example's value (a float in
[0, 1]) or None when the example has nothing that metric scores (an example
without reads has no last read).  A split's metric is the mean over examples
with a value, so standard errors and by-length tables come from these.

    per-position tasks (prediction: one label id per position; target -1 = unscored)
      acc            fraction of scored positions right (flip-flop: all reads;
                     copying/denoising: the S output slots; counting: every next input)
      token_acc      the same, under the word-problem name
      seq_acc        1 if every scored position is right (sequence exact match)
      last_read_acc  the last scored position only (flip-flop: the final read, P1 Table 3)
      offset_acc     counting: fraction of ISI offsets predicted, an offset being a pair
                     of scored positions with targets 1 then 0 (the last `on` input
                     predicts 0 next) and both predictions right; positions after the
                     last input are never scored, so a sequence cut inside an ISI adds
                     no artificial offset (docs/benchmarks.md §7)
      offset_seq     1 if every offset of the sequence is predicted
    classification / pair (prediction and target: one class id)
      acc            1 if right
"""
from __future__ import annotations

import math
from typing import Optional, Sequence


def _scored(prediction: Sequence[int], target: Sequence[int]):
    return [(int(p) == int(t)) for p, t in zip(prediction, target) if int(t) >= 0]


def _offsets(prediction, target):
    hits = []
    for t in range(1, len(target)):
        if int(target[t - 1]) == 1 and int(target[t]) == 0:
            hits.append(int(prediction[t - 1]) == 1 and int(prediction[t]) == 0)
    return hits


def _mean(values) -> Optional[float]:
    return sum(values) / len(values) if values else None


def acc(prediction, target) -> Optional[float]:
    if isinstance(target, (list, tuple)):
        return _mean(_scored(prediction, target))
    return float(int(prediction) == int(target))


def seq_acc(prediction, target) -> Optional[float]:
    hits = _scored(prediction, target)
    return float(all(hits)) if hits else None


def last_read_acc(prediction, target) -> Optional[float]:
    hits = _scored(prediction, target)
    return float(hits[-1]) if hits else None


def offset_acc(prediction, target) -> Optional[float]:
    return _mean(_offsets(prediction, target))


def offset_seq(prediction, target) -> Optional[float]:
    hits = _offsets(prediction, target)
    return float(all(hits)) if hits else None


METRICS = {"acc": acc, "token_acc": acc, "seq_acc": seq_acc, "last_read_acc": last_read_acc,
           "offset_acc": offset_acc, "offset_seq": offset_seq}


def score(name: str, prediction, target) -> Optional[float]:
    return METRICS[name](prediction, target)


def summary(values) -> dict:
    """{"mean", "se", "n"} over the values that are not None (a split's examples, or
    a comparison cell's seeds); se = sample sd / sqrt(n)."""
    xs = [float(v) for v in values if v is not None]
    n = len(xs)
    if n == 0:
        return {"mean": None, "se": None, "n": 0}
    mean = sum(xs) / n
    if n < 2:
        return {"mean": mean, "se": None, "n": n}
    var = sum((x - mean) * (x - mean) for x in xs) / (n - 1)      # (not **: a huge value overflows to inf, not raises)
    return {"mean": mean, "se": math.sqrt(var / n), "n": n}
