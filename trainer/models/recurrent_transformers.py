"""Recurrent transformers with dynamic halting (P1, MODELS.md §1.0-1.6): UT with
ACT, P1's UT, GUT and its ablations, TLB, TLB with fixed recurrence, GUTLB.

    ut_act       Graves/Dehghani ACT, per token (T2T `act_basic`, §1.1.a)
    ut           P1's UT: token halting, S stream as K/V, mean pooling (§1.1.b)
    gut          gated FFN + global transition-aware mean halting, END pooling (§1.2)
    gut_token    GUT - global halt (token halting on [h_{l-1}; h_l], S stream as K/V)
    gut_nogate   GUT - gate (plain pre-LN block)
    gut_notrans  GUT - transition (halt(mean(H_{l-1})))
    tlb          chunked fast stream, memory slots, cross-attention both ways (§1.3)
    tlb_fixed    TLB with k = 5 chunks whatever the length (P1 §6.6)
    gutlb        TLB whose per-chunk stack is one gated block looped with GUT halting (§1.4)

All of them are encoders (trainer/models/base.py).  `cfg.n_layer` is the depth
cap of the looped models (UT/GUT: layers; GUTLB: layers per chunk; ut_act:
`act_max_steps`) and the number of distinct chunk layers L of TLB.
`cfg.extra`: `pos` (xpos | rope | nope), `attn_dropout`, `threshold` (0.999),
`beta` (penalty weight, P1's β = `penalty_gamma`), `pool` (what the head reads),
`chunk`, `memory`, `update_layers`, `fixed_chunks`, `act_epsilon`,
`act_loss_weight`.

Decisions where the sources disagree (MODELS.md §5), as the table suggests:
  #1  flip-flop chunk: the paper's 10 slots / chunk 10 by default; `chunk=100`
      (JRC's flipflop config) is one `--set chunk=100` away.
  #4  TLB on ListOps: chunk 20, 20 memory slots in the paper preset.
  #5  ACT penalty: the code's version, layer index l+1 of the 0-based loop plus
      the un-halted remainder charged at the last executed layer ("slack"),
      not Eq. 8's Σ α_l·l.
  #6  GUTLB gate: mixes with the chunk state C_{l-1} (Alg. 4's H_{l-1} is a typo).
  #7  Halting input: α̂_{l-1} = halt(h_{l-1}) decides at layer l-1, and its
      weight multiplies H_{l-1}, so α_0 weights the embedding H_0 (as the code).
  #19 Eq. 12-13's `H^{1-1}` is H_{l-1}.
Other code details kept (JRC UniversalTransformerEncoder.py / UTLBEncoder.py /
TLBEncoder.py @58026b2): depth cap min(layers, S+1) plus a per-sample forced
halt once l >= length+1; the layer at which Σα crosses the threshold is
discarded (H, S, penalty revert to the previous layer, while Σα, Π(1-α̂) and
Σα·H keep accumulating); the loop breaks when no unit updates, in training too;
causal GUT/GUTLB halt per position on prefix means; GUTLB's penalty is averaged
over non-empty chunks; TLB/GUTLB add no START/END and pool the layer-normed last
memory.  Deliberate departures: SDPA in fp32 instead of FlashAttention in fp16;
cross-attention (chunk -> memory, memory -> chunk) is never causal, whereas
FlashMHA applies the causal mask whenever len(Q) = len(K), i.e. whenever
chunk = memory slots in a causal run (a quirk that hides part of the chunk
from the memory update); ut_act tracks "halted" as a flag instead of testing
H_t < 1 again, which in float can re-open a halted position.

stats["depth"] = executed layers whose output is kept (an update that the
threshold discards is not counted): per position (B, L) in causal mode, per
sample (B,) otherwise (the deepest position for token halting; GUTLB: mean
over non-empty chunks; TLB: its L layers per chunk).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainer.models.base import EncoderConfig, EncoderOutput, EncoderSpec, register_encoder

THRESHOLD = 0.999          # P1's α_thresh
POSITIONAL = ("xpos", "rope", "nope")


# --------------------------------------------------------------------------
# The shared pre-LN block (MODELS.md §1.0).  Local until trainer/models/blocks.py
# (the `frame` helper) lands on main; then these classes give way to it.
# --------------------------------------------------------------------------

class LocalRotary(nn.Module):
    """RoPE on consecutive pairs (x0,x1),(x2,x3)...; with `decay` it is xPos
    (torchscale's, as JRC uses it): q scaled by s^(pos+m)/512, k by its inverse."""

    def __init__(self, head_dim: int, decay: bool, scale_base: float = 512.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary position encodings need an even head size, got {head_dim}")
        self.decay = decay
        self.scale_base = scale_base
        half = head_dim // 2
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(half).float() / half), persistent=False)
        self.register_buffer("decay_base", (torch.arange(0, head_dim, 2).float() + 0.4 * head_dim) / (1.4 * head_dim),
                             persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, downscale: bool) -> torch.Tensor:
        # x (B, heads, L, hd); positions (B, L)
        pos = positions.to(x.dtype)[:, None, :, None]                      # (B,1,L,1)
        angle = pos * self.inv_freq
        sin, cos = angle.sin(), angle.cos()
        if self.decay:
            m = (-x.shape[2]) // 2                                       # floor(-L/2)
            scale = self.decay_base ** ((pos + m) / self.scale_base)
            scale = 1.0 / scale if downscale else scale
            sin, cos = sin * scale, cos * scale
        sin = sin.repeat_interleave(2, dim=-1)
        cos = cos.repeat_interleave(2, dim=-1)
        rotated = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
        return x * cos + rotated * sin


