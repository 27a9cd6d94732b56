"""The model beneath the compiler and the trainer: the looped transformer
(model/looped.py) and the checks of its files (model/files.py: safetensors
headers, JSON, manifests, configs).

Imports flow one way, rasp -> model -> compiler -> trainer: this package
imports only rasp (tests/test_layers.py checks it).
"""
from .looped import (ACTIVATIONS, MLP, Block, CausalSelfAttention, LoopedConfig, LoopedTransformer,
                     gpt2_init_, position_feature)
from .live import zero_skipping

__all__ = ["ACTIVATIONS", "Block", "CausalSelfAttention", "LoopedConfig", "LoopedTransformer", "MLP",
           "gpt2_init_", "position_feature", "zero_skipping"]
