"""The linear-recurrence baselines of P3 ("memory and generalization of linear
recurrence"; docs/models.md §9): S4D, Mamba (Mamba-1), NRU and IDS4, as causal
sequence encoders (contract: trainer/models/base.py).

All four share one skeleton (`LinearRecurrenceEncoder`): token embedding ->
N residual layers of one mixer each -> hidden states.  They are
uni-directional recurrences, so they are causal whatever `cfg.causal` says
(P3 uses them causally on every task); right padding never reaches a valid
position.

    s4d    minimal S4D [S4 `models/s4/s4d.py`, `example.py`]: diagonal complex A
           (S4D-Lin init), ZOH kernel, FFT convolution, D skip, GELU, Conv1d(H->2H,
           k=1) + GLU; post-norm residual (example.py's default).
    mamba  Mamba-1 selective SSM in plain PyTorch [mamba_ssm `mamba_simple.py`,
           `selective_scan_ref`]: ZOH for A (exp(ΔA)), Euler for B (ΔB) —
           docs/models.md §9 (P3 Eq. 11 writes a bilinear form; we follow the
           Mamba code).  Pre-norm residual blocks and a final norm (MixerModel).
           Sequential scan; a chunked parallel form gives the same outputs
           (tested) and is the one to use on an accelerator.
    nru    P3 Eq. 5: one write/erase head, ReLU, memory vector of `memory_size`;
           write/erase vectors L5-normalised as in the NRU code, memory-read
           weights initialised at zero (without both the state overflows on
           200-token counting signals; see NRULayer).
    ids4   per-layer input-dependent N×N transition, cumulative matrix product
           (P3 §4.1: "significant numerical issues … incapable of modeling
           sequences longer than 20 tokens" — the product of L random-ish
           matrices grows or shrinks like exp(L); nothing here rescues that, on
           purpose: it is the baseline as published.  Measured at init, d_model
           64, N 16, LayerNorm'd inputs: max ‖P_t‖ ≈ 1e6 at t = 5, 5e10 at
           t = 10, inf (float32) by t = 20 — training then stops with the
           trainer's "loss is not finite" error; `act = tanh` bounds the
           entries of A(x_t) but not the product).

Optimiser hint.  S4D's SSM parameters (log Δ, A) train with lr ≤ 1e-3 and no
weight decay, Mamba's A_log and D with no weight decay, as in the official
code (S4 `setup_optimizer`, Mamba `_no_weight_decay`).  Such parameters are
tagged with `trainer.models.base.tag_optim`; `base.param_groups(module, lr,
weight_decay)` (also the method `encoder.optim_groups(lr, weight_decay)`)
turns any module — the encoder or encoder + head — into AdamW groups
honouring them, and trainer/benchmark/kind.py builds its optimiser from it.

`cfg.extra` keys (defaults in each EncoderSpec): d_state, dt_min, dt_max,
ssm_lr (s4d); d_state, expand, d_conv, dt_rank, scan = "sequential" |
"chunked", chunk (mamba); memory_size, d_emb, lp_norm (nru); d_state, act (ids4);
norm = "post" | "pre" | "none" (all).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainer.models.base import (EncoderConfig, EncoderOutput, EncoderSpec, param_groups,
                                 register_encoder, tag_optim)

# ---------------------------------------------------------------------------
# the shared skeleton


class ResidualStack(nn.Module):
    """x <- x + dropout(mixer(x)) with LayerNorm before ("pre", plus a final
    norm) or after ("post") each mixer, or none."""

    def __init__(self, mixers: list, d_model: int, norm: str = "post", dropout: float = 0.0):
        super().__init__()
        if norm not in ("pre", "post", "none"):
            raise ValueError(f"norm must be pre, post or none, not {norm!r}")
        self.norm = norm
        self.mixers = nn.ModuleList(mixers)
        make = (lambda: nn.LayerNorm(d_model)) if norm != "none" else nn.Identity
        self.norms = nn.ModuleList(make() for _ in mixers)
        self.final_norm = nn.LayerNorm(d_model) if norm == "pre" else nn.Identity()
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for mixer, norm in zip(self.mixers, self.norms):
            if self.norm == "pre":
                x = x + self.dropout(mixer(norm(x)))
            else:
                x = norm(x + self.dropout(mixer(x)))
        return self.final_norm(x)


class LinearRecurrenceEncoder(nn.Module):
    """Embedding -> residual stack of causal mixers -> (B, L, d_model)."""

    def __init__(self, cfg: EncoderConfig, mixers: list, norm: str, d_emb: int | None = None):
        super().__init__()
        self.cfg = cfg
        d_emb = d_emb or cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, d_emb, padding_idx=0)
        self.stack = ResidualStack(mixers, cfg.d_model, norm=norm, dropout=cfg.dropout)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        hidden = self.stack(self.embed(tokens))
        return EncoderOutput(hidden=hidden, mask=mask)

    def optim_groups(self, lr: float, weight_decay: float) -> list:
        """AdamW groups for this encoder's parameters (see `param_groups`)."""
        return param_groups(self, lr, weight_decay)


