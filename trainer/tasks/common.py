"""Small pieces the comparison-task families share (trainer/tasks/*.py).

    encode / decode          strings <-> Example ids (vocab index + 1, 0 = padding)
    pick                     a split parameter that is one value or a list to draw from
    python_random            a `random.Random` seeded from the numpy generator, for the
                             ported generators that must call Python's `random` in the
                             original order (ListOps, Logic)
    distinct                 draw until n distinct items (JRC/NB keep distinct sequences)
    derive_split             a new `Split` from an existing one with some parameters
                             changed (what `--set` / flags make)
    read_tab_lines           the released tab-separated files, errors at PATH:LINE
"""
from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Callable, Hashable

import numpy as np

from rasp.errors import RaspError
from trainer.tasks.base import SeqTask, Split


def encode(tokens, vocab) -> list:
    index = {t: i + 1 for i, t in enumerate(vocab)}
    try:
        return [index[t] for t in tokens]
    except KeyError as e:
        raise RaspError(f"token {e.args[0]!r} is not in the vocabulary {' '.join(vocab)}") from None


def decode(ids, vocab) -> list:
    return [vocab[i - 1] for i in ids]


def pick(rng: np.random.Generator, value):
    """A parameter given as a list (or tuple) is drawn uniformly per example."""
    if isinstance(value, (list, tuple)):
        return value[int(rng.integers(len(value)))]
    return value


def python_random(rng: np.random.Generator) -> random.Random:
    return random.Random(int(rng.integers(0, 2 ** 63 - 1)))


def distinct(draw: Callable[[], object], n: int, key: Callable[[object], Hashable],
             max_tries: int = 0) -> list:
    """n items from `draw()` with pairwise distinct `key`s, in order of drawing."""
    seen, out, tries = set(), [], 0
    max_tries = max_tries or 1000 * n + 10_000
    while len(out) < n:
        item = draw()
        tries += 1
        if tries > max_tries:
            raise RaspError(f"could only draw {len(out)} distinct examples of {n} in {max_tries} tries; "
                            "the split's parameters allow too few distinct sequences")
        if item is None:
            continue
        k = key(item)
        if k in seen:
            continue
        seen.add(k)
        out.append(item)
    return out


def derive_split(task: SeqTask, base: str, name: str = "", size: int = 0, **params) -> Split:
    """`task.splits[base]` with `params` overridden, e.g. flip-flop at T = 2048."""
    if base not in task.splits:
        raise RaspError(f"task {task.name}: unknown split {base!r} (known: {', '.join(task.splits)})")
    old = task.splits[base]
    unknown = sorted(set(params) - set(old.params))
    if unknown:
        raise RaspError(f"task {task.name}: split {base!r} has no parameter {', '.join(map(repr, unknown))} "
                        f"(it has: {', '.join(old.params)})")
    new = {**old.params, **params}
    label = name or base + "".join(f"_{k}{v}" for k, v in params.items())
    return replace(old, name=label, params=new, size=size or old.size)


def read_tab_lines(path, what: str, parse_line: Callable[[list], object]) -> list:
    """`parse_line(fields)` over every non-blank line of a released tab-separated
    file; a line it rejects (ValueError / RaspError) is a RaspError naming
    PATH:LINE and `what` ("ListOps", "Logic")."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise RaspError(f"{path}: cannot read ({e})") from None
    out = []
    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(parse_line(line.split("\t")))
        except (ValueError, RaspError) as e:
            msg = e.message if isinstance(e, RaspError) else str(e)
            raise RaspError(f"{path}:{line_no}: bad {what} line ({msg})") from None
    return out