class LocalAttention(nn.Module):
    """P1's MHA: no biases, xavier gains 1/sqrt2 on q/k/v, SDPA with a boolean
    key-padding (and causal) mask; positions only for self-attention."""

    def __init__(self, d: int, heads: int, attn_dropout: float, pos: str):
        super().__init__()
        if d % heads:
            raise ValueError(f"d_model {d} is not a multiple of n_head {heads}")
        self.heads, self.head_dim, self.attn_dropout = heads, d // heads, attn_dropout
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        for lin in (self.q, self.k, self.v):
            nn.init.xavier_uniform_(lin.weight, gain=1 / math.sqrt(2))
        nn.init.xavier_uniform_(self.out.weight)
        self.rotary = None if pos == "nope" else LocalRotary(self.head_dim, decay=pos == "xpos")

    def _split(self, x):
        B, L, _ = x.shape
        return x.view(B, L, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, q_in, kv_in, kv_mask, causal=False, q_pos=None, kv_pos=None):
        q, k, v = self._split(self.q(q_in)), self._split(self.k(kv_in)), self._split(self.v(kv_in))
        if self.rotary is not None and q_pos is not None:
            q = self.rotary(q, q_pos, downscale=False)
            k = self.rotary(k, kv_pos, downscale=True)
        Lq, Lk = q.shape[2], k.shape[2]
        allowed = kv_mask[:, None, None, :].expand(-1, 1, Lq, Lk)
        if causal:
            allowed = allowed & torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).tril()
        # a query row with no visible key (padding) would give NaN: let it see key 0
        allowed = allowed | (~allowed.any(-1, keepdim=True) & (torch.arange(Lk, device=q.device) == 0))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed,
                                             dropout_p=self.attn_dropout if self.training else 0.0)
        return self.out(out.transpose(1, 2).reshape(q_in.shape[0], Lq, -1))


def local_ffn(d: int, d_hidden: int, dropout: float, out_act: nn.Module | None = None) -> nn.Sequential:
    """Linear -> Dropout -> GELU -> Linear -> Dropout (+ optional sigmoid for
    the gate); xavier weights, biases N(0, 1e-6) [JRC TransformerBlock.py]."""
    layers = [nn.Linear(d, d_hidden), nn.Dropout(dropout), nn.GELU(), nn.Linear(d_hidden, d), nn.Dropout(dropout)]
    if out_act is not None:
        layers.append(out_act)
    seq = nn.Sequential(*layers)
    for i in (0, 3):
        nn.init.xavier_uniform_(seq[i].weight)
        nn.init.normal_(seq[i].bias, std=1e-6)
    return seq


