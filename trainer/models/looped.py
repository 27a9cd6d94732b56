"""The looped model and the baselines of Fan et al. §6.1.2/§6.3, as they run on
Fan et al.'s tasks, and the looped model as it runs on the comparison tasks.

Each registers a `ModelSpec` in the one model registry (`trainer/models/base.py`): how to build the network and how it is run.
All current entries are `LoopedTransformer`s (the compiler's class):

    looped        block looped T(n) times, input injection      (the method)
    looped_noinj  same, the input enters only as h_0            (§6.3 "FAP-Loop-Adaptive-WO")
    fap           one pass through baseline_depth x block layers, full answer
    fap_pause     fap with pause tokens before `>`
    ntp           next-token prediction, baseline_depth x block layers
    ntp_pause     ntp with pause tokens before `>`
    ntp_loop      ntp, block looped a fixed loop_steps times (weight-tied)

`objective` picks the training/decoding code in `trainer/fan/objectives.py`
("fap" or "ntp"); `adaptive` says the depth follows T(n), so stopping rules
apply.  Later entries (UT with ACT halting, GUT, TLB, GUTLB, implicit
SSM/transformer) register their own `build` and, where needed, a new
objective, without touching these.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn as nn

from model import LoopedConfig, LoopedTransformer, gpt2_init_
from trainer.models.base import MODELS, EncoderOutput, EncoderSpec, register_encoder
from trainer.registry import FAN
from trainer.settings.hparams import MARKER_TARGETS, clock_plan

# positions back a halting clock attends to (--halt-target clock): its marker moves one
# position per step, and a window that sees no farther than two back cannot count the input
# instead, which fails beyond the trained lengths (bench/BENCH.md, "A clock of its own")
CLOCK_WINDOW = 2
# a clock with global reach (--clock-reach global): one block this wide (at most the answering
# model's width), this many heads, the first of them unwindowed (bench/BENCH.md, "A clock that
# can count")
GLOBAL_CLOCK_WIDTH, GLOBAL_CLOCK_HEADS, GLOBAL_CLOCK_GLOBAL_HEADS = 32, 4, 1
CLOCK_HEAD_WIDTH = 8     # a --clock-width clock's heads


@dataclass(frozen=True)
class ModelSpec:
    name: str
    objective: str = "fap"           # "fap" | "ntp"
    adaptive: bool = False           # iterations = T(n) of each sample
    injection: bool = True
    deep: bool = False               # baseline_depth x n_layer layers, run once
    fixed_steps: Optional[str] = None  # None (adaptive) | "one" | "loop" (hp.loop_steps)
    pause: bool = False
    description: str = ""
    build: Optional[Callable] = None  # (spec, hp, data) -> nn.Module; default LoopedTransformer

    def layout(self) -> str:
        return "ntp" if self.objective == "ntp" else "fap"

    def pause_count(self, hp) -> int:
        return hp.pause_tokens if self.pause else 0

    def iterations(self, hp) -> Optional[int]:
        """Fixed number of loop iterations, or None when adaptive."""
        if self.adaptive:
            return None
        return hp.loop_steps if self.fixed_steps == "loop" else 1

    def make(self, hp, data) -> nn.Module:
        return (self.build or build_looped)(self, hp, data)


def looped_config(spec: ModelSpec, hp, data) -> LoopedConfig:
    layers = hp.n_layer * (hp.baseline_depth if spec.deep else 1)
    # arch "fan": Fan et al.'s code -- GPT-2's tanh GELU, a read-in Linear with
    # bias on one-hot tokens, the read-out straight after the block's ln_f.
    fan = hp.arch == "fan"
    # read_out_dims: Fan et al.'s read-out has n_dims logits, more than the task's
    # outputs; the extra ones are never targets but share the softmax.  Never
    # fewer rows than outputs.
    n_out = max(len(data.output_tokens), getattr(hp, "read_out_dims", None) or 0)
    halting = getattr(hp, "halt_target", "answer") if getattr(hp, "halt", 0.0) else None    # None: no unit
    return LoopedConfig(
        vocab_size=len(data.input_tokens), out_vocab_size=n_out,
        d_model=hp.d_model, n_head=hp.n_head, d_mlp=hp.d_mlp, n_body=layers,
        input_injection=spec.injection,
        activation="gelu_tanh" if fan else "gelu",
        embed_bias=fan and hp.read_in == "linear", decode_norm=not fan,
        halt_unit=halting is not None,
        halt_marker=halting in MARKER_TARGETS,
        halt_clock=CLOCK_WINDOW if halting == "clock" else 0,
        **(clock_shape(hp, getattr(data, "needs", False), getattr(data, "count_by_size", True))
           if halting == "clock" else {}),
        extra={**data.meta(), "model": spec.name})


def clock_shape(hp, needs: bool = False, by_size: bool = True) -> dict:
    """The LoopedConfig fields of a halting clock's shape (none: a copy of the answering
    model's), from `--clock-reach` (`auto` reads what the loop counts: clock_plan),
    `--clock-width` and `--clock-mlp` (a narrow clock's)."""
    width = min(getattr(hp, "clock_width", 0), hp.d_model)        # never wider than the answering model
    reach = clock_plan(hp, needs, by_size)[0]
    if reach == "global":
        shape = global_clock(hp.d_model, width)
    elif reach in ("wide", "max"):
        width = width or min(GLOBAL_CLOCK_WIDTH, hp.d_model)
        shape = dict(clock_d_model=width, clock_n_head=head_count(width, max(2, width // CLOCK_HEAD_WIDTH)),
                     **{"clock_wide_heads" if reach == "wide" else "clock_max_heads": 1})
    elif width:
        shape = dict(clock_d_model=width, clock_n_head=max(1, width // CLOCK_HEAD_WIDTH))
    else:
        return {}
    mlp = getattr(hp, "clock_mlp", 0)
    return {**shape, "clock_d_mlp": mlp} if mlp else shape


def head_count(width: int, most: int) -> int:
    """The most heads, up to `most`, that split `width` evenly."""
    return max(h for h in range(1, most + 1) if width % h == 0)


def global_clock(d_model: int, width: int = 0) -> dict:
    """The LoopedConfig fields of a clock with global reach beside a model d_model wide
    (`width` wide where given)."""
    width = width or min(GLOBAL_CLOCK_WIDTH, d_model)
    return dict(clock_d_model=width, clock_n_head=head_count(width, GLOBAL_CLOCK_HEADS),
                clock_global_heads=GLOBAL_CLOCK_GLOBAL_HEADS)


def build_looped(spec: ModelSpec, hp, data) -> nn.Module:
    model = LoopedTransformer(looped_config(spec, hp, data))
    if hp.init_scheme == "gpt2":
        gpt2_init_(model, hp.read_in, getattr(hp, "read_in_dims", None))
    return model


def register(spec: ModelSpec) -> ModelSpec:
    return MODELS.add(FAN, spec)


def get_model_spec(name: str) -> ModelSpec:
    return MODELS.spec(name, FAN)


register(ModelSpec("looped", adaptive=True, description="Fan et al.'s looped transformer: one block, T(n) "
                                                        "iterations, input injection"))
register(ModelSpec("looped_noinj", adaptive=True, injection=False,
                   description="looped block without input injection"))
register(ModelSpec("fap", deep=True, fixed_steps="one", description="full-answer prediction, deep model"))
register(ModelSpec("fap_pause", deep=True, fixed_steps="one", pause=True,
                   description="FAP with pause tokens"))
register(ModelSpec("ntp", objective="ntp", deep=True, fixed_steps="one",
                   description="next-token prediction, deep model"))
register(ModelSpec("ntp_pause", objective="ntp", deep=True, fixed_steps="one", pause=True,
                   description="NTP with pause tokens"))
register(ModelSpec("ntp_loop", objective="ntp", fixed_steps="loop",
                   description="NTP, block looped a fixed number of times"))


# ---- the looped block as a comparison encoder (SeqTasks) -----------------------------
# One model, `looped`, for every task: the same LoopedTransformer (GPT-2
# pre-norm block, causal, no positional encoding), weight-tied, with input
# injection h_0 = 0, h_t = body(h_{t-1} + e).  What differs is only who knows
# the number of iterations: Fan et al.'s tasks give T(n) per sample (the ModelSpec
# above); a comparison task has no T(n), so the model runs a fixed
# `loops` (--set loops=K), unless it is the task's own program compiled
# (--init compiled, trainer/benchmark/compiled.py), which runs its program's T(n).

class LoopedEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.loops = int(cfg.extra.get("loops", 4))
        self.core = LoopedTransformer(LoopedConfig(
            vocab_size=cfg.vocab_size, out_vocab_size=1, d_model=cfg.d_model, n_head=cfg.n_head,
            d_mlp=cfg.d_ff, n_body=cfg.n_layer, input_injection=bool(cfg.extra.get("injection", True)),
            activation="gelu", decode_norm=False))
        gpt2_init_(self.core, "embedding")
        del self.core.unembed          # the task's head reads the state

    def forward(self, tokens, mask):
        e = self.core.encode(tokens)
        h = self.core.initial_state(e)
        for _ in range(self.loops):
            h = self.core.step(h, e)
        depth = torch.full((tokens.shape[0],), float(self.loops * self.cfg.n_layer), device=tokens.device)
        return EncoderOutput(h, mask, None, {"depth": depth})


register_encoder(EncoderSpec("looped", LoopedEncoder, "looped",
                             "the looped transformer above: --set loops=K iterations (default 4), as no T(n) "
                             "is known; --init compiled: its program's T(n)",
                             {"loops": 4, "injection": True, "pooling": "end"}, {}))
