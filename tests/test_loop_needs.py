"""What a halting clock is taught per position: the step from which each position
stops the program's first loop from being done (rasp/interpreter/needs.py), checked
against running the program on every prefix of the input, and how the trainer
chooses between it and the first T(n) positions."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rasp

HEAD = 'input seq: {0, 1}\n'
PROGRAMS = {
    # a count over the whole input: each 1 counts
    "count": HEAD + "param c = count(seq, 1)\nx = full(seq, 0)\nloop c:\n    x = shift_right(seq, 1, 0) | x\n"
                    "output x\n",
    # erosion until stable, under a cap no prefix reaches
    "erosion": HEAD + "ones = seq == 1\nloop 40 until stable:\n    ones = ones & shift_right(ones, 1, 0)\n"
                      "output ones\n",
    # a running value that changes at every later position while a 1 is left before it
    "running": HEAD + "ones = seq == 1\nodd = full(seq, 0)\nloop 40 until stable:\n"
                      "    odd = (odd + maximum(ones)) % 2\n    ones = ones & shift_right(ones, 1, 0)\n"
                      "output odd\n",
    # the query's size: the first positions, one step each
    "size": HEAD + "param n = len(seq)\nx = seq\nloop n:\n    x = shift_right(x, 1, 0)\noutput x\n",
    # a count that can fall along the input (a prefix's count above the whole input's)
    "falling": HEAD + "param k = max(len(seq) - 2 * count(seq, 1), 0)\nx = seq\nloop k:\n"
                      "    x = shift_right(x, 1, 0)\noutput x\n",
}


def by_prefixes(program, x: list) -> np.ndarray:
    """The needs, computed independently: the first loop's count on each prefix
    (the program is causal), its running maximum capped at T, kept where it rises."""
    runs = program.run_batch([x[:i + 1] for i in range(len(x))] + [x])
    steps = np.asarray(runs.steps)[:, 0]
    reach = np.minimum(np.maximum.accumulate(steps[:-1]), steps[-1])
    return np.where(reach > np.concatenate([[0], reach[:-1]]), reach, 0)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@settings(max_examples=40, deadline=None)
@given(bits=st.lists(st.integers(0, 1), min_size=1, max_size=14))
def test_loop_needs_equal_the_loop_counts_of_the_prefixes(name, bits):
    program = rasp.loads(PROGRAMS[name])
    res = program.run_batch([bits])
    (need,) = program.loop_needs([bits], res)
    np.testing.assert_array_equal(need, by_prefixes(program, bits))
    T = int(res.steps[0, 0])
    assert int(need.max(initial=0)) == T         # every position is done from T on, and one not before


def test_needs_of_a_batch_of_mixed_lengths_are_those_of_each_input_alone(monkeypatch):
    from rasp.interpreter import driver
    monkeypatch.setattr(driver, "GROUP_WORK", 64)        # a batch this size runs in length groups
    program = rasp.loads(PROGRAMS["running"])
    rng = np.random.default_rng(0)
    batch = [rng.integers(0, 2, size=int(n)).tolist() for n in rng.integers(1, 30, size=200)]
    assert len(driver.length_groups([len(x) for x in batch])) > 1
    together = program.loop_needs(batch, program.run_batch(batch))
    for x, need in zip(batch, together):
        np.testing.assert_array_equal(need, program.loop_needs([x], program.run_batch([x]))[0])


def test_where_the_loop_counts_the_first_positions_the_clock_keeps_its_marker():
    """The built-in tasks (a count of the query's size) teach the clock the first T(n)
    positions as before; a count of ones and an erosion teach each position its need."""
    from trainer.fan.kind import build_data
    from trainer.fan.objectives import first_positions
    from trainer.models.looped import get_model_spec
    from trainer.settings.hparams import HParams
    from trainer.tasks.program import program_record, task_of_record
    spec, hp = get_model_spec("looped"), HParams.from_dict({"halt": 1.0, "halt_target": "clock"})
    rng = np.random.default_rng(1)
    for task in ("parity", "addition"):
        data = build_data(task, spec, hp)
        assert not data.needs
        data.needs = True         # what it would be taught otherwise: the same on parity, not on addition
        batch = data.batch(rng, [6] * 8, taught=True)
        same = bool((batch.need == first_positions(batch.steps, batch.tokens.shape[1])).all())
        assert same == (task == "parity")
    for name in ("unary_ones", "longest_run"):
        data = build_data(task_of_record(program_record(f"programs/{name}.rasp")), spec, hp)
        assert data.needs
        batch = data.batch(rng, [7] * 16, taught=True)
        assert batch.need is not None and (batch.need.max(1).values == batch.steps).all()
        assert not (batch.need == first_positions(batch.steps, batch.tokens.shape[1])).all()
    fan = HParams.from_dict({"halt": 1.0, "halt_target": "clock", "clock_reach": "global"})
    assert not build_data(task_of_record(program_record("programs/unary_ones.rasp")), spec, fan).needs


def test_the_clock_loss_reads_each_positions_need_and_without_one_the_first_positions():
    import torch
    from trainer.fan.objectives import first_positions, halting_unit_loss
    g = torch.Generator().manual_seed(0)
    T = torch.tensor([1, 3, 5, 2])
    done = torch.randn(9, 4, 6, generator=g)
    mask = torch.ones(4, 6, dtype=torch.bool)
    marker = first_positions(T, 6)
    assert marker[2].tolist() == [1, 2, 3, 4, 5, 0]
    loss = halting_unit_loss(done, T, mask, "clock", 3)
    torch.testing.assert_close(halting_unit_loss(done, T, mask, "clock", 3, marker), loss)
    ones = torch.tensor([[1, 0, 0, 0, 0, 0], [0, 1, 0, 2, 3, 0], [1, 2, 0, 3, 4, 5], [0, 0, 1, 0, 2, 0]])
    assert not torch.allclose(halting_unit_loss(done, T, mask, "clock", 3, ones), loss)
    # where --past-t scores a later step, the clock is still taught the program's own count
    later = halting_unit_loss(done, T + 2, mask, "clock", 1, ones)
    torch.testing.assert_close(later, halting_unit_loss(done, T, mask, "clock", 3, ones))
