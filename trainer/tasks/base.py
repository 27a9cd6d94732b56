"""The contract of the comparison tasks (docs/benchmarks.md §1): a generator of
examples per named split, a vocabulary, and how outputs are scored.

    kind "per_position"  causal; `target` is one id per position, -1 = not
                         scored (flip-flop: only the bits after `r`)
    kind "classify"      `target` is one class id for the whole sequence
    kind "pair"          `input2` is a second sentence; one class id

An `Example` keeps ids, never strings: input ids index `SeqTask.vocab` + 1
(0 is padding), targets index `SeqTask.labels`.  `group` is what a split is
reported by besides length (Logic: number of operators; ListOps: length bin).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np


@dataclass
class Example:
    input: list                     # ids, 1..len(vocab)
    target: object                  # list of ids (-1 = unscored) or one class id
    input2: Optional[list] = None   # sentence pairs
    group: Optional[int] = None


@dataclass(frozen=True)
class Split:
    name: str
    params: dict                    # generator parameters (length, p_i, max_args, ...)
    size: int                       # the paper's size of this split
    description: str = ""


@dataclass(frozen=True)
class SeqTask:
    name: str
    kind: str                                   # "per_position" | "classify" | "pair"
    vocab: tuple                                # input tokens (strings); id = index + 1
    labels: tuple                               # output classes (strings)
    splits: dict                                # name -> Split; "train" and "valid" always present
    # generate(rng, split_params, n) -> list[Example]; deterministic given rng
    generate: Callable[[np.random.Generator, dict, int], list]
    metrics: tuple = ("acc",)                   # reported per split; the first is the headline
    family: str = ""                            # module under trainer/tasks/
    description: str = ""
    train_range: Optional[tuple] = None         # (lo, hi) lengths seen in training, for plots
    paper_stats: dict = field(default_factory=dict)   # published figures `rasp data --stats` prints
    # the n-RASP-L program whose outputs are the labels (input value = int(vocab
    # string), label = int(label string)); `rasp train --init compiled` compiles it
    program: Optional[str] = None

    @property
    def causal(self) -> bool:
        return self.kind == "per_position"