# ---------------------------------------------------------------------------
# S4D


def s4d_discretise(log_dt, log_A_real, A_imag, C):
    """ZOH discretisation of the diagonal system, B folded into C as in the
    minimal S4D: returns (ΔA, dC) with h_t = exp(ΔA) h_{t-1} + u_t and
    y_t = 2 Re Σ_n dC_n h_{t,n}, dC = C (exp(ΔA) − 1) / A."""
    dt = torch.exp(log_dt).unsqueeze(-1)                      # (H, 1)
    A = -torch.exp(log_A_real) + 1j * A_imag                  # (H, N/2)
    dtA = dt * A
    return dtA, C * (torch.exp(dtA) - 1.0) / A


def s4d_kernel(dtA: torch.Tensor, dC: torch.Tensor, length: int) -> torch.Tensor:
    """K_l = 2 Re Σ_n dC_n exp(ΔA_n l), l = 0..length−1 -> (H, length)."""
    powers = torch.exp(dtA.unsqueeze(-1) * torch.arange(length, device=dtA.device))
    return 2 * torch.einsum("hn,hnl->hl", dC, powers).real


def causal_fft_conv(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """y_t = Σ_{j≤t} k_j u_{t−j}; u (B, H, L), k (H, L); zero-padded to 2L so
    the circular convolution does not wrap."""
    L = u.shape[-1]
    y = torch.fft.irfft(torch.fft.rfft(u, n=2 * L) * torch.fft.rfft(k, n=2 * L), n=2 * L)
    return y[..., :L]


def s4d_recurrence(u: torch.Tensor, dtA: torch.Tensor, dC: torch.Tensor) -> torch.Tensor:
    """The same discretised system stepped token by token; u (B, H, L)."""
    dA = torch.exp(dtA)
    h = torch.zeros(u.shape[0], *dA.shape, dtype=dA.dtype, device=u.device)
    ys = []
    for u_t in u.unbind(-1):        # unbind: one backward copy, not one per step
        h = dA * h + u_t.unsqueeze(-1)
        ys.append(2 * (dC * h).sum(-1).real)
    return torch.stack(ys, dim=-1)


class S4DLayer(nn.Module):
    """Minimal S4D [S4 `s4d.py`]: y = FFTconv(u, K) + D⊙u -> GELU -> dropout ->
    Conv1d(H->2H, k=1) -> GLU.  Inits: log_A_real = log 0.5, A_imag = π n
    (S4D-Lin), log Δ ~ U[log dt_min, log dt_max], C ~ complex normal, D ~ N(0,1)."""

    def __init__(self, d_model: int, d_state: int = 64, dt_min: float = 1e-3,
                 dt_max: float = 1e-1, ssm_lr: float = 1e-3, dropout: float = 0.0):
        super().__init__()
        H, N2 = d_model, d_state // 2
        log_dt = torch.rand(H) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
        self.log_dt = tag_optim(nn.Parameter(log_dt), lr=ssm_lr, weight_decay=0.0)
        self.log_A_real = tag_optim(nn.Parameter(torch.log(0.5 * torch.ones(H, N2))),
                                    lr=ssm_lr, weight_decay=0.0)
        self.A_imag = tag_optim(nn.Parameter(math.pi * torch.arange(N2).float().repeat(H, 1)),
                                lr=ssm_lr, weight_decay=0.0)
        self.C = nn.Parameter(torch.view_as_real(torch.randn(H, N2, dtype=torch.cfloat)))
        self.D = nn.Parameter(torch.randn(H))
        self.dropout = nn.Dropout(dropout)
        self.output_linear = nn.Sequential(nn.Conv1d(H, 2 * H, kernel_size=1), nn.GLU(dim=-2))

    def discretise(self):
        return s4d_discretise(self.log_dt, self.log_A_real, self.A_imag,
                              torch.view_as_complex(self.C))

    def ssm(self, u: torch.Tensor, mode: str = "conv") -> torch.Tensor:
        """The linear part y = K * u + D u on (B, H, L)."""
        dtA, dC = self.discretise()
        if mode == "conv":
            y = causal_fft_conv(u, s4d_kernel(dtA, dC, u.shape[-1]))
        elif mode == "recurrent":
            y = s4d_recurrence(u, dtA, dC)
        else:
            raise ValueError(f"mode must be conv or recurrent, not {mode!r}")
        return y + u * self.D.unsqueeze(-1)

    def forward(self, x: torch.Tensor, mode: str = "conv") -> torch.Tensor:
        y = self.dropout(F.gelu(self.ssm(x.transpose(1, 2), mode)))
        return self.output_linear(y).transpose(1, 2)


def build_s4d(cfg: EncoderConfig) -> LinearRecurrenceEncoder:
    ex = {**S4D_DEFAULTS, **cfg.extra}
    mixers = [S4DLayer(cfg.d_model, ex["d_state"], ex["dt_min"], ex["dt_max"], ex["ssm_lr"],
                       cfg.dropout) for _ in range(cfg.n_layer)]
    return LinearRecurrenceEncoder(cfg, mixers, ex["norm"])


# ---------------------------------------------------------------------------
# Mamba (Mamba-1)


def selective_scan(u, delta, A, B, C, D):
    """Sequential selective scan [mamba_ssm `selective_scan_ref`]:
    h_t = exp(Δ_t A) h_{t−1} + Δ_t B_t u_t (ZOH for A, Euler for B),
    y_t = C_t h_t + D u_t.  u, delta (B, L, D); A (D, N); B, C (B, L, N).
    Everything per step (no (B, L, D, N) tensor is built): 2–4× faster on a
    CPU than materialising exp(ΔA) and ΔBu for the whole sequence."""
    h = u.new_zeros(u.shape[0], u.shape[2], A.shape[-1])
    ys = []
    for u_t, d_t, B_t, C_t in zip(u.unbind(1), delta.unbind(1), B.unbind(1), C.unbind(1)):
        h = torch.exp(d_t.unsqueeze(-1) * A) * h + (d_t * u_t).unsqueeze(-1) * B_t.unsqueeze(1)
        ys.append((h * C_t.unsqueeze(1)).sum(-1))
    return torch.stack(ys, dim=1) + u * D


def selective_scan_chunked(u, delta, A, B, C, D, chunk: int = 16):
    """The same recurrence, parallel inside chunks of `chunk` tokens and
    sequential across chunks: h_t = exp(c_t − c_s) summed over s ≤ t in the
    chunk, c = cumulative Σ Δ A (differences of a cumsum, exponentiated only
    where s ≤ t, so nothing overflows).  Costs (B, Q, Q, D, N) memory and on
    a CPU is slower than the sequential scan (≈ 15–40× at B = 64, L = 64,
    d_inner 128, N 16, Q 16); it is the path to try on an accelerator."""
    Bsz, L, Dm = u.shape
    logA = delta.unsqueeze(-1) * A                                   # (B, L, D, N)
    dBu = (delta * u).unsqueeze(-1) * B.unsqueeze(2)
    h = u.new_zeros(Bsz, Dm, A.shape[-1])
    ys = []
    for start in range(0, L, chunk):
        la, bu = logA[:, start:start + chunk], dBu[:, start:start + chunk]
        Q = la.shape[1]
        c = torch.cumsum(la, dim=1)                                  # (B, Q, D, N)
        diff = c.unsqueeze(2) - c.unsqueeze(1)                       # [t, s] = c_t − c_s
        causal = torch.tril(torch.ones(Q, Q, dtype=torch.bool, device=u.device))
        diff = diff.masked_fill(~causal[None, :, :, None, None], float("-inf"))
        hs = torch.einsum("btsdn,bsdn->btdn", torch.exp(diff), bu) + torch.exp(c) * h.unsqueeze(1)
        ys.append(torch.einsum("btdn,btn->btd", hs, C[:, start:start + chunk]))
        h = hs[:, -1]
    return torch.cat(ys, dim=1) + u * D


class MambaMixer(nn.Module):
    """Mamba-1 mixer [mamba_ssm `Mamba`, constructor defaults]: in_proj -> (x, z);
    x <- SiLU(causal depthwise conv1d_k(x)); Δ = softplus(W_Δ(W_r x) + b_Δ) with
    rank dt_rank; B, C = W_B x, W_C x; A = −exp(A_log), A_log = log(1..N);
    y = scan(...) ⊙ SiLU(z) -> out_proj."""

    def __init__(self, d_model: int, d_state: int = 16, expand: int = 2, d_conv: int = 4,
                 dt_rank: int | None = None, dt_min: float = 1e-3, dt_max: float = 1e-1,
                 dt_floor: float = 1e-4, scan: str = "sequential", chunk: int = 16):
        super().__init__()
        d_inner = expand * d_model
        self.dt_rank = dt_rank or math.ceil(d_model / 16)
        self.d_state, self.scan, self.chunk = d_state, scan, chunk
        self.in_proj = nn.Linear(d_model, 2 * d_inner, bias=False)
        self.conv1d = nn.Conv1d(d_inner, d_inner, d_conv, groups=d_inner, padding=d_conv - 1)
        self.x_proj = nn.Linear(d_inner, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, d_inner, bias=True)
        # Δ init: weight U(±dt_rank^-½), bias = softplus^{-1}(Δ0), Δ0 log-uniform
        std = self.dt_rank ** -0.5
        nn.init.uniform_(self.dt_proj.weight, -std, std)
        dt = torch.exp(torch.rand(d_inner) * (math.log(dt_max) - math.log(dt_min))
                       + math.log(dt_min)).clamp(min=dt_floor)
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))
        A = torch.arange(1, d_state + 1, dtype=torch.float32).repeat(d_inner, 1)
        self.A_log = tag_optim(nn.Parameter(torch.log(A)), weight_decay=0.0)
        self.D = tag_optim(nn.Parameter(torch.ones(d_inner)), weight_decay=0.0)
        self.out_proj = nn.Linear(d_inner, d_model, bias=False)

    def forward(self, hidden: torch.Tensor, scan: str | None = None) -> torch.Tensor:
        L = hidden.shape[1]
        x, z = self.in_proj(hidden).chunk(2, dim=-1)
        x = F.silu(self.conv1d(x.transpose(1, 2))[..., :L].transpose(1, 2))
        dt, B, C = self.x_proj(x).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        delta = F.softplus(self.dt_proj(dt))
        A = -torch.exp(self.A_log)
        scan = scan or self.scan
        if scan == "sequential":
            y = selective_scan(x, delta, A, B, C, self.D)
        elif scan == "chunked":
            y = selective_scan_chunked(x, delta, A, B, C, self.D, self.chunk)
        else:
            raise ValueError(f"scan must be sequential or chunked, not {scan!r}")
        return self.out_proj(y * F.silu(z))


