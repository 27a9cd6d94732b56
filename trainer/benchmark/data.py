"""Batches and files of comparison-task examples (trainer/tasks/base.py).

`collate` right-pads a list of `Example`s into tensors; `write_jsonl` /
`read_jsonl` keep a split on disk, one example per line:

    {"input": [ids], "target": [ids] | id, "input2": [ids] (pairs), "group": g (optional)}

(ids as in `Example`: inputs index the task's vocab + 1, targets its labels,
-1 = not scored).
"""
from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from rasp.errors import RaspError, RaspFileError
from rasp.readfile import read_bytes
from trainer.run.device import on_host, to_device
from trainer.settings.hparams import HParams, scored_positions
from trainer.tasks.base import Example, SeqTask


@dataclass
class SeqBatch:
    tokens: torch.Tensor                  # (B, L) long, 0 = padding
    mask: torch.Tensor                    # (B, L) bool
    targets: torch.Tensor                 # (B, L) long, -1 unscored (per_position) | (B,) class ids
    lengths: torch.Tensor                 # (B,) reported length (pairs: the longer sentence)
    groups: torch.Tensor                  # (B,) long, -1 = no group
    tokens2: Optional[torch.Tensor] = None
    mask2: Optional[torch.Tensor] = None

    def to(self, device):
        kw = {k: (to_device(v, device) if torch.is_tensor(v) else v) for k, v in self.__dict__.items()}
        return SeqBatch(**kw)

    def __len__(self):
        return self.tokens.shape[0]


def _pad(seqs: list, fill: int = 0) -> torch.Tensor:
    width = max(1, max((len(s) for s in seqs), default=1))
    out = torch.full((len(seqs), width), fill, dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            out[i, :len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


def example_length(ex: Example) -> int:
    return max(len(ex.input), len(ex.input2)) if ex.input2 is not None else len(ex.input)


def collate(task: SeqTask, examples: list) -> SeqBatch:
    with on_host():             # built on the host, moved by SeqBatch.to
        return _collate(task, examples)


def _collate(task: SeqTask, examples: list) -> SeqBatch:
    tokens = _pad([e.input for e in examples])
    if task.kind == "per_position":
        targets = _pad([e.target for e in examples], fill=-1)
        if targets.shape != tokens.shape:
            targets = targets[:, :tokens.shape[1]]
    else:
        targets = torch.as_tensor([int(e.target) for e in examples], dtype=torch.long)
    batch = SeqBatch(tokens, tokens != 0, targets,
                     torch.as_tensor([example_length(e) for e in examples], dtype=torch.long),
                     torch.as_tensor([-1 if e.group is None else int(e.group) for e in examples],
                                     dtype=torch.long))
    if task.kind == "pair":
        batch.tokens2 = _pad([e.input2 for e in examples])
        batch.mask2 = batch.tokens2 != 0
    return batch


def generate_split(task: SeqTask, split: str, n: int, seed: int) -> list:
    """n examples of a split from a generator seeded by (seed, split name), so
    a split's examples never depend on which other splits are drawn
    (`rasp data --seed S` writes what `rasp eval --seed S` scores)."""
    rng = np.random.default_rng([seed, zlib.crc32(split.encode())])
    return task.generate(rng, task.splits[split].params, n)


# ---- files --------------------------------------------------------------------------

def example_to_dict(ex: Example) -> dict:
    d = {"input": list(map(int, ex.input)),
         "target": [int(t) for t in ex.target] if isinstance(ex.target, (list, tuple)) else int(ex.target)}
    if ex.input2 is not None:
        d["input2"] = list(map(int, ex.input2))
    if ex.group is not None:
        d["group"] = int(ex.group)
    return d


MAX_DATA_BYTES = 4 << 30     # a --data split file (rasp data writes one example a line)
MAX_GROUP = 2 ** 31 - 1         # an example's "group" (a long tensor; -1 stands for none)


def check_example(task: SeqTask, ex: Example, where: str):
    """Raise RaspError (with `where`) unless `ex` fits `task`."""
    n_vocab, n_labels = len(task.vocab), len(task.labels)

    def ids(xs, lo, hi, what):
        if not isinstance(xs, list) or not xs or not all(isinstance(x, int) and not isinstance(x, bool)
                                                         and lo <= x <= hi for x in xs):
            raise RaspError(f"{where}: {what} must be a non-empty list of ids in {lo}..{hi}")
    ids(ex.input, 1, n_vocab, "input")
    if task.kind == "per_position":
        ids(ex.target, -1, n_labels - 1, "target")
        if len(ex.target) != len(ex.input):
            raise RaspError(f"{where}: target has {len(ex.target)} ids for {len(ex.input)} inputs")
    else:
        if not isinstance(ex.target, int) or isinstance(ex.target, bool) or not 0 <= ex.target < n_labels:
            raise RaspError(f"{where}: target must be a class id in 0..{n_labels - 1}")
    if task.kind == "pair":
        ids(ex.input2, 1, n_vocab, "input2")
    g = ex.group
    if g is not None and (not isinstance(g, int) or isinstance(g, bool) or not 0 <= g <= MAX_GROUP):
        raise RaspError(f"{where}: group must be an integer in 0..{MAX_GROUP}, got {g!r}")


def write_jsonl(path, examples: list):
    from trainer.run.checkpoint import write_text_atomic
    write_text_atomic(Path(path), "".join(json.dumps(example_to_dict(e)) + "\n" for e in examples))


def read_jsonl(task: SeqTask, path, lines: Optional[list] = None) -> list:
    """Examples of `task` from a JSON-lines file written by `rasp data`; every
    line is checked against the task (a located error otherwise).  `lines`
    receives each example's line number (blank lines are skipped)."""
    path = Path(path)
    raw = read_bytes(path, MAX_DATA_BYTES)
    out = []
    for i, data in enumerate(raw.split(b"\n"), 1):
        where = f"{path}:{i}"
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RaspError(f"{where}: not UTF-8 text (byte {e.start + 1} of the line)") from None
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError as e:
            raise RaspError(f"{where}: not valid JSON ({str(e)[:60]})") from None
        except RecursionError:
            raise RaspError(f"{where}: JSON nested too deeply") from None
        if not isinstance(d, dict) or "input" not in d or "target" not in d:
            raise RaspError(f"{where}: needs \"input\" and \"target\"")
        ex = Example(d["input"], d["target"], d.get("input2"), d.get("group"))
        check_example(task, ex, where)
        out.append(ex)
        if lines is not None:
            lines.append(i)
    if not out:
        raise RaspFileError(path, "holds no examples")
    return out


def position_curriculum_gap(task: SeqTask, hp: HParams) -> Optional[tuple]:
    """(positions the loss scores at the last step, most targets of a training
    example) where a curriculum over positions would not reach every target by
    the last step; None where it does, or where there is none."""
    last = scored_positions(max(hp.steps - 1, 0), hp.loss_first, hp.loss_grow_every)
    if not last or task.kind != "per_position":
        return None
    sample = task.generate(np.random.default_rng([hp.seed, 7]), task.splits[hp.train_split].params, 64)
    most = int((collate(task, sample).targets >= 0).sum(1).max())
    return (last, most) if last < most else None