class RecurrentBlock(nn.Module):
    """Pre-LN block in its four P1 forms:

        plain    A = Drop(MHA(LN1 H, LN1 KV)) + H;  out = FFN(LN2 A) + A      (TransformerBlock)
        gated    out = G*(FFN(U)+A) + (1-G)*H, U = LN2 A, G = σ(MLP_g(U))     (GatedTransformerBlock)
        memory   after self-attention: A = Drop(XAttn(LN11 A, LN12 M)) + A     (TLBBlock)
        both     memory read and gate                                          (GatedTLBBlock)
    """

    def __init__(self, cfg: EncoderConfig, gated: bool = False, memory: bool = False):
        super().__init__()
        d, ex = cfg.d_model, cfg.extra
        attn_drop = ex.get("attn_dropout", cfg.dropout)
        self.ln1 = nn.LayerNorm(d)
        self.attn = LocalAttention(d, cfg.n_head, attn_drop, ex.get("pos", "xpos"))
        self.drop = nn.Dropout(cfg.dropout)
        self.memory = memory
        if memory:
            self.ln_mq, self.ln_mkv = nn.LayerNorm(d), nn.LayerNorm(d)
            self.cross = LocalAttention(d, cfg.n_head, attn_drop, "nope")
            self.drop_m = nn.Dropout(cfg.dropout)
        self.ln2 = nn.LayerNorm(d)
        self.ffn = local_ffn(d, cfg.d_ff, cfg.dropout)
        self.gate = local_ffn(d, ex.get("d_gff", cfg.d_ff), cfg.dropout, nn.Sigmoid()) if gated else None

    def forward(self, h, kv, mask, positions, causal, memory=None):
        a = self.drop(self.attn(self.ln1(h), self.ln1(kv), mask, causal, positions, positions)) + h
        if self.memory and memory is not None:
            slots = torch.ones(memory.shape[:2], dtype=torch.bool, device=memory.device)
            a = self.drop_m(self.cross(self.ln_mq(a), self.ln_mkv(memory), slots)) + a
        u = self.ln2(a)
        out = self.ffn(u) + a
        if self.gate is not None:
            g = self.gate(u)
            out = g * out + (1 - g) * h
        return out


class MemoryUpdateBlock(nn.Module):
    """TLB's CrossTransformerBlock: memory slots read the chunk; FFN' is d -> d -> d."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        d = cfg.d_model
        self.ln_q, self.ln_kv, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.cross = LocalAttention(d, cfg.n_head, cfg.extra.get("attn_dropout", cfg.dropout), "nope")
        self.drop = nn.Dropout(cfg.dropout)
        self.ffn = local_ffn(d, d, cfg.dropout)

    def forward(self, memory, chunk, chunk_mask):
        b = self.drop(self.cross(self.ln_q(memory), self.ln_kv(chunk), chunk_mask)) + memory
        return self.ffn(self.ln2(b)) + b


class TokenFrontEnd(nn.Module):
    """Embedding (N(0, 0.02), row 0 = padding) + dropout; for non-causal use
    the learned START vector in front and END at the first padding slot."""

    def __init__(self, cfg: EncoderConfig, start_end: bool):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=0)
        nn.init.normal_(self.embed.weight, std=0.02)
        with torch.no_grad():
            self.embed.weight[0].zero_()
        self.drop = nn.Dropout(cfg.dropout)
        self.start_end = start_end
        if start_end:
            self.START = nn.Parameter(torch.randn(cfg.d_model))
            self.END = nn.Parameter(torch.randn(cfg.d_model))

    def forward(self, tokens, mask):
        x = self.drop(self.embed(tokens))
        if not self.start_end:
            return x, mask
        B, L, d = x.shape
        x = torch.cat([self.START.expand(B, 1, d), x, x.new_zeros(B, 1, d)], dim=1)
        lengths = mask.sum(1)
        end_at = F.one_hot(lengths + 1, L + 2).bool()[..., None]            # (B, L+2, 1)
        x = torch.where(end_at, self.END.expand(B, L + 2, d), x)
        new_mask = torch.arange(L + 2, device=mask.device)[None] < (lengths + 2)[:, None]
        return x, new_mask


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over dim 1 of x (B, S, ...) where mask (B, S) is True."""
    m = mask.to(x.dtype).view(*mask.shape, *([1] * (x.dim() - 2)))
    return (x * m).sum(1) / m.sum(1).clamp(min=1)


