"""Loss and metrics of the comparison tasks (BENCHMARKS.md §2).

A metric gives each example a value in [0, 1], or None when the example has
nothing it scores (`score(name, prediction, target)`, per example: the
task families' definitions).  A split's value is the mean over the examples
with a value, its standard error the sample standard deviation / sqrt(n),
and the same values give the per-length and per-group tables.  Names:

    acc            per_position: fraction of scored positions (target >= 0) right
                   (flip-flop: all reads); classify / pair: 1 if right
    token_acc      the same, under the word-problem name
    seq_acc        1 if every scored position is right (sequence exact match)
    last_read_acc  the last scored position (flip-flop's final read, P1 Table 3)
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F

from trainer.seqdata import SeqBatch


def _scored(prediction, target):
    return [int(p) == int(t) for p, t in zip(prediction, target) if int(t) >= 0]


def _acc(prediction, target) -> Optional[float]:
    if isinstance(target, (list, tuple)):
        hits = _scored(prediction, target)
        return sum(hits) / len(hits) if hits else None
    return float(int(prediction) == int(target))


def _seq_acc(prediction, target) -> Optional[float]:
    hits = _scored(prediction, target)
    return float(all(hits)) if hits else None


def _last_read_acc(prediction, target) -> Optional[float]:
    hits = _scored(prediction, target)
    return float(hits[-1]) if hits else None


METRICS = {"acc": _acc, "token_acc": _acc, "seq_acc": _seq_acc, "last_read_acc": _last_read_acc}


def score(name: str, prediction, target) -> Optional[float]:
    # the task families' own metrics (counting's offsets) live in tasks/scoring.py
    from trainer.tasks.scoring import METRICS as TASK_METRICS
    known = {**TASK_METRICS, **METRICS}
    if name not in known:
        raise KeyError(f"unknown metric {name!r} (known: {', '.join(known)})")
    return known[name](prediction, target)


def example_values(name: str, pred: torch.Tensor, batch: SeqBatch) -> list:
    """The metric's value (or None) for every example of the batch."""
    pred, targets = pred.tolist(), batch.targets.tolist()
    return [score(name, p, t) for p, t in zip(pred, targets)]


def loss_fn(logits: torch.Tensor, batch: SeqBatch) -> torch.Tensor:
    """Cross-entropy: per_position averaged over the batch's scored positions."""
    if batch.targets.dim() == 1:
        return F.cross_entropy(logits, batch.targets)
    s = batch.targets >= 0
    if not bool(s.any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits[s], batch.targets[s])


def predictions(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(-1)


def summary(values) -> dict:
    """{"mean", "se", "n"} over the examples with a value."""
    xs = [float(v) for v in values if v is not None]
    n = len(xs)
    if n == 0:
        return {"mean": None, "se": None, "n": 0}
    mean = sum(xs) / n
    if n < 2:
        return {"mean": mean, "se": None, "n": n}
    var = sum((x - mean) ** 2 for x in xs) / (n - 1)
    return {"mean": mean, "se": math.sqrt(var / n), "n": n}
