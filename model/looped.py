"""The looped decoder-only transformer (Fan et al. 2024), readable top to bottom.

    e   = prelude(embed(tokens))                 # input embedding (+ prelude blocks)
    h_0 = 0
    h_t = body(h_{t-1} + e)        t = 1..T     # one weight-shared block, input injection
    y_t = unembed(postlude(h_t))                 # per-step logits, shared unembedding

The same class holds trained models (GPT-2 blocks: pre-norm, causal
multi-head attention, GELU MLP, no positional encoding) and compiled ones
(`norm="none"`, `activation="relu"`, weights set by `compiler/`).  Compiled
models may also ask for a BOS position (prepended inside `forward`, removed
from the outputs) and for fixed numeric position features.
"""
from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import asdict, dataclass, field, replace
from typing import Optional, cast

import torch
import torch.nn as nn
import torch.nn.functional as F


ACTIVATIONS = ("gelu", "gelu_tanh", "relu")      # LoopedConfig.activation (checked on load)


@dataclass
class LoopedConfig:
    vocab_size: int                      # input token ids are 0..vocab_size-1
    out_vocab_size: Optional[int] = None  # unembedding rows (default vocab_size)
    d_model: int = 256
    n_head: int = 8
    d_head: Optional[int] = None         # default d_model // n_head
    d_mlp: Optional[int] = None          # default 4 * d_model
    n_prelude: int = 0                   # blocks applied once before the loop
    n_body: int = 1                      # blocks in the looped body
    n_postlude: int = 0                  # blocks applied to each step's state
    norm: str = "layernorm"              # "layernorm" | "none" (compiled weights stay exact)
    activation: str = "gelu"             # one of ACTIVATIONS: "gelu_tanh" is GPT-2's gelu_new
    input_injection: bool = True         # re-add e before every iteration
    body_final_norm: bool = True         # LayerNorm at the end of each iteration (GPT-2 ln_f)
    bias: bool = True
    embed_bias: bool = False             # read-in is a Linear on one-hot tokens (Fan et al.'s code): + bias
    decode_norm: bool = True             # LayerNorm before the unembedding (Fan et al.: none after ln_f)
    attn_scale: Optional[float] = None   # default 1/sqrt(d_head)
    bos: bool = False                    # prepend a BOS token (id vocab_size) inside forward
    position_features: list = field(default_factory=list)  # [(feature, residual dim)], see below
    # [n_head, d_head, d_mlp] of each block (prelude, body, postlude in order), or [] for
    # n_head, d_head, d_mlp in every block: a compiled model's layers are only as wide as
    # their own ops (0 heads or 0 units allowed), so a wide op is paid by one layer, not all
    block_shapes: list = field(default_factory=list)
    # a learned "done" unit on the read-out state (ACT's halting unit), trained with the
    # model by `rasp train --halt` (trainer/fan/objectives.py); read by the `head` rule
    halt_unit: bool = False
    # the unit is taught at every position (`rasp train --halt-target marker`: whether a marker
    # moved one position per step has passed it, inside the loop's count) and the model is done
    # when every position says so; else it is taught on the answer's averaged state
    halt_marker: bool = False
    # local attention: each position attends only to itself and the attn_window positions
    # before it, with a learned bias per head and offset (T5's relative bias, Raffel et al.
    # 2020), so a head can read "the position one back" alike at every length (0: every
    # earlier position and no positions, as in Fan et al.'s model)
    attn_window: int = 0
    # the halting unit sits on a looped network of its own (a clock: this model's shape or a narrow one, a BOS
    # position and attn_window = halt_clock), so the answering trunk trains exactly as without
    # halting (`rasp train --halt-target clock`; 0: the unit reads this model's own states)
    halt_clock: int = 0
    # the clock's own shape (0: this model's shape, every layer): a narrow clock of one block,
    # d_model clock_d_model with clock_n_head heads, costs a fraction of the answering step
    clock_d_model: int = 0
    clock_n_head: int = 0
    clock_d_mlp: int = 0                 # a narrow clock's MLP units (0: 4 * clock_d_model)
    # heads of the clock's block that see every earlier position, not only the window (0: none);
    # the clock's unit is then one per input, the sum of a score at every position, so a loop
    # whose count is a count over the input (of a token, up to a token found by search) can be timed
    clock_global_heads: int = 0
    # heads of the clock's block that see every earlier position, its unit still read at every
    # position (the model is done when all say so): a head can find a token anywhere before a
    # position (the first 0 that ends a carry chain) where the window sees two back
    clock_wide_heads: int = 0
    # heads of the clock's block that read the running maximum of their values over every earlier
    # position (`max_heads`), its unit still read at every position: an OR over the prefix ("some
    # earlier 1 is not done yet") that does not thin out with the input's length as a softmax does
    clock_max_heads: int = 0
    # heads of each block, from the first, exempt from attn_window (a clock's global heads)
    global_heads: int = 0
    # heads of each windowed block after the global ones whose output at position i is the
    # elementwise maximum of their values at the positions before i (no query or key is read)
    max_heads: int = 0
    extra: dict = field(default_factory=dict)  # free-form metadata (token maps, compiler info)

    def __post_init__(self):
        if self.out_vocab_size is None:
            self.out_vocab_size = self.vocab_size
        if self.d_head is None:
            self.d_head = self.d_model // self.n_head
        if self.d_mlp is None:
            self.d_mlp = 4 * self.d_model
        n = self.n_prelude + self.n_body + self.n_postlude
        if self.block_shapes and len(self.block_shapes) != n:
            raise ValueError(f"block_shapes lists {len(self.block_shapes)} blocks, the model has {n}")

    def shapes(self) -> list:
        """(n_head, d_head, d_mlp) of every block, prelude, body, postlude."""
        n = self.n_prelude + self.n_body + self.n_postlude
        if self.block_shapes:
            return [tuple(int(x) for x in b) for b in self.block_shapes]
        return [(self.n_head, self.d_head, self.d_mlp)] * n

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> "LoopedConfig":
        d = dict(d)
        d["position_features"] = [tuple(p) for p in d.get("position_features", [])]
        d["block_shapes"] = [list(b) for b in d.get("block_shapes", [])]
        return cls(**d)


