"""The shared pre-LN Transformer block of every P1 model (docs/models.md §3,
JRC models/modules/*): Transformer, UT, GUT, TLB and GUTLB all stack or loop
`PreLNBlock`.

    A = Dropout(MHA(LN1(H), LN1(KV))) + H          KV = H for self-attention
    H' = FFN(LN2(A)) + A,  FFN = Linear -> Dropout -> GELU -> Linear -> Dropout

* MHA: no biases in q/k/v/out, softmax scale head_dim^-0.5, SDPA (CPU and
  fp32; JRC's flash kernel is CUDA-only), padding keys masked, a causal mask
  when asked.  Init: q/k/v xavier_uniform gain 1/sqrt(2), out xavier_uniform;
  FFN weights xavier_uniform, biases N(0, 1e-6).
* Positions (self-attention only, never cross-attention): "nope", "rope"
  (`Rotary`) or "xpos" (`XPos`, rotary with a decay, P1's default), with
  pos = cumsum(mask) - 1 and consecutive coordinate pairs (x0, x1), ...
* `add_start_end`: P1's learned START/END vectors for non-causal tasks.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

POSITIONS = ("nope", "rope", "xpos")


def positions(mask: torch.Tensor) -> torch.Tensor:
    """(B, L) bool -> (B, L) float position of each token, cumsum(mask) - 1."""
    return (mask.long().cumsum(1) - 1).clamp_min(0).float()


def _rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    """rot(x0, x1) = (-x1, x0) on consecutive pairs of the last axis."""
    x = x.unflatten(-1, (-1, 2))
    return torch.stack([-x[..., 1], x[..., 0]], dim=-1).flatten(-2)


class Rotary(nn.Module):
    """RoPE on (B, H, L, h): x cos(theta) + rot(x) sin(theta), theta_j(pos) =
    pos / 10000^(j / (h/2)) for pair j (no parameters)."""

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary positions need an even head dimension, got {head_dim}")
        self.head_dim = head_dim
        self.register_buffer("inv_freq", base ** (-torch.arange(head_dim // 2).float() / (head_dim // 2)),
                             persistent=False)

    def angles(self, pos: torch.Tensor):
        """(B, L) -> cos, sin of shape (B, 1, L, h), each pair's angle twice."""
        theta = pos[..., None] * self.inv_freq                       # (B, L, h/2)
        theta = theta.repeat_interleave(2, dim=-1).unsqueeze(1)
        return theta.cos(), theta.sin()

    def scale(self, pos: torch.Tensor) -> Optional[torch.Tensor]:
        return None

    def forward(self, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor):
        cos, sin = self.angles(pos)
        q = q * cos + _rotate_pairs(q) * sin
        k = k * cos + _rotate_pairs(k) * sin
        s = self.scale(pos)
        if s is not None:
            q, k = q * s, k / s
        return q, k


