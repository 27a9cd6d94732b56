"""The descent guard's two samples (trainer/run/guard.py, issue 41): the short
one checked after the steps, the long one (a compiled comparison model's
longest inputs, a loop step per token) only before a checkpoint and at the
end, with a rollback to the last state both passed; and how a comparison
task's guard sample is split (trainer/benchmark/kind.py `guard_examples`)."""
from __future__ import annotations

import torch

from trainer.benchmark.kind import guard_examples, seq_task
from trainer.run.distributed import Dist
from trainer.run.guard import Guard
from trainer.settings.hparams import defaults


class TwoSampleKind:
    """A kind whose long sample scores the distance of the weights from where
    they started (any step raises its loss when `long_breaks`) while the short
    one scores the batch loss the steps lower."""

    def __init__(self, model, long_breaks: bool):
        self.start = [p.detach().clone() for p in model.parameters()]
        self.long_breaks = long_breaks

    def guard_sample(self, model):
        return ["short"]

    def guard_long_sample(self, model):
        return ["long"]

    def loss(self, net, batch):
        return (net.weight ** 2).sum(), 1.0

    def guard_eval(self, net, sample):
        if sample == ["long"]:
            moved = sum(float((p - s).abs().sum()) for p, s in zip(net.parameters(), self.start))
            return (moved if self.long_breaks else 0.0), (0.5 if self.long_breaks and moved else 1.0), 1.0
        return float(self.loss(net, None)[0]), 1.0, 1.0


def _guarded(long_breaks: bool):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hp = defaults("seq")
    kind = TwoSampleKind(model, long_breaks)
    state = {"scale": 1.0}
    return model, opt, Guard(kind, hp, model, model, opt, Dist(), state), state, kind


def _steps(model, opt, guard, k: int) -> int:
    rejected = 0
    for _ in range(k):
        loss = (model.weight ** 2).sum()
        opt.zero_grad()
        loss.backward()
        rejected += guard.step(None, float(loss.detach()), 1.0)
    return rejected + guard.verify()


def test_long_sample_passes_and_the_steps_stay():
    model, opt, guard, state, kind = _guarded(long_breaks=False)
    assert _steps(model, opt, guard, 5) == 0
    assert state["unconfirmed"] == 5
    assert guard.confirm() == 0 and state["unconfirmed"] == 0 and state["scale"] == 1.0
    assert not torch.equal(model.weight, kind.start[0])
    kept = model.weight.detach().clone()
    kind.long_breaks = True                             # from here on any step breaks the long sample
    assert _steps(model, opt, guard, 2) == 0
    assert guard.confirm() == 2                         # undone back to the confirmed state, not the start
    assert torch.equal(model.weight, kept) and state["scale"] == 0.5


def test_long_sample_fails_and_every_unconfirmed_step_is_undone():
    model, opt, guard, state, kind = _guarded(long_breaks=True)
    short_before = state.get("loss")
    assert _steps(model, opt, guard, 5) == 0            # the short sample passes every check
    assert state["loss"] < (short_before if short_before is not None else float("inf"))
    assert guard.confirm() == 5                         # the long one does not: all five undone
    assert torch.equal(model.weight, kind.start[0])
    assert state["scale"] == 0.5 and state["every"] == 1 and state["long_measured"][1] == 0.5
    assert state["loss"] == state["confirmed"][0]       # the short baseline is the confirmed state's again
    assert guard.confirm() == 0                         # nothing left to confirm


def test_a_kind_without_a_long_sample_confirms_nothing():
    model, opt, guard, state, kind = _guarded(long_breaks=True)
    guard.long_sample = []
    assert _steps(model, opt, guard, 3) == 0
    assert guard.confirm() == 0 and not torch.equal(model.weight, kind.start[0])


class _Compiled:
    class encoder:
        max_length = 512


def test_guard_examples_split_at_the_factor_times_the_longest_training_input():
    task = seq_task("words_z60")
    hp = defaults("seq")
    hp.guard_samples, hp.guard_long_samples = 16, 3
    whole, none = guard_examples(task, hp, _Compiled)
    assert none == []                                   # factor 0: the earlier guard, all short
    hp.guard_short_factor = 2                           # training words are up to 8 tokens: the cut is 16
    short, long = guard_examples(task, hp, _Compiled)
    lengths = lambda batches: [int(n) for b in batches for n in b.lengths]  # noqa: E731
    assert max(lengths(short)) == 16 and min(lengths(long)) == 24
    assert sorted(lengths(short)) == sorted(n for n in lengths(whole) if n <= 16)
    for b in long:                                      # one split per batch, 3 words each
        assert len(set(b.lengths.tolist())) == 1 and len(b.lengths) == 3
    assert {int(b.lengths[0]) for b in long} == {24, 32, 40, 64, 128, 256, 512}
