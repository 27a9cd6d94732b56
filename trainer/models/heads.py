"""Task heads over a sequence encoder (docs/models.md §2) and the `SeqModel`
that joins the two.

    PositionHead     Linear(d, C) at every position (flip-flop, word problems,
                     copying, counting: JRC flipflop_framework.py)
    ClassifierHead   pool -> Linear(d, d) -> ReLU -> Linear(d, C)  (ListOps)
    PairHead         pool each sentence to u, v; [u; v; u*v; |u-v|] ->
                     Linear(4d, d) -> ReLU -> Linear(d, C)  (Logical Inference)

Pooling (models/base.py): "mean" = masked mean over the positions the
encoder returns (START/END included when it adds them), "end" = the last
valid position, "cls" = position 0.  Multi-class heads use C logits and
cross-entropy, binary ones too (2 logits + CE equals 1 logit + BCE on what
is scored).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from trainer.models.base import EncoderOutput

POOLING = ("mean", "end", "cls")


def pool(hidden: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    """(B, L, d), (B, L) bool -> (B, d)."""
    if how == "mean":
        w = mask.to(hidden.dtype).unsqueeze(-1)
        return (hidden * w).sum(1) / w.sum(1).clamp_min(1.0)
    if how == "end":
        last = (mask.long().sum(1) - 1).clamp_min(0)        # padding is on the right
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    if how == "cls":
        return hidden[:, 0]
    raise ValueError(f"unknown pooling {how!r} (one of {', '.join(POOLING)})")


def sample_stat(value: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """An encoder statistic per sample (B,): per-position (B, L) values are
    averaged over the valid positions, (B,) ones kept, scalars broadcast."""
    value = value.detach().float()
    if value.dim() == 0:
        return value.expand(mask.shape[0])
    if value.dim() == 2:
        w = mask.float()
        return (value * w).sum(1) / w.sum(1).clamp_min(1.0)
    return value


def _mlp(d_in: int, d: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d), nn.ReLU(), nn.Linear(d, n_out))


class PositionHead(nn.Module):
    def __init__(self, d_model: int, n_labels: int):
        super().__init__()
        self.out = nn.Linear(d_model, n_labels)

    def forward(self, enc: EncoderOutput) -> torch.Tensor:       # (B, L, C)
        return self.out(enc.hidden)


class ClassifierHead(nn.Module):
    def __init__(self, d_model: int, n_labels: int, pooling: str = "mean"):
        super().__init__()
        if pooling not in POOLING:
            raise ValueError(f"unknown pooling {pooling!r} (one of {', '.join(POOLING)})")
        self.pooling = pooling
        self.mlp = _mlp(d_model, d_model, n_labels)

    def forward(self, enc: EncoderOutput) -> torch.Tensor:       # (B, C)
        return self.mlp(pool(enc.hidden, enc.mask, self.pooling))


def pair_features(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The siamese features [u; v; u*v; |u-v|] (JRC sentence_pair_framework.py)."""
    return torch.cat([u, v, u * v, (u - v).abs()], dim=-1)


class PairHead(nn.Module):
    def __init__(self, d_model: int, n_labels: int, pooling: str = "mean"):
        super().__init__()
        if pooling not in POOLING:
            raise ValueError(f"unknown pooling {pooling!r} (one of {', '.join(POOLING)})")
        self.pooling = pooling
        self.mlp = _mlp(4 * d_model, d_model, n_labels)

    def forward(self, enc1: EncoderOutput, enc2: EncoderOutput) -> torch.Tensor:     # (B, C)
        u = pool(enc1.hidden, enc1.mask, self.pooling)
        v = pool(enc2.hidden, enc2.mask, self.pooling)
        return self.mlp(pair_features(u, v))


def make_head(kind: str, d_model: int, n_labels: int, pooling: str = "mean") -> nn.Module:
    if kind == "per_position":
        return PositionHead(d_model, n_labels)
    if kind == "classify":
        return ClassifierHead(d_model, n_labels, pooling)
    if kind == "pair":
        return PairHead(d_model, n_labels, pooling)
    raise ValueError(f"unknown task kind {kind!r}")


def _split_output(enc: EncoderOutput, b: int):
    """The two halves of an encoder output over a batch of 2b sentences."""
    return (EncoderOutput(enc.hidden[:b], enc.mask[:b]), EncoderOutput(enc.hidden[b:], enc.mask[b:]))


class SeqModel(nn.Module):
    """encoder + head.  forward(tokens, mask[, tokens2, mask2]) ->
    (logits, EncoderOutput).  Sentence pairs are padded to one length and
    encoded in one batch of 2B ("batch_pair", JRC); the returned
    EncoderOutput is then that 2B batch, its stats averaged over each pair."""

    def __init__(self, encoder: nn.Module, head: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.head = head

    def set_progress(self, step: int, total_steps: int):
        if hasattr(self.encoder, "set_progress"):
            self.encoder.set_progress(step, total_steps)

    def forward(self, tokens, mask, tokens2=None, mask2=None):
        if tokens2 is None:
            enc = self.encoder(tokens, mask)
            return self.head(enc), enc
        b, width = tokens.shape[0], max(tokens.shape[1], tokens2.shape[1])
        pad = lambda t: torch.nn.functional.pad(t, (0, width - t.shape[1]))
        enc = self.encoder(torch.cat([pad(tokens), pad(tokens2)]), torch.cat([pad(mask), pad(mask2)]))
        enc1, enc2 = _split_output(enc, b)
        stats = {k: (sample_stat(v, enc.mask)[:b] + sample_stat(v, enc.mask)[b:]) / 2
                 for k, v in enc.stats.items() if torch.is_tensor(v)}
        return self.head(enc1, enc2), EncoderOutput(enc.hidden, enc.mask, enc.aux_loss, stats)
