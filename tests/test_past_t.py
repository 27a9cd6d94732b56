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


def _batch_and_model(settle=0, unsure=0.0, seed=5, halt=0.0, halt_target="answer", task="parity", halt_past=2):
    import torch
    from trainer.fan.objectives import train_step_outputs
    from trainer.models import get_model_spec
    hp = make_hparams("cpu", get_task(task), settle=settle, unsure=unsure, halt=halt, seed=seed, batch_size=16,
                      halt_target=halt_target, halt_past=halt_past)
    kind = FanKind(RunConfig(task=task, out="unused", model="looped", hp=hp))
    kind.seed_rng()
    torch.manual_seed(seed)
    model, _ = kind.initial_model("cpu")
    batch = kind.train_batch(900, slice(None), "cpu")
    return get_model_spec("looped"), hp, model, batch, train_step_outputs


def test_settle_and_unsure_zero_are_fan_et_al_loss():
    import torch
    spec, hp, model, batch, loss_of = _batch_and_model()
    loss, acc = loss_of(spec, hp, model, batch)
    from trainer.fan.objectives import loss_and_accuracy
    ref, ref_acc = loss_and_accuracy(model(batch.tokens, batch.steps), batch, hp.loss_reduction)
    assert torch.equal(loss, ref) and torch.equal(acc, ref_acc)


def test_settle_averages_the_loss_at_T_and_the_steps_after_it():
    import torch
    from trainer.fan.objectives import loss_and_accuracy
    spec, hp, model, batch, loss_of = _batch_and_model(settle=2)
    loss, acc = loss_of(spec, hp, model, batch)
    # independently: one forward per offset, each sample stopped at its own T(n) + k
    parts = [loss_and_accuracy(model(batch.tokens, batch.steps + k), batch, hp.loss_reduction)[0] for k in range(3)]
    assert torch.allclose(loss, sum(parts) / 3, rtol=1e-5, atol=1e-6)
    assert torch.equal(acc, loss_and_accuracy(model(batch.tokens, batch.steps), batch, hp.loss_reduction)[1])


def test_unsure_adds_the_divergence_from_uniform_of_the_steps_before_T():
    import math
    import torch.nn.functional as F
    spec, hp, model, batch, loss_of = _batch_and_model(unsure=0.5)
    base, _ = loss_of(*_batch_and_model()[:2], model, batch)
    loss, _ = loss_of(spec, hp, model, batch)
    # independently: a loop over samples and steps t < T(n), KL(u || p) of each scored token
    total, count = 0.0, 0
    for i in range(len(batch.steps)):
        for t in range(1, int(batch.steps[i])):
            logp = F.log_softmax(model(batch.tokens[i:i + 1], t)[0].detach().double(), -1)
            v = logp.shape[-1]
            for pos in batch.mask[i].nonzero().flatten().tolist():
                total += float(-logp[pos].mean() - math.log(v))
                count += 1
    assert count > 0
    assert abs(float(loss - base) - 0.5 * total / count) < 1e-4


@pytest.mark.parametrize("flag", ["settle", "unsure", "halt"])
def test_settle_and_unsure_are_refused_for_a_fixed_depth_model(tmp_path, flag):
    hp = make_hparams("cpu", get_task("parity"), **{flag: 1})
    with pytest.raises(RaspError, match=flag):
        FanKind(RunConfig(task="parity", out=str(tmp_path), model="fap", hp=hp))


def test_halting_from_keeps_fan_et_al_loss_until_its_step():
    import torch
    from trainer.fan.objectives import loss_and_accuracy
    from dataclasses import replace
    spec, hp, model, batch, loss_of = _batch_and_model(settle=2, unsure=1.0)
    hp = replace(hp, halting_from=500)
    kind = FanKind(RunConfig(task="parity", out="unused", model="looped", hp=hp))
    fan, _ = loss_and_accuracy(model(batch.tokens, batch.steps), batch, hp.loss_reduction)
    halting, _ = loss_of(spec, replace(hp, halting_from=0), model, batch)
    assert not torch.allclose(fan, halting)
    kind.before_step(model, 499)
    assert torch.equal(kind.loss(model, batch)[0], fan)
    kind.before_step(model, 500)
    assert torch.equal(kind.loss(model, batch)[0], halting)


def test_the_halting_unit_starts_at_zero_and_leaves_the_rest_of_the_start_unchanged():
    import torch
    plain, with_unit = _batch_and_model()[2], _batch_and_model(halt=1.0)[2]
    assert with_unit.cfg.halt_unit and not plain.cfg.halt_unit
    a, b = plain.state_dict(), with_unit.state_dict()
    assert set(b) - set(a) == {"halt_weight", "halt_bias"}
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not b["halt_weight"].any() and not b["halt_bias"].any()


