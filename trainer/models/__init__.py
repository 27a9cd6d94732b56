"""Model registries, one module per model family over shared blocks.

    looped.py   MODELS: Fan et al.'s looped transformer and its baselines
                (FAP/NTP layouts, trained by trainer/train.py)
    mamba2.py   mamba2 (plain-PyTorch Mamba2 mixer, SSD + recurrent step)
    llama.py    llama (RMSNorm, RoPE, SwiGLU blocks)
    implicit.py implicit_mamba2, implicit_llama (fixed point of a block
                stack; solver/backward in fixed_point.py, on torchdeq)
    base.py     ENCODERS: the contract of the comparison models (sequence
                encoders with an optional halting / fixed-point loop), trained
                on the comparison tasks of trainer/tasks/
"""
from trainer.models.looped import (MODELS, ModelSpec, build_looped, get_model_spec,  # noqa: F401
                                   looped_config, register)
from trainer.models import implicit, llama, mamba2  # noqa: F401,E402  (register the encoders)
