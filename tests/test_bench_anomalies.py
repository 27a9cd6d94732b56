"""bench/counting_phase.py and bench/flipflop_positions.py score each example
themselves (to group it by gap or by position); their per-example scores must
equal the task's own metrics (trainer/tasks/scoring.py), which `rasp eval` reports."""
import importlib

import numpy as np
import torch

from trainer.benchmark.data import generate_split
from trainer.tasks import TASKS
from trainer.tasks.scoring import score


def load(name):
    return importlib.import_module(f"bench.{name}")


class Guess(torch.nn.Module):
    """A stand-in model: right on each position with probability `p`, reproducible."""

    def __init__(self, task, examples, p, seed=0):
        super().__init__()
        self.rng, self.p = np.random.default_rng(seed), p
        self.truth = {tuple(e.input): e.target for e in examples}
        self.n_labels = len(task.labels)

    def forward(self, tokens, mask, tokens2=None, mask2=None):
        logits = torch.zeros(*tokens.shape, self.n_labels)
        self.preds = []
        for b, row in enumerate(tokens.tolist()):
            target = self.truth[tuple(t for t in row if t)]
            pred = [t if t >= 0 and self.rng.random() < self.p else int(self.rng.integers(self.n_labels))
                    for t in target]
            pred += [0] * (len(row) - len(pred))
            logits[b, torch.arange(len(row)), torch.tensor(pred)] = 1.0
            self.preds.append(pred[:len(target)])
        return logits, None


def test_counting_phase_scores_offsets_as_rasp_eval():
    bench, task = load("counting_phase"), TASKS["counting"]
    for split in ("test_double_isi", "test_double_isi_cpu"):
        exs = generate_split(task, split, 20, 1234)
        model = Guess(task, exs, 0.93)
        rows = bench.per_example(model, task, exs, batch_size=20)
        for ex, pred, (_, gap, first, second, _) in zip(exs, model.preds, rows):
            assert (first + second) / 2 == score("offset_acc", pred, ex.target)
            assert 1 <= gap <= (5 if split == "test_double_isi" else 3)
        assert 0 < np.mean([r[2] + r[3] for r in rows]) < 2           # both outcomes occur


def test_flipflop_positions_scores_reads_as_rasp_eval():
    bench, task = load("flipflop_positions"), TASKS["flipflop"]
    exs = generate_split(task, "test_128_p0.8", 20, 1234)
    model = Guess(task, exs, 0.8)
    rows = bench.reads(model, task, exs, batch_size=20)
    by_example = np.cumsum([sum(t >= 0 for t in ex.target) for ex in exs])
    for k, (ex, pred) in enumerate(zip(exs, model.preds)):
        mine = rows[(by_example[k - 1] if k else 0):by_example[k]]
        assert np.mean([r[3] for r in mine]) == score("acc", pred, ex.target)
        assert [r[3] for r in mine if r[2]] == [score("last_read_acc", pred, ex.target) == 1.0]
        seq = [i - 1 for i in ex.input]
        for t, back, _, _ in mine:                                   # the write it needs is `back` tokens back
            assert seq[t - back] == 0 and 0 not in seq[t - back + 2:t + 1:2]


def test_flipflop_positions_window_limits_causal_attention_only(monkeypatch):
    from trainer.models import blocks
    bench = load("flipflop_positions")
    monkeypatch.setattr(blocks, "attention_mask", blocks.attention_mask)     # restored after the test
    full = blocks.attention_mask(5, None, True, "cpu")[0, 0]
    bench.limit_attention(2)
    band = blocks.attention_mask(5, None, True, "cpu")[0, 0]
    i, j = np.meshgrid(range(5), range(5), indexing="ij")
    assert full.tolist() == (j <= i).tolist()
    assert band.tolist() == ((j <= i) & (j > i - 2)).tolist()
    keys = torch.tensor([[True, True, True, False]])
    assert blocks.attention_mask(4, keys, False, "cpu")[0, 0, 0].tolist() == keys[0].tolist()   # no band
