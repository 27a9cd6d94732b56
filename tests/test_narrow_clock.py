"""The clock recipe's narrow clock (issue 56): one block `--clock-width` wide, trained on
every `--clock-every`-th step only, so it costs a fraction of a training step.  The
answering model still trains bit for bit as under Fan et al.'s recipe; runs recorded
before these settings keep their full-width clock trained on every step."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from model import LoopedConfig, LoopedTransformer
from model.looped import CausalSelfAttention
from trainer.fan import objectives
from trainer.fan.presets import RECIPES
from trainer.settings.hparams import HParams
from test_clock import _train, trunk_beside_fan


def test_the_recipe_trains_a_narrow_clock_and_the_answering_model_as_fan_et_al_s(capsys, tmp_path):
    narrow, extra = trunk_beside_fan(capsys, tmp_path, 8, 3, "--clock-width", "8")
    assert narrow["clock.embed.weight"].shape[1] == 8
    assert not any(k.startswith("clock.body.1.") for k in extra)       # one block
    hp = json.loads((tmp_path / "clock" / "run.json").read_text())["hparams"]
    assert (hp["clock_width"], hp["clock_every"]) == (8, RECIPES["clock"]["clock_every"])


def test_the_clock_is_taught_on_every_kth_step_only(capsys, tmp_path, monkeypatch):
    calls = []
    real = objectives.unit_loss
    monkeypatch.setattr(objectives, "unit_loss", lambda *a: calls.append(1) or real(*a))
    _train(capsys, "--steps", "9", "--clock-every", "4", "--eval-every", "0", "--out", str(tmp_path / "e"))
    taught_in_training = len(calls)
    assert taught_in_training >= 3          # steps 0, 4 and 8 (the summary's evaluation may score it too)
    calls.clear()
    _train(capsys, "--steps", "9", "--clock-every", "1", "--eval-every", "0", "--out", str(tmp_path / "o"))
    assert len(calls) - taught_in_training == 9 - 3


def test_clock_due_counts_optimiser_steps_and_scores_outside_training():
    hp = HParams.from_dict({"halt": 1.0, "halt_target": "clock", "clock_every": 3})
    assert [objectives.clock_due(hp, s) for s in range(7)] == [True, False, False, True, False, False, True]
    assert objectives.clock_due(hp, None)
    marker = HParams.from_dict({"halt": 1.0, "halt_target": "marker", "clock_every": 3})
    assert all(objectives.clock_due(marker, s) for s in range(4))     # only a clock has parameters apart


def test_runs_recorded_before_keep_a_full_clock_on_every_step():
    old = HParams.from_dict({"halt": 1.0, "halt_target": "clock", "halt_past": 10})
    assert (old.clock_width, old.clock_every) == (0, 1)
    from trainer.models.looped import clock_shape
    assert clock_shape(old) == {}
    model = LoopedTransformer(LoopedConfig(vocab_size=3, d_model=16, n_head=2, n_body=2, halt_unit=True,
                                           halt_marker=True, halt_clock=2))
    assert model.clock is not None and (model.clock.cfg.d_model, model.clock.cfg.n_body) == (16, 2)
    assert clock_shape(HParams.from_dict({"halt": 1.0, "halt_target": "clock", "clock_width": 16})) == \
        dict(clock_d_model=16, clock_n_head=2)
    assert clock_shape(HParams.from_dict({"d_model": 8, "halt": 1.0, "halt_target": "clock", "clock_width": 32})) == \
        dict(clock_d_model=8, clock_n_head=1)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 12), window=st.integers(1, 4), heads=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2 ** 16))
def test_banded_attention_is_the_dense_windowed_attention(n, window, heads, seed):
    """A windowed head's attention over its few offsets equals the dense n x n attention
    under `relative_bias`'s mask, values and gradients, up to float32 rounding."""
    torch.manual_seed(seed)
    cfg = LoopedConfig(vocab_size=3, d_model=8, n_head=heads, bos=True, attn_window=window)
    attn = CausalSelfAttention(cfg, heads, 8 // heads)
    with torch.no_grad():
        attn.rel_bias.normal_()
    x = torch.randn(3, n, 8, requires_grad=True)
    split = lambda t: t.view(3, n, heads, 8 // heads).transpose(1, 2)      # noqa: E731
    q, k, v = split(attn.q(x)), split(attn.k(x)), split(attn.v(x))
    dense = F.scaled_dot_product_attention(q, k, v, attn_mask=attn.relative_bias(n, x.device, q.dtype),
                                           scale=attn.scale)
    band = attn.banded(q, k, v)
    torch.testing.assert_close(band, dense, rtol=1e-5, atol=1e-5)
    weights = torch.randn_like(dense)
    g_dense = torch.autograd.grad((dense * weights).sum(), [x, attn.rel_bias], retain_graph=True)
    g_band = torch.autograd.grad((band * weights).sum(), [x, attn.rel_bias])
    for a, b in zip(g_band, g_dense):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert attn.global_heads == 0           # the forward takes the banded path for such a head


@pytest.mark.parametrize("wide", [0, 1, 2])
def test_a_block_with_unwindowed_heads_attends_as_the_dense_mask_says(wide):
    """The forward: the first `wide` heads see every earlier position, the rest their band."""
    torch.manual_seed(wide)
    cfg = LoopedConfig(vocab_size=3, d_model=8, n_head=2, bos=True, attn_window=2, global_heads=wide)
    attn = CausalSelfAttention(cfg, 2, 4)
    with torch.no_grad():
        attn.rel_bias.normal_()
    x = torch.randn(2, 7, 8)
    split = lambda t: t.view(2, 7, 2, 4).transpose(1, 2)      # noqa: E731
    q, k, v = split(attn.q(x)), split(attn.k(x)), split(attn.v(x))
    dense = F.scaled_dot_product_attention(q, k, v, attn_mask=attn.relative_bias(7, x.device, q.dtype),
                                           scale=attn.scale)
    torch.testing.assert_close(attn(x), attn.o(dense.transpose(1, 2).reshape(2, 7, -1)), rtol=1e-5, atol=1e-5)


def test_a_wide_clock_has_one_unwindowed_head_and_reads_every_position(capsys, tmp_path):
    import rasp
    _train(capsys, "--steps", "5", "--clock-reach", "wide", "--out", str(tmp_path / "w"))
    model = rasp.load(tmp_path / "w").module
    assert (model.cfg.clock_wide_heads, model.cfg.clock_global_heads) == (1, 0)
    assert model.clock.cfg.global_heads == 1 and model.clock.cfg.out_vocab_size == 1
    tokens = torch.tensor([[0, 1, 1, 2, 3, 3]])
    assert model.done_every(tokens, 4).shape == (4, 1, 6)       # a unit at every position
    assert objectives.halting_target(model.cfg) == "clock"


def test_a_run_of_the_full_clock_is_still_the_clock_recipe_when_resumed():
    """`--resume --recipe clock` on a run recorded before the clock's shape was part of the
    recipe (no clock_width, clock_every, clock_reach), before the max clock (clock_reach
    window, every 4th step) or before every 6th step, is accepted; another recipe is refused."""
    from types import SimpleNamespace
    from rasp.errors import RaspError
    from trainer.settings.resolve import refuse_changed_run
    old = {k: v for k, v in RECIPES["clock"].items() if k not in ("clock_width", "clock_every", "clock_reach")}
    run = {"hparams": old}
    refuse_changed_run(SimpleNamespace(given=frozenset({"recipe"}), recipe="clock"), run)
    for reach in ("window", "auto"):        # taught on every 4th step, before and after the max clock
        every4 = {"hparams": dict(RECIPES["clock"], clock_reach=reach, clock_every=4)}
        refuse_changed_run(SimpleNamespace(given=frozenset({"recipe"}), recipe="clock"), every4)
    with pytest.raises(RaspError, match="the run has clock"):
        refuse_changed_run(SimpleNamespace(given=frozenset({"recipe"}), recipe="fan"), run)
    narrow = {"hparams": dict(RECIPES["clock"], clock_width=16)}
    with pytest.raises(RaspError, match="its own halting settings"):
        refuse_changed_run(SimpleNamespace(given=frozenset({"recipe"}), recipe="clock"), narrow)


def _clock_model(seed: int = 0, **cfg) -> LoopedTransformer:
    torch.manual_seed(seed)
    return LoopedTransformer(LoopedConfig(vocab_size=4, d_model=16, n_head=2, n_body=1, halt_unit=True,
                                          halt_marker=True, halt_clock=2, clock_d_model=8, clock_n_head=1, **cfg))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=6), st.integers(1, 7), st.integers(0, 2 ** 16))
