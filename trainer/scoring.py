"""Loss and metrics of the comparison tasks (BENCHMARKS.md §2).

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

from trainer.seqdata import SeqBatch
from trainer.tasks.scoring import METRICS, score, summary  # noqa: F401  (the definitions)


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