def prefix_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Running mean over positions <= t (P1 App. B: causal mean halting)."""
    m = mask.to(x.dtype)[..., None]
    return torch.cumsum(x, 1) * m / torch.cumsum(m, 1).clamp(min=1)


# --------------------------------------------------------------------------
# P1's halting (§1.1.b, §1.2): one layer of bookkeeping, and the loop.
# --------------------------------------------------------------------------

@dataclass
class HaltingState:
    """Per unit u (a position, or a sample under global halting; shape (B, X)
    with X = S or 1): H = block output, S = marginalised state (Eq. 7/15),
    accu = Σ α·H, total = Σ α, not_halted = Π (1 - α̂), penalty = Σ α·(l+1),
    slack = (1 - Σα)·(l+1) at the last kept layer, depth = kept updates."""
    H: torch.Tensor
    S: torch.Tensor
    accu: torch.Tensor
    total: torch.Tensor
    not_halted: torch.Tensor
    penalty: torch.Tensor
    slack: torch.Tensor
    depth: torch.Tensor

    @classmethod
    def start(cls, H0: torch.Tensor, units: int) -> "HaltingState":
        zeros = H0.new_zeros(H0.shape[0], units)
        return cls(H=H0, S=H0, accu=torch.zeros_like(H0), total=zeros, not_halted=torch.ones_like(zeros),
                   penalty=zeros, slack=zeros, depth=zeros)

    def final_penalty(self) -> torch.Tensor:
        return self.penalty + self.slack


def halting_step(st: HaltingState, H_new: torch.Tensor, p: torch.Tensor, layer: int,
                 can_update: torch.Tensor, threshold: float = THRESHOLD):
    """Layer `layer` (0-based) of P1's halting, line for line as JRC's
    UniversalTransformerEncoder: p = α̂_layer from halt(H_layer [, H_layer+1]),
    H_new = block(H).  Returns the new state and the update flag (B, X)."""
    w = lambda t: t.unsqueeze(-1)                                           # (B,X) -> (B,X,1)
    alpha = st.not_halted * p                                               # Eq. 6
    accu = w(alpha) * st.H + st.accu                                        # α_{l-1} multiplies H_{l-1}
    total = st.total + alpha
    not_halted = st.not_halted * (1 - p)
    penalty = alpha * (layer + 1) + st.penalty
    slack = (1 - total) * (layer + 1)
    S_new = w(1 - total) * H_new + accu                                     # Eq. 7
    flag = (total < threshold) & can_update
    return HaltingState(H=torch.where(w(flag), H_new, st.H), S=torch.where(w(flag), S_new, st.S),
                        accu=accu, total=total, not_halted=not_halted,
                        penalty=torch.where(flag, penalty, st.penalty),
                        slack=torch.where(flag, slack, st.slack),
                        depth=st.depth + flag.to(st.depth.dtype)), flag


def run_halting(step, halt_prob, H0, mask, max_layers: int, per_unit_position: bool,
                threshold: float = THRESHOLD) -> HaltingState:
    """Loop `step(H, S) -> H_new` up to min(max_layers, S+1) times with
    `halt_prob(H, H_new) -> (B, X)`; a sample is forced to halt once
    layer >= its length + 1; break when nothing updates (training too)."""
    B, S, _ = H0.shape
    st = HaltingState.start(H0, S if per_unit_position else 1)
    lengths = mask.sum(1)
    for layer in range(min(max_layers, S + 1)):
        H_new = step(st.H, st.S)
        p = halt_prob(st.H, H_new)
        can = (layer < lengths + 1)[:, None]
        if per_unit_position:
            can = can & mask
        st, flag = halting_step(st, H_new, p, layer, can, threshold)
        if not bool(flag.any()):
            break
    return st


class HaltFunction(nn.Module):
    """halt(x) = σ(GELU(x W1 + b1) W2 + b2), W1 ∈ R^{k·d × d} (Eq. 5 / 16).
    `global_mean`: x pools the states (masked mean, prefix mean when causal);
    `transition`: x = [state(H_{l-1}); state(H_l)]."""

    def __init__(self, d: int, global_mean: bool, transition: bool, causal: bool):
        super().__init__()
        self.global_mean, self.transition, self.causal = global_mean, transition, causal
        self.net = nn.Sequential(nn.Linear((2 if transition else 1) * d, d), nn.GELU(), nn.Linear(d, 1))

    def summary(self, H, mask):
        if not self.global_mean:
            return H                                                        # (B, S, d)
        return prefix_mean(H, mask) if self.causal else masked_mean(H, mask)[:, None]   # (B, S|1, d)

    def forward(self, H_prev, H_new, mask):
        x = self.summary(H_prev, mask)
        if self.transition:
            x = torch.cat([x, self.summary(H_new, mask)], dim=-1)
        return torch.sigmoid(self.net(x)).squeeze(-1)


def depth_stat(depth: torch.Tensor, mask: torch.Tensor, causal: bool) -> torch.Tensor:
    """(B, L) per position in causal mode, else per sample (deepest unit)."""
    if causal:
        return depth if depth.shape[1] == mask.shape[1] else depth.expand(-1, mask.shape[1])
    return (depth * mask.to(depth.dtype)).amax(1) if depth.shape[1] == mask.shape[1] else depth[:, 0]


# --------------------------------------------------------------------------
# UT / GUT (§1.1.b, §1.2)
# --------------------------------------------------------------------------

class UniversalTransformer(nn.Module):
    """One shared block looped with P1's halting.  `global_halt`: one α per
    sample from mean-pooled states (per position on prefix means when causal),
    K/V = H_{l-1}; else token halting with K/V = the marginalised S_{l-1}."""

    def __init__(self, cfg: EncoderConfig, gated: bool, global_halt: bool, transition: bool):
        super().__init__()
        self.cfg = cfg
        self.causal, self.global_halt = cfg.causal, global_halt
        self.front = TokenFrontEnd(cfg, start_end=not cfg.causal)
        self.block = RecurrentBlock(cfg, gated=gated)
        self.halt = HaltFunction(cfg.d_model, global_mean=global_halt, transition=transition, causal=cfg.causal)
        self.threshold = cfg.extra.get("threshold", THRESHOLD)
        self.beta = cfg.extra.get("beta", 0.1)

    def forward(self, tokens, mask):
        x, m = self.front(tokens, mask)
        positions = m.long().cumsum(1) - 1
        per_position = self.causal or not self.global_halt

        def step(H, S):
            return self.block(H, H if self.global_halt else S, m, positions, self.causal)

        st = run_halting(step, lambda H, Hn: self.halt(H, Hn, m), x, m, self.cfg.n_layer, per_position,
                         self.threshold)
        pen = st.final_penalty()
        pen = masked_mean(pen, m) if per_position else pen[:, 0]
        return EncoderOutput(hidden=st.S, mask=m, aux_loss=self.beta * pen.mean(),
                             stats={"depth": depth_stat(st.depth, m, self.causal)})


# --------------------------------------------------------------------------
# UT with Graves/Dehghani ACT (§1.1.a)
# --------------------------------------------------------------------------

def timing_signal(positions: torch.Tensor, d: int) -> torch.Tensor:
    """T2T's sinusoid (sin half, cos half; timescales 1..1e4) at `positions` (...,)."""
    half = d // 2
    inv = torch.exp(-math.log(1e4) * torch.arange(half, dtype=torch.float32, device=positions.device)
                    / max(half - 1, 1))
    angle = positions.float()[..., None] * inv
    sig = torch.cat([angle.sin(), angle.cos()], dim=-1)
    return F.pad(sig, (0, d - 2 * half))


