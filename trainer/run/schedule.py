"""Length curriculum and learning-rate schedule, both pure functions of the
step (so resuming needs nothing but the step number)."""
from __future__ import annotations

import math

import numpy as np


def curriculum_max_n(step: int, hp) -> int:
    """Max training length at `step`: start_n, +1 every `interval` steps, capped."""
    return min(hp.start_n + step // max(1, hp.interval), hp.max_train_n)


def sample_lengths(rng: np.random.Generator, step: int, hp, min_n: int, size: int) -> np.ndarray:
    """Lengths uniform on min_n..current max (Fan et al. App. E)."""
    hi = max(curriculum_max_n(step, hp), min_n)
    return rng.integers(min_n, hi + 1, size=size)


def lr_at(step: int, hp) -> float:
    """Linear warm-up, constant while the curriculum grows, cosine to 0 from
    `hp.decay_from()` (the curriculum's end, or Fan et al.'s step
    (max n + 1) * interval in the paper and cpu presets) to the last step."""
    if hp.warmup and step < hp.warmup:
        return hp.lr * (step + 1) / hp.warmup
    start = max(hp.warmup, min(hp.decay_from(), hp.steps - 1))
    if step < start:
        return hp.lr
    frac = (step - start) / max(1, hp.steps - start)
    return hp.lr * 0.5 * (1.0 + math.cos(math.pi * min(frac, 1.0)))
