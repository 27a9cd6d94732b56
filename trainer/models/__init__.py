"""Model registries, one module per model family over shared blocks.

    base.py         MODELS, the one model registry (each name once, with how it
                    runs on Fan et al.'s tasks and/or on the comparison tasks),
                    and the contract of the comparison models (sequence encoders
                    with an optional halting / fixed-point loop, under a task head)
    looped.py       Fan et al.'s looped transformer and its baselines (FAP/NTP
                    layouts, trained by trainer/fan/kind.py); the same looped model
                    as a comparison encoder
    heads.py        per-position / pooled / sentence-pair heads, SeqModel
    blocks.py       P1's shared pre-LN block (xPos, RoPE, START/END)
    mamba2.py       mamba2 (plain-PyTorch Mamba2 mixer: chunked SSD + recurrent step)
    llama.py        llama (RMSNorm, RoPE θ=500000, SwiGLU)
    implicit.py     implicit_mamba2, implicit_llama (a block stack iterated to a
                    fixed point; solver and backward in fixed_point.py, on torchdeq)
    rnn.py, transformer.py, ...   one module per encoder family

Every module of this package is imported here, so a new family registers
its encoders by existing (no list to edit).
"""
import importlib
import pkgutil

from trainer.models.base import MODELS, comparison_models, fan_models, get_encoder_spec  # noqa: F401
from trainer.models.looped import ModelSpec, build_looped, get_model_spec, looped_config, register  # noqa: F401

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")