def test_halt_adds_the_units_cross_entropy_on_reaching_T():
    import torch
    import torch.nn.functional as F
    spec, hp, model, batch, loss_of = _batch_and_model(halt=0.5)
    with torch.no_grad():
        model.halt_weight.copy_(torch.randn(model.cfg.d_model, generator=torch.Generator().manual_seed(1)))
        model.halt_bias.fill_(-0.3)
    base, _ = loss_of(*_batch_and_model()[:2], model, batch)
    loss, _ = loss_of(spec, hp, model, batch)
    # independently: per sample and step t <= T(n) + --halt-past, the unit on the scored positions' mean state
    terms = []
    for i in range(len(batch.steps)):
        T = int(batch.steps[i])
        for t in range(1, T + hp.halt_past + 1):
            r = model(batch.tokens[i:i + 1], t, read=model.readout)[0].detach().double()
            pooled = r[batch.mask[i]].mean(0)
            z = pooled @ model.halt_weight.detach().double() + float(model.halt_bias.detach())
            terms.append(float(F.binary_cross_entropy_with_logits(z, torch.tensor(float(t >= T), dtype=z.dtype))))
    assert abs(float(loss - base) - 0.5 * sum(terms) / len(terms)) < 1e-4


@pytest.mark.parametrize("halt_past", [2, 5])
def test_a_marker_unit_is_taught_at_every_position_whether_the_marker_passed_it(halt_past):
    """--halt-target marker: per position i, "t > i" (i < T(n)) or "t >= T(n)" (later); and the soft AND
    of the positions, "t >= T(n)"; written as a loop over samples, steps and positions."""
    import math
    import torch
    spec, hp, model, batch, loss_of = _batch_and_model(halt=0.5, halt_target="marker", task="padded_parity",
                                                       halt_past=halt_past)
    assert model.cfg.halt_marker
    with torch.no_grad():
        model.halt_weight.copy_(torch.randn(model.cfg.d_model, generator=torch.Generator().manual_seed(2)))
        model.halt_bias.fill_(0.4)
    base, _ = loss_of(*_batch_and_model(task="padded_parity")[:2], model, batch)
    loss, _ = loss_of(spec, hp, model, batch)

    def bce(z, y):
        return -math.log(1 / (1 + math.exp(-z))) if y else -math.log(1 - 1 / (1 + math.exp(-z)))

    per_position, pooled = [], []
    for b in range(len(batch.steps)):
        T = int(batch.steps[b])
        for t in range(1, T + hp.halt_past + 1):
            r = model(batch.tokens[b:b + 1], t, read=model.readout)[0].detach().double()
            z = (r @ model.halt_weight.detach().double() + float(model.halt_bias.detach())).tolist()
            per_position += [bce(zi, t > i if i < T else t >= T) for i, zi in enumerate(z)]
            soft_and = -math.log(sum(math.exp(-zi) for zi in z))
            pooled.append(bce(soft_and, t >= T))
    want = 0.5 * (sum(per_position) / len(per_position) + sum(pooled) / len(pooled))
    assert abs(float(loss - base) - want) < 1e-4


def test_the_head_rule_reads_a_marker_unit_at_every_position():
    """A marker model is done at the first step where every position's logit is positive."""
    import torch
    from trainer.fan.halting import calibrate, trajectory
    from trainer.fan.stopping import choose_steps, step_stats
    spec, hp, model, batch, _ = _batch_and_model(halt=1.0, halt_target="marker", task="padded_parity")
    with torch.no_grad():
        model.halt_weight.copy_(torch.randn(model.cfg.d_model, generator=torch.Generator().manual_seed(3)))
        model.halt_bias.fill_(0.5)
    kind = FanKind(RunConfig(task="padded_parity", out="unused", model="looped", hp=hp))
    fit = calibrate(model, kind.data, range(1, 4), seed=0, samples=8)
    assert fit.record["head"]["trained_with_model"] and fit.head.weight.tolist() == [1.0]
    logits, features = trajectory(model, batch.tokens, batch.mask, 12)
    chosen = choose_steps("head", step_stats(logits, batch.targets, batch.mask, features), batch.steps, halting=fit)
    for b in range(len(batch.steps)):
        every = [bool((model(batch.tokens[b:b + 1], t, read=model.readout)[0] @ model.halt_weight
                       + model.halt_bias > 0).all()) for t in range(1, 13)]
        assert int(chosen[b]) == (every.index(True) + 1 if True in every else 12)


def test_the_marker_needs_the_halt_unit(tmp_path):
    hp = make_hparams("cpu", get_task("parity"), halt_target="marker")
    with pytest.raises(RaspError, match="--halt W"):
        FanKind(RunConfig(task="parity", out=str(tmp_path), model="looped", hp=hp))


def test_the_head_rule_reads_the_trained_unit_instead_of_fitting_one():
    import torch
    from trainer.fan.halting import calibrate
    spec, hp, model, batch, _ = _batch_and_model(halt=1.0)
    with torch.no_grad():
        model.halt_weight.copy_(torch.linspace(-1, 1, model.cfg.d_model))
        model.halt_bias.fill_(0.25)
    kind = FanKind(RunConfig(task="parity", out="unused", model="looped", hp=hp))
    fit = calibrate(model, kind.data, range(1, 4), seed=0, samples=8)
    assert torch.equal(fit.head.weight, model.halt_weight) and float(fit.head.bias) == 0.25
    assert not fit.head.mean.any() and bool((fit.head.std == 1).all())
    assert fit.record["head"]["trained_with_model"]


def test_halt_is_refused_for_a_compiled_start(tmp_path):
    hp = make_hparams("cpu", get_task("parity"), init="compiled", halt=1.0)
    with pytest.raises(RaspError, match="--halt"):
        FanKind(RunConfig(task="parity", out=str(tmp_path), model="looped", init="compiled", hp=hp))
