"""The contract every comparison model keeps (UT/GUT/TLB/GUTLB, implicit
Mamba2/Llama, S4D, Mamba, NRU, IDS4, RNN/LSTM/GRU, Transformer).

A comparison model is a sequence *encoder*: token ids in, one vector per
position out.  The task's head (per-position read-out, pooled classifier,
sentence-pair features; `trainer/models/heads.py`) sits on top, so a model
file holds only the model of its paper.

    build(cfg: EncoderConfig) -> nn.Module
    module(tokens, mask) -> EncoderOutput

* `tokens`: LongTensor (B, L), 0 = padding; `mask`: BoolTensor (B, L), True on
  real tokens.  Padding is on the right.
* With `cfg.causal` the output at position t depends only on tokens <= t
  (per-position tasks: flip-flop, word problems, counting, copying).
* Without it (classification: ListOps, Logic) a model may add positions of its
  own (P1's START/END vectors); it returns the mask of what it returns, and
  pooling reads it: "mean" = masked mean, "end" = the last True position,
  "cls" = position 0.
* `aux_loss` is added to the task loss as is (ACT ponder cost already times
  its weight); `stats` holds per-sample (B,) or per-position (B, L) float
  tensors that evaluation averages per split and per length, under these
  names when they apply: "depth" (executed layers), "iterations" (fixed-point
  solver), "residual" (relative residual at stop).
* Models whose behaviour follows the training step (implicit models'
  unrolled warm-up, bounded -> free curriculum) define
  `set_progress(step: int, total_steps: int)`; the trainer calls it before
  every training step.  Test-time caps and tolerances are `cfg.extra` keys
  that `rasp eval --set KEY=VALUE` can override.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from trainer.registry import COMPARISON, FAN, ModelRegistry


@dataclass
class EncoderConfig:
    vocab_size: int             # ids 0..vocab_size-1, 0 = padding
    d_model: int = 64
    n_layer: int = 1            # layers (or the maximum depth of a halting model)
    n_head: int = 4
    d_ff: int = 128
    causal: bool = True
    dropout: float = 0.0
    extra: dict = field(default_factory=dict)   # model-specific hyper-parameters


@dataclass
class EncoderOutput:
    hidden: torch.Tensor                 # (B, L', d_model)
    mask: torch.Tensor                   # (B, L') bool, valid positions of `hidden`
    aux_loss: Optional[torch.Tensor] = None
    stats: dict = field(default_factory=dict)


@dataclass(frozen=True)
class EncoderSpec:
    name: str
    build: Callable                      # (EncoderConfig) -> nn.Module
    family: str                          # module under trainer/models/ that defines it
    description: str = ""
    defaults: dict = field(default_factory=dict)    # EncoderConfig.extra defaults
    # presets[preset][task family] -> overrides of EncoderConfig fields and
    # optimiser settings (lr, batch_size, steps, weight_decay, grad_clip, betas)
    presets: dict = field(default_factory=dict)


def tag_optim(param: torch.nn.Parameter, **settings) -> torch.nn.Parameter:
    """Give a parameter its own optimiser settings (`lr` — an upper bound —
    and/or `weight_decay`), e.g. S4D's SSM parameters (lr <= 1e-3, no decay)."""
    param._optim = dict(settings)     # type: ignore[attr-defined]  # a tag torch's Parameter does not declare
    return param


def param_groups(module: torch.nn.Module, lr: float, weight_decay: float) -> list:
    """AdamW parameter groups for `module`: untagged parameters get (lr,
    weight_decay), each distinct `tag_optim` setting its own group with lr =
    min(tagged, lr) (S4 `setup_optimizer`).  Every group carries `lr_scale` =
    its lr / lr, which a learning-rate schedule multiplies.  Without tags:
    one group, in `module.parameters()` order."""
    plain: list = []
    tagged: dict[tuple, list] = {}         # settings -> parameters
    for p in module.parameters():
        if not p.requires_grad:
            continue
        settings = getattr(p, "_optim", None)
        if settings:
            tagged.setdefault(tuple(sorted(settings.items())), []).append(p)
        else:
            plain.append(p)
    groups: list[dict[str, Any]] = [{"params": plain, "lr": lr, "weight_decay": weight_decay}] if plain else []
    for key, params in tagged.items():
        settings = dict(key)
        groups.append({"params": params, "weight_decay": settings.get("weight_decay", weight_decay),
                       "lr": min(settings.get("lr", lr), lr)})
    for g in groups:
        g["lr_scale"] = g["lr"] / lr
    return groups


# Every model, once by name: Fan et al.'s looped transformer and its baselines
# register a `ModelSpec` (trainer/models/looped.py), the comparison models an
# `EncoderSpec`; `looped` has both.
MODELS = ModelRegistry()


def register_encoder(spec: EncoderSpec) -> EncoderSpec:
    return MODELS.add(COMPARISON, spec)


def get_encoder_spec(name: str) -> EncoderSpec:
    return MODELS.spec(name, COMPARISON)


def comparison_models() -> list:
    return MODELS.names(COMPARISON)


def fan_models() -> list:
    return MODELS.names(FAN)