@dataclass
class ACTState:
    """Per position: H = cumulative halting probability, R = remainder,
    N = ponder steps, halted = has taken its remainder."""
    H: torch.Tensor
    R: torch.Tensor
    N: torch.Tensor
    halted: torch.Tensor

    @classmethod
    def start(cls, like: torch.Tensor) -> "ACTState":
        zeros = like.new_zeros(like.shape[:2])
        return cls(H=zeros, R=zeros, N=zeros, halted=torch.zeros_like(zeros, dtype=torch.bool))

    def running(self, eps: float) -> torch.Tensor:
        return ~self.halted & (self.H < 1 - eps)


def act_step(st: ACTState, p: torch.Tensor, eps: float):
    """One step of T2T's `universal_transformer_act` bookkeeping; returns the
    new state and the update weight w (0 once halted)."""
    running = (~st.halted).to(p.dtype)
    over = st.H + p * running > 1 - eps
    new_halted = over.to(p.dtype) * running
    still = (~over).to(p.dtype) * running
    H = st.H + p * still
    R = st.R + new_halted * (1 - H)
    H = H + new_halted * R
    N = st.N + still + new_halted
    w = p * still + new_halted * R
    return ACTState(H=H, R=R, N=N, halted=st.halted | new_halted.bool()), w


