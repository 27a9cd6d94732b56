"""The descent guard: keep an optimizer step only when it does not hurt.

Compiled weights sit on a knife edge (a 1e-9 change to a residual writer can
flip a hard attention), so a fine-tune of a compiled start keeps a step only
if the loss on its own batch does not rise, and then checks the kept steps
on a fixed guard sample (every length the model was compiled for); where
checking the longest inputs after every few steps would cost more than the
training (a compiled comparison model runs a loop step per token), they are
checked before each checkpoint and at the end instead, with a rollback.  Any
model and task can use it (`--guard on`); the training loop (trainer/run/loop.py)
calls `Guard.step` in place of `optimizer.step()`.  What it measures comes
from the run's kind (`RunKind.guard_eval`, `RunKind.loss`, trainer/run/kind.py), so the same guard
serves Fan et al.'s tasks and the comparison tasks.
"""
from __future__ import annotations

import copy
import math
from typing import Optional

import torch

from trainer.run.kind import RunKind


class Snapshot:
    """Weights and optimizer state to return to."""

    def __init__(self, model, opt):
        self.take(model, opt)

    def take(self, model, opt):
        self.params = [p.detach().clone() for p in model.parameters()]
        self.opt_state = copy.deepcopy(opt.state_dict())

    @torch.no_grad()
    def restore(self, model, opt):
        for p, old in zip(model.parameters(), self.params):
            p.copy_(old)
        opt.load_state_dict(copy.deepcopy(self.opt_state))


class Guard:
    """`state` is JSON (it travels in the checkpoint): scale (the step-size
    factor), the guard sample's loss / acc / confident share at the last
    passed check, pending (kept steps not yet checked) and every (the
    current check interval); with a long sample (`RunKind.guard_long_sample`)
    also its loss / acc at the last confirmation (long_loss, long_acc), the
    short sample's at that moment (confirmed) and unconfirmed (checked steps
    kept since)."""

    def __init__(self, kind: RunKind, hp, net, model, opt, dist, state: dict):
        self.kind, self.hp, self.net, self.model, self.opt, self.dist = kind, hp, net, model, opt, dist
        self.state = state
        self.sample = kind.guard_sample(model)
        self.long_sample = kind.guard_long_sample(model)
        self.verified = Snapshot(model, opt)        # the last state the guard sample passed
        self.confirmed = Snapshot(model, opt) if self.long_sample else None   # ... and the long sample too

    def measure(self, sample=None):
        with torch.no_grad():
            return self.kind.guard_eval(self.net, self.sample if sample is None else sample)

    def step(self, batch, loss: float, acc: float) -> int:
        """Keep the optimizer step only if the loss on the current batch does
        not rise (and its accuracy does not fall); else undo it and halve the
        step size.  `verify` then checks the kept steps on the guard sample,
        after every step at first and less often while checks pass.  Returns
        the number of steps rejected."""
        g, d = self.state, self.dist
        if "loss" not in g:
            g["loss"], g["acc"], g["confident"] = self.measure()
        if self.long_sample and "long_loss" not in g:
            g["long_loss"], g["long_acc"], _ = self.measure(self.long_sample)
            g["confirmed"] = [g["loss"], g["acc"], g["confident"]]
        before_step = Snapshot(self.model, self.opt)
        self.opt.step()
        with torch.no_grad():
            new_loss, new_acc = self.kind.loss(self.net, batch)
        before, after = d.mean(loss), d.mean(float(new_loss))
        if not (math.isfinite(after) and after <= before and d.mean(float(new_acc)) >= d.mean(acc)):
            before_step.restore(self.model, self.opt)
            g["scale"] *= 0.5
            return 1
        g["pending"] = g.get("pending", 0) + 1
        if g["pending"] >= g.get("every", 1):
            return self.verify()
        return 0

    def verify(self) -> int:
        """The steps kept since the last check stay only if, on the guard
        sample, the loss did not rise and accuracy did not fall (nor, for a
        start with a halting clock, the share where Eq. 2 picks T(n));
        otherwise they are all undone and the step size halved (it regrows x2
        per passed check, up to 1).  The interval between checks doubles
        after each pass (up to hp.guard_every) and drops back to 1 after a
        failure, so a stable fine-tune pays for a check every guard_every
        steps while a failing one loses a single step per rejection; what is
        kept is always a checked state.  Returns the number of steps undone."""
        g = self.state
        pending, g["pending"] = g.get("pending", 0), 0
        if not pending:
            return 0
        loss, acc, conf = self.measure()
        if loss <= g["loss"] and acc >= g["acc"] and conf >= g.get("confident", 0.0):
            g.update(scale=min(1.0, g["scale"] * 2.0), loss=loss, acc=acc, confident=conf,
                     every=min(2 * g.get("every", 1), max(1, self.hp.guard_every)))
            self.verified.take(self.model, self.opt)
            g["unconfirmed"] = g.get("unconfirmed", 0) + pending
            return 0
        self.verified.restore(self.model, self.opt)
        g.update(scale=g["scale"] * 0.5, every=1)
        return pending

    def confirm(self) -> int:
        """Before a checkpoint and at the end (after `verify`): the steps
        verified since the last confirmation stay only if, on the long sample,
        the loss did not rise and accuracy did not fall; otherwise the model
        returns to the last confirmed state (the start, at first) and the step
        size is halved.  So a checkpoint, and the run's end, always hold a
        state both samples passed.  Returns the number of steps undone."""
        g = self.state
        undone, g["unconfirmed"] = g.get("unconfirmed", 0), 0
        if not (self.long_sample and undone):
            return 0
        loss, acc, _ = self.measure(self.long_sample)
        g["long_measured"] = [loss, acc]
        if loss <= g["long_loss"] and acc >= g["long_acc"]:
            g.update(long_loss=loss, long_acc=acc, confirmed=[g["loss"], g["acc"], g["confident"]])
            self.confirmed.take(self.model, self.opt)
            return 0
        self.confirmed.restore(self.model, self.opt)
        self.verified.take(self.model, self.opt)
        g["loss"], g["acc"], g["confident"] = g["confirmed"]
        g.update(scale=g["scale"] * 0.5, every=1)
        return undone