def test_a_clock_run_to_each_inputs_own_step_equals_the_full_run_up_to_it(steps, n, seed):
    """`all_steps` with a count per sample: each sample's rows up to its own count are those of
    the loop run to the longest count for all (values and gradients), zeros after it."""
    model = _clock_model()
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 4, (len(steps), n), generator=g)
    own = torch.tensor(steps)
    most = max(steps)
    weights = torch.randn(most, len(steps), n, generator=g)
    ran = (torch.arange(1, most + 1)[:, None] <= own[None])[..., None]          # [T, B, 1]
    early = model.clock.all_steps(tokens, own)[..., 0]
    assert torch.equal(early[~ran.expand_as(early)], torch.zeros(int((~ran).sum()) * n))
    grads = []
    for out in (early, model.clock.all_steps(tokens, most)[..., 0]):
        model.zero_grad()
        (out * weights * ran).sum().backward()
        grads.append([p.grad.clone() for p in model.clock.parameters()])
    full = model.clock.all_steps(tokens, most)[..., 0]
    torch.testing.assert_close(early * ran, full * ran, rtol=1e-5, atol=1e-6)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_the_clock_loss_is_the_same_when_each_input_stops_at_its_own_horizon():
    """settle_loss runs each input's clock to T(n) + halt_past only: the loss equals the one
    on the loop run to the batch's longest horizon (the steps past an input's horizon are
    never taught)."""
    from types import SimpleNamespace
    model = _clock_model(1)
    g = torch.Generator().manual_seed(3)
    T = torch.tensor([1, 4, 2, 6, 3])
    tokens = torch.randint(0, 4, (5, 7), generator=g)
    mask = torch.zeros(5, 7, dtype=torch.bool)
    mask[:, -2:] = True
    batch = SimpleNamespace(tokens=tokens, steps=T, mask=mask, need=None,
                            targets=torch.randint(0, 4, (5, 7), generator=g))
    past = 3
    own = objectives.settle_loss(model, batch, 0, 0.0, halt=1.0, halt_past=past)[0]
    done = model.clock_targets(tokens, int((T + past).max()))
    at_t = model(tokens, T)
    longest = objectives.loss_and_accuracy(at_t, batch)[0] + objectives.unit_loss(model, done, batch, past)
    torch.testing.assert_close(own, longest, rtol=1e-5, atol=1e-6)


def test_clock_mlp_sets_a_narrow_clocks_units_and_old_configs_load_without_it(tmp_path):
    from model.files import check_config
    from rasp.errors import RaspError
    from trainer.models.looped import clock_shape
    from trainer.settings.validate import check_hparams
    from trainer.tasks import get_task
    hp = HParams.from_dict({"halt": 1.0, "halt_target": "clock", "clock_width": 16, "clock_mlp": 24})
    assert clock_shape(hp) == dict(clock_d_model=16, clock_n_head=2, clock_d_mlp=24)
    model = _clock_model(clock_d_mlp=24)
    assert model.clock.body[0].mlp.up.out_features == 24
    assert _clock_model().clock.body[0].mlp.up.out_features == 32         # 0: four times the width
    cfg = json.loads(model.cfg.to_json())
    del cfg["clock_d_mlp"]                        # a file written before the field
    assert check_config(cfg, tmp_path / "config.json").clock_d_mlp == 0
    full = HParams.from_dict({"halt": 1.0, "halt_target": "clock", "clock_mlp": 24})
    with pytest.raises(RaspError, match="--clock-mlp 24: .*give --clock-width"):
        check_hparams(full, get_task("parity"))
