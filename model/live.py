"""Running a mostly-zero looped transformer (a compiled one) without its zeros.

A compiled model is sparse in value: addition compiled at 102 tokens has
179k parameters of which 5.0k are nonzero (993k when every block had the
widest block's widths; LoopedConfig.block_shapes).  `zero_skipping`
returns a copy whose linear maps multiply only their nonzero block (rows
with a nonzero weight or bias, columns with a nonzero weight), whose MLPs
compute only the hidden units both projections use, and whose attention is
skipped when its output projection is zero.  Skipped terms are products
with an exact 0 and act(0) = 0 for every activation in ACTIVATIONS, so the
outputs are the same (the nonzero terms are summed in a shorter dot product,
which may round differently; on the compiled models we probe it has been
bit-identical).

The copy's parameters have the model's names; changing a nonzero entry in
place is seen by the copy, making a zero entry nonzero is not.  Meant for
repeated evaluation of one zero pattern (the liveness measurement of
trainer/fan/compiled.py's --compress merge), not for training.
"""
from __future__ import annotations

import copy
from typing import cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from .looped import MLP, CausalSelfAttention, LoopedTransformer


def _index(mask: torch.Tensor) -> torch.Tensor:
    return mask.nonzero().flatten()


class _LiveLinear(nn.Module):
    """nn.Linear on its rows `rows` and columns `cols` (default: those with a
    nonzero entry); every other output is 0."""
    rows: torch.Tensor          # buffers (register_buffer)
    cols: torch.Tensor

    def __init__(self, lin: nn.Linear, rows=None, cols=None):
        super().__init__()
        self.weight, self.bias = lin.weight, lin.bias             # the same Parameters
        nz = lin.weight.detach() != 0
        if rows is None:
            rows = nz.any(1) if lin.bias is None else nz.any(1) | (lin.bias.detach() != 0)
            rows = _index(rows)
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer("cols", _index(nz.any(0)) if cols is None else cols, persistent=False)

    def live(self, x_cols: torch.Tensor) -> torch.Tensor:
        """Outputs at `rows` from the inputs at `cols`."""
        w = self.weight.index_select(0, self.rows).index_select(1, self.cols)
        b = None if self.bias is None else self.bias.index_select(0, self.rows)
        return F.linear(x_cols, w, b)

    def scatter(self, y_rows: torch.Tensor) -> torch.Tensor:
        y = y_rows.new_zeros(*y_rows.shape[:-1], self.weight.shape[0])
        return y.index_copy_(-1, self.rows, y_rows)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scatter(self.live(x.index_select(-1, self.cols)))


class _LiveMLP(nn.Module):
    """down(act(up(x))) over the hidden units that up writes (nonzero row or
    bias) and down reads (nonzero column): the others give act(0) = 0 or are
    multiplied by 0."""

    def __init__(self, mlp: MLP):
        super().__init__()
        up_nz, down_nz = mlp.up.weight.detach() != 0, mlp.down.weight.detach() != 0
        written = up_nz.any(1) if mlp.up.bias is None else up_nz.any(1) | (mlp.up.bias.detach() != 0)
        units = _index(written & down_nz.any(0))
        self.up = _LiveLinear(mlp.up, rows=units, cols=_index(up_nz[units].any(0)))
        self.act = mlp.act
        self.down = _LiveLinear(mlp.down, cols=units)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down.scatter(self.down.live(self.act(self.up.live(x.index_select(-1, self.up.cols)))))


class _LiveAttention(CausalSelfAttention):
    """CausalSelfAttention with live projections; 0 when nothing is written."""

    def __init__(self, attn: CausalSelfAttention):
        nn.Module.__init__(self)
        self.n_head, self.d_head, self.scale = attn.n_head, attn.d_head, attn.scale
        self.rel_bias = attn.rel_bias       # the local window's bias, when the model has one
        # add_module: the stand-ins do nn.Linear's work but are not the declared nn.Linear
        for name in "qkvo":
            self.add_module(name, _LiveLinear(getattr(attn, name)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not len(cast(_LiveLinear, self.o).rows):     # o is a _LiveLinear (__init__)
            return torch.zeros_like(x)
        return super().forward(x)


def zero_skipping(model: LoopedTransformer) -> LoopedTransformer:
    """A copy of `model` (its own parameters, the same names and values) that
    skips the products with its zero weights (module docstring)."""
    live = copy.deepcopy(model)
    for blk in live.blocks():
        blk.attn, blk.mlp = _LiveAttention(blk.attn), _LiveMLP(blk.mlp)
    live.add_module("unembed", _LiveLinear(live.unembed))     # a stand-in, as in _LiveAttention
    return live.eval()
