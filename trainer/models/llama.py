"""Llama-3 block (docs/models.md §6.2) and the explicit `llama` encoder.

Pre-norm `torch.nn.RMSNorm`, multi-head attention without biases and without
GQA, rotary position embedding (θ = 500 000; blocks.Rotary's consecutive-pair
layout, a fixed permutation of HF's rotate-half one), SDPA, SwiGLU
MLP `w2(SiLU(w1 h) ⊙ w3 h)`.  The attention takes an optional injected input
`[v_q | v_k | v_v]` added to the Q, K, V projections before RoPE (P2 §3.2
"Attn(z W_QKV + x W_inp)"), which the implicit Llama uses; the explicit
encoder passes none.  `step` is the one-token form with a (K, V) cache for
the implicit model's sequential mode.
"""
from __future__ import annotations


import torch
import torch.nn.functional as F
from torch import nn

from rasp.errors import RaspError
from trainer.models.base import EncoderOutput, EncoderSpec, register_encoder
from trainer.models.blocks import Rotary
from trainer.models.fixed_point import InjectedCore, VariationalDropout
from trainer.models.mamba2 import causal_presets, extra_with_defaults, init_out_proj


class LlamaAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int, rope_theta: float):
        super().__init__()
        if d_model % n_head or (d_model // n_head) % 2:
            raise RaspError(f"d_model {d_model} must split into {n_head} heads of even size")
        self.n_head, self.head_dim = n_head, d_model // n_head
        self.rope = Rotary(self.head_dim, base=rope_theta)
        self.wq = nn.Linear(d_model, d_model, bias=False)
        self.wk = nn.Linear(d_model, d_model, bias=False)
        self.wv = nn.Linear(d_model, d_model, bias=False)
        self.wo = nn.Linear(d_model, d_model, bias=False)

    def _qkv(self, h, injected):
        q, k, v = self.wq(h), self.wk(h), self.wv(h)
        if injected is not None:
            vq, vk, vv = injected.chunk(3, dim=-1)
            q, k, v = q + vq, k + vk, v + vv
        heads = lambda t: t.reshape(*t.shape[:-1], self.n_head, self.head_dim).transpose(-3, -2)  # noqa: E731
        return heads(q), heads(k), heads(v)

    def forward(self, h, injected=None, key_mask=None):
        """h (b, l, d); causal unless `key_mask` (b, l) bool is given (bidirectional
        over the real tokens)."""
        b, l, d = h.shape
        q, k, v = self._qkv(h, injected)
        q, k = self.rope(q, k, torch.arange(l, device=h.device, dtype=torch.float32).expand(b, l))
        if key_mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask[:, None, None, :])
        return self.wo(out.transpose(1, 2).reshape(b, l, d))

    def step(self, h, injected, position: int, cache):
        """One token h (b, d) at `position`, cache = (K, V) of the earlier tokens
        (b, H, t, hd) or None.  Returns (out, cache with this token appended);
        the given cache is not modified."""
        q, k, v = self._qkv(h[:, None], injected if injected is None else injected[:, None])
        q, k = self.rope(q, k, torch.full((h.shape[0], 1), float(position), device=h.device))
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.wo(out.transpose(1, 2).reshape(h.shape)), (k, v)


class LlamaMLP(nn.Module):
    def __init__(self, d_model: int, d_inner: int):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_inner, bias=False)
        self.w3 = nn.Linear(d_model, d_inner, bias=False)
        self.w2 = nn.Linear(d_inner, d_model, bias=False)

    def forward(self, h):
        return self.w2(F.silu(self.w1(h)) * self.w3(h))


class LlamaBlock(nn.Module):
    """z + Drop(Attn(RMSNorm(z), injected)); then + Drop(MLP(RMSNorm(z))).
    `attn_dropout`/`mlp_dropout` are modules so the implicit model can pass
    variational (mask-reusing) ones."""

    def __init__(self, d_model: int, n_head: int, d_inner: int, rope_theta: float,
                 attn_dropout: nn.Module, mlp_dropout: nn.Module, n_layer: int):
        super().__init__()
        self.norm1 = nn.RMSNorm(d_model, eps=1e-5)
        self.attn = LlamaAttention(d_model, n_head, rope_theta)
        self.norm2 = nn.RMSNorm(d_model, eps=1e-5)
        self.mlp = LlamaMLP(d_model, d_inner)
        self.attn_dropout, self.mlp_dropout = attn_dropout, mlp_dropout
        for out in (self.attn.wo, self.mlp.w2):
            init_out_proj(out, 2 * n_layer)

    def forward(self, z, injected=None, key_mask=None):
        z = z + self.attn_dropout(self.attn(self.norm1(z), injected, key_mask))
        return z + self.mlp_dropout(self.mlp(self.norm2(z)))

    def step(self, z, injected, position: int, cache):
        a, cache = self.attn.step(self.norm1(z), injected, position, cache)
        z = z + self.attn_dropout(a)
        return z + self.mlp_dropout(self.mlp(self.norm2(z))), cache


