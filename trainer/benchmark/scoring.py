"""Loss and metrics of the comparison tasks (docs/benchmarks.md §1).

What each metric name means for one example is defined with the tasks
(`trainer/tasks/scoring.py`: `score(name, prediction, target)` -> a value in
[0, 1], or None when the example has nothing that metric scores -- acc,
token_acc, seq_acc, last_read_acc, offset_acc, offset_seq).  Here: those
values for a batch of model predictions, a split's mean with its standard
error (sample sd / sqrt(n) over the examples with a value), and the
training loss over the same scored positions.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from trainer.benchmark.data import SeqBatch
from trainer.tasks.scoring import METRICS, score, summary  # noqa: F401  (the definitions)


def example_values(name: str, pred: torch.Tensor, batch: SeqBatch) -> list:
    """The metric's value (or None) for every example of the batch."""
    pred, targets = pred.tolist(), batch.targets.tolist()
    return [score(name, p, t) for p, t in zip(pred, targets)]


def loss_weight(batch: SeqBatch) -> float:
    """How many terms the batch's loss averages: its examples, or its scored positions."""
    if batch.targets.dim() == 1:
        return float(batch.targets.shape[0])
    return float((batch.targets >= 0).sum())


def loss_fn(logits: torch.Tensor, batch: SeqBatch, per_shard=None) -> torch.Tensor:
    """Cross-entropy averaged over the batch's examples (pooled heads) or
    scored positions (per_position).  Under data parallelism `per_shard` is
    the mean `loss_weight` of a shard, so the shards' averaged gradients are
    the full batch's exactly."""
    if batch.targets.dim() == 1:
        logits, targets = logits, batch.targets
    else:
        s = batch.targets >= 0
        logits, targets = logits[s], batch.targets[s]
    if not targets.numel():
        return logits.sum() * 0.0
    if per_shard is None:
        return F.cross_entropy(logits, targets)
    return F.cross_entropy(logits, targets, reduction="sum") / max(per_shard, 1.0)


def keep_first_targets(targets: torch.Tensor, k: int) -> torch.Tensor:
    """Per-position targets with all but each example's first k scored ones
    unscored (-1); k = 0, or pooled targets, keep every one."""
    if k <= 0 or targets.dim() == 1:
        return targets
    rank = torch.cumsum((targets >= 0).long(), dim=1)
    return torch.where(rank <= k, targets, torch.full_like(targets, -1))


def predictions(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(-1)
