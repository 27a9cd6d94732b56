"""Online i.i.d. batches: sample inputs, label them with the program, map
token values to model ids, pad on the right.

Two layouts of the same labelled example (k = index of `>`):

* FAP (full-answer prediction, Fan et al. §2.2): the model reads the whole
  input `q > # # …` and predicts, at every position from `>` on, the program's
  output there.
* NTP (next-token prediction): the model reads the solved sequence
  `q > a_1 … a_m` shifted by one and predicts each next token; at test time it
  decodes greedily from the prompt `q >`.

Pause variants insert P pause tokens between the query and `>`; the targets
are those of the unpaused input.  Right padding is safe because attention is
causal (padding never influences real positions) and padded positions are not
scored.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional, Sequence

import numpy as np
import torch

from rasp.errors import RaspError
from trainer.run.device import on_host, to_device
from trainer.tasks import Task


@dataclass
class Batch:
    tokens: torch.Tensor       # [B, L] input ids
    targets: torch.Tensor      # [B, L] output ids (0 where not scored)
    mask: torch.Tensor         # [B, L] bool, scored positions
    steps: torch.Tensor        # [B] T(n) from the program, at least MIN_STEPS (a training batch with past_t:
                               # T(n) + k, its scored step)
    lengths: torch.Tensor      # [B] problem size n
    prompt_len: torch.Tensor   # [B] NTP: tokens up to and including `>`
    # [B, L] the step from which each position stops the loop from being done, 0 where it does
    # not count (a halting clock's targets: `TaskData(needs=True)`); None: the first T(n) positions
    need: Optional[torch.Tensor] = None

    def to(self, device) -> "Batch":
        return Batch(**{f.name: None if getattr(self, f.name) is None else to_device(getattr(self, f.name), device)
                        for f in fields(self)})

    def __len__(self):
        return self.tokens.shape[0]


def scored_once(rng: np.random.Generator, inputs: list, most: int) -> list:
    """Each of `inputs` (a file's distinct inputs) once, or, when there are more
    than `most`, `most` of them drawn without replacement (in file order)."""
    if len(inputs) <= most:
        return list(inputs)
    return [inputs[i] for i in sorted(rng.choice(len(inputs), size=most, replace=False))]


# A looped model answers after one iteration at the earliest: every stopping rule
# counts steps from 1 (trainer/fan/stopping.py), and with input injection the state
# before the first iteration is zeros, the same for every input.  So an input whose
# loop the program runs 0 times (`loop max(n - 1, 0)` at n = 1) is trained,
# evaluated and answered at step 1, with the program's output as its target.
MIN_STEPS = 1


class TaskData:
    def __init__(self, task: Task, labeler, layout: str = "fap", pause: int = 0, needs: bool = False):
        """needs: the batches a loss is computed on carry `Batch.need` (a halting clock's
        targets; FAP layout without pauses, a labeler that runs a program)."""
        if layout not in ("fap", "ntp"):
            raise ValueError(layout)
        if layout == "ntp" and task.target != "fap":
            raise RaspError(f"next-token prediction needs a full-answer task; {task.name} is {task.target}")
        self.task, self.labeler, self.layout, self.pause = task, labeler, layout, pause
        self.needs = needs and layout == "fap" and not pause and hasattr(labeler, "program")
        # the loop's count is the same on every input of a size (trainer/fan/kind.py probe_counts)
        self.count_by_size = True
        self._row_lengths: dict = {}       # row_length's, per size
        sym = labeler.symbols
        missing = [s for s in task.symbols if s not in sym]
        if missing:
            raise RaspError(f"{labeler.path}: task {task.name} needs symbols {missing} declared in its program")
        self.sym = sym
        self.output_tokens = [int(v) for v in task.output_values(sym)]
        values = list(labeler.vocab)
        if layout == "ntp":   # generated answer tokens are read back in
            values = sorted(set(values) | set(self.output_tokens))
        self.pause_token = None
        if pause:
            self.pause_token = min(values + self.output_tokens) - 1
            values = values + [self.pause_token]
        self.input_tokens = values
        self.in_id = {v: i for i, v in enumerate(self.input_tokens)}
        self.out_id = {v: i for i, v in enumerate(self.output_tokens)}

    # -- sampling ---------------------------------------------------------
    def sample_inputs(self, rng: np.random.Generator, lengths: Sequence[int], train: bool = True):
        return self.task.draw(rng, lengths, self.sym, train)     # checked against the program's `require`

    def batch(self, rng: np.random.Generator, lengths: Sequence[int], train: bool = True,
              taught: bool = False) -> Batch:
        return self.make_batch(self.sample_inputs(rng, lengths, train), lengths, taught=taught)

    def file_inputs(self, train: bool, lo: int = 0, hi: int = 1 << 62):
        """{size n: the distinct inputs of that size} of the file the task reads
        (train: the training file; else the held-out one, or the training file
        without one), sizes lo..hi; None when inputs are drawn fresh."""
        pools = self.task.pools
        if pools is None:
            return None
        return {n: group for n, group in pools[train].items() if lo <= n <= hi}

    def row_length(self, n: int) -> int:
        """FAP-layout input length of a row of problem size n (the probe draws
        from its own generator; multiplication's n1 is drawn: the longest of a few).
        Kept per n: every training batch asks it, and the probe always draws the same."""
        if n not in self._row_lengths:
            rng = np.random.default_rng(0)
            self._row_lengths[n] = max(len(x) for x in self.sample_inputs(rng, [n] * 4, True)) + self.pause
        return self._row_lengths[n]

    # -- labelling and layout --------------------------------------------
    def make_batch(self, inputs: list, lengths: Sequence[int], pad_to: int = 0,
                   score_padding: bool = False, labels=None, taught: bool = False) -> Batch:
        """Right-pad with `#` to the longest row (or `pad_to`).  score_padding
        (Fan et al.'s training batches, generate_training_data.py:15-29: their
        mask covers every position from `=` to the end of the padded row) also
        scores the padding, with target `#`; FAP layout only.  `labels`:
        (outputs, T) already computed by the labeler (default: computed here).
        `taught`: a batch a loss is computed on (training, the guard), which carries
        `Batch.need` where the data teaches them; an evaluation's does not."""
        needs = None
        if labels is not None:
            outputs, steps = labels
        elif taught and self.needs:
            outputs, steps, needs = self.labeler(inputs, needs=True)
        else:
            outputs, steps = self.labeler(inputs)
        with on_host():         # built on the host, moved by Batch.to
            return self._make_batch(inputs, lengths, outputs, steps, pad_to, score_padding, needs)

    def _make_batch(self, inputs, lengths, outputs, steps, pad_to, score_padding, needs=None) -> Batch:
        rows = [self._layout(x, y) for x, y in zip(inputs, outputs)]
        L = max([pad_to] + [len(r[0]) for r in rows])
        pad = self.in_id[self.sym["#"]] if "#" in self.sym else 0     # right padding is never read
        B = len(rows)
        # filled in NumPy, one tensor each at the end: a tensor per row cost a few
        # percent of a small model's training step
        tok = np.full((B, L), pad, dtype=np.int64)
        tgt = np.zeros((B, L), dtype=np.int64)
        msk = np.zeros((B, L), dtype=bool)
        if score_padding:
            if self.layout != "fap" or self.task.target != "fap":
                raise RaspError("scoring the padding needs the full-answer layout")
            tgt[:] = self._out(self.sym["#"])
            for i, r in enumerate(rows):
                msk[i, len(r[0]):] = True
        for i, (t, g, m, _) in enumerate(rows):
            tok[i, :len(t)] = t
            tgt[i, :len(g)] = g
            msk[i, :len(m)] = m
        plen = torch.tensor([r[3] for r in rows], dtype=torch.long)
        steps = np.maximum(np.asarray(steps, dtype=np.int64), MIN_STEPS)       # a 0-step loop: MIN_STEPS
        need = None
        if needs is not None:
            need = np.zeros((B, L), dtype=np.int64)
            for i, n in enumerate(needs):
                need[i, :len(n)] = n
            need = torch.from_numpy(need)
        return Batch(torch.from_numpy(tok), torch.from_numpy(tgt), torch.from_numpy(msk),
                     torch.as_tensor(steps, dtype=torch.long), torch.as_tensor(list(lengths), dtype=torch.long), plen,
                     need)

    def _scored_from(self, x) -> int:
        t = self.task.target
        if t == "fap":
            try:
                return x.index(self.sym[self.task.marker])
            except ValueError:
                raise RaspError(f"a full-answer input has no end-of-query symbol {self.task.marker!r}") from None
        return 0 if t == "per_position" else len(x) - 1

    def _out(self, v) -> int:
        if v not in self.out_id:
            raise RaspError(f"{self.labeler.path}: output value {v} at a scored position is not one of "
                            f"task {self.task.name}'s output tokens {self.output_tokens}")
        return self.out_id[v]

    def _layout(self, x: list, y: list):
        """-> (input ids, target ids, score mask, prompt length)."""
        k = self._scored_from(x)
        if self.task.target == "fap":
            query, answer = x[:k], [self._out(v) for v in y[k:]]
            prompt = query + [self.pause_token] * self.pause + [x[k]]
        else:
            answer = [self._out(v) for v in y[k:]]
            prompt = x[:k] if k else []
        if self.layout == "fap":
            rest = x[k + 1:] if self.task.target == "fap" else x[k:]
            seq = prompt + rest if self.task.target == "fap" else x
            ids = [self.in_id[v] for v in seq]
            start = len(seq) - len(answer)
            tgt = [0] * start + answer
            mask = [False] * start + [True] * len(answer)
            return ids, tgt, mask, len(prompt)
        # NTP: solved sequence S = prompt + answer values; read S[:-1], predict S[1:]
        ans_vals = [self.output_tokens[a] for a in answer]
        solved = prompt + ans_vals
        ids = [self.in_id[v] for v in solved[:-1]]
        start = len(prompt) - 1
        tgt = [0] * start + answer
        mask = [False] * start + [True] * len(answer)
        return ids, tgt, mask, len(prompt)

    # -- metadata stored in checkpoints ----------------------------------
    def meta(self) -> dict:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "symbols": self.sym, "layout": self.layout, "pause": self.pause,
                "pause_token": self.pause_token, "task": self.task.name}