ROTARY_FEATURE = re.compile(r"index_(cos|sin):([1-9][0-9]{0,6})")


def position_feature(name: str, pos: torch.Tensor) -> torch.Tensor:
    """Fixed (not learned) numeric functions of the position index i (BOS is -1
    when present, so the first real token is 0).  `index_cos:P` and
    `index_sin:P` are cos and sin of 2 pi i / P, computed in float64 from i mod
    P and rounded once: the compiler compares positions past the quadratic
    score's float32 range by them (compiler/attn.py, rot_eq_exact)."""
    if name == "one":
        return torch.ones_like(pos)
    if name == "index":
        return pos
    if name == "index_sq":
        return pos * pos
    m = ROTARY_FEATURE.fullmatch(name)
    if m:
        period = int(m.group(2))
        angle = torch.remainder(pos.to(torch.float64), period) * (2.0 * math.pi / period)
        return (torch.cos(angle) if m.group(1) == "cos" else torch.sin(angle)).to(pos.dtype)
    raise ValueError(f"unknown position feature {name!r}")


def _norm(cfg: LoopedConfig) -> nn.Module:
    return nn.LayerNorm(cfg.d_model, bias=cfg.bias) if cfg.norm == "layernorm" else nn.Identity()


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: LoopedConfig, n_head: int, d_head: int):
        super().__init__()
        inner = n_head * d_head
        self.n_head, self.d_head = n_head, d_head
        self.scale = cfg.attn_scale if cfg.attn_scale is not None else 1.0 / math.sqrt(max(1, d_head))
        self.q = nn.Linear(cfg.d_model, inner, bias=cfg.bias)
        self.k = nn.Linear(cfg.d_model, inner, bias=cfg.bias)
        self.v = nn.Linear(cfg.d_model, inner, bias=cfg.bias)
        self.o = nn.Linear(inner, cfg.d_model, bias=cfg.bias)
        self.rel_bias = nn.Parameter(torch.zeros(n_head, cfg.attn_window + 1)) if cfg.attn_window else None
        self.global_heads = min(cfg.global_heads, n_head)
        self.max_heads = min(cfg.max_heads, n_head - self.global_heads) if cfg.attn_window else 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, n, _ = x.shape
        if not self.n_head * self.d_head:          # no heads: the output projection's bias
            return self.o(x.new_zeros(B, n, 0))
        split = lambda t: t.view(B, n, self.n_head, self.d_head).transpose(1, 2)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        if self.rel_bias is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        else:       # the unwindowed heads (the first global_heads) see all n, the running maxima next, the others a band
            g, m = self.global_heads, self.global_heads + self.max_heads
            y = self.banded(q[:, m:], k[:, m:], v[:, m:])
            if m > g:
                y = torch.cat([running_max(v[:, g:m]), y], 1)
            if g:
                wide = F.scaled_dot_product_attention(q[:, :g], k[:, :g], v[:, :g], scale=self.scale,
                                                      attn_mask=self.relative_bias(n, x.device, q.dtype)[:g])
                y = torch.cat([wide, y], 1)
        return self.o(y.transpose(1, 2).reshape(B, n, -1))

    def banded(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention of every head to the attn_window positions before each and itself only:
        the scores of those few offsets [B, H, window + 1, n] instead of all n x n pairs
        (the same function as `relative_bias`'s dense mask, up to float rounding; a
        halting clock's loop costs a fraction of the dense attention's on a CPU).  The
        offsets lie on the second-last axis: a softmax over a last axis of 3 runs about
        20 times slower on a CPU than over the same values laid out this way."""
        assert self.rel_bias is not None
        n, window = q.shape[2], self.rel_bias.shape[1] - 1
        bias = self.rel_bias[self.global_heads + self.max_heads:]       # the windowed heads' (the last ones)
        back = lambda t, o: F.pad(t, (0, 0, o, 0))[:, :, :n] if o else t      # noqa: E731  position i sees i - o
        offsets = range(window + 1)
        scores = torch.stack([(q * back(k, o)).sum(-1) for o in offsets], -2) * self.scale
        scores = scores + bias.to(q.dtype)[None, :, :, None]
        before_start = torch.arange(n, device=q.device) < torch.arange(window + 1, device=q.device)[:, None]
        p = torch.softmax(scores.masked_fill(before_start, float("-inf")), -2)[..., None]
        out = p[:, :, 0] * v
        for o in offsets[1:]:
            out = out + p[:, :, o] * back(v, o)
        return out

    def relative_bias(self, n: int, device, dtype) -> torch.Tensor:
        """[n_head, n, n]: the learned bias of each offset back inside the window, -inf
        outside it (the future, and the positions more than attn_window back).  The first
        `global_heads` heads see every earlier position; the offsets past the window share
        the last bias."""
        assert self.rel_bias is not None      # forward calls it only for a windowed model
        i = torch.arange(n, device=device)
        back = i[:, None] - i[None, :]
        window = self.rel_bias.shape[1] - 1
        bias = self.rel_bias[:, back.clamp(0, window)]
        windowed = torch.arange(bias.shape[0], device=device) >= self.global_heads
        outside = (back < 0)[None] | ((back > window)[None] & windowed[:, None, None])
        return bias.masked_fill(outside, float("-inf")).to(dtype)


def running_max(v: torch.Tensor) -> torch.Tensor:
    """[B, H, n, d]: at each position i >= 1 the elementwise maximum of v over the positions
    before it (0..i-1), at position 0 its own value (a clock's BOS, which every later
    position's maximum includes, so it sets the floor)."""
    before = torch.cummax(v, dim=2).values[:, :, :-1]
    return torch.cat([v[:, :, :1], before], 2)


class MLP(nn.Module):
    def __init__(self, cfg: LoopedConfig, d_mlp: int):
        super().__init__()
        self.up = nn.Linear(cfg.d_model, d_mlp, bias=cfg.bias)
        self.act = {"gelu": nn.GELU(), "gelu_tanh": nn.GELU(approximate="tanh"),
                    "relu": nn.ReLU()}[cfg.activation]
        self.down = nn.Linear(d_mlp, cfg.d_model, bias=cfg.bias)

    def forward(self, x):
        return self.down(self.act(self.up(x)))


class Block(nn.Module):
    """Pre-norm GPT-2 block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: LoopedConfig, shape: tuple):
        super().__init__()
        n_head, d_head, d_mlp = shape
        self.ln1, self.attn = _norm(cfg), CausalSelfAttention(cfg, n_head, d_head)
        self.ln2, self.mlp = _norm(cfg), MLP(cfg, d_mlp)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class LoopedTransformer(nn.Module):
    def __init__(self, cfg: LoopedConfig):
        super().__init__()
        self.cfg = cfg
        # built on the meta device, the model is a shape whose every tensor a file will give:
        # nothing to initialise, and torch's normal_ on a meta tensor imports its compiler
        # (2 s of `rasp run RUN`'s start on a CPU)
        on_meta = torch.empty(()).is_meta
        rows = cfg.vocab_size + (1 if cfg.bos else 0)
        self.embed = nn.Embedding(rows, cfg.d_model, _weight=torch.empty(rows, cfg.d_model) if on_meta else None)
        shapes = iter(cfg.shapes())
        with warnings.catch_warnings():     # a block without heads or units has empty Linears
            warnings.filterwarnings("ignore", "Initializing zero-element tensors is a no-op")
            self.prelude = nn.ModuleList(Block(cfg, next(shapes)) for _ in range(cfg.n_prelude))
            self.body = nn.ModuleList(Block(cfg, next(shapes)) for _ in range(cfg.n_body))
            self.postlude = nn.ModuleList(Block(cfg, next(shapes)) for _ in range(cfg.n_postlude))
        self.body_norm = _norm(cfg) if cfg.body_final_norm else nn.Identity()
        self.final_norm = _norm(cfg) if cfg.decode_norm else nn.Identity()
        if cfg.embed_bias:
            self.embed_bias = nn.Parameter(torch.zeros(cfg.d_model))
        n_out = cast(int, cfg.out_vocab_size)      # LoopedConfig.__post_init__ fills in None
        self.unembed = nn.Linear(cfg.d_model, n_out, bias=cfg.bias)
        if not on_meta:
            self.apply(self._init_weights)
        self.clock: Optional[LoopedTransformer] = None
        if cfg.halt_unit and cfg.halt_clock:
            with torch.random.fork_rng():     # its draws leave the rest of the initialisation as without it
                self.clock = LoopedTransformer(clock_config(cfg))
        elif cfg.halt_unit:     # zeros, drawing no random numbers: the rest starts as without it
            self.halt_weight = nn.Parameter(torch.zeros(cfg.d_model))
            self.halt_bias = nn.Parameter(torch.zeros(()))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear) and m.weight.numel():
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def blocks(self):
        return [*self.prelude, *self.body, *self.postlude]

    # -- the three stages -------------------------------------------------
    def encode(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids [B, n] -> injected embedding e [B, n(+1 with BOS), d]."""
        cfg = self.cfg
        if cfg.bos:
            bos = torch.full_like(tokens[:, :1], cfg.vocab_size)
            tokens = torch.cat([bos, tokens], dim=1)
        e = self.embed(tokens)
        if cfg.embed_bias:
            e = e + self.embed_bias
        if cfg.position_features:
            start = -1 if cfg.bos else 0
            pos = torch.arange(start, start + tokens.shape[1], device=e.device, dtype=e.dtype)
            e = e.clone()
            for name, dim in cfg.position_features:
                e[:, :, dim] += position_feature(name, pos)
        for blk in self.prelude:
            e = blk(e)
        return e

    def step(self, h: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """One loop iteration: h_t = body(h_{t-1} + e)."""
        x = h + e if self.cfg.input_injection else (h if h is not None else e)
        for blk in self.body:
            x = blk(x)
        return self.body_norm(x)

    def readout(self, h: torch.Tensor) -> torch.Tensor:
        """State [B, n(+1), d] -> what the unembedding reads [B, n, d]
        (postlude, final norm; BOS dropped)."""
        for blk in self.postlude:
            h = blk(h)
        h = self.final_norm(h)
        return h[:, 1:] if self.cfg.bos else h

    def decode(self, h: torch.Tensor) -> torch.Tensor:
        """State [B, n(+1), d] -> logits [B, n, out_vocab] (BOS dropped)."""
        return self.unembed(self.readout(h))

    def done_logits(self, r: torch.Tensor) -> torch.Tensor:
        """Read-out states [..., n, d] -> the halting unit's logit of "done"
        at each position [..., n] (averaged over the scored positions, it is
        the unit on their averaged state: it is linear).  Not for a model
        with a clock: its unit reads the clock's states (`done_every`)."""
        return r @ self.halt_weight + self.halt_bias

    def decode_with_done(self, h: torch.Tensor) -> torch.Tensor:
        """`decode`, with the halting unit's logit as one more channel [B, n, out_vocab + 1]."""
        r = self.readout(h)
        return torch.cat([self.unembed(r), self.done_logits(r)[..., None]], dim=-1)

    def done_every(self, tokens: torch.Tensor, max_steps, r: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The halting unit's logits after every step 1..max_steps [T, B, n]: run on the
        clock, or read off this model's read-out states r [T, B, n, d] (`all_steps` with
        read=readout), which a model without a clock needs."""
        if self.clock is not None:      # a clock's first output row is its unit
            if self.cfg.clock_global_heads:      # one unit per input: [T, B, 1]
                return self.clock_unit(self.clock.all_steps(tokens, max_steps))[..., None]
            return self.clock.all_steps(tokens, max_steps)[..., 0]
        if r is None:
            r = self.all_steps(tokens, max_steps, read=self.readout)
        return self.done_logits(r)

    def clock_unit(self, out: torch.Tensor) -> torch.Tensor:
        """A global clock's unit [T, B] from its outputs [T, B, n, 2]: the SUM over the
        positions of its first row, the row's bias counted once.  A sum, not a mean or
        one position's guess: a count over the input (of a token, of the positions its
        marker has passed) enters it one unit per position, so "done" is the sign of a
        difference of counts with a margin of a whole position at every length."""
        assert self.clock is not None
        b = self.clock.unembed.bias
        b0 = b[0] if b is not None else out.new_zeros(())
        return (out[..., 0] - b0).sum(-1) + b0

    def clock_targets(self, tokens: torch.Tensor, done_steps) -> torch.Tensor:
        """What a clock's loss reads after every step 1..done_steps: its unit at every
        position [T, B, n]; a clock with global heads, both its rows [T, B, n, 2] (the
        unit is their first row's sum, `clock_unit`; the second is its marker).
        `done_steps`: an int, or each sample's own count [B] (zeros after it: `all_steps`)."""
        assert self.clock is not None
        if self.cfg.clock_global_heads:
            return self.clock.all_steps(tokens, done_steps)
        return self.done_every(tokens, done_steps)

    def clip_groups(self) -> list:
        """The parameters whose gradient norm is clipped together: the clock apart, so
        its gradients never scale the answering trunk's (which then trains as without it)."""
        if self.clock is None:
            return [list(self.parameters())]
        clock = {id(p) for p in self.clock.parameters()}
        return [[p for p in self.parameters() if id(p) not in clock], list(self.clock.parameters())]

    def initial_state(self, e: torch.Tensor) -> torch.Tensor:
        # Without injection the input enters once, as the initial state.
        return torch.zeros_like(e) if self.cfg.input_injection else e

    # -- running ----------------------------------------------------------
    def forward(self, tokens: torch.Tensor, steps, read=None, every: bool = False,
                done_steps=None):
        """Logits at each sample's own step count.  `steps` is an int or a
        LongTensor [B] (0 allowed: the answer is decoded from h_0).  `read`
        replaces `decode` (e.g. `readout`: the states a separate head reads).
        `every`: the logits after every step 1..max(steps) instead,
        [T, B, n, out_vocab] (`all_steps` through `forward`, so a
        DistributedDataParallel wrapper sees the call); with `done_steps`, the
        pair (those logits, the halting unit's after every step 1..done_steps)
        (`steps_and_done`).  A model with a clock also takes `done_steps`
        without `every`: (the logits at each sample's own step, the clock's),
        `done_steps` an int or each sample's own count [B] (`clock_targets`).
        """
        if every:
            most = int(steps.max()) if torch.is_tensor(steps) else int(steps)
            if done_steps is not None:
                return self.steps_and_done(tokens, most, done_steps)
            return self.all_steps(tokens, most, read)
        if done_steps is not None and self.clock is not None:
            # the clock runs its own loop, so the answering trunk runs each sample's own steps only
            return self.forward(tokens, steps, read), self.clock_targets(tokens, done_steps)
        read = read or self.decode
        steps = torch.as_tensor(steps, device=tokens.device).long().expand(tokens.shape[0])
        return read(self.final_states(self.encode(tokens), steps))

    def final_states(self, e: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        """Each sample's state after its own number of steps [B, n(+1), d].  A sample
        leaves the loop once its steps are done: the batch is sorted longest first, so
        the samples still running are a prefix of it and each step runs only them."""
        steps, order = steps.sort(descending=True, stable=True)
        e = e[order]
        h = self.initial_state(e)
        finished = []                   # the samples done after each step, last ones first
        for k in still_running(steps):
            finished.append(h[k:])
            h = self.step(h[:k], e[:k])
        finished.append(h)
        return torch.cat(finished[::-1])[order.argsort()]

    def all_steps(self, tokens: torch.Tensor, max_steps, read=None) -> torch.Tensor:
        """Logits after every step 1..max_steps: [max_steps, B, n, out_vocab]
        (`read` replaces `decode`, as in `forward`).  `max_steps` may be a LongTensor
        [B], each sample's own count: a sample leaves the loop after its own last step
        (as in `final_states`), and its rows after it are zeros, for a loss that never
        reads them (a halting clock's, taught up to T(n) + halt_past per input)."""
        read = read or self.decode
        e = self.encode(tokens)
        order = None
        if torch.is_tensor(max_steps):
            steps, order = max_steps.sort(descending=True, stable=True)
            e, counts = e[order], still_running(steps)
        else:
            counts = [len(e)] * max_steps
        h = self.initial_state(e)
        outs = []
        for k in counts:
            h = self.step(h[:k], e[:k])
            r = read(h)
            outs.append(r if k == len(e) else F.pad(r, (0, 0) * (r.dim() - 1) + (0, len(e) - k)))  # zeros: finished
        out = torch.stack(outs)
        return out if order is None else out[:, order.argsort()]

    def steps_and_done(self, tokens: torch.Tensor, answer_steps: int, done_steps: int):
        """(logits after every step 1..answer_steps [answer_steps, B, n, out_vocab],
        the halting unit's logits after every step 1..done_steps [done_steps, B, n]).
        A clock runs its own loop, so the answering trunk runs no step it does not need."""
        if self.clock is not None:
            return self.all_steps(tokens, answer_steps), self.clock_targets(tokens, done_steps)
        every = self.all_steps(tokens, max(answer_steps, done_steps), read=self.decode_with_done)
        return every[:answer_steps, ..., :-1], every[:done_steps, ..., -1]

    @torch.no_grad()
    def run_until_stable(self, tokens: torch.Tensor, max_steps, state_dims: list, lengths=None,
                         first_step_changes: bool = False):
        """Halting by convergence (compiled `loop N until stable`): each sample
        stops after the first step that leaves the residual dims `state_dims`
        unchanged (rounded, at its valid positions), or after max_steps (int or
        LongTensor [B]).  Returns (logits [B, n, out_vocab], steps run [B])."""
        B, n = tokens.shape
        caps = torch.as_tensor(max_steps, device=tokens.device).long().expand(B)
        valid = torch.ones(B, n, dtype=torch.bool, device=tokens.device) if lengths is None else \
            torch.arange(n, device=tokens.device)[None, :] < torch.as_tensor(lengths, device=tokens.device)[:, None]
        e = self.encode(tokens)
        h = self.initial_state(e)
        out = self.decode(h)
        ran = torch.zeros(B, dtype=torch.long, device=tokens.device)
        active = caps > 0
        start = 1 if self.cfg.bos else 0
        t = 0
        while bool(active.any()):
            t += 1
            new = self.step(h, e)
            ran += active.long()
            diff = (torch.round(h[:, start:, state_dims]) != torch.round(new[:, start:, state_dims])).any(-1)
            changed = (diff & valid).any(-1) | (t == 1 and first_step_changes)
            h = torch.where(active[:, None, None], new, h)
            done = active & ((caps <= t) | ~changed)
            if bool(done.any()):
                out = torch.where(done[:, None, None], self.decode(h), out)
            active = active & ~done
        return out, ran

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def still_running(steps: torch.Tensor) -> list:
    """For step counts sorted longest first: how many samples run step 1, 2, ... max."""
    most = int(steps[0]) if len(steps) else 0
    return (steps[:, None] >= torch.arange(1, most + 1, device=steps.device)).sum(0).tolist()


def clock_config(cfg: LoopedConfig) -> LoopedConfig:
    """The clock of a model with `halt_clock`: its shape and token set, a BOS position
    (without one, the positions of a constant prefix 1 1 1 ... hold the same values, so no
    weighting of them tells the first from the rest), local attention of halt_clock
    positions back, and one output row, which is the halting unit.

    With `clock_d_model`, a narrow clock of one block instead (clock_n_head heads, clock_d_mlp MLP units, the
    first clock_global_heads or clock_wide_heads of them unwindowed) and, with global heads, two output rows:
    a score per position whose sum is the unit (`LoopedTransformer.clock_unit`), and a
    marker that passes one position per step, a step count made of positions."""
    clock = replace(cfg, out_vocab_size=1, bos=True, attn_window=cfg.halt_clock, halt_clock=0,
                    halt_unit=False, halt_marker=False, extra={}, clock_d_model=0, clock_n_head=0,
                    clock_d_mlp=0, clock_global_heads=0, clock_wide_heads=0, clock_max_heads=0)
    if not cfg.clock_d_model:
        return clock
    return replace(clock, d_model=cfg.clock_d_model, n_head=cfg.clock_n_head or 1, d_head=None,
                   d_mlp=cfg.clock_d_mlp or None,
                   n_prelude=0, n_body=1, n_postlude=0, block_shapes=[], position_features=[],
                   global_heads=cfg.clock_global_heads or cfg.clock_wide_heads, max_heads=cfg.clock_max_heads,
                   out_vocab_size=2 if cfg.clock_global_heads else 1)


def gpt2_init_(model: LoopedTransformer, read_in: str = "linear",
               read_in_dims: Optional[int] = None) -> LoopedTransformer:
    """Fan et al.'s initialisation (their `GeneralTransformerModel`): the
    blocks as Hugging Face GPT-2 initialises them (Linear weights N(0, 0.02),
    biases 0, LayerNorm 1/0, the residual-writing projections -- attention
    output and MLP down -- N(0, 0.02/sqrt(2 * layers))), between a read-in and
    a read-out at PyTorch's default Linear initialisation (uniform
    +-1/sqrt(fan_in), bias too).  read_in="linear": their one-hot Linear, so
    the embedding rows and the shared bias are uniform +-1/sqrt(vocab);
    "embedding": their nn.Embedding read-in (unique set), N(0, 1).
    read_in_dims: the one-hot width that sets the bound (Fan et al.'s n_dims,
    wider than our input vocabulary; default our vocabulary)."""
    cfg = model.cfg
    resid_std = 0.02 / math.sqrt(2 * max(1, len(model.blocks())))
    with torch.no_grad():
        for blk in model.blocks():
            for m in blk.modules():
                if isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, std=0.02)
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
                elif isinstance(m, nn.LayerNorm):
                    nn.init.ones_(m.weight)
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
            nn.init.normal_(blk.attn.o.weight, std=resid_std)
            nn.init.normal_(blk.mlp.down.weight, std=resid_std)
        if read_in == "linear":
            bound = 1.0 / math.sqrt(read_in_dims or cfg.vocab_size)
            nn.init.uniform_(model.embed.weight, -bound, bound)
            if cfg.embed_bias:
                nn.init.uniform_(model.embed_bias, -bound, bound)
        elif read_in == "embedding":
            nn.init.normal_(model.embed.weight, std=1.0)
        else:
            raise ValueError(f"unknown read-in {read_in!r}")
        model.unembed.reset_parameters()          # PyTorch default: uniform +-1/sqrt(d_model)
    if model.clock is not None:
        with torch.random.fork_rng():         # the same draws for the answering trunk as without a clock
            gpt2_init_(model.clock, read_in, read_in_dims)
        with torch.no_grad():
            for p in model.clock.unembed.parameters():
                p.zero_()                         # the unit starts at "unsure", as the unit on the states does
    return model
