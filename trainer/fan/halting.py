"""Halting rules fitted on held-in lengths (trainer/fan/stopping.py: depth_law,
head), before a run is evaluated.

The training loop knows T(n) for every training input (the task program's
step count), and so does this calibration on the same lengths: it runs the
trained model on fresh inputs of every training length (labels from the
task program, its own random stream), up to T(n) + the task's extra steps,
and fits

* the depth law: on each length, the step with the best exact match (T(n)
  itself when it is among the best: the model was trained to answer there); a
  line through those points (Theil-Sen) gives the step of any size n;
* the halting head: a logistic "done" unit on the step's pooled state
  (ACT's halting unit, Graves 2016; PonderNet's lambda_t, Banino et al. 2021),
  trained by step supervision on whether t >= T(n), on DETACHED states: the
  model's weights are not changed, and its parameters start at zero and are
  fitted full-batch, so no random stream is drawn.

Nothing is stored: the fit takes seconds, is made from the checkpoint being
evaluated, and is written into the evaluation file (its points and
coefficients), so a run of any age can be evaluated with these rules.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from trainer.fan import stopping

CALIBRATION_SAMPLES = 128       # inputs per held-in length
HEAD_FIT_STEPS = 300            # full-batch Adam steps of the halting head


@torch.no_grad()
def trajectory(model, tokens: torch.Tensor, mask: torch.Tensor, t_max: int):
    """Logits after every step [T, B, L, V] and the state the halting head
    reads: the read-out state averaged over each input's scored positions [T, B, d]."""
    r = model.all_steps(tokens, t_max, read=model.readout)
    m = mask.to(r.dtype)[..., None]
    return model.unembed(r), (r * m).sum(2) / m.sum(1).clamp(min=1)


@dataclass
class DepthLaw:
    slope: float
    intercept: float

    def steps(self, sizes: torch.Tensor) -> torch.Tensor:
        return torch.round(self.slope * sizes.double() + self.intercept).long()

    @classmethod
    def fit(cls, sizes, best_steps) -> "DepthLaw":
        """Theil-Sen line through (size, best step): the median of the pairwise
        slopes, then the median of best - slope * size.  One length alone
        gives a constant."""
        x, y = np.asarray(sizes, dtype=float), np.asarray(best_steps, dtype=float)
        i, j = np.triu_indices(len(x), 1)
        keep = x[j] != x[i]
        slope = float(np.median((y[j] - y[i])[keep] / (x[j] - x[i])[keep])) if keep.any() else 0.0
        return cls(slope, float(np.median(y - slope * x)))


class HaltingHead(nn.Module):
    """p(done | state at step t) = sigmoid(w . (f - mean) / std + b)."""

    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(d))      # zeros: no random stream is drawn
        self.bias = nn.Parameter(torch.zeros(()))
        self.register_buffer("mean", torch.zeros(d))
        self.register_buffer("std", torch.ones(d))

    def logit(self, features: torch.Tensor) -> torch.Tensor:
        return (features - self.mean) / self.std @ self.weight + self.bias

    def done(self, features: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.logit(features) > 0

    def fit(self, features: torch.Tensor, done: torch.Tensor, steps: int = HEAD_FIT_STEPS) -> float:
        """Full-batch fit on detached features [N, d] and targets [N] (bool);
        returns the final loss."""
        x = features.detach().float()
        self.mean.copy_(x.mean(0))
        self.std.copy_(x.std(0).clamp(min=1e-6))
        opt = torch.optim.Adam(self.parameters(), lr=0.05)
        y = done.float()
        with torch.enable_grad():
            for _ in range(steps):
                loss = F.binary_cross_entropy_with_logits(self.logit(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        return float(loss.detach())


@dataclass
class Halting:
    law: DepthLaw
    head: HaltingHead
    record: dict        # what the evaluation file keeps of the fit


def best_step(acc: torch.Tensor, trained_at: int) -> int:
    """The 1-based step of highest exact match acc [T]; the step the model was
    trained to answer at (T(n) of a held-in length) when it is among the best,
    else the first best one."""
    top = float(acc.max())
    if 1 <= trained_at <= len(acc) and float(acc[trained_at - 1]) >= top:
        return trained_at
    return int(acc.argmax()) + 1


def calibrate(model, data, lengths, seed: int, samples: int = CALIBRATION_SAMPLES, device="cpu") -> Halting:
    """Fit the depth law and the halting head on `lengths` (the run's
    training lengths), `samples` fresh inputs each."""
    best, feats, done, held_in = [], [], [], {}
    for n in lengths:
        rng = np.random.default_rng([seed, n, 24])
        b = data.batch(rng, [n] * samples, train=True).to(device)
        t_max = int(b.steps.max()) + data.task.t_max_extra
        logits, f = trajectory(model, b.tokens, b.mask, t_max)
        stats = stopping.step_stats(logits, b.targets, b.mask)
        acc = stats.correct.float().mean(1)                         # [T]
        best.append(best_step(acc, int(b.steps[0])))
        held_in[n] = float(acc.max())
        t = torch.arange(1, t_max + 1, device=f.device)[:, None]
        feats.append(f.reshape(-1, f.shape[-1]))
        done.append((t >= b.steps[None, :]).reshape(-1))
    law = DepthLaw.fit(list(lengths), best)
    with torch.device(device):      # made where its features are
        head = HaltingHead(feats[0].shape[-1])
    loss = head.fit(torch.cat(feats), torch.cat(done))
    lengths = [int(n) for n in lengths]
    fitted = law.steps(torch.tensor(lengths, device="cpu")).tolist()       # read on the host
    record = {"lengths": lengths, "samples": samples, "best_step": best,
              "best_exact_match": [held_in[n] for n in lengths],
              "depth_law": {"slope": law.slope, "intercept": law.intercept,
                            "misses": [n for n, f, b in zip(lengths, fitted, best) if f != b]},
              "head": {"parameters": sum(p.numel() for p in head.parameters()), "fit_loss": loss}}
    return Halting(law, head, record)
