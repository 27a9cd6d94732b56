"""Flip-flop task (docs/benchmarks.md §2): generator, program labels, splits, scoring."""
import numpy as np
import pytest

from rasp.errors import RaspError
from trainer.tasks import TASKS
from trainer.tasks import flipflop as ff
from trainer.tasks.scoring import score

TASK = TASKS["flipflop"]


def _gen(split, n, seed=0):
    return TASK.generate(np.random.default_rng(seed), TASK.splits[split].params, n)


def test_every_read_is_the_last_write_and_program_labels_agree():
    for split in ("test_128_p0.1", "test_256_p0.8", "test_128_p0.98"):
        for ex in _gen(split, 200):
            seq = [i - 1 for i in ex.input]
            ref = ff.last_write_reference(seq)
            assert ex.target == ref                       # program labels == plain Python
            for t, tgt in enumerate(ex.target):           # the generator's read bits
                if tgt >= 0:
                    assert seq[t] == ff.R and seq[t + 1] - ff.ZERO == tgt


def test_layout_and_scoring_mask():
    for ex in _gen("test_128_p0.8", 100):
        seq = [i - 1 for i in ex.input]
        assert len(seq) == 128 and seq[0] == ff.W and seq[-2] == ff.R
        assert all(t in (ff.W, ff.I, ff.R) for t in seq[0::2])
        assert all(t in (ff.ZERO, ff.ONE) for t in seq[1::2])
        # scored exactly at the `r` instructions (the positions whose next token is a read answer)
        assert [t for t, v in enumerate(ex.target) if v >= 0] == [t for t in range(0, 128, 2) if seq[t] == ff.R]
        assert ex.target[-2] >= 0 and ex.target[-1] == -1


@pytest.mark.parametrize("p_i", [0.1, 0.8, 0.98])
def test_instruction_frequencies_within_3_sigma(p_i):
    exs = _gen(f"test_256_p{p_i:g}", 400)
    free = np.array([[i - 1 for i in ex.input][2:-2:2] for ex in exs])   # the drawn instructions
    n = free.size
    for tok, p in ((ff.I, p_i), (ff.W, (1 - p_i) / 2), (ff.R, (1 - p_i) / 2)):
        k = (free == tok).sum()
        assert abs(k - n * p) <= 3 * np.sqrt(n * p * (1 - p)) + 1


def test_same_seed_same_data_and_distinct():
    a, b = _gen("test_128_p0.8", 50, seed=3), _gen("test_128_p0.8", 50, seed=3)
    assert [x.input for x in a] == [x.input for x in b]
    assert [x.input for x in a] != [x.input for x in _gen("test_128_p0.8", 50, seed=4)]
    # T = 6 has exactly 10 strings: w b, (w b | i b | r m), r m
    short = TASK.generate(np.random.default_rng(0), {"T": 6, "p_i": 0.5}, 10)
    assert len({tuple(x.input) for x in short}) == 10
    with pytest.raises(RaspError):
        TASK.generate(np.random.default_rng(0), {"T": 6, "p_i": 0.5}, 11)


def test_splits_and_factory():
    for T in (512, 1024):
        for p in (0.1, 0.8, 0.98):
            s = TASK.splits[f"test_{T}_p{p:g}"]
            assert s.params == {"T": T, "p_i": p} and s.size == 10_000
    assert TASK.splits["train"].params == {"T": 512, "p_i": 0.8} and TASK.splits["train"].size == 160_000
    assert TASK.metrics == ("acc", "last_read_acc")
    s = ff.make_split(T=2048, p_i=0.9)
    assert s.name == "test_2048_p0.9" and s.params == {"T": 2048, "p_i": 0.9}
    valid = TASK.generate(np.random.default_rng(0), TASK.splits["valid_128"].params, 14)
    assert sorted({len(x.input) for x in valid}) == [128, 256]
    with pytest.raises(RaspError):
        ff.make_split(T=7, p_i=0.5)


def test_metrics_all_reads_and_last_read():
    ex = _gen("test_128_p0.8", 1)[0]
    pred = [max(t, 0) for t in ex.target]
    assert score("acc", pred, ex.target) == 1.0 and score("last_read_acc", pred, ex.target) == 1.0
    last = max(t for t, v in enumerate(ex.target) if v >= 0)
    pred[last] = 1 - pred[last]
    assert score("last_read_acc", pred, ex.target) == 0.0
    n_reads = sum(v >= 0 for v in ex.target)
    assert score("acc", pred, ex.target) == pytest.approx(1 - 1 / n_reads)
