"""The reference Transformer encoders: P1's pre-LN block (models/blocks.py)
stacked `n_layer` times (docs/models.md §3).

    transformer        no positional encoding (NoPE; P3's Transformer)
    transformer_rope   rotary positions
    transformer_xpos   xPos (P1's default)

Embedding N(0, 0.02) with padding row 0, dropout, then (non-causal tasks
only) the START/END vectors, the blocks, and a final LayerNorm: the blocks
are pre-LN, so their output is un-normalised without it.
`extra`: attn_dropout (default = dropout), head_dim.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from trainer.models.base import EncoderConfig, EncoderOutput, EncoderSpec, register_encoder
from trainer.models.blocks import PreLNBlock, add_start_end


class TransformerEncoder(nn.Module):
    def __init__(self, cfg: EncoderConfig, positions: str = "nope"):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=0)
        nn.init.normal_(self.embed.weight, std=0.02)
        with torch.no_grad():
            self.embed.weight[0].zero_()
        self.drop = nn.Dropout(cfg.dropout)
        attn_dropout = cfg.extra.get("attn_dropout", cfg.dropout)
        self.blocks = nn.ModuleList(
            PreLNBlock(cfg.d_model, cfg.n_head, cfg.d_ff, cfg.dropout, attn_dropout, positions,
                       cfg.extra.get("head_dim")) for _ in range(cfg.n_layer))
        self.norm = nn.LayerNorm(cfg.d_model)
        if not cfg.causal:
            self.start = nn.Parameter(torch.randn(cfg.d_model))
            self.end = nn.Parameter(torch.randn(cfg.d_model))

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        h = self.drop(self.embed(tokens))
        if not self.cfg.causal:
            h, mask = add_start_end(h, mask, self.start, self.end)
        for blk in self.blocks:
            h = blk(h, mask, self.cfg.causal)
        depth = torch.full((tokens.shape[0],), float(len(self.blocks)), device=tokens.device)
        return EncoderOutput(self.norm(h), mask, None, {"depth": depth})


CPU = {   # docs/benchmarks.md §9: 2 layers, d 64, 4 heads, AdamW 1e-3, wd 0.1, batch 32
    "flipflop": {"d_model": 64, "n_layer": 2, "n_head": 4, "d_ff": 128, "lr": 1e-3, "weight_decay": 0.1,
                 "batch_size": 32},
}
PAPER = {  # P1's Transformer rows (JRC configs), P3's sizes: docs/models.md §11
    "flipflop": {"d_model": 512, "n_layer": 6, "n_head": 8, "d_ff": 2048, "dropout": 0.1, "lr": 3e-4,
                 "betas": [0.9, 0.999], "weight_decay": 0.1, "batch_size": 16, "steps": 10_000,
                 "schedule": "linear", "warmup": 50, "attn_dropout": 0.1},
    "listops": {"d_model": 512, "n_layer": 4, "n_head": 8, "d_ff": 1024, "dropout": 0.1, "attn_dropout": 0.1,
                "betas": [0.9, 0.98], "weight_decay": 0.1, "batch_size": 32},
    "logic": {"d_model": 512, "n_layer": 4, "n_head": 8, "d_ff": 1024, "dropout": 0.2, "attn_dropout": 0.5,
              "lr": 7e-4, "betas": [0.9, 0.98], "weight_decay": 0.1, "batch_size": 256,
              "schedule": "constant", "warmup": 4000},
    "words": {"d_model": 512, "n_head": 8, "d_ff": 2048},
}


def _spec(name: str, positions: str, what: str):
    return EncoderSpec(name, lambda cfg: TransformerEncoder(cfg, positions), "transformer",
                       f"pre-LN Transformer (P1 block, SDPA), {what}", {},
                       {"cpu": CPU, "paper": PAPER})


register_encoder(_spec("transformer", "nope", "no positional encoding (NoPE)"))
register_encoder(_spec("transformer_rope", "rope", "rotary positions (RoPE)"))
register_encoder(_spec("transformer_xpos", "xpos", "xPos positions (P1's default)"))
