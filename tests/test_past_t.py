"""Training past T(n) (issue 39, --past-t): the loss at T(n) + k, k uniform
on 0..K per sample; K = 0 is Fan et al.'s recipe and draws nothing."""
from __future__ import annotations

import numpy as np
import pytest

from rasp.errors import RaspError
from trainer.fan.kind import FanKind, RunConfig
from trainer.fan.presets import make_hparams
from trainer.settings.hparams import HParams
from trainer.tasks import get_task


def _kind(tmp_path, past_t, model="looped", seed=3):
    hp = make_hparams("cpu", get_task("parity"), past_t=past_t, seed=seed, batch_size=32)
    kind = FanKind(RunConfig(task="parity", out=str(tmp_path), model=model, hp=hp))
    kind.seed_rng()
    return kind


def test_a_run_recorded_without_past_t_trains_at_T(tmp_path):
    assert HParams.from_dict({"d_model": 64}).past_t == 0
    kind = _kind(tmp_path, None)
    b = kind.train_batch(300, slice(None), "cpu")
    after = kind.rng.bit_generator.state
    assert (b.steps == b.lengths).all()             # parity: T(n) = n
    # the stream is the one the data alone draws (as before the option existed)
    ref = _kind(tmp_path, None)
    ref.train_batch(300, slice(None), "cpu")
    assert ref.rng.bit_generator.state == after


def test_past_t_scores_each_sample_at_T_plus_k(tmp_path):
    kind = _kind(tmp_path, 4)
    k = np.concatenate([(b.steps - b.lengths).numpy() for b in
                        (kind.train_batch(300, slice(None), "cpu") for _ in range(8))])
    assert k.min() == 0 and k.max() == 4 and len(set(k.tolist())) == 5
    assert kind.run_record()["hparams"]["past_t"] == 4
    # the draws come from the run's own (checkpointed) stream: the same seed, the same k
    a, b = _kind(tmp_path, 4), _kind(tmp_path, 4)
    assert a.train_batch(300, slice(None), "cpu").steps.tolist() == b.train_batch(300, slice(None), "cpu").steps.tolist()


def test_past_t_is_refused_for_a_fixed_depth_model(tmp_path):
    with pytest.raises(RaspError, match="past-t"):
        _kind(tmp_path, 2, model="fap")
