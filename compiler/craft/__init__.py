"""Crafting: every graph node -> a residual representation plus the heads
and MLP units that compute it (core.Crafter, composed of one mixin per kind
of layer)."""
from .base import CAT_LIMIT, NUMBER_ABOVE, dense_small
from .core import LINEAR, Crafter
from .maps import COMPARE
from .readout import quadratic_unembed_exact

__all__ = ["CAT_LIMIT", "COMPARE", "LINEAR", "NUMBER_ABOVE", "Crafter", "dense_small", "quadratic_unembed_exact"]
