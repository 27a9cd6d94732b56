"""The classical recurrent references (docs/models.md §8, P3 Eq. 2-4): torch.nn
RNN (tanh), LSTM and GRU over a learned embedding.  Causal by construction;
padding is on the right, so no packing is needed for the real positions
(pooled heads read the last real one: "end" pooling).

`extra`: d_emb (embedding width, default d_model).  `d_model` is the hidden
size.  P3's "optional skip/normalisation between layers" is not used.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from trainer.models.base import EncoderConfig, EncoderOutput, EncoderSpec, register_encoder

CELLS = {"rnn": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}


class RecurrentEncoder(nn.Module):
    def __init__(self, cfg: EncoderConfig, cell: str):
        super().__init__()
        self.cfg = cfg
        d_emb = int(cfg.extra.get("d_emb", cfg.d_model))
        self.embed = nn.Embedding(cfg.vocab_size, d_emb, padding_idx=0)
        self.rnn = CELLS[cell](d_emb, cfg.d_model, num_layers=cfg.n_layer, batch_first=True,
                               dropout=cfg.dropout if cfg.n_layer > 1 else 0.0)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        h, _ = self.rnn(self.embed(tokens))
        depth = torch.full((tokens.shape[0],), float(self.cfg.n_layer), device=tokens.device)
        return EncoderOutput(h, mask, None, {"depth": depth})


# docs/benchmarks.md §9: the sizes shown to learn in minutes on one core
CPU = {
    # words: the GRU probe's (the LSTM at the same size); steps are the words family's (trainer/benchmark/presets.py)
    "lstm": {"flipflop": {"d_model": 64, "n_layer": 1, "batch_size": 32, "lr": 1e-3},
             "words": {"d_model": 128, "d_emb": 64, "n_layer": 1, "batch_size": 256, "lr": 3e-3}},
    "gru": {"words": {"d_model": 128, "d_emb": 64, "n_layer": 1, "batch_size": 256, "lr": 3e-3},
            # batch and steps: the memory family's cpu preset (trainer/benchmark/presets.py), as for every model
            "memory": {"d_model": 128, "n_layer": 1, "lr": 1e-3, "grad_clip": 1.0, "weight_decay": 0.0}},
    "rnn": {"counting": {"d_model": 8, "n_layer": 1, "batch_size": 32, "lr": 1e-2}},
}
# docs/models.md §11: P3's state-tracking (d_emb 256 / hidden 768, AdamW 1e-4, wd 0.01, batch 256),
# copying (embedding 10, Adam 1e-3, clip 1, batch 2048, hidden 216 / 112 / 128) and counting (hidden 8)
PAPER = {
    cell: {"words": {"d_model": 768, "d_emb": 256, "batch_size": 256, "lr": 1e-4, "weight_decay": 0.01},
           "memory": {"d_model": hidden, "d_emb": 10, "batch_size": 2048, "lr": 1e-3, "grad_clip": 1.0,
                       "weight_decay": 0.0, "steps": 150_000},
           "counting": {"d_model": 8, "n_layer": 1}}
    for cell, hidden in (("rnn", 216), ("lstm", 112), ("gru", 128))
}

for _cell, _what in (("rnn", "Elman RNN (tanh)"), ("lstm", "LSTM"), ("gru", "GRU")):
    register_encoder(EncoderSpec(_cell, (lambda c: (lambda cfg: RecurrentEncoder(cfg, c)))(_cell), "rnn",
                                 f"torch.nn {_what} over a learned embedding", {"pooling": "end"},
                                 {"cpu": CPU.get(_cell, {}), "paper": PAPER[_cell]}))