def build_mamba(cfg: EncoderConfig) -> LinearRecurrenceEncoder:
    ex = {**MAMBA_DEFAULTS, **cfg.extra}
    mixers = [MambaMixer(cfg.d_model, ex["d_state"], ex["expand"], ex["d_conv"], ex["dt_rank"],
                         scan=ex["scan"], chunk=ex["chunk"]) for _ in range(cfg.n_layer)]
    return LinearRecurrenceEncoder(cfg, mixers, ex["norm"])


# ---------------------------------------------------------------------------
# NRU


class NRULayer(nn.Module):
    """P3 Eq. 5 with f = ReLU and one head: from z = [x_t, h_{t−1}, m_{t−1}],
    h_t = f(W_h z), α_t, β_t = f(w z) (scalars), v^w_t, v^e_t = f(W z) (memory
    sized), m_t = m_{t−1} + α_t v^w_t − β_t v^e_t.  Outputs h_t.  (The original
    NRU has k heads and low-rank write vectors; P3 uses this one-head form.)

    `lp_norm` = p > 0 divides v^w and v^e by their L_p norm, as the official
    NRU code does (p = 5, `F.normalize(v, p=5)`); Eq. 5 omits it, but without
    it the ReLU write/erase feedback (α and v grow with m) overflows within a
    few dozen steps at initialisation.  lp_norm = 0 gives the bare Eq. 5.

    Initialisation (Eq. 5 leaves it open): the weights that READ the memory
    (m_{t−1} -> h, α, β, v) start at zero, the rest is PyTorch's default.
    With the default init everywhere, v ≥ 0 makes m drift along the positive
    orthant and α (which reads m) grows with it: at hidden 8 / memory 16 the
    state reached 1e3–1e7 by t = 200 in 6 of 6 seeds and training on
    counting (L = 200) went to NaN; with the read weights at zero the state
    stays O(1) to t = 1000 and gradients still reach them through m."""

    def __init__(self, d_in: int, d_hidden: int, memory_size: int, lp_norm: float = 5.0):
        super().__init__()
        self.d_hidden, self.memory_size, self.lp_norm = d_hidden, memory_size, lp_norm
        d_out = d_hidden + 2 + 2 * memory_size          # h, α, β, v^w, v^e in one matmul
        self.from_input = nn.Linear(d_in, d_out)        # input part, hoisted out of the loop
        self.from_state = nn.Linear(d_hidden + memory_size, d_out, bias=False)
        with torch.no_grad():
            self.from_state.weight[:, d_hidden:].zero_()     # memory read weights (see above)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        Bsz, L, _ = x.shape
        H, M = self.d_hidden, self.memory_size
        pre = self.from_input(x)
        h, m = x.new_zeros(Bsz, H), x.new_zeros(Bsz, M)
        outs = []
        for pre_t in pre.unbind(1):
            act = F.relu(pre_t + self.from_state(torch.cat([h, m], dim=-1)))
            h, alpha, beta, vw, ve = act.split([H, 1, 1, M, M], dim=-1)
            if self.lp_norm:
                vw = F.normalize(vw, p=self.lp_norm, dim=-1)
                ve = F.normalize(ve, p=self.lp_norm, dim=-1)
            m = m + alpha * vw - beta * ve
            outs.append(h)
        return torch.stack(outs, dim=1)


