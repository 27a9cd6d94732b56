"""Issue 44 item 4: a registered Fan task is its program plus a sampler, made
by `program_task` as `rasp train --program` makes a task.  Its batches must
stay what they were when each task had a Python sampler of its own (old runs
resume identically, the docs' figures stay valid): those samplers are written
out again here as the reference, their inputs labelled by the interpreter."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rasp
from rasp.errors import RaspError
from trainer.fan.kind import build_data
from trainer.fan.presets import make_hparams
from trainer.models import get_model_spec
from trainer.tasks import PROGRAMS, TASKS, get_task
from trainer.tasks.base import SeqTask
from trainer.tasks.program import ProgramInputs, program_record, program_task, task_of_record


def _bits(rng, n):
    return [int(b) for b in rng.integers(0, 2, size=n)]


def _fap(query, sym, n_answer):
    return list(query) + [sym[">"]] + [sym["#"]] * (n_answer + 1)


def _padded_parity(rng, n, sym, train):
    k = int(rng.integers(1, n + 1))
    return _fap(_bits(rng, k) + [sym["_"]] * (n - k), sym, 1)


def _multiplication(rng, n, sym, train):
    n1 = int(rng.integers(1, 3)) if train else 2
    return _fap(_bits(rng, n1) + [sym["*"]] + _bits(rng, n), sym, n1 + n)


# the samplers of the registered tasks before their programs drew their own inputs
REFERENCE = {
    "parity": lambda rng, n, sym, train: _fap(_bits(rng, n), sym, 1),
    "padded_parity": _padded_parity,
    "copy": lambda rng, n, sym, train: _fap(_bits(rng, n), sym, n),
    "addition": lambda rng, n, sym, train: _fap(_bits(rng, n) + [sym["+"]] + _bits(rng, n), sym, n + 1),
    "binary_sum": lambda rng, n, sym, train: _fap(_bits(rng, n), sym, int(n).bit_length()),
    "multiplication": _multiplication,
    "unique_set": lambda rng, n, sym, train: _fap([int(t) for t in rng.integers(0, 50, size=n)], sym, n),
}
FROM_THE_PROGRAM = {"parity", "copy", "addition", "unique_set"}     # drawn by the program's `sample`


def _fan_tasks() -> list:
    return sorted(name for name, task in TASKS.items() if not isinstance(task, SeqTask))


def test_every_registered_fan_task_has_a_reference():
    assert _fan_tasks() == sorted(REFERENCE)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_batches_are_the_reference_samplers_inputs_labelled_by_the_interpreter(name):
    task = get_task(name)
    program = rasp.load(PROGRAMS / f"{name}.rasp")
    sym = dict(program.ir.symbols)
    data = build_data(task, get_model_spec("looped"), make_hparams("cpu", task))
    top = task.paper.test_n
    for seed, train in ((0, True), (1, False)):
        ours, ref = np.random.default_rng(seed), np.random.default_rng(seed)
        for lengths in ([1, 2, 3], [task.paper.max_train_n] * 4, [top] * 2,
                        [int(n) for n in np.random.default_rng(seed + 9).integers(1, top + 1, size=16)]):
            got = data.batch(ours, lengths, train)
            inputs = [REFERENCE[name](ref, n, sym, train) for n in lengths]
            result = program.run_batch(inputs)
            want = data.make_batch(inputs, lengths, labels=(result.outputs, np.asarray(result.steps)[:, 0]))
            for field in ("tokens", "targets", "mask", "steps", "lengths"):
                assert torch.equal(getattr(got, field), getattr(want, field)), (name, field, lengths)
        # the random stream goes on as before, so every later batch is the same too
        assert ours.bit_generator.state == ref.bit_generator.state, name


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_a_registered_task_is_its_program_plus_a_sampler(name):
    task = get_task(name)
    assert isinstance(task.draw, ProgramInputs) and task.program_path == PROGRAMS / f"{name}.rasp"
    statement = rasp.load(task.program_path).ir.sampler
    if name in FROM_THE_PROGRAM:
        assert task.draw.sampler is None
        assert (statement.lo, statement.hi) == (task.min_n, task.paper.max_train_n)     # the training sizes
    else:
        assert task.draw.sampler is not None and statement is None      # fan.py says why


def test_the_program_path_draws_what_the_registered_task_draws():
    """`rasp train --program programs/parity.rasp` and `--task parity`: the same inputs."""
    from_file = task_of_record(program_record(PROGRAMS / "parity.rasp"))
    registered = get_task("parity")
    for train in (True, False):
        a, b = np.random.default_rng(3), np.random.default_rng(3)
        assert from_file.draw(a, [1, 5, 20, 40], {}, train) == registered.draw(b, [1, 5, 20, 40], {}, train)


def test_a_python_sampler_that_breaks_a_require_is_refused_located():
    task = program_task(PROGRAMS / "parity.rasp", name="no_marker", sampler=lambda rng, n, sym, train: [0] * n,
                        output_values=lambda sym: [0, 1], paper=get_task("parity").paper)
    with pytest.raises(RaspError, match="the sampler <lambda> of .*parity.rasp drew inputs of size n = 3"):
        task.sample(np.random.default_rng(0), 3, {}, True)
