"""Mamba2 in plain PyTorch (docs/models.md §6.1) and the explicit `mamba2` encoder.

The official mixer calls Triton/CUDA kernels; this one computes the same
function with two interchangeable paths:

* `ssd_chunked`: the chunked state-space-dual form (the `ssd_minimal_discrete`
  reference of state-spaces/mamba, re-implemented): quadratic attention-like
  products inside a chunk, a linear recurrence of chunk states between chunks.
  With one chunk (L <= chunk_size) it is the quadratic SSD form, the simplest
  and fastest on a CPU for short sequences.
* `ssd_step`: the per-token recurrence `S_t = exp(Δ a) S_{t-1} + Δ x_t ⊗ B_t`,
  `y_t = S_t C_t + D x_t`, used for generation / the implicit model's
  sequential mode with a (conv, ssm) state cache.

The mixer takes an optional *injected* input added to its input projection
(`[z | xBC | dt] = in_proj(u) + v`), which the implicit model uses (docs/models.md §7.1);
the explicit encoder passes none.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from rasp.errors import RaspError
from trainer.models.base import EncoderOutput, EncoderSpec, register_encoder, tag_optim
from trainer.models.fixed_point import InjectedCore, VariationalDropout


def segsum(x: torch.Tensor) -> torch.Tensor:
    """(..., T) -> (..., T, T): out[i, j] = x[j+1] + ... + x[i] for i >= j, -inf above
    the diagonal.  Built by masked cumulative sums (not cumsum differences), which
    keeps it exact when the decays are large."""
    T = x.size(-1)
    x = x[..., None].expand(*x.shape, T)                      # x[..., i, j] = x_i
    below = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=-1)
    x = x.masked_fill(~below, 0.0)
    out = torch.cumsum(x, dim=-2)
    on_or_below = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
    return out.masked_fill(~on_or_below, float("-inf"))


def ssd_chunked(x, dt, A, B, C, chunk_size: int, initial_state=None):
    """Chunked SSD scan.

    x (b, l, h, p), dt (b, l, h) (already softplus'd), A (h,) negative decays,
    B and C (b, l, n) shared by all heads (ngroups = 1), initial_state
    (b, h, p, n) or None.  Returns y (b, l, h, p) without the D skip, and the
    final state (b, h, p, n).  Padding to a multiple of the chunk uses dt = 0,
    which neither decays nor writes the state."""
    b, l, h, p = x.shape
    chunk = max(1, min(chunk_size, l))
    pad = (-l) % chunk
    if pad:
        x = F.pad(x, (0, 0, 0, 0, 0, pad))
        dt = F.pad(dt, (0, 0, 0, pad))
        B = F.pad(B, (0, 0, 0, pad))
        C = F.pad(C, (0, 0, 0, pad))
    c = x.shape[1] // chunk
    X = (x * dt[..., None]).reshape(b, c, chunk, h, p)
    Adt = (dt * A).reshape(b, c, chunk, h).permute(0, 3, 1, 2)          # b h c l
    Bc = B.reshape(b, c, chunk, -1)
    Cc = C.reshape(b, c, chunk, -1)
    A_cum = torch.cumsum(Adt, dim=-1)
    # 1. within-chunk outputs (the quadratic "attention" form)
    decay = torch.exp(segsum(Adt))                                        # b h c l s
    y_diag = torch.einsum("bcln,bcsn,bhcls,bcshp->bclhp", Cc, Bc, decay, X)
    # 2. the state each chunk leaves behind, from its own inputs
    decay_to_end = torch.exp(A_cum[..., -1:] - A_cum)                     # b h c l
    states = torch.einsum("bcln,bhcl,bclhp->bchpn", Bc, decay_to_end, X)
    if c == 1 and initial_state is None:       # one chunk from a zero state: nothing to carry
        return y_diag.reshape(b, chunk, h, p)[:, :l], states[:, 0]
    # 3. carry states across chunks
    if initial_state is None:
        initial_state = torch.zeros_like(states[:, :1])
    else:
        initial_state = initial_state[:, None]
    states = torch.cat([initial_state, states], dim=1)                    # b c+1 h p n
    decay_chunk = torch.exp(segsum(F.pad(A_cum[..., -1], (1, 0))))       # b h c+1 c+1
    states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)
    states, final = states[:, :-1], states[:, -1]
    # 4. contribution of the carried-in state to each position
    y_off = torch.einsum("bcln,bchpn,bhcl->bclhp", Cc, states, torch.exp(A_cum))
    y = (y_diag + y_off).reshape(b, c * chunk, h, p)[:, :l]
    return y, final


def ssd_step(state, x, dt, A, B, C):
    """One token of the same recurrence: state (b, h, p, n), x (b, h, p), dt (b, h),
    B and C (b, n).  Returns y (b, h, p) without the D skip, and the new state."""
    decay = torch.exp(dt * A)[..., None, None]
    state = state * decay + (dt[..., None] * x)[..., None] * B[:, None, None, :]
    y = torch.einsum("bhpn,bn->bhp", state, C)
    return y, state


class Mamba2Mixer(nn.Module):
    """The Mamba2 mixer with the constructor defaults of MSI's modules/mamba2.py
    (ngroups 1, d_conv 4, conv bias, no projection biases, gated RMSNorm with
    the norm after the gate, one D per head)."""

    def __init__(self, d_model: int, d_state: int = 128, expand: int = 2, headdim: int = 64,
                 d_conv: int = 4, chunk_size: int = 256, dt_min: float = 1e-3, dt_max: float = 0.1,
                 dt_init_floor: float = 1e-4, A_init_range=(1.0, 16.0)):
        super().__init__()
        self.d_model, self.d_state, self.headdim, self.d_conv = d_model, d_state, headdim, d_conv
        self.d_inner = expand * d_model
        if self.d_inner % headdim:
            raise RaspError(f"expand*d_model = {self.d_inner} is not a multiple of headdim {headdim}")
        self.nheads = self.d_inner // headdim
        self.chunk_size = chunk_size
        self.conv_dim = self.d_inner + 2 * d_state
        self.d_in_proj = 2 * self.d_inner + 2 * d_state + self.nheads
        self.in_proj = nn.Linear(d_model, self.d_in_proj, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, d_conv, groups=self.conv_dim,
                                padding=d_conv - 1, bias=True)
        dt = torch.exp(torch.rand(self.nheads) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
        dt = dt.clamp(min=dt_init_floor)
        # dt_bias, A_log and D are never weight-decayed (mamba_ssm's `_no_weight_decay`)
        self.dt_bias = tag_optim(nn.Parameter(dt + torch.log(-torch.expm1(-dt))), weight_decay=0.0)  # softplus^-1
        self.A_log = tag_optim(nn.Parameter(torch.log(torch.empty(self.nheads).uniform_(*A_init_range))),
                               weight_decay=0.0)
        self.D = tag_optim(nn.Parameter(torch.ones(self.nheads)), weight_decay=0.0)
        self.norm = nn.RMSNorm(self.d_inner, eps=1e-5)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

    def _split(self, zxbcdt):
        return torch.split(zxbcdt, [self.d_inner, self.conv_dim, self.nheads], dim=-1)

    def _gate_out(self, y, z):
        return self.out_proj(self.norm(y * F.silu(z)))

    def forward(self, u: torch.Tensor, injected: Optional[torch.Tensor] = None) -> torch.Tensor:
        """u (b, l, d_model), injected (b, l, d_in_proj) or None -> (b, l, d_model)."""
        b, l, _ = u.shape
        zxbcdt = self.in_proj(u)
        if injected is not None:
            zxbcdt = zxbcdt + injected
        z, xBC, dt = self._split(zxbcdt)
        xBC = F.silu(self.conv1d(xBC.transpose(1, 2))[..., :l].transpose(1, 2))
        x, B, C = torch.split(xBC, [self.d_inner, self.d_state, self.d_state], dim=-1)
        dt = F.softplus(dt + self.dt_bias)
        x = x.reshape(b, l, self.nheads, self.headdim)
        y, _ = ssd_chunked(x, dt, -torch.exp(self.A_log), B, C, self.chunk_size)
        y = y + self.D[:, None] * x
        return self._gate_out(y.reshape(b, l, self.d_inner), z)

    def empty_cache(self, batch: int, device=None, dtype=torch.float32):
        """(conv window of the last d_conv pre-conv inputs, SSM state)."""
        return (torch.zeros(batch, self.conv_dim, self.d_conv, device=device, dtype=dtype),
                torch.zeros(batch, self.nheads, self.headdim, self.d_state, device=device, dtype=dtype))

    def step(self, u: torch.Tensor, injected: Optional[torch.Tensor], cache):
        """One token: u (b, d_model), injected (b, d_in_proj) or None, cache from
        `empty_cache` or a previous step.  Returns (out (b, d_model), new cache);
        the given cache is not modified, so a caller can iterate on a token
        without writing it."""
        conv_state, ssm_state = cache
        zxbcdt = self.in_proj(u)
        if injected is not None:
            zxbcdt = zxbcdt + injected
        z, xBC, dt = self._split(zxbcdt)
        conv_state = torch.cat([conv_state[..., 1:], xBC[..., None]], dim=-1)
        xBC = F.silu((conv_state * self.conv1d.weight[:, 0, :]).sum(-1) + self.conv1d.bias)
        x, B, C = torch.split(xBC, [self.d_inner, self.d_state, self.d_state], dim=-1)
        dt = F.softplus(dt + self.dt_bias)
        x = x.reshape(-1, self.nheads, self.headdim)
        y, ssm_state = ssd_step(ssm_state, x, dt, -torch.exp(self.A_log), B, C)
        y = y + self.D[:, None] * x
        return self._gate_out(y.reshape(-1, self.d_inner), z), (conv_state, ssm_state)


def init_out_proj(linear: nn.Linear, n_residuals: int):
    """MSI `_init_weights`: kaiming-uniform(a=√5) divided by √(residual branches)."""
    nn.init.kaiming_uniform_(linear.weight, a=math.sqrt(5))
    with torch.no_grad():
        linear.weight /= math.sqrt(n_residuals)


class Mamba2Block(nn.Module):
    """Pre-norm residual block `z + Dropout(Mamba2(RMSNorm(z), injected))`.
    `dropout` is a module so the implicit model can pass a variational one."""

    def __init__(self, d_model: int, mixer_kwargs: dict, dropout: nn.Module):
        super().__init__()
        self.norm = nn.RMSNorm(d_model, eps=1e-5)
        self.mixer = Mamba2Mixer(d_model, **mixer_kwargs)
        self.dropout = dropout

    def forward(self, z, injected=None):
        return z + self.dropout(self.mixer(self.norm(z), injected))

    def step(self, z, injected, position: int, cache):
        out, cache = self.mixer.step(self.norm(z), injected, cache)
        return z + self.dropout(out), cache


# The causal per-position task families these models are compared on; the
# same sizes serve each (the word-problem sizes of the CPU probes, docs/benchmarks.md §9).
CAUSAL_FAMILIES = ("words", "counting", "flipflop", "memory")


# Word problems, cpu preset: P2's protocol for the four P2 models (mamba2,
# implicit_mamba2, llama, implicit_llama) — one training length (P2 Fig. 1 trains
# S5 at L = 32 only; every word task has `train_k`) with a constant lr.  On Z60
# implicit Mamba2 reached 0.96 sequence accuracy at L = 8 by step 750 this way
# and 0.03 on P3's length mix 2..8 with a cosine schedule (bench/implicit.md);
# the explicit blocks get the same protocol so the gap is measured like for
# like.  P3's models (GRU, LSTM, Transformer, ...) keep P3's mixed `train`.
WORDS_CPU_SINGLE_LENGTH = dict(train_split="train_k", schedule="constant")


def causal_presets(cpu: dict, paper: dict) -> dict:
    """presets[preset][task family] with one size per preset for every causal
    family (the cpu word problems with P2's single-length protocol)."""
    cpu_fams = {fam: cpu for fam in CAUSAL_FAMILIES}
    cpu_fams["words"] = {**cpu, **WORDS_CPU_SINGLE_LENGTH}
    # counting: the family's batch (P3's 32) for every model, as its steps
    cpu_fams["counting"] = {k: v for k, v in cpu.items() if k != "batch_size"}
    return {"cpu": cpu_fams, "paper": {fam: paper for fam in CAUSAL_FAMILIES}}


def extra_with_defaults(cfg, defaults: dict) -> dict:
    """cfg.extra over the model's defaults (a config built by hand may omit keys)."""
    return {**defaults, **cfg.extra}


def mixer_kwargs(ex: dict) -> dict:
    return dict(d_state=ex["d_state"], expand=ex["expand"], headdim=ex["headdim"],
                d_conv=ex["d_conv"], chunk_size=ex["chunk_size"])


class Mamba2Encoder(nn.Module):
    """Explicit Mamba2: embedding -> N pre-norm Mamba2 blocks -> RMSNorm.  Causal by
    construction (causal conv and left-to-right scan)."""

    def __init__(self, cfg):
        super().__init__()
        ex = extra_with_defaults(cfg, MAMBA2_DEFAULTS)
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        nn.init.normal_(self.embedding.weight, std=ex["emb_std"])
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Mamba2Block(cfg.d_model, mixer_kwargs(ex), nn.Dropout(cfg.dropout))
                                    for _ in range(cfg.n_layer))
        for block in self.blocks:
            init_out_proj(block.mixer.out_proj, cfg.n_layer)
        self.norm_f = nn.RMSNorm(cfg.d_model, eps=1e-5)

    def forward(self, tokens, mask):
        z = self.dropout(self.embedding(tokens))
        for block in self.blocks:
            z = block(z)
        return EncoderOutput(hidden=self.norm_f(z), mask=mask)


MAMBA2_DEFAULTS = dict(d_state=128, expand=2, headdim=64, d_conv=4, chunk_size=256, emb_std=0.02)
# docs/benchmarks.md §9: 1 layer, d 64, expand 2, headdim 16 (8 heads), d_state 16.
MAMBA2_CPU = dict(d_model=64, n_layer=1, d_state=16, expand=2, headdim=16,
                  lr=1e-3, betas=[0.9, 0.95], weight_decay=0.0, grad_clip=0.25, batch_size=128)
# docs/models.md §11: the state-tracking model of MSI's config.
MAMBA2_PAPER = dict(d_model=256, n_layer=1, d_state=128, expand=4, headdim=64,
                    lr=1e-3, betas=[0.9, 0.95], weight_decay=0.0, grad_clip=0.25, batch_size=512)

register_encoder(EncoderSpec(
    name="mamba2", build=Mamba2Encoder, family="mamba2",
    description="explicit Mamba2 (plain-PyTorch SSD), N pre-norm layers (docs/models.md §6.1)",
    defaults=MAMBA2_DEFAULTS,
    presets=causal_presets(MAMBA2_CPU, MAMBA2_PAPER)))


class ImplicitMamba2Core(InjectedCore):
    """The f of implicit Mamba2 (docs/models.md §7.1): embedding (std 0.01), one
    injection `Linear(RMSNorm_inj(x))` of width d_in_proj shared by all layers,
    N pre-norm Mamba2 blocks with variational dropout, final RMSNorm."""

    def __init__(self, cfg):
        super().__init__()
        ex = extra_with_defaults(cfg, {**MAMBA2_DEFAULTS, "emb_std": 0.01})
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        nn.init.normal_(self.embedding.weight, std=ex["emb_std"])
        self.emb_dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Mamba2Block(cfg.d_model, mixer_kwargs(ex), VariationalDropout(cfg.dropout))
                                    for _ in range(cfg.n_layer))
        for block in self.blocks:
            init_out_proj(block.mixer.out_proj, cfg.n_layer)
        self.norm_inj = nn.RMSNorm(cfg.d_model, eps=1e-5)
        self.injection = nn.Linear(cfg.d_model, self.blocks[0].mixer.d_in_proj, bias=False)
        self.norm_f = nn.RMSNorm(cfg.d_model, eps=1e-5)

    def empty_caches(self, batch: int, device=None):
        return [block.mixer.empty_cache(batch, device) for block in self.blocks]
