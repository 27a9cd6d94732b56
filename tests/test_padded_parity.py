"""padded_parity (issue 39): a task whose loop count T = k (the real bits)
varies between inputs of one size n (bits + padding)."""
from __future__ import annotations

import random

import numpy as np

import rasp
from tests import references as R
from trainer.fan.kind import build_data
from trainer.fan.presets import make_hparams
from trainer.models import get_model_spec
from trainer.tasks import PROGRAMS, get_task


def _text(tokens):
    return " ".join(map(str, tokens))


def test_program_equals_the_reference_on_random_inputs():
    prog = rasp.load(PROGRAMS / "padded_parity.rasp")
    rng = random.Random(39)
    batch = [R.sample_padded_parity(rng, rng.randint(1, 30), k=rng.randint(0, 4)) for _ in range(200)]
    res = prog.run_batch([prog.parse_input(_text(b)) for b in batch])
    for b, out, steps in zip(batch, res.outputs, res.steps[:, 0]):
        got = prog.format_output(out).split()
        assert R.scored(b, [t if t in (">", "#", "_") else int(t) for t in got]) == R.padded_parity(b)
        assert steps == R.loop_count("padded_parity", b)


def test_the_samplers_inputs_pass_require_and_T_varies_at_one_size():
    task = get_task("padded_parity")
    data = build_data(task, get_model_spec("looped"), make_hparams("cpu", task))
    rng = np.random.default_rng(0)
    for n in (1, 5, 12, 30):
        b = data.batch(rng, [n] * 64, train=True)       # labelled by the program: `require` is checked
        assert (b.lengths == n).all()
        assert 1 <= int(b.steps.min()) and int(b.steps.max()) <= n
        if n > 1:
            assert len(set(b.steps.tolist())) > 1          # T varies at one size


def test_the_answer_holds_past_T():
    """Run k + extra iterations (--param): the answer stays the parity."""
    prog = rasp.load(PROGRAMS / "padded_parity.rasp")
    rng = random.Random(7)
    for extra in (1, 5, 20):
        batch = [R.sample_padded_parity(rng, 9) for _ in range(16)]
        for b in batch:
            k = R.loop_count("padded_parity", b)
            out = prog.run(prog.parse_input(_text(b)), params={"k": k + extra})
            got = prog.format_output(out).split()
            assert R.scored(b, [t if t in (">", "#", "_") else int(t) for t in got]) == R.padded_parity(b)


def test_every_fan_tasks_input_gives_back_the_samplers_n():
    """Task.size_of: the n that depth_law reads when `rasp run` / `rasp.load` see only text."""
    from trainer.tasks import TASKS
    from trainer.tasks.base import SeqTask
    from trainer.tasks.labels import ProgramLabeler
    rng = np.random.default_rng(1)
    for task in TASKS.values():
        if isinstance(task, SeqTask):
            continue
        sym = ProgramLabeler(task.program_path).symbols
        for n in (1, 3, 8):
            for train in (True, False):
                assert task.size_of(task.sample(rng, n, sym, train), sym) == n, (task.name, n)