# ---- when a guarded fine-tune is done -------------------------------------

FLAT_GAIN = 0.05          # "flat": the best loss of the last flat_stop steps is < 5% below the best before
STUCK_SCALE = 2.0 ** -6   # the guard has halved the step size this far (net): steps no longer change anything


def finetune_stop_reason(hp, rows: list, guard: dict, guard_scope: str) -> Optional[str]:
    """Why a guarded fine-tune (a compiled start) should end now, or None.
    `rows` are the logged metrics so far, `guard` the descent guard's state
    (its fixed sample spans every compiled length).  The run ends when the
    model is exact (training batches and the whole guard sample, halting
    clock included) and the loss has stopped improving over `hp.flat_stop`
    steps, or when the guard has shrunk the step size so far that nothing
    changes any more; never before hp.flat_stop steps.  Off unless
    hp.flat_stop and hp.guard."""
    if not (hp.flat_stop and hp.guard and rows and "loss" in rows[-1]) or rows[-1]["step"] < hp.flat_stop:
        return None         # (at least one window of steps before judging)
    if guard["scale"] < STUCK_SCALE:
        return (f"the guard rejected steps until the step size fell to {guard['scale']:.1e} x the learning rate; "
                f"nothing changes any more")
    if not (guard.get("acc") == 1.0 and guard.get("confident", 1.0) == 1.0):
        return None
    cut = rows[-1]["step"] - hp.flat_stop
    earlier = [r["loss"] for r in rows if "loss" in r and r["step"] <= cut]
    recent = [r for r in rows if "loss" in r and r["step"] > cut]
    if not earlier or any(r["acc"] < 1.0 for r in recent):
        return None
    before, now = min(earlier), min(r["loss"] for r in recent)
    if now > before * (1 - FLAT_GAIN):
        return (f"exact (training batches and {guard_scope}) "
                f"and the loss gained under {FLAT_GAIN:.0%} in the last {hp.flat_stop} steps "
                f"({before:.3g} -> {now:.3g})")
    return None
