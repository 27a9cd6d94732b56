"""Issue 16, flags: every numeric flag of `rasp train` / `rasp eval` has a
range (argparse's one-line error, exit 2), combinations are checked, and a
model plus batch that would not fit in memory is refused with the estimate
before anything is allocated."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rasp.cli import main
from trainer.settings import validate

ROOT = Path(__file__).resolve().parents[1]

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
BASE = ["train", "--task", "parity", "--preset", "cpu", "--no-progress", "--steps", "1"]


def cli(*argv):
    return subprocess.run([sys.executable, "-m", "trainer", *map(str, argv)], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=300)


def status_of(capsys, argv):
    try:
        status = main([str(a) for a in argv])
    except SystemExit as e:           # argparse's error exit
        status = e.code
    out, err = capsys.readouterr()
    assert "internal error" not in err and "Traceback" not in err, err
    return status, err


def test_bad_flags_through_the_command_line(tmp_path):
    for flag, value, words in [("--grad-clip", "-1", "> 0")]:
        r = cli(*BASE, flag, value, "--out", tmp_path / "x")
        assert r.returncode == 2 and f"argument {flag}: " in r.stderr and words in r.stderr, (flag, r.stderr)
        assert "Traceback" not in r.stderr and not (tmp_path / "x").exists()


@pytest.mark.parametrize("flag, value, words", [
    ("--ckpt-every", "0", "must be in 1.."), ("--batch-size", "0", "must be in 1.."), ("--seed", "-1", "must be in 0.."), ("--lr", "nan", "finite"),
    ("--lr", "0", "> 0"), ("--n-layer", "100000", "must be in 1.."), ("--d-model", "1000000", "must be in 1.."),
    ("--max-wall", "inf", "finite"), ("--compress", "0", "must be in 1.."), ("--steps", "-3", "must be in 0.."),
])
def test_bad_flags(tmp_path, capsys, flag, value, words):
    status, err = status_of(capsys, [*BASE, flag, value, "--out", tmp_path / "x"])
    assert status == 2 and f"argument {flag}: " in err and words in err, err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("argv, words", [
    (["--d-model", "30", "--n-head", "4"], "not divisible by --n-head"),
    (["--start-n", "9", "--max-train-n", "4"], "--start-n 9 is above --max-train-n 4"),
    (["--d-model", "65536", "--n-layer", "64", "--n-head", "1"], "GiB to train"),
    (["--batch-size", "1048576", "--max-train-n", "2000"], "GiB to train"),
])
def test_combinations_and_memory_are_refused_before_allocating(tmp_path, capsys, argv, words):
    status, err = status_of(capsys, [*BASE, *argv, "--out", tmp_path / "x"])
    assert status == 2 and words in err, err


def test_memory_estimate_is_in_range_for_a_real_model():
    """The estimate counts the parameters exactly and the activations roughly."""
    from trainer.models import get_model_spec, looped_config
    from trainer.settings.hparams import HParams
    from trainer.fan.kind import build_data
    spec, hp = get_model_spec("looped"), HParams(d_model=64, n_head=4, n_layer=2, max_train_n=5)
    data = build_data("parity", spec, hp)
    cfg = looped_config(spec, hp, data)
    params, need = validate.training_memory(cfg, 64, 10, 10)
    model = spec.make(hp, data)
    assert params == model.num_params()
    assert 6 * 4 * params < need < 2 ** 30


def test_memory_estimate_charges_the_clocks_own_loop():
    """A clock runs a loop of its own to T(n) + halt_past beside the trunk's to T(n)
    (+ settle): both are charged, each for its own steps."""
    import numpy as np
    from model.looped import clock_config
    from trainer.models import get_model_spec, looped_config
    from trainer.settings.hparams import HParams
    from trainer.fan.kind import build_data
    spec = get_model_spec("looped")

    def need(**kw):
        hp = HParams(d_model=32, n_head=2, n_layer=2, max_train_n=6, batch_size=8, **kw)
        data = build_data("parity", spec, hp)
        return validate.check_memory(spec, hp, data, "cpu"), looped_config(spec, hp, data), data, hp

    clock = dict(halt=1.0, halt_target="clock")
    near, cfg, data, hp = need(**clock, halt_past=2)
    far = need(**clock, halt_past=10)[0]
    sample = data.batch(np.random.default_rng(0), [hp.max_train_n], train=True)
    n_tokens, T = int(sample.tokens.shape[1]) + 1, int(sample.steps.max())
    ccfg = clock_config(cfg)
    assert far - near == 4 * validate.activation_floats(ccfg, 8, n_tokens + 1, cfg.n_body * 8)
    # the trunk alone to T(n), without a unit, is charged less by the clock's loop and weights
    plain = need()[0]
    assert near - plain > 4 * validate.activation_floats(ccfg, 8, n_tokens + 1, cfg.n_body * (T + 2))


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(flag=st.sampled_from(sorted(validate.HP_FLAG_TYPES)),
       value=st.one_of(st.integers(-10 ** 20, 10 ** 20).map(str),
                       st.sampled_from(["nan", "inf", "-inf", "1e400", "", "x", "1.5", "-0"])))
def test_any_flag_value_is_accepted_or_refused_cleanly(flag, value):
    """Each type function either returns an in-range value or raises argparse's error."""
    import argparse
    parse = validate.HP_FLAG_TYPES[flag]
    try:
        v = parse(value)
    except argparse.ArgumentTypeError:
        return
    import math
    from trainer.settings.hparams import CHOICES
    assert v in CHOICES[flag] if flag in CHOICES else (math.isfinite(v) and v >= 0)


def test_eval_flags(tmp_path, capsys):
    for argv, words in [(["--samples", "0"], "--samples"), (["--threshold", "-1"], "--threshold"),
                        (["--batch-size", "0"], "--batch-size"), (["--seed", "-5"], "--seed")]:
        status, err = status_of(capsys, ["eval", tmp_path, *argv])
        assert status == 2 and words in err, err
