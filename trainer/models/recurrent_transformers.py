"""Recurrent transformers with dynamic halting (P1; docs/models.md §3-5): UT with
ACT, P1's UT, GUT and its ablations, TLB, TLB with fixed recurrence, GUTLB.

    ut_act       Graves/Dehghani ACT, per token (T2T `act_basic`; docs §4.1)
    ut           P1's UT: token halting, S stream as K/V, mean pooling (docs §4.2)
    gut          gated FFN + global transition-aware mean halting, END pooling (docs §4.3)
    gut_token    GUT - global halt (token halting on [h_{l-1}; h_l], S stream as K/V)
    gut_nogate   GUT - gate (plain pre-LN block)
    gut_notrans  GUT - transition (halt(mean(H_{l-1})))
    tlb          chunked fast stream, memory slots, cross-attention both ways (docs §5)
    tlb_fixed    TLB with k = 5 chunks whatever the length (P1 §6.6)
    gutlb        TLB whose per-chunk stack is one gated block looped with GUT halting (docs §5)

All of them are encoders (trainer/models/base.py).  `cfg.n_layer` is the depth
cap of the looped models (UT/GUT: layers; GUTLB: layers per chunk; ut_act:
`act_max_steps`) and the number of distinct chunk layers L of TLB.
`cfg.extra`: `pos` (xpos | rope | nope), `attn_dropout`, `threshold` (0.999),
`beta` (penalty weight, P1's β = `penalty_gamma`), `chunk`, `memory`,
`update_layers`, `fixed_chunks`, `d_gff`, `act_epsilon`, `act_loss_weight`,
`act_halting_bias_init`; the head's `pooling` (a run setting) defaults to
P1's: mean for UT/TLB/GUTLB, END for the GUT family.

Decisions where the sources disagree (docs/models.md §4.3 and §5, "Departures"):
  *   flip-flop chunk: the paper's 10 slots / chunk 10 by default; `chunk=100`
      (JRC's flipflop config) is one `--set chunk=100` away.
  *   UT/GUT max layers on LRA: the code's 10 (no LRA training preset here;
      ListOps-LRA is only a test split of the listops task).
  *   TLB on ListOps: chunk 20, 20 memory slots in the paper preset.
  *   ACT penalty: the code's version, layer index l+1 of the 0-based loop plus
      the un-halted remainder charged at the last executed layer ("slack"),
      not Eq. 8's Σ α_l·l.
  *   GUTLB gate: mixes with the chunk state C_{l-1} (Alg. 4's H_{l-1} is a typo).
  *   Halting input: α̂_{l-1} = halt(h_{l-1}) decides at layer l-1, and its
      weight multiplies H_{l-1}, so α_0 weights the embedding H_0 (as the code).
  *   Eq. 12-13's `H^{1-1}` is H_{l-1}.
Other code details kept (JRC UniversalTransformerEncoder.py / UTLBEncoder.py /
TLBEncoder.py @58026b2): depth cap min(layers, S+1) plus a per-sample forced
halt once l >= length+1 (GUTLB: the chunk's real tokens); the layer at which Σα crosses the threshold is
discarded (H, S, penalty revert to the previous layer, while Σα, Π(1-α̂) and
Σα·H keep accumulating); the loop breaks when no unit updates, in training too;
causal GUT/GUTLB halt per position on prefix means; GUTLB's penalty is averaged
over non-empty chunks; TLB/GUTLB add no START/END and pool the layer-normed last
memory; the FFNs and gates of the TLB/GUTLB blocks and the memory update
keep PyTorch's default init (JRC TLBBlock.py, GatedTLBBlock.py,
CrossTransformerBlock.py), the UT/GUT blocks the xavier init of docs/models.md §3.  Deliberate departures: in causal mode the forced halt of position t
reads the tokens t sees (`halting_lengths`: its prefix t+1; GUTLB: the
earlier chunks' tokens plus its prefix in the chunk, so only the first chunk
and never a full chunk differ from JRC), not the whole length (chunk length)
as JRC does, which would let the number of later tokens change earlier
outputs where the cap binds; SDPA in fp32 instead of FlashAttention in fp16;
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
from trainer.models.blocks import FeedForward, MultiHeadAttention, PreLNBlock, add_start_end, positions

THRESHOLD = 0.999          # P1's α_thresh


def default_init(*modules):
    """Back to PyTorch's default Linear init (JRC's TLB blocks never apply
    the xavier / N(0, 1e-6) init of docs/models.md §3 to their FFNs and gates)."""
    for mod in modules:
        if mod is not None:
            for lin in mod.modules():
                if isinstance(lin, nn.Linear):
                    lin.reset_parameters()


class RecurrentBlock(nn.Module):
    """The shared `PreLNBlock` in its four P1 forms:

        plain    A = Drop(MHA(LN1 H, LN1 KV)) + H;  out = FFN(LN2 A) + A      (TransformerBlock)
        gated    out = G*(FFN(U)+A) + (1-G)*H, U = LN2 A, G = σ(MLP_g(U))     (GatedTransformerBlock)
        memory   after self-attention: A = Drop(XAttn(LN11 A, LN12 M)) + A     (TLBBlock)
        both     memory read and gate                                          (GatedTLBBlock)

    `stream`: K/V from UT's marginalised S (same positions as H)."""

    def __init__(self, cfg: EncoderConfig, gated: bool = False, memory: bool = False):
        super().__init__()
        d, ex = cfg.d_model, cfg.extra
        attn_drop = ex.get("attn_dropout", cfg.dropout)
        self.core = PreLNBlock(d, cfg.n_head, cfg.d_ff, cfg.dropout, attn_drop, ex.get("pos", "xpos"),
                               ex.get("head_dim"))
        if memory:
            self.ln_mq, self.ln_mkv = nn.LayerNorm(d), nn.LayerNorm(d)
            self.cross = MultiHeadAttention(d, cfg.n_head, ex.get("head_dim"), attn_drop, "nope")
            self.drop_m = nn.Dropout(cfg.dropout)
        # JRC's FFN_gate = the FFN's layout (d -> d_gff -> d, same init) + sigmoid
        self.gate = FeedForward(d, ex.get("d_gff", cfg.d_ff), cfg.dropout) if gated else None
        if memory:      # JRC's TLBBlock / GatedTLBBlock leave their FFN and gate at PyTorch's default init
            default_init(self.core.ffn, self.gate)

    def forward(self, h, mask, pos, causal, stream=None, memory=None):
        a = self.core.attend(h, mask, causal, pos=pos, stream=stream)
        if memory is not None:                    # all slots visible, no positions, never causal
            a = a + self.drop_m(self.cross(self.ln_mq(a), self.ln_mkv(memory)))
        u = self.core.ln2(a)
        out = a + self.core.ffn(u)
        if self.gate is not None:
            g = torch.sigmoid(self.gate(u))
            out = g * out + (1 - g) * h
        return out


