"""Model registries, one module per model family over shared blocks.

    looped.py   MODELS: Fan et al.'s looped transformer and its baselines
                (FAP/NTP layouts, trained by trainer/train.py)
    base.py     ENCODERS: the contract of the comparison models (sequence
                encoders with an optional halting / fixed-point loop), trained
                on the comparison tasks of trainer/tasks/
"""
from trainer.models.looped import (MODELS, ModelSpec, build_looped, get_model_spec,  # noqa: F401
                                   looped_config, register)
from trainer.models import linear_recurrence  # noqa: F401,E402  (registers s4d, mamba, nru, ids4)
