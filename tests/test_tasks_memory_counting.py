"""Copying / denoising (docs/benchmarks.md §6) and counting (§7): layouts, scoring masks, metrics."""
import numpy as np
import pytest

from trainer.benchmark.data import generate_split
from trainer.tasks import TASKS
from trainer.tasks import counting as C
from trainer.tasks import memory as M
from trainer.tasks.scoring import score


@pytest.mark.parametrize("kind", ["copying", "denoising"])
def test_layout_and_mask(kind):
    task = TASKS[kind]
    for ex in task.generate(np.random.default_rng(0), task.splits["train_s"].params, 100):
        x = [M.VOCAB[i - 1] for i in ex.input]
        S = ex.group
        T = 50
        assert len(x) == T + 2 * S + (kind == "denoising")              # docs/benchmarks.md §6 layout
        at = x.index(M.INDICATOR)
        assert x.count(M.INDICATOR) == 1 and at == len(x) - S - 1 and x[at + 1:] == [M.BLANK] * S
        data = [v for v in x[:at] if v != M.BLANK]
        assert len(data) == S
        if kind == "copying":
            assert x[S:at] == [M.BLANK] * (T - 1)
        # scored exactly at the S output slots, with the symbols in order
        assert [t for t, v in enumerate(ex.target) if v >= 0] == list(range(at + 1, len(x)))
        assert [M.SYMBOLS[v] for v in ex.target if v >= 0] == data
        assert ex.target == M.reference_targets(ex.input)      # program labels (copying) == reference


def test_mixtures_and_sweeps():
    cp = TASKS["copying"]
    a = cp.generate(np.random.default_rng(1), cp.splits["train"].params, 500)
    lengths = {len(e.input) for e in a}
    assert lengths == {T + 20 for T in (10, 20, 30, 40, 50)}
    b = cp.generate(np.random.default_rng(1), cp.splits["train_s"].params, 500)
    assert {e.group for e in b} == {2, 4, 6, 8, 10}
    assert cp.splits["test_T500"].params == {"S": 10, "T": 500} and cp.splits["test_S100"].params == {"S": 100, "T": 50}
    ex = cp.generate(np.random.default_rng(1), cp.splits["test_S100"].params, 1)[0]
    pred = [max(v, 0) for v in ex.target]
    assert score("acc", pred, ex.target) == 1.0
    pred[-1] = (pred[-1] + 1) % 8
    assert score("acc", pred, ex.target) == pytest.approx(0.99) and score("seq_acc", pred, ex.target) == 0.0


def test_same_seed_same_data():
    for name in ("copying", "denoising", "counting"):
        t = TASKS[name]
        a = t.generate(np.random.default_rng(3), t.splits["train"].params, 20)
        b = t.generate(np.random.default_rng(3), t.splits["train"].params, 20)
        assert [(e.input, e.target) for e in a] == [(e.input, e.target) for e in b]


def _runs(x):
    runs, start = [], 0
    for t in range(1, len(x) + 1):
        if t == len(x) or x[t] != x[start]:
            runs.append((x[start], t - start))
            start = t
    return runs


@pytest.mark.parametrize("setting", ["short", "medium", "long", "short_cpu", "medium_cpu", "long_cpu"])
def test_counting_signal_statistics(setting):
    L, isi, (lo, hi) = C.SETTINGS[setting]
    split = {"short": "train", "short_cpu": "train_cpu"}.get(setting, f"train_{setting}")
    if setting.endswith("_cpu"):            # the cpu preset's settings: P3's at 1/5 length
        assert (L, isi, lo, hi) == tuple(v // 5 for v in (*C.SETTINGS[setting[:-4]][:2], *C.SETTINGS[setting[:-4]][2]))
    exs = TASKS["counting"].generate(np.random.default_rng(0), TASKS["counting"].splits[split].params, 60)
    itis = []
    for ex in exs:
        x = [i - 1 for i in ex.input]
        assert len(x) == L and ex.target == x[1:] + [-1]               # next input; the last unscored
        runs = _runs(x)
        assert runs[0][0] == 0
        for v, n in runs[:-1]:                          # the last run may be cut
            if v == 1:
                assert n == isi
            else:
                assert lo <= n < hi
                itis.append(n)
    mean, sd = (lo + hi - 1) / 2, np.sqrt(((hi - lo) ** 2 - 1) / 12)
    assert abs(np.mean(itis) - mean) <= 3 * sd / np.sqrt(len(itis))


def test_offset_metric_counts_real_offsets_only():
    x = [0] * 5 + [1] * 3 + [0] * 4 + [1] * 3          # cut inside the second ISI
    ex = C.example(x)
    assert score("offset_acc", list(ex.target[:-1]) + [0], ex.target) == 1.0
    # exactly one offset: the first ISI's end (positions 6, 7); the cut gives none
    pred = list(ex.target[:-1]) + [0]
    pred[7] = 1
    assert score("offset_acc", pred, ex.target) == 0.0 and score("offset_seq", pred, ex.target) == 0.0
    always_zero = [0] * len(x)
    assert score("offset_acc", always_zero, ex.target) == 0.0           # predicting 0 everywhere fails
    assert score("acc", always_zero, ex.target) < 1.0


def test_phase_alignment_tests():
    t = TASKS["counting"]
    for name in ("test_two_isi", "test_double_isi"):
        for ex in t.generate(np.random.default_rng(4), t.splits[name].params, 30):
            runs = _runs([i - 1 for i in ex.input])
            assert [v for v, _ in runs] == [0, 1, 0, 1, 0] and runs[1][1] == runs[3][1] == 10
            assert runs[-1][1] == C.TAIL
            gap = runs[2][1]
            assert (80 <= gap < 160) if name == "test_two_isi" else (1 <= gap <= 5)


def test_cpu_double_isi_split_can_separate_models():
    """The cpu double-ISI split (ISI 2) draws its gap from 1..3 zeros, every gap
    below the shortest training ITI: with 1..ISI/2 it was always one zero and its
    100 examples were 4 distinct sequences (issue 28).  The full-length split
    keeps P3's 1..ISI/2 = 1..5."""
    t = TASKS["counting"]
    lo = C.SETTINGS["short_cpu"][2][0]
    exs = generate_split(t, "test_double_isi_cpu", 100, 1234)       # what `rasp eval` scores
    shapes = set()
    for ex in exs:
        runs = _runs([i - 1 for i in ex.input])
        assert [v for v, _ in runs] == [0, 1, 0, 1, 0] and runs[1][1] == runs[3][1] == 2 and runs[-1][1] == C.TAIL
        assert lo <= runs[0][1] < C.SETTINGS["short_cpu"][2][1] and 1 <= runs[2][1] < lo
        shapes.add((runs[0][1], runs[2][1]))
    assert {g for _, g in shapes} == {1, 2, 3}
    assert len({tuple(ex.input) for ex in exs}) == len(shapes) == 12
    full = generate_split(t, "test_double_isi", 300, 1234)
    assert {_runs([i - 1 for i in ex.input])[2][1] for ex in full} == {1, 2, 3, 4, 5}