class MemoryUpdateBlock(nn.Module):
    """TLB's CrossTransformerBlock: memory slots read the chunk; FFN' is d -> d -> d."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        d = cfg.d_model
        self.ln_q, self.ln_kv, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.cross = MultiHeadAttention(d, cfg.n_head, cfg.extra.get("head_dim"),
                                        cfg.extra.get("attn_dropout", cfg.dropout), "nope")
        self.drop = nn.Dropout(cfg.dropout)
        self.ffn = FeedForward(d, d, cfg.dropout)
        default_init(self.ffn)                  # as JRC's CrossTransformerBlock

    def forward(self, memory, chunk, chunk_mask):
        b = self.drop(self.cross(self.ln_q(memory), self.ln_kv(chunk), chunk_mask)) + memory
        return self.ffn(self.ln2(b)) + b


class TokenFrontEnd(nn.Module):
    """Embedding (N(0, 0.02), row 0 = padding) + dropout; for non-causal use
    P1's learned START/END vectors (`add_start_end`)."""

    def __init__(self, cfg: EncoderConfig, start_end: bool):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=0)
        nn.init.normal_(self.embed.weight, std=0.02)
        with torch.no_grad():
            self.embed.weight[0].zero_()
        self.drop = nn.Dropout(cfg.dropout)
        self.start_end = start_end
        if start_end:
            self.start = nn.Parameter(torch.randn(cfg.d_model))
            self.end = nn.Parameter(torch.randn(cfg.d_model))

    def forward(self, tokens, mask):
        x = self.drop(self.embed(tokens))
        return add_start_end(x, mask, self.start, self.end) if self.start_end else (x, mask)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over dim 1 of x (B, S, ...) where mask (B, S) is True."""
    m = mask.to(x.dtype).view(*mask.shape, *([1] * (x.dim() - 2)))
    return (x * m).sum(1) / m.sum(1).clamp(min=1)


def prefix_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Running mean over positions <= t (P1 App. B: causal mean halting)."""
    m = mask.to(x.dtype)[..., None]
    return torch.cumsum(x, 1) * m / torch.cumsum(m, 1).clamp(min=1)