class XPos(Rotary):
    """xPos (JRC xpos_relative_position.py, from torchscale): rotary, then Q
    times s and K divided by s, s_j(pos) = ((2j + 0.4h) / 1.4h)^((pos + m)/512)
    with m = floor(-L/2), L the tensor length."""

    def __init__(self, head_dim: int, base: float = 10000.0, scale_base: float = 512.0):
        super().__init__(head_dim, base)
        self.scale_base = scale_base
        j = torch.arange(head_dim // 2).float()
        self.register_buffer("zeta", (2 * j + 0.4 * head_dim) / (1.4 * head_dim), persistent=False)

    def scale(self, pos: torch.Tensor) -> torch.Tensor:
        m = math.floor(-pos.shape[1] / 2)
        power = (pos[..., None] + m) / self.scale_base                # (B, L, 1)
        s = self.zeta ** power                                        # (B, L, h/2)
        return s.repeat_interleave(2, dim=-1).unsqueeze(1)


def make_positions(kind: str, head_dim: int) -> Optional[nn.Module]:
    if kind == "nope":
        return None
    if kind == "rope":
        return Rotary(head_dim)
    if kind == "xpos":
        return XPos(head_dim)
    raise ValueError(f"unknown positional encoding {kind!r} (one of {', '.join(POSITIONS)})")


def attention_mask(q_len: int, key_mask: Optional[torch.Tensor], causal: bool, device) -> Optional[torch.Tensor]:
    """Boolean SDPA mask (B or 1, 1, Lq, Lk), True = may attend."""
    m = None
    if key_mask is not None:
        m = key_mask[:, None, None, :]
    if causal:
        k_len = key_mask.shape[1] if key_mask is not None else q_len
        tri = torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len)
        m = tri[None, None] if m is None else m & tri
    return m


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int, head_dim: Optional[int] = None, attn_dropout: float = 0.0,
                 positions: str = "nope"):
        super().__init__()
        self.n_head = n_head
        self.head_dim = head_dim or d_model // n_head
        inner = self.n_head * self.head_dim
        self.q = nn.Linear(d_model, inner, bias=False)
        self.k = nn.Linear(d_model, inner, bias=False)
        self.v = nn.Linear(d_model, inner, bias=False)
        self.o = nn.Linear(inner, d_model, bias=False)
        self.attn_dropout = attn_dropout
        self.pos = make_positions(positions, self.head_dim)
        for lin in (self.q, self.k, self.v):
            nn.init.xavier_uniform_(lin.weight, gain=1 / math.sqrt(2))
        nn.init.xavier_uniform_(self.o.weight)

    def forward(self, x, kv=None, key_mask=None, causal: bool = False, pos=None):
        """x (B, Lq, d); kv (B, Lk, d) or None (self-attention); key_mask (B, Lk)
        bool; pos (B, L) token positions for rotary/xPos: self-attention, or a
        `kv` stream over the same positions as x when `pos` is given (UT's
        marginalised S stream); cross-attention (kv, no pos) has none."""
        B, Lq, _ = x.shape
        src = x if kv is None else kv
        split = lambda t: t.view(B, t.shape[1], self.n_head, self.head_dim).transpose(1, 2)
        q, k, v = split(self.q(x)), split(self.k(src)), split(self.v(src))
        if self.pos is not None and (kv is None or pos is not None):
            if pos is None:
                pos = positions(key_mask) if key_mask is not None else \
                    torch.arange(Lq, device=x.device).float().expand(B, Lq)
            q, k = self.pos(q, k, pos)
        mask = attention_mask(Lq, key_mask, causal, x.device)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                           dropout_p=self.attn_dropout if self.training else 0.0)
        return self.o(y.transpose(1, 2).reshape(B, Lq, -1))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)
        for lin in (self.up, self.down):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.normal_(lin.bias, std=1e-6)

    def forward(self, x):
        return self.drop(self.down(F.gelu(self.drop(self.up(x)))))


class PreLNBlock(nn.Module):
    """One P1 block.  forward(h, mask, causal, kv=None, kv_mask=None, pos=None):
    self-attention over h (keys masked by `mask`) or, with `kv`, attention
    from h to kv (the same LN1 on both streams, keys masked by `kv_mask`)."""

    def __init__(self, d_model: int, n_head: int, d_ff: int, dropout: float = 0.0, attn_dropout: float = 0.0,
                 positions: str = "nope", head_dim: Optional[int] = None):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_head, head_dim, attn_dropout, positions)
        self.drop = nn.Dropout(dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff, dropout)

    def attend(self, h, mask=None, causal: bool = False, kv=None, kv_mask=None, pos=None, stream=None):
        """`stream`: keys/values from a second sequence over h's own positions
        (masked by `mask`, causal and positioned like self-attention)."""
        q = self.ln1(h)
        if stream is not None:
            pos = positions(mask) if pos is None else pos
            return h + self.drop(self.attn(q, self.ln1(stream), mask, causal, pos))
        if kv is None:
            return h + self.drop(self.attn(q, None, mask, causal, pos))
        return h + self.drop(self.attn(q, self.ln1(kv), kv_mask, False))

    def forward(self, h, mask=None, causal: bool = False, kv=None, kv_mask=None, pos=None):
        a = self.attend(h, mask, causal, kv, kv_mask, pos)
        return a + self.ffn(self.ln2(a))


def add_start_end(h: torch.Tensor, mask: torch.Tensor, start: torch.Tensor, end: torch.Tensor):
    """P1's START/END (JRC `augment_sequence`): START before every sequence,
    END at its first padding slot (right after its last real token).
    (B, L, d), (B, L) -> (B, L + 2, d), (B, L + 2)."""
    B, L, d = h.shape
    lengths = mask.long().sum(1)
    out = torch.cat([start.expand(B, 1, d), h, h.new_zeros(B, 1, d)], dim=1)
    idx = torch.arange(L + 2, device=h.device)
    is_end = idx[None, :] == (lengths + 1)[:, None]
    out = torch.where(is_end[..., None], end.expand(B, L + 2, d), out)
    new_mask = idx[None, :] < (lengths + 2)[:, None]
    return out * new_mask[..., None].to(out.dtype), new_mask
