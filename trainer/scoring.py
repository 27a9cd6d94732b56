"""Loss and metrics of the comparison tasks (BENCHMARKS.md §2).

Every metric is a ratio of sums: `fn(pred, batch) -> (num, den)`, two (B,)
float tensors, so that a split's value is sum(num) / sum(den) and the same
code gives per-length and per-group values and a standard error (the ratio
estimator's, over samples).  Built in:

    acc         per_position: fraction of scored positions right (flip-flop
                "accuracy" = all reads); classify / pair: accuracy
    token_acc   the same as acc for per_position tasks (word problems)
    seq_acc     per_position: a sequence counts when every scored position is right
    last_acc    per_position: the last scored position of each sequence is right
                (flip-flop last read, P1 Table 3)

A task family with its own score (counting's offsets) registers it with
`register_metric(name, fn)` and names it in `SeqTask.metrics`.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from trainer.seqdata import SeqBatch

METRICS: dict = {}


def register_metric(name: str, fn, description: str = ""):
    METRICS[name] = fn
    fn.description = description
    return fn


def _scored(batch: SeqBatch) -> torch.Tensor:
    return batch.targets >= 0


def _per_position_acc(pred, batch):
    if batch.targets.dim() == 1:
        right = (pred == batch.targets).float()
        return right, torch.ones_like(right)
    s = _scored(batch)
    return ((pred == batch.targets) & s).sum(1).float(), s.sum(1).float()


def _seq_acc(pred, batch):
    s = _scored(batch)
    wrong = ((pred != batch.targets) & s).any(1)
    has = s.any(1)
    return (has & ~wrong).float(), has.float()


def _last_acc(pred, batch):
    s = _scored(batch)
    idx = torch.arange(s.shape[1], device=s.device).expand_as(s)
    last = torch.where(s, idx, torch.full_like(idx, -1)).max(1).values
    has = last >= 0
    rows = torch.arange(s.shape[0], device=s.device)
    right = pred[rows, last.clamp_min(0)] == batch.targets[rows, last.clamp_min(0)]
    return (right & has).float(), has.float()


register_metric("acc", _per_position_acc, "accuracy (per-position: over every scored position)")
register_metric("token_acc", _per_position_acc, "token accuracy over the scored positions")
register_metric("seq_acc", _seq_acc, "sequence exact match over the scored positions")
register_metric("last_acc", _last_acc, "accuracy at the last scored position")


def get_metric(name: str):
    if name not in METRICS:
        raise KeyError(f"unknown metric {name!r} (known: {', '.join(METRICS)})")
    return METRICS[name]


def loss_fn(logits: torch.Tensor, batch: SeqBatch) -> torch.Tensor:
    """Cross-entropy: per_position averaged over the batch's scored positions."""
    if batch.targets.dim() == 1:
        return F.cross_entropy(logits, batch.targets)
    s = _scored(batch)
    if not bool(s.any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits[s], batch.targets[s])


def predictions(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(-1)


def ratio(num, den) -> dict:
    """{"mean", "se", "n"} of sum(num)/sum(den) over samples with den > 0."""
    pairs = [(a, b) for a, b in zip(num, den) if b > 0]
    n = len(pairs)
    if n == 0:
        return {"mean": None, "se": None, "n": 0}
    total = sum(b for _, b in pairs)
    r = sum(a for a, _ in pairs) / total
    if n < 2:
        return {"mean": r, "se": None, "n": n}
    resid = sum((a - r * b) ** 2 for a, b in pairs)
    return {"mean": r, "se": math.sqrt(resid * n / (n - 1)) / total, "n": n}