# --------------------------------------------------------------------------
# P1's halting (docs/models.md §4.2, §4.3): one layer of bookkeeping, and the loop.
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


def halting_lengths(mask: torch.Tensor, causal: bool, seen_before=0) -> torch.Tensor:
    """The length the depth cap reads, (B, 1) or (B, S): JRC's `lengths` =
    the sample's valid positions; in causal mode the valid tokens position
    t sees (`seen_before` earlier ones, GUTLB's previous chunks through the
    memory, plus those of its prefix up to t), so the cap of position t never
    depends on how many tokens follow it (JRC reads the whole length there
    too, which lets a later token change an earlier output)."""
    return seen_before + mask.long().cumsum(1) if causal else mask.long().sum(1, keepdim=True)


def run_halting(step, halt_prob, H0, mask, max_layers: int, per_unit_position: bool,
                threshold: float = THRESHOLD, causal: bool = False, seen_before=0) -> HaltingState:
    """Loop `step(H, S) -> H_new` up to min(max_layers, S+1) times with
    `halt_prob(H, H_new) -> (B, X)`; a unit is forced to halt once layer >=
    its length + 1 (`halting_lengths`: the sample's length, or the tokens
    position t sees when `causal`, which needs per_unit_position); break
    when nothing updates (training too)."""
    B, S, _ = H0.shape
    if causal and not per_unit_position:
        raise ValueError("causal halting is per position")
    st = HaltingState.start(H0, S if per_unit_position else 1)
    lengths = halting_lengths(mask, causal, seen_before)
    for layer in range(min(max_layers, S + 1)):
        H_new = step(st.H, st.S)
        p = halt_prob(st.H, H_new)
        can = layer < lengths + 1
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
# UT / GUT (docs/models.md §4.2, §4.3)
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
        pos = positions(m)
        per_position = self.causal or not self.global_halt

        def step(H, S):
            return self.block(H, m, pos, self.causal, stream=None if self.global_halt else S)

        st = run_halting(step, lambda H, Hn: self.halt(H, Hn, m), x, m, self.cfg.n_layer, per_position,
                         self.threshold, causal=self.causal)
        pen = st.final_penalty()
        pen = masked_mean(pen, m) if per_position else pen[:, 0]
        return EncoderOutput(hidden=st.S, mask=m, aux_loss=self.beta * pen.mean(),
                             stats={"depth": depth_stat(st.depth, m, self.causal)})


# --------------------------------------------------------------------------
# UT with Graves/Dehghani ACT (docs/models.md §4.1)
# --------------------------------------------------------------------------

def timing_signal(at: torch.Tensor, d: int) -> torch.Tensor:
    """T2T's sinusoid (sin half, cos half; timescales 1..1e4) at positions `at` (...,)."""
    half = d // 2
    inv = torch.exp(-math.log(1e4) * torch.arange(half, dtype=torch.float32, device=at.device)
                    / max(half - 1, 1))
    angle = at.float()[..., None] * inv
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
        pos = positions(m)
        pos_signal = timing_signal(pos, d)
        st, acc = ACTState.start(s), torch.zeros_like(s)
        for n in range(self.cfg.n_layer):
            if not bool((st.running(self.eps) & m).any()):
                break
            s_t = s + pos_signal + timing_signal(torch.tensor(n, device=s.device), d)   # step_preprocess
            st, w = act_step(st, torch.sigmoid(self.halt(s_t)).squeeze(-1), self.eps)
            s = self.block(s_t, m, pos, self.cfg.causal)
            acc = act_accumulate(acc, s, w)
        ponder = masked_mean(st.N + st.R, m)
        return EncoderOutput(hidden=acc, mask=m, aux_loss=self.tau * ponder.mean(),
                             stats={"depth": depth_stat(st.N, m, self.cfg.causal)})