def build_nru(cfg: EncoderConfig) -> LinearRecurrenceEncoder:
    ex = {**NRU_DEFAULTS, **cfg.extra}
    d_emb = ex["d_emb"] or cfg.d_model
    mixers = [NRULayer(d_emb if i == 0 else cfg.d_model, cfg.d_model, ex["memory_size"],
                       ex["lp_norm"])
              for i in range(cfg.n_layer)]
    if d_emb != cfg.d_model:
        # the first layer changes width, so it cannot sit in a residual: put
        # a projection in front (keeps one skeleton; identity when equal)
        mixers[0] = _Widen(d_emb, mixers[0])
    return LinearRecurrenceEncoder(cfg, mixers, ex["norm"], d_emb=d_emb)


class _Widen(nn.Module):
    """Runs `layer` on a d_emb-wide input; the residual path is a projection."""

    def __init__(self, d_emb: int, layer: NRULayer):
        super().__init__()
        self.layer, self.skip = layer, nn.Linear(d_emb, layer.d_hidden, bias=False)

    def forward(self, x):
        return self.layer(x) + self.skip(x)


# ---------------------------------------------------------------------------
# IDS4


class IDS4Layer(nn.Module):
    """Input-dependent S4 [P3; word-problem repo `ids4.py`]: per layer
    A ∈ R^{d_model×N×N} (init I + randn/√N); A(x_t) = act(Σ_i x_{t,i} A_i);
    P_t = A(x_1) A(x_2) … A(x_t); s_t = P_t w + b (a Linear N->1 over the last
    axis, giving R^N); y_t = C s_t + D ⊙ x_t.  Numerically fragile by design
    (see the module docstring)."""

    ACTS = {"identity": lambda a: a, "tanh": torch.tanh, "relu": F.relu}

    def __init__(self, d_model: int, d_state: int = 16, act: str = "identity"):
        super().__init__()
        if act not in self.ACTS:
            raise ValueError(f"ids4 act must be one of {sorted(self.ACTS)}, not {act!r}")
        N = d_state
        self.act = self.ACTS[act]
        self.A = nn.Parameter(torch.eye(N).repeat(d_model, 1, 1) + torch.randn(d_model, N, N) / N ** 0.5)
        self.w = nn.Linear(N, 1)
        self.C = nn.Linear(N, d_model)
        self.D = nn.Parameter(torch.randn(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mats = self.act(torch.einsum("bld,dij->blij", x, self.A))   # (B, L, N, N)
        steps = mats.unbind(1)
        P = steps[0]
        states = [P]
        for A_t in steps[1:]:
            P = P @ A_t
            states.append(P)
        s = self.w(torch.stack(states, dim=1)).squeeze(-1)           # (B, L, N)
        return self.C(s) + self.D * x


def build_ids4(cfg: EncoderConfig) -> LinearRecurrenceEncoder:
    ex = {**IDS4_DEFAULTS, **cfg.extra}
    mixers = [IDS4Layer(cfg.d_model, ex["d_state"], ex["act"]) for _ in range(cfg.n_layer)]
    return LinearRecurrenceEncoder(cfg, mixers, ex["norm"])


# ---------------------------------------------------------------------------
# defaults, presets, registration

S4D_DEFAULTS = {"d_state": 64, "dt_min": 1e-3, "dt_max": 1e-1, "ssm_lr": 1e-3, "norm": "post"}
MAMBA_DEFAULTS = {"d_state": 16, "expand": 2, "d_conv": 4, "dt_rank": None,
                  "scan": "sequential", "chunk": 16, "norm": "pre"}
NRU_DEFAULTS = {"memory_size": 64, "d_emb": None, "lp_norm": 5.0, "norm": "post"}
IDS4_DEFAULTS = {"d_state": 16, "act": "identity", "norm": "post"}


# presets[preset][task family] = model sizes only (flat: EncoderConfig fields
# and extra keys); the optimiser of each family is the trainer's
# (trainer/benchmark/presets.py FAMILY: P3 App. B for words, App. D for copying).
# "paper" = P3's sizes: state tracking Table 6 (≈ 3M parameters per layer;
# P3 picks the fewest layers that learn k, 2 here), copying Table 7 (parameter
# matched, 1 layer; Mamba 2 layers, the depth at which it learns), counting
# Table 8 / App. H (1 layer, hidden 8 or 64: `--set d_model=8`).  "cpu" =
# CPU-probe sizes, docs/benchmarks.md §9 (hidden 64–128; counting hidden 8).

ENCODER_SPECS = [
    EncoderSpec(
        "s4d", build_s4d, "linear_recurrence",
        "minimal S4D (diagonal complex A, ZOH, FFT convolution, GLU), post-norm residual",
        defaults=S4D_DEFAULTS,
        # counting: 1 layer of width 8 / 64 with N = 64 is P3 Table 8's 1 225 /
        # 16 961 parameters with a scalar input (tests check the count)
        presets={"paper": {"words": {"d_model": 1174, "n_layer": 2},
                           "copying": {"d_model": 2400, "n_layer": 1},
                           "counting": {"d_model": 64, "n_layer": 1}},
                 "cpu": {"words": {"d_model": 128, "n_layer": 2},
                         "copying": {"d_model": 128, "n_layer": 1},
                         "counting": {"d_model": 8, "n_layer": 1}}}),
    EncoderSpec(
        "mamba", build_mamba, "linear_recurrence",
        "Mamba-1 selective SSM (plain PyTorch scan; ZOH A, Euler B), pre-norm residual",
        defaults=MAMBA_DEFAULTS,
        # counting: d_state 64 matches P3 Table 8 (hidden 64: 51 393 = our
        # mixer's 51 072 + a scalar Linear(1, 64) in, Linear(64, 1) out and
        # one LayerNorm; hidden 8: 3 641 = 3 600 + 16 + 9 + 16)
        presets={"paper": {"words": {"d_model": 512, "n_layer": 2},
                           "copying": {"d_model": 256, "n_layer": 2},
                           "counting": {"d_model": 64, "n_layer": 1, "d_state": 64}},
                 "cpu": {"words": {"d_model": 64, "n_layer": 2},
                         "copying": {"d_model": 64, "n_layer": 2},
                         "counting": {"d_model": 8, "n_layer": 1, "d_state": 64}}}),
    EncoderSpec(
        "nru", build_nru, "linear_recurrence",
        "Non-saturating recurrent unit, P3 Eq. 5 (one write/erase head, ReLU)",
        defaults=NRU_DEFAULTS,
        presets={"paper": {"words": {"d_model": 1024, "n_layer": 1, "memory_size": 256, "d_emb": 256},
                           "copying": {"d_model": 128, "n_layer": 1, "memory_size": 64},
                           "counting": {"d_model": 64, "n_layer": 1, "memory_size": 64}},
                 "cpu": {"words": {"d_model": 128, "n_layer": 1, "memory_size": 64},
                         "copying": {"d_model": 128, "n_layer": 1, "memory_size": 64},
                         # lr 1e-3 (P3's grid, App. A.4): at the family's 1e-2 the
                         # memory loop diverged (NaN) within 200 steps on counting
                         "counting": {"d_model": 8, "n_layer": 1, "memory_size": 16, "lr": 1e-3}}}),
    EncoderSpec(
        "ids4", build_ids4, "linear_recurrence",
        "input-dependent S4: cumulative products of input-dependent N×N matrices "
        "(numerically fragile beyond ~20 tokens, as P3 reports)",
        defaults=IDS4_DEFAULTS,
        presets={"paper": {"words": {"d_model": 256, "n_layer": 2, "d_state": 128},
                           "copying": {"d_model": 128, "n_layer": 1, "d_state": 128},
                           "counting": {"d_model": 64, "n_layer": 1, "d_state": 16}},
                 "cpu": {"words": {"d_model": 64, "n_layer": 1, "d_state": 16},
                         "copying": {"d_model": 64, "n_layer": 1, "d_state": 16},
                         "counting": {"d_model": 8, "n_layer": 1, "d_state": 8}}}),
]

for _spec in ENCODER_SPECS:
    for _p in _spec.presets.values():
        _p["memory"] = _p.pop("copying")      # the copying/denoising family is tasks/memory.py
    register_encoder(_spec)