def act_accumulate(acc: torch.Tensor, s: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """act_type "basic": acc = w·s + (1 - w)·acc (the parenthesised form of
    T2T PR #1011, not the buggy `acc*1 - w`)."""
    w = w[..., None]
    return w * s + (1 - w) * acc


class UTACT(nn.Module):
    """Per-token ACT with the parenthesised update, threshold 1 - ε, at most
    `cfg.n_layer` steps (T2T's act_max_steps), ponder loss τ·mean_t(N_t + R_t).
    Every position is transformed at every step; halted ones get weight 0.
    step_preprocess adds T2T's sinusoidal position and step signals to the
    state, so the embeddings are scaled by sqrt(d) as in T2T (P1's N(0, 0.02)
    embeddings alone would be drowned by unit-amplitude signals); the block's
    attention keeps its xPos/RoPE/NoPE option as in every model here."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = cfg
        self.front = TokenFrontEnd(cfg, start_end=not cfg.causal)
        self.block = RecurrentBlock(cfg)
        self.halt = nn.Linear(cfg.d_model, 1)
        nn.init.constant_(self.halt.bias, cfg.extra.get("act_halting_bias_init", 1.0))
        self.eps = cfg.extra.get("act_epsilon", 0.01)
        self.tau = cfg.extra.get("act_loss_weight", 0.01)

    def forward(self, tokens, mask):
        s, m = self.front(tokens, mask)
        d = s.shape[-1]
        s = s * math.sqrt(d)        # T2T scales embeddings by sqrt(d) before adding timing signals
        positions = m.long().cumsum(1) - 1
        pos_signal = timing_signal(positions, d)
        st, acc = ACTState.start(s), torch.zeros_like(s)
        for n in range(self.cfg.n_layer):
            if not bool((st.running(self.eps) & m).any()):
                break
            s_t = s + pos_signal + timing_signal(torch.tensor(n, device=s.device), d)   # step_preprocess
            st, w = act_step(st, torch.sigmoid(self.halt(s_t)).squeeze(-1), self.eps)
            s = self.block(s_t, s_t, m, positions, self.cfg.causal)
            acc = act_accumulate(acc, s, w)
        ponder = masked_mean(st.N + st.R, m)
        return EncoderOutput(hidden=acc, mask=m, aux_loss=self.tau * ponder.mean(),
                             stats={"depth": depth_stat(st.N, m, self.cfg.causal)})


# --------------------------------------------------------------------------
# TLB / GUTLB (§1.3, §1.4)
# --------------------------------------------------------------------------

def chunk_sequence(x: torch.Tensor, mask: torch.Tensor, chunk: int, fixed_chunks: int | None):
    """torch.chunk into k = ceil(n/g) (or k = fixed_chunks) near-equal pieces."""
    k = fixed_chunks if fixed_chunks else math.ceil(x.shape[1] / chunk)
    return list(zip(torch.chunk(x, k, dim=1), torch.chunk(mask, k, dim=1)))


class LatentBottleneck(nn.Module):
    """Chunk-wise recurrence with a slow memory.  `halting=False`: TLB, L
    distinct TLBBlocks per chunk.  `halting=True`: GUTLB, one GatedTLBBlock
    looped per chunk with GUT halting; the memory reads the marginalised S."""

    def __init__(self, cfg: EncoderConfig, halting: bool):
        super().__init__()
        ex = cfg.extra
        self.cfg, self.halting, self.causal = cfg, halting, cfg.causal
        self.chunk, self.fixed_chunks = ex.get("chunk", 10), ex.get("fixed_chunks")
        self.front = TokenFrontEnd(cfg, start_end=False)
        self.memory0 = nn.Parameter(torch.zeros(ex.get("memory", 10), cfg.d_model))
        if halting:
            self.block = RecurrentBlock(cfg, gated=True, memory=True)
            self.halt = HaltFunction(cfg.d_model, global_mean=True, transition=True, causal=cfg.causal)
            self.threshold, self.beta = ex.get("threshold", THRESHOLD), ex.get("beta", 0.1)
        else:
            self.blocks = nn.ModuleList(RecurrentBlock(cfg, memory=True) for _ in range(cfg.n_layer))
        self.updates = nn.ModuleList(MemoryUpdateBlock(cfg) for _ in range(ex.get("update_layers", 1)))
        self.final_ln = None if cfg.causal else nn.LayerNorm(cfg.d_model)   # on the pooled memory

    def fast_stream(self, C, pseudo, positions, memory):
        """TLB: the L chunk layers.  Returns (C_L, None, depth)."""
        for blk in self.blocks:
            C = blk(C, C, pseudo, positions, self.causal, memory)
        return C, None, C.new_full((C.shape[0], 1), float(len(self.blocks)))

    def halting_stream(self, C, pseudo, positions, memory, real):
        """GUTLB: GUT halting over one chunk (lengths = real tokens of the chunk)."""
        def step(H, S):
            return self.block(H, H, pseudo, positions, self.causal, memory)
        st = run_halting(step, lambda H, Hn: self.halt(H, Hn, pseudo), C, real, self.cfg.n_layer,
                         self.causal, self.threshold)
        pen = st.final_penalty()
        pen = masked_mean(pen, pseudo) if self.causal else pen[:, 0]
        return st.S, pen, st.depth

    def forward(self, tokens, mask):
        x, mask = self.front(tokens, mask)
        B = x.shape[0]
        memory = self.memory0.expand(B, -1, -1)
        outs, depths, penalty = [], [], x.new_zeros(B)
        live_chunks = x.new_zeros(B)
        for C0, real in chunk_sequence(x, mask, self.chunk, self.fixed_chunks):
            pseudo = real.clone()
            pseudo[:, 0] = True                                   # first slot valid "for stability"
            positions = pseudo.long().cumsum(1) - 1               # positions restart in every chunk
            if self.halting:
                C, pen, depth = self.halting_stream(C0, pseudo, positions, memory, real)
            else:
                C, pen, depth = self.fast_stream(C0, pseudo, positions, memory)
            new_memory = memory
            for upd in self.updates:
                new_memory = upd(new_memory, C, pseudo)
            live = real[:, 0]                                      # a chunk starting on padding changes nothing
            C = torch.where(live[:, None, None], C, C0)
            memory = torch.where(live[:, None, None], new_memory, memory)
            if pen is not None:
                penalty = penalty + pen * live
            live_chunks = live_chunks + live
            depths.append((depth * live[:, None]).expand(-1, C.shape[1]) if self.causal else depth[:, :1] * live[:, None])
            outs.append(C)
        stats_depth = (torch.cat(depths, 1) if self.causal
                       else torch.cat(depths, 1).sum(1) / live_chunks.clamp(min=1))
        aux = self.beta * (penalty / live_chunks.clamp(min=1)).mean() if self.halting else None
        if self.causal:
            return EncoderOutput(hidden=torch.cat(outs, 1), mask=mask, aux_loss=aux, stats={"depth": stats_depth})
        slots = self.final_ln(memory)
        return EncoderOutput(hidden=slots, mask=torch.ones(slots.shape[:2], dtype=torch.bool, device=slots.device),
                             aux_loss=aux, stats={"depth": stats_depth})


# --------------------------------------------------------------------------
# Registry and presets
# --------------------------------------------------------------------------

def _paper(d, heads, d_ff, n_layer, dropout, extra, optim):
    return {"d_model": d, "n_head": heads, "d_ff": d_ff, "n_layer": n_layer, "dropout": dropout,
            "extra": extra, **optim}


# P1 optimisers (MODELS.md §1.5): JRC configs listopsc2 / proplogic / flipflop
_LISTOPS_OPT = {"lr": 0.05, "schedule": "rootwarmup", "warmup": 1000, "betas": (0.9, 0.98),
                "weight_decay": 0.1, "batch_size": 32, "grad_clip": 1.0, "epochs": 100, "patience": 10}
_LISTOPS_TLB_OPT = {**_LISTOPS_OPT, "lr": 0.0125, "warmup": 8000}
_LOGIC_OPT = {"lr": 7e-4, "schedule": "warmup_constant", "warmup": 4000, "betas": (0.9, 0.98),
              "weight_decay": 0.1, "batch_size": 256, "grad_clip": 1.0, "epochs": 150, "patience": 20}
_FLIPFLOP_OPT = {"lr": 3e-4, "schedule": "onecycle_linear", "warmup": 50, "betas": (0.9, 0.999),
                 "weight_decay": 0.1, "batch_size": 16, "grad_clip": 1.0, "steps": 10000}
# cpu preset (BENCHMARKS.md §4.2): d 64, 4 heads, d_ff 128, max 6-8 layers, chunk 10, 10 slots, L=2/U=1
_CPU_OPT = {"lr": 1e-3, "betas": (0.9, 0.999), "weight_decay": 0.1, "batch_size": 32, "grad_clip": 1.0}
_CPU_STEPS = {"flipflop": 1000, "listops": 1500, "logic": 1500, "words": 1500}


def _cpu(n_layer, extra):
    return {fam: {"d_model": 64, "n_head": 4, "d_ff": 128, "n_layer": n_layer, "dropout": 0.0,
                  "extra": dict(extra, **({"beta": 0.0} if fam == "logic" and "beta" in extra else {})),
                  **_CPU_OPT, "steps": _CPU_STEPS[fam]}
            for fam in _CPU_STEPS}


def _halting_presets(layers_listops, layers_logic, layers_flipflop, extra, cpu_layers=8, flipflop_ff=2048):
    """UT/GUT-style presets: the same 512-d block as P1's Transformer, β 0.1 (0 on Logic)."""
    return {
        "paper": {
            "listops": _paper(512, 8, 1024, layers_listops, 0.1, dict(extra, attn_dropout=0.1), _LISTOPS_OPT),
            "logic": _paper(512, 8, 1024, layers_logic, 0.2, dict(extra, attn_dropout=0.5, beta=0.0), _LOGIC_OPT),
            "flipflop": _paper(512, 8, flipflop_ff, layers_flipflop, 0.1, dict(extra, attn_dropout=0.1),
                               _FLIPFLOP_OPT),
        },
        "cpu": _cpu(cpu_layers, extra),
    }


def _tlb_presets(extra, listops_layers=2, logic_layers=2, flipflop_layers=3, cpu_layers=2, halting=False):
    mem_listops = dict(extra, chunk=20, memory=20, update_layers=1, attn_dropout=0.1)
    mem_logic = dict(extra, chunk=10, memory=10, update_layers=1, attn_dropout=0.5)
    mem_ff = dict(extra, chunk=10, memory=10, update_layers=2, attn_dropout=0.1)   # §5 #1: paper's chunk 10
    if halting:
        mem_logic["beta"] = 0.0
    return {
        "paper": {
            "listops": _paper(512, 8, 1024, listops_layers, 0.1, mem_listops, _LISTOPS_TLB_OPT),
            "logic": _paper(512, 8, 1024, logic_layers, 0.2, mem_logic, _LOGIC_OPT),
            "flipflop": _paper(512, 8, 2048, flipflop_layers, 0.1, mem_ff, _FLIPFLOP_OPT),
        },
        "cpu": _cpu(cpu_layers, dict(extra, chunk=10, memory=10, update_layers=1)),
    }


_HALT = {"pos": "xpos", "threshold": THRESHOLD, "beta": 0.1}


def _gut(cfg, **kw):
    return UniversalTransformer(cfg, **{**dict(gated=True, global_halt=True, transition=True), **kw})


_SPECS = [
    EncoderSpec("ut_act", UTACT, "recurrent_transformers",
                "Universal Transformer with Graves/Dehghani ACT (per token, threshold 1-ε, ponder τ)",
                defaults={"pos": "xpos", "act_epsilon": 0.01, "act_loss_weight": 0.01,
                          "act_halting_bias_init": 1.0, "pool": "mean"},
                presets=_halting_presets(10, 15, 10, {"pos": "xpos", "act_epsilon": 0.01,
                                                      "act_loss_weight": 0.01, "pool": "mean"})),
    EncoderSpec("ut", lambda cfg: UniversalTransformer(cfg, gated=False, global_halt=False, transition=False),
                "recurrent_transformers", "P1's UT: token halting (SUT/PonderNet style), mean pooling",
                defaults={**_HALT, "pool": "mean"},
                presets=_halting_presets(10, 15, 10, {**_HALT, "pool": "mean"})),
    EncoderSpec("gut", _gut, "recurrent_transformers",
                "Gated UT: gated FFN, global transition-aware mean halting, END pooling",
                defaults={**_HALT, "pool": "end"}, presets=_halting_presets(10, 15, 20, {**_HALT, "pool": "end"})),
    EncoderSpec("gut_token", lambda cfg: _gut(cfg, global_halt=False), "recurrent_transformers",
                "GUT - global halt (token halting on [h_{l-1}; h_l])",
                defaults={**_HALT, "pool": "end"}, presets=_halting_presets(10, 15, 20, {**_HALT, "pool": "end"})),
    EncoderSpec("gut_nogate", lambda cfg: _gut(cfg, gated=False), "recurrent_transformers",
                "GUT - gate (plain pre-LN block)",
                defaults={**_HALT, "pool": "end"}, presets=_halting_presets(10, 15, 20, {**_HALT, "pool": "end"})),
    EncoderSpec("gut_notrans", lambda cfg: _gut(cfg, transition=False), "recurrent_transformers",
                "GUT - transition (halt(mean(H_{l-1})))",
                defaults={**_HALT, "pool": "end"}, presets=_halting_presets(10, 15, 20, {**_HALT, "pool": "end"})),
    EncoderSpec("tlb", lambda cfg: LatentBottleneck(cfg, halting=False), "recurrent_transformers",
                "Temporal Latent Bottleneck (P1's version): chunk layers + memory slots",
                defaults={"pos": "xpos", "chunk": 10, "memory": 10, "update_layers": 1, "pool": "mean"},
                presets=_tlb_presets({"pos": "xpos", "pool": "mean"})),
    EncoderSpec("tlb_fixed", lambda cfg: LatentBottleneck(cfg, halting=False), "recurrent_transformers",
                "TLB with fixed recurrence: k = 5 chunks whatever the length",
                defaults={"pos": "xpos", "chunk": 10, "memory": 10, "update_layers": 1, "fixed_chunks": 5,
                          "pool": "mean"},
                presets=_tlb_presets({"pos": "xpos", "pool": "mean", "fixed_chunks": 5})),
    EncoderSpec("gutlb", lambda cfg: LatentBottleneck(cfg, halting=True), "recurrent_transformers",
                "Gated Universal TLB: one gated TLB block looped per chunk with GUT halting",
                defaults={**_HALT, "chunk": 10, "memory": 10, "update_layers": 1, "pool": "mean"},
                presets=_tlb_presets({**_HALT, "pool": "mean"}, 5, 5, 10, cpu_layers=6, halting=True)),
]

for _spec in _SPECS:
    register_encoder(_spec)