# --------------------------------------------------------------------------
# TLB / GUTLB (docs/models.md §5)
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

    def fast_stream(self, C, pseudo, pos, memory):
        """TLB: the L chunk layers.  Returns (C_L, None, depth)."""
        for blk in self.blocks:
            C = blk(C, pseudo, pos, self.causal, memory=memory)
        return C, None, C.new_full((C.shape[0], 1), float(len(self.blocks)))

    def halting_stream(self, C, pseudo, pos, memory, real, seen_before):
        """GUTLB: GUT halting over one chunk (lengths = real tokens of the
        chunk; causal: the tokens position t sees, `seen_before` = the real
        tokens of the earlier chunks, which reach it through the memory)."""
        def step(H, S):
            return self.block(H, pseudo, pos, self.causal, memory=memory)
        st = run_halting(step, lambda H, Hn: self.halt(H, Hn, pseudo), C, real, self.cfg.n_layer,
                         self.causal, self.threshold, causal=self.causal, seen_before=seen_before)
        pen = st.final_penalty()
        pen = masked_mean(pen, pseudo) if self.causal else pen[:, 0]
        return st.S, pen, st.depth

    def forward(self, tokens, mask):
        x, mask = self.front(tokens, mask)
        B = x.shape[0]
        memory = self.memory0.expand(B, -1, -1)
        outs, depths, penalty = [], [], x.new_zeros(B)
        live_chunks = x.new_zeros(B)
        seen = mask.new_zeros(B, 1, dtype=torch.long)          # real tokens of the chunks so far
        for C0, real in chunk_sequence(x, mask, self.chunk, self.fixed_chunks):
            pseudo = real.clone()
            pseudo[:, 0] = True                                   # first slot valid "for stability"
            pos = positions(pseudo)                               # positions restart in every chunk
            if self.halting:
                C, pen, depth = self.halting_stream(C0, pseudo, pos, memory, real, seen)
                seen = seen + real.long().sum(1, keepdim=True)
            else:
                C, pen, depth = self.fast_stream(C0, pseudo, pos, memory)
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

# Presets are flat (trainer/benchmark/presets.py): HParams fields (sizes, pooling,
# optimiser) or EncoderConfig.extra keys.  The cpu preset only sizes the
# model; the optimiser, batch and steps come from presets.FAMILY["cpu"], the
# same for every model of a comparison.

def _paper_sizes(d_ff: int, dropout: float, attn_dropout: float) -> dict:
    return {"d_model": 512, "n_head": 8, "d_ff": d_ff, "dropout": dropout, "attn_dropout": attn_dropout}


_PAPER_OPT = {   # P1 App. B, JRC configs listopsc2 / proplogic / flipflop (docs/models.md §11)
    "listops": {"lr": 0.05, "schedule": "root", "warmup": 1000, "betas": [0.9, 0.98], "weight_decay": 0.1,
                "batch_size": 32, **_paper_sizes(1024, 0.1, 0.1)},
    "logic": {"lr": 7e-4, "schedule": "constant", "warmup": 4000, "betas": [0.9, 0.98], "weight_decay": 0.1,
              "batch_size": 256, **_paper_sizes(1024, 0.2, 0.5)},
    "flipflop": {"lr": 3e-4, "schedule": "linear", "warmup": 50, "betas": [0.9, 0.999], "weight_decay": 0.1,
                 "batch_size": 16, "steps": 10_000, **_paper_sizes(2048, 0.1, 0.1)},
}
_CPU_SIZES = {"d_model": 64, "n_head": 4, "d_ff": 128, "dropout": 0.0, "weight_decay": 0.1}   # docs/benchmarks.md §9
_CPU_FAMILIES = ("flipflop", "listops", "logic", "words")


def _presets(paper: dict, cpu: dict, no_penalty_on_logic: bool) -> dict:
    """paper[family] / cpu (all families) -> EncoderSpec.presets; β = 0 on
    Logical Inference (P1 App. B) for the models that have a penalty."""
    out = {"paper": {fam: {**_PAPER_OPT[fam], **kw} for fam, kw in paper.items()},
           "cpu": {fam: {**_CPU_SIZES, **cpu} for fam in _CPU_FAMILIES}}
    if no_penalty_on_logic:
        for preset in out.values():
            preset["logic"]["beta"] = 0.0
    return out


