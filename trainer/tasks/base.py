"""The contracts of the two kinds of task, and the registry `TASKS` that holds both.

`Task` (Fan et al.'s tasks and `rasp train --program`): a program plus where
its inputs come from.  Targets and the step count T(n) come from running the
program through the interpreter (trainer/tasks/labels.py); the task says how
inputs are drawn (`draw`), which positions are scored and the curriculum.
Every `Task` is made by one constructor, `trainer.tasks.program.program_task`.

`SeqTask` (the comparison tasks, docs/benchmarks.md §1): a generator of
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
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from trainer.registry import Registry

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = REPO / "programs"

TASKS = Registry("task")
register = TASKS.register
get_task = TASKS.lookup


@dataclass(frozen=True)
class PaperHParams:
    """Fan et al. Table 2 / docs/tasks.md: the block and curriculum per task."""
    n_layer: int
    n_head: int
    interval: int       # steps between curriculum increments
    max_train_n: int
    test_n: int


@dataclass(frozen=True)
class Task:
    """How outputs are scored (`target`):

        "fap"           positions from the marker (the end-of-query `>`) on (Fan et al.)
        "per_position"  every position
        "per_sequence"  only the last position
    """
    name: str
    # draw(rng, lengths, sym, train) -> one input per size n (ints; symbols as their codes),
    # each accepted by the program's `require` lines (trainer/tasks/program.py `ProgramInputs`)
    draw: Callable[[np.random.Generator, Sequence[int], dict, bool], list]
    # possible values at scored positions, given the symbol codes
    output_values: Callable[[dict], list]
    paper: PaperHParams
    program: str                   # the program file (its path)
    source: str = ""               # its text, when a run keeps it (run.json), else read from `program`
    t_max_extra: int = 20          # confidence stopping runs up to T(n) + this
    target: str = "fap"
    marker: str = ">"              # "fap": the symbol where scoring starts
    min_n: int = 1
    symbols: tuple = (">", "#")    # symbols the task needs the program to declare
    description: str = ""          # one line, for `rasp train --help`
    eval_sizes: tuple = ()         # the sizes a file of held-out inputs holds (empty: any size)
    # draw_exact(rng, n, k, sym) -> up to k inputs of size exactly n, [] where none exists (a task
    # whose inputs come from files: `draw` gives the nearest size the file has instead); None:
    # `draw` gives every size.  What checks a compiled start at every size (trainer/fan/coverage.py).
    draw_exact: Optional[Callable[[np.random.Generator, int, int, dict], list]] = None
    # the problem size n of an input (the sampler's n, which depth_law reads), when it is not
    # the number of tokens before the marker
    size: Optional[Callable[[list, dict], int]] = None
    # inputs read from files (`rasp train --program P --inputs FILE`): {True: the training file's,
    # False: the held-out file's (or the training file's)} -> {size n: [its distinct inputs]};
    # None: inputs are drawn fresh.  An evaluation scores each file input once (trainer/fan/evaluate.py)
    pools: Optional[dict] = field(default=None, compare=False)
    # where a file's inputs came from, {True: ..., False: ...} -> {"source": "file", "file": path as given}
    # (trainer/tasks/program.py `inputs_origin` says it for drawn inputs too)
    origins: Optional[dict] = field(default=None, compare=False)

    def sample(self, rng: np.random.Generator, n: int, sym: dict, train: bool = True) -> list:
        """One input of size n."""
        return self.draw(rng, [n], sym, train)[0]

    def size_of(self, tokens: list, sym: dict) -> int:
        if self.size is not None:
            return self.size(tokens, sym)
        marker = sym.get(self.marker)
        return tokens.index(marker) if marker in tokens else len(tokens)

    @property
    def program_path(self) -> Path:
        return Path(self.program)


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
