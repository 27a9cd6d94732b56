"""Halting rules (issue 24): the rules on hand-made step statistics against
simple independent definitions, the depth-law and halting-head fits, the
degenerate-step warnings, and `rasp eval`'s default rule end to end."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from trainer.fan import objectives, stopping
from trainer.fan.evaluate import halting_warnings
from trainer.fan.halting import DepthLaw, HaltingHead, best_step, calibrate
from inprocess import rasp

pytestmark = pytest.mark.heavy          # tests/conftest.py: run these first


def naive_stable(answers: list, k: int) -> int:
    """First 1-based step whose answer the next k steps repeat; else T - k."""
    T = len(answers)
    if T <= k:
        return T
    for t in range(T - k):
        if all(answers[t + j] == answers[t] for j in range(1, k + 1)):
            return t + 1
    return T - k


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2), min_size=3, max_size=3), min_size=1, max_size=12),
       st.integers(1, 3), st.lists(st.booleans(), min_size=3, max_size=3))
def test_stable_rule_is_the_first_step_the_answer_holds_for_k_more(traj, k, scored):
    pred = torch.tensor(traj)[:, None, :]                       # [T, 1, L]
    mask = torch.tensor(scored)[None, :]
    answers = [tuple(a for a, s in zip(step, scored) if s) for step in traj]
    assert int(stopping.stable_steps(pred, mask, k)[0]) == naive_stable(answers, k)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=4, max_size=4), min_size=1, max_size=10))
def test_first_done_is_the_first_true_step_or_the_last(done):
    d = torch.tensor(done)                                       # [T, B]
    for b in range(d.shape[1]):
        col = [row[b] for row in done]
        want = col.index(True) + 1 if True in col else len(col)
        assert int(stopping.first_done(d)[b]) == want


@settings(max_examples=60, deadline=None)
@given(st.integers(-3, 3), st.integers(-5, 5), st.lists(st.integers(1, 40), min_size=2, max_size=12, unique=True))
def test_depth_law_recovers_a_line_exactly(slope, intercept, sizes):
    law = DepthLaw.fit(sizes, [slope * n + intercept for n in sizes])
    assert law.slope == slope and law.intercept == intercept
    n = torch.arange(1, 50)
    assert torch.equal(law.steps(n), slope * n + intercept)


def test_best_step_prefers_the_trained_step_among_ties():
    acc = torch.tensor([0.2, 1.0, 1.0, 1.0, 0.5])
    assert best_step(acc, 3) == 3                                # T(n) is among the best
    assert best_step(acc, 5) == 2                                # it is not: the first best
    assert best_step(acc, 9) == 2                                # beyond the horizon


def test_depth_law_ignores_one_bad_length():
    sizes = list(range(1, 11))
    best = [n for n in sizes]
    best[3] = 1                                                  # one length's best step is off
    law = DepthLaw.fit(sizes, best)
    assert torch.equal(law.steps(torch.tensor([15, 30])), torch.tensor([15, 30]))


def test_halting_head_learns_a_separable_done_signal_without_drawing_random_numbers():
    g = torch.Generator().manual_seed(0)
    f = torch.randn(400, 8, generator=g)
    done = f[:, 2] + 0.5 * f[:, 5] > 0.3
    state = torch.get_rng_state()
    head = HaltingHead(8)
    loss = head.fit(f, done)
    assert torch.equal(torch.get_rng_state(), state)             # the training stream is untouched
    assert loss < 0.1
    assert (head.done(f) == done).float().mean() > 0.98


def rows(*steps, errors=None):
    errors = errors or [0.0] * len(steps)
    return [{"length": i + 1, "chosen_step": s, "step_error": e} for i, (s, e) in enumerate(zip(steps, errors))]


def test_warnings_name_one_step_for_every_length_and_steps_far_from_T():
    same = halting_warnings("confidence", rows(1.0, 1.0, 1.0, errors=[0.0, 1.0, 2.0]))
    assert len(same) == 2
    assert "chose step 1 at every length (1..3)" in same[0]
    assert "1 of 3 lengths" in same[1] and "n = 3" in same[1]
    assert halting_warnings("depth_law", rows(1.0, 2.0, 3.0)) == []
    assert halting_warnings("oracle", rows(1.0, 1.0)) == []
    assert halting_warnings("confidence", rows(4.0)) == []      # one length: nothing to compare
    bent = halting_warnings("depth_law", rows(1.0, 2.0), {"depth_law": {"misses": [4, 9]}})
    assert len(bent) == 1 and "n = 4, 9" in bent[0]


@pytest.fixture(scope="module")
def compiled_parity():
    """An exact start (the compiled parity program, T(n) = n at every length)."""
    from trainer.fan.initialise import initial_model
    from trainer.models import get_model_spec
    from trainer.fan.presets import make_hparams
    from trainer.tasks import get_task
    from trainer.fan.kind import RunConfig, build_data
    hp = make_hparams("cpu", get_task("parity"), "compiled", max_train_n=4, freeze_fragile=False)
    spec = get_model_spec("looped")
    data = build_data("parity", spec, hp)
    model, _ = initial_model(RunConfig(task="parity", out="-", init="compiled", hp=hp), spec, hp, data, "cpu")
    return spec, hp, data, model


def test_depth_law_fitted_on_short_lengths_stops_an_exact_model_at_T_beyond_them(compiled_parity):
    spec, hp, data, model = compiled_parity
    halting = calibrate(model, data, range(1, 5), seed=3, samples=8)
    assert halting.record["best_step"] == [1, 2, 3, 4]
    assert (halting.law.slope, halting.law.intercept) == (1.0, 0.0)
    assert halting.record["depth_law"]["misses"] == []
    batch = data.batch(np.random.default_rng(5), [2, 7, 12, 12, 9], train=False)
    for rule in ("depth_law", "head"):
        out = objectives.evaluate_batch(spec, hp, model, batch, rule, data.task.t_max_extra, halting=halting)
        assert bool(out["oracle_correct"].all())
        if rule == "depth_law":
            assert torch.equal(out["chosen"], batch.steps) and bool(out["correct"].all())
            assert torch.equal(out["ran"], batch.steps)          # it runs only the chosen steps
    with pytest.raises(ValueError, match="held-in fit"):
        objectives.evaluate_batch(spec, hp, model, batch, "depth_law", data.task.t_max_extra)


def test_rasp_eval_defaults_to_the_models_own_clock_and_shows_the_oracle_beside_it(tmp_path):
    """A run of `rasp train`'s default recipe has a halting clock; `rasp eval` stops by it
    (`head`, read and not fitted) and prints the oracle beside it."""
    out = tmp_path / "run"
    r = rasp("train", "--task", "parity", "--preset", "cpu", "--steps", "6", "--max-train-n", "3", "--d-model", "16",
             "--eval-samples", "16", "--out", out, "--no-progress")
    assert r.returncode == 0, r.stderr
    r = rasp("eval", out, "--lengths", "1:5", "--samples", "8", "--no-plots", "--no-progress")
    assert r.returncode == 0, r.stderr
    header = next(line for line in r.stdout.splitlines() if line.lstrip().startswith("length"))
    assert "stop = head" in r.stdout and "oracle" in header
    doc = json.loads((out / "eval_head.json").read_text())
    assert doc["stop"] == "head" and doc["calibration"]["lengths"] == [1, 2, 3]
    assert doc["calibration"]["head"]["trained_with_model"]
    by_length = doc["splits"]["test"]["by_length"]
    assert all("oracle_exact_match" in v and "step_error" in v for v in by_length.values())
    # every warning is one line on stderr, never in the table
    assert all(line.startswith(("threads:", "warning: ")) for line in r.stderr.splitlines())


def test_a_saved_fit_rebuilds_both_rules_and_a_damaged_one_is_refused(tmp_path):
    """issue 39: the fit of depth_law and head is saved (halting.json, an export's
    config.json) and read back by every command."""
    from rasp.errors import RaspFileError
    from trainer.fan.halting import Halting
    head = HaltingHead(5)
    feats = torch.randn(200, 5)
    head.fit(feats, feats[:, 0] > 0.3, steps=50)
    fit = Halting(DepthLaw(1.0, 0.5), head, {"lengths": [1, 2], "depth_law": {"slope": 1.0, "intercept": 0.5, "misses": []}})
    doc = json.loads(json.dumps(fit.to_json(step=7)))
    back = Halting.from_json(doc, tmp_path / "halting.json", 5)
    assert doc["step"] == 7 and back.record == fit.record
    sizes = torch.arange(1, 30)
    assert torch.equal(back.law.steps(sizes), fit.law.steps(sizes))
    assert torch.equal(back.head.done(feats), fit.head.done(feats))
    del doc["head"]["std"]
    with pytest.raises(RaspFileError, match="not a halting fit"):
        Halting.from_json(doc, tmp_path / "halting.json", 5)


@pytest.mark.parametrize("task,recipe", [("parity", "fan"), ("addition", "fan"), ("copy", "clock")])
def test_training_evaluation_answers_at_t_as_the_oracle_rule_does(task, recipe):
    """Training's periodic evaluation reads each input's answer at T(n) from its own steps
    (`answer_at_t`); `evaluate_batch`'s oracle rule reads it from every step's read-out.
    Both give the same tokens on every input (weights drawn wide, so the answers vary)."""
    from trainer.fan.initialise import initial_model
    from trainer.fan.kind import RunConfig, build_data
    from trainer.fan.presets import RECIPES, make_hparams
    from trainer.models import get_model_spec
    from trainer.tasks import get_task
    hp = make_hparams("cpu", get_task(task), "random", seed=1, max_train_n=6, **RECIPES[recipe])
    spec = get_model_spec("looped")
    data = build_data(task, spec, hp)
    torch.manual_seed(1)
    model, _ = initial_model(RunConfig(task=task, out="-", hp=hp), spec, hp, data, "cpu")
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:                 # matrices only: a large bias would answer alike everywhere
                p.normal_(0, 1.0)
    batch = data.batch(np.random.default_rng(2), [1, 6, 3, 6, 2, 5, 4, 1, 6, 3], train=False)
    out = objectives.evaluate_batch(spec, hp, model, batch, "oracle", 0)
    pred = objectives.answer_at_t(model, batch)
    assert torch.equal(pred, out["pred"])
    assert len({tuple(row) for row in pred.tolist()}) > 3            # the answers vary between inputs
    assert torch.equal(objectives.oracle_correct(spec, hp, model, batch), out["correct"])