def _ut_presets(flipflop_layers: int, **extra) -> dict:
    """UT / GUT: 10 layers on ListOps, 15 on Logic; flip-flop 10 (UT) or 20 (GUT)."""
    return _presets({"listops": {"n_layer": 10, **extra}, "logic": {"n_layer": 15, **extra},
                     "flipflop": {"n_layer": flipflop_layers, **extra}}, {"n_layer": 8, **extra}, True)


def _tlb_presets(layers: tuple, halting: bool, **extra) -> dict:
    """TLB (L = 2/2/3) and GUTLB (5/5/10 layers per chunk); ListOps chunk
    20 / 20 slots; flip-flop chunk 10 (paper; JRC's 100 via --set chunk=100): docs/models.md §5."""
    listops, logic, flipflop = layers
    paper = {"listops": {"n_layer": listops, "chunk": 20, "memory": 20, "update_layers": 1,
                         "lr": 0.0125, "warmup": 8000, **extra},
             "logic": {"n_layer": logic, "chunk": 10, "memory": 10, "update_layers": 1, **extra},
             "flipflop": {"n_layer": flipflop, "chunk": 10, "memory": 10, "update_layers": 2, **extra}}
    cpu = {"n_layer": 6 if halting else 2, "chunk": 10, "memory": 10, "update_layers": 1, **extra}
    return _presets(paper, cpu, halting)


_HALT = {"pos": "xpos", "threshold": THRESHOLD, "beta": 0.1}
_TLB = {"pos": "xpos", "chunk": 10, "memory": 10, "update_layers": 1, "pooling": "mean"}


def _gut(cfg, **kw):
    return UniversalTransformer(cfg, **{**dict(gated=True, global_halt=True, transition=True), **kw})


def _spec(name, build, description, defaults, presets):
    return EncoderSpec(name, build, "recurrent_transformers", description, defaults, presets)


_ACT = {"pos": "xpos", "act_epsilon": 0.01, "act_loss_weight": 0.01, "act_halting_bias_init": 1.0,
        "pooling": "mean"}
_SPECS = [
    _spec("ut_act", UTACT, "Universal Transformer with Graves/Dehghani ACT (per token, threshold 1-ε, ponder τ)",
          _ACT, _presets({"listops": {"n_layer": 10}, "logic": {"n_layer": 15}, "flipflop": {"n_layer": 10}},
                         {"n_layer": 8}, False)),
    _spec("ut", lambda cfg: UniversalTransformer(cfg, gated=False, global_halt=False, transition=False),
          "P1's UT: token halting (SUT/PonderNet style), mean pooling", {**_HALT, "pooling": "mean"},
          _ut_presets(10)),
    _spec("gut", _gut, "Gated UT: gated FFN, global transition-aware mean halting, END pooling",
          {**_HALT, "pooling": "end"}, _ut_presets(20)),
    _spec("gut_token", lambda cfg: _gut(cfg, global_halt=False), "GUT - global halt (token halting on [h_{l-1}; h_l])",
          {**_HALT, "pooling": "end"}, _ut_presets(20)),
    _spec("gut_nogate", lambda cfg: _gut(cfg, gated=False), "GUT - gate (plain pre-LN block)",
          {**_HALT, "pooling": "end"}, _ut_presets(20)),
    _spec("gut_notrans", lambda cfg: _gut(cfg, transition=False), "GUT - transition (halt(mean(H_{l-1})))",
          {**_HALT, "pooling": "end"}, _ut_presets(20)),
    _spec("tlb", lambda cfg: LatentBottleneck(cfg, halting=False),
          "Temporal Latent Bottleneck (P1's version): chunk layers + memory slots", _TLB,
          _tlb_presets((2, 2, 3), False)),
    _spec("tlb_fixed", lambda cfg: LatentBottleneck(cfg, halting=False),
          "TLB with fixed recurrence: k = 5 chunks whatever the length", {**_TLB, "fixed_chunks": 5},
          _tlb_presets((2, 2, 3), False, fixed_chunks=5)),
    _spec("gutlb", lambda cfg: LatentBottleneck(cfg, halting=True),
          "Gated Universal TLB: one gated TLB block looped per chunk with GUT halting",
          {**_TLB, **_HALT}, _tlb_presets((5, 5, 10), True)),
]

for _s in _SPECS:
    register_encoder(_s)