class LlamaEncoder(nn.Module):
    """Explicit Llama: embedding -> N Llama blocks -> RMSNorm."""

    def __init__(self, cfg):
        super().__init__()
        ex = extra_with_defaults(cfg, LLAMA_DEFAULTS)
        self.causal = cfg.causal
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        nn.init.normal_(self.embedding.weight, std=ex["emb_std"])
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(
            LlamaBlock(cfg.d_model, cfg.n_head, cfg.d_ff, ex["rope_theta"], nn.Dropout(cfg.dropout),
                       nn.Dropout(cfg.dropout), cfg.n_layer) for _ in range(cfg.n_layer))
        self.norm_f = nn.RMSNorm(cfg.d_model, eps=1e-5)

    def forward(self, tokens, mask):
        z = self.dropout(self.embedding(tokens))
        key_mask = None if self.causal else mask
        for block in self.blocks:
            z = block(z, key_mask=key_mask)
        return EncoderOutput(hidden=self.norm_f(z), mask=mask)


LLAMA_DEFAULTS = dict(rope_theta=500000.0, emb_std=0.02)
# CPU size matched to the Mamba2 cpu preset (d 64, one layer); optimiser as the Mamba2 probe's (docs/benchmarks.md §9).
LLAMA_CPU = dict(d_model=64, n_layer=1, n_head=4, d_ff=256,
                 lr=1e-3, betas=[0.9, 0.95], weight_decay=0.0, grad_clip=0.25, batch_size=128)
# docs/models.md §11: MSI's 130M config (12 layers, d 768, 12 heads, d_inner 3072, wd 0.1).
LLAMA_PAPER = dict(d_model=768, n_layer=12, n_head=12, d_ff=3072,
                   lr=1e-3, betas=[0.9, 0.95], weight_decay=0.1, grad_clip=0.25, batch_size=512)

register_encoder(EncoderSpec(
    name="llama", build=LlamaEncoder, family="llama",
    description="explicit Llama-3 blocks: RMSNorm, RoPE θ=500000, SwiGLU (docs/models.md §6.2)",
    defaults=LLAMA_DEFAULTS,
    presets=causal_presets(LLAMA_CPU, LLAMA_PAPER)))


# The injection's bias (MSI: `nn.Linear(d, 3d)`, bias zero-initialised) is the only
# token-independent part of the queries and keys while z is 0 (RMSNorm(0) = 0): through
# RoPE it gives a head a purely positional score, e.g. "attend to t - 1", which the
# recurrence of a word problem needs (bench/implicit.md, 2026-11-26, issue 28).
IMPLICIT_LLAMA_DEFAULTS = {**LLAMA_DEFAULTS, "emb_std": 0.01, "injection_bias": True}


class ImplicitLlamaCore(InjectedCore):
    """The f of implicit Llama (docs/models.md §7.1): embedding (std 0.01), one injection
    `Linear_{d->3d}(RMSNorm_inj(x))` = [v_q|v_k|v_v] shared by all layers, N Llama
    blocks with variational dropout, final RMSNorm.  Causal only."""

    def __init__(self, cfg):
        super().__init__()
        if not cfg.causal:
            raise RaspError("implicit_llama is causal only (its sequential mode needs it)")
        ex = extra_with_defaults(cfg, IMPLICIT_LLAMA_DEFAULTS)
        if not isinstance(ex["injection_bias"], bool):
            raise RaspError(f"injection_bias = {ex['injection_bias']!r}: true or false")
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        nn.init.normal_(self.embedding.weight, std=ex["emb_std"])
        self.emb_dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(
            LlamaBlock(cfg.d_model, cfg.n_head, cfg.d_ff, ex["rope_theta"], VariationalDropout(cfg.dropout),
                       VariationalDropout(cfg.dropout), cfg.n_layer) for _ in range(cfg.n_layer))
        self.norm_inj = nn.RMSNorm(cfg.d_model, eps=1e-5)
        self.injection = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=bool(ex["injection_bias"]))
        if self.injection.bias is not None:
            nn.init.zeros_(self.injection.bias)
        self.norm_f = nn.RMSNorm(cfg.d_model, eps=1e-5)

    def empty_caches(self, batch: int, device=None):
        return [None for _ in self.blocks]
