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
  fitted full-batch, so no random stream is drawn.  A model trained with its
  own halting unit (`rasp train --halt`) is not fitted: the head is that unit
  (its loss on these lengths is recorded); a marker unit (`--halt-target
  marker`) is read at every position and the model is done when all say so.

A compiled start (`rasp train --init compiled`) is not fitted (issue 54): a
probe on its pooled state need not separate done from not done (on a parity
program of ours it answered `1 0 > # #` wrong where the compiled model was
exact: tests/test_compiled_start.py).  Its head reads what the compiler built: the halting clock
(compiler/clock.py), whose output margin (the top logit over the next, the
smallest over the scored positions) is DONE_LOGIT at exactly T(n) steps and
OPEN_LOGIT at every other, so it is done at the first step whose margin
passes their midpoint (`reads` "clock").  The clock is checked on every
calibration input and on inputs of every size up to the compile length
(`beyond`); where the compiled model has no clock (its loop count is not
known causally: `len`, `count`, `until stable`) or the check finds one
input the clock stops elsewhere (a lossy --compress, a fine-tune that moved
it), the head takes T(n) from the program (`reads` "program"), which is the
oracle by definition, and the record says why.

The fit is made once per checkpoint (issue 39): `rasp eval`, `rasp run`,
`rasp.load` and `rasp export` read it from the run's `halting.json` when it
was made from the newest checkpoint, else fit it (seconds to a minute) and
save it there; an export carries it in its config.json.  So every command
stops a model by the same fit, and a run of any age can use these rules.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from compiler.clock import DONE_LOGIT, OPEN_LOGIT
from rasp.errors import RaspFileError, printable
from rasp.readfile import is_finite_number, nonfinite
from trainer.fan import stopping
from trainer.fan.compiled import has_clock
from trainer.fan.coverage import exact_size_batches, size_list
from trainer.run.device import on_host

HALTING_FILE = "halting.json"   # the fit of a run's newest checkpoint, in the run folder
CALIBRATION_SAMPLES = 128       # inputs per held-in length
HEAD_FIT_STEPS = 300            # full-batch Adam steps of the halting head
CLOCK_MARGIN = (DONE_LOGIT + OPEN_LOGIT) / 2     # a compiled clock's output margin above this: done
CLOCK_CHECK_SAMPLES = 16        # inputs per size beyond the training sizes the compiled clock is checked on
# what the head reads: a probe on the pooled read-out state (or the model's own unit), a compiled
# start's halting clock, or T(n) from the program (a compiled start whose clock is absent or unverified)
READS = ("state", "clock", "program")


def compiled_start(model) -> bool:
    """A model built by the compiler (`--init compiled`), whose head is read, never fitted."""
    return "compile_max_len" in model.cfg.extra and not getattr(model.cfg, "halt_unit", False)


def clock_margin(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[T, B]: each step's output margin (top logit minus the next) at its least sure
    scored position, from logits [T, B, L, V] and the scored positions mask [B, L]."""
    if logits.shape[-1] < 2:
        return logits.new_zeros(logits.shape[:2])
    top = logits.float().topk(2, -1).values
    return (top[..., 0] - top[..., 1]).masked_fill(~mask, float("inf")).amin(-1)


def clock_stops(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B]: the step a compiled start's halting clock stops at (1-based): the first whose
    margin passes CLOCK_MARGIN; the last step where none does."""
    return stopping.first_done(clock_margin(logits, mask) > CLOCK_MARGIN)


@torch.no_grad()
def trajectory(model, tokens: torch.Tensor, mask: torch.Tensor, t_max: int, reads: str = "state"):
    """Logits after every step [T, B, L, V] and the state the halting head
    reads: the read-out state averaged over each input's scored positions [T, B, d];
    for a model with a marker unit (`rasp train --halt-target marker|clock`),
    the unit's smallest logit over the positions [T, B, 1]: done when every
    position says so (the head reads it as it is); for a compiled start's clock
    (`reads` "clock"), its margin [T, B, 1]; for T(n) from the program, None."""
    if reads != "state":
        logits = model.all_steps(tokens, t_max)
        return logits, clock_margin(logits, mask)[..., None] if reads == "clock" else None
    r = model.all_steps(tokens, t_max, read=model.readout)
    if getattr(model.cfg, "halt_marker", False):
        return model.unembed(r), model.done_every(tokens, t_max, r).amin(-1, keepdim=True)
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
    reads: str = "state"    # what the head reads (READS)

    def to_json(self, step: int) -> dict:
        """What halting.json and an export's config.json keep: enough to rebuild both rules."""
        h = self.head
        return {"step": step, "depth_law": {"slope": self.law.slope, "intercept": self.law.intercept},
                "head": {k: getattr(h, k).detach().cpu().reshape(-1).tolist() for k in ("weight", "bias", "mean", "std")},
                "reads": self.reads, "record": self.record}

    @classmethod
    def from_json(cls, doc: dict, where, width: int, device="cpu") -> "Halting":
        """The fit in `doc` (halting.json, an export's config.json), every number
        checked: a head of `width` inputs (`feature_width` of the model it
        stops), finite values, a positive scale; else a RaspFileError at `where`."""
        try:
            if not isinstance(doc, dict):
                raise TypeError("not a JSON object")
            at = nonfinite(doc)
            if at is not None:
                raise ValueError(f"{at} is NaN or infinite")
            law = DepthLaw(_number(doc["depth_law"]["slope"]), _number(doc["depth_law"]["intercept"]))
            reads = doc.get("reads", "state")       # a fit made before issue 54 read the state
            if reads not in READS:
                raise ValueError(f"reads {str(reads)[:20]!r} is not one of {', '.join(READS)}")
            if reads != "state":        # a compiled start's head reads one number: its clock's margin
                width = 1
            shapes = {"weight": width, "bias": 1, "mean": width, "std": width}
            for k, n in shapes.items():
                v = doc["head"][k]
                if not (isinstance(v, list) and len(v) == n and all(map(is_finite_number, v))):
                    raise ValueError(f"head.{k} is not a list of {n} number{'s' if n > 1 else ''} "
                                     f"(the model's halting features are {width} wide)")
            if not all(x > 0 for x in doc["head"]["std"]):
                raise ValueError("head.std holds a scale that is not positive")
            record = _checked_record(doc["record"], law)
            with on_host():                 # built on the host, then moved: whatever torch's default device
                head = HaltingHead(width).to(device)
            with torch.no_grad():
                for k in shapes:
                    p = getattr(head, k)
                    p.copy_(torch.tensor(doc["head"][k], dtype=p.dtype, device=p.device).reshape(p.shape))
            return cls(law, head, record, reads)
        except (KeyError, TypeError, ValueError, RuntimeError) as e:
            raise RaspFileError(where, f"not a halting fit ({type(e).__name__}: {e})") from None


def feature_width(model) -> int:
    """The width of what a fitted halting head reads (`trajectory`): the read-out
    state, or a marker unit's one logit (a compiled start's head reads one number
    whatever this says: `Halting.from_json`)."""
    return 1 if getattr(model.cfg, "halt_marker", False) else int(model.cfg.d_model)


def _number(x) -> float:
    if not is_finite_number(x):
        raise ValueError(f"{x!r} is not a finite number")
    return float(x)


def _checked_record(record, law: DepthLaw) -> dict:
    """The fit's record as `rasp eval` prints it: lengths, and the law it states."""
    ints = lambda v: isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)  # noqa: E731
    stated = record.get("depth_law") if isinstance(record, dict) else None
    if not (isinstance(stated, dict) and ints(record.get("lengths")) and record["lengths"]
            and ints(stated.get("misses", [])) and stated.get("slope") == law.slope
            and stated.get("intercept") == law.intercept):
        raise ValueError("record does not state the fit (lengths, depth_law)")
    return dict(record)


def held_in_lengths(data, hp) -> range:
    return range(data.task.min_n, hp.max_train_n + 1)


def saved_or_fit(run_dir: Optional[Path], step: int, model, data, hp, seed: int, device="cpu") -> Halting:
    """The run's fit of checkpoint `step` (RUN/halting.json), or a new fit,
    saved there when `run_dir` is given (fitted once, read by every command)."""
    from rasp.readfile import read_json
    from trainer.run.checkpoint import write_json_atomic
    path = Path(run_dir) / HALTING_FILE if run_dir is not None else None
    if path is not None and path.is_file():
        try:
            doc = read_json(path)
            if isinstance(doc, dict) and doc.get("step") == step and current(doc, model):
                return Halting.from_json(doc, path, feature_width(model), device)
        except RaspFileError as e:      # a cache: a damaged one is fitted again, never used
            print(f"warning: {printable(str(path))}: {printable(e.message)}; fitting it again", file=sys.stderr)
    halting = calibrate(model, data, held_in_lengths(data, hp), seed, device=device, beyond=checked_beyond(data, hp))
    if path is not None:
        try:
            write_json_atomic(path, halting.to_json(step))
        except OSError:         # a run folder we may not write (read-only copy): this fit serves this command
            pass
    return halting


def current(doc: dict, model) -> bool:
    """Whether a saved fit (halting.json, an export's) is what `calibrate` makes of this model
    now: a compiled start's fit made before issue 54 fitted a probe, and is made again."""
    return not (compiled_start(model) and doc.get("reads", "state") == "state")


def checked_beyond(data, hp) -> range:
    """The sizes past the training ones that a compiled start's clock is checked on: up to
    the size it was compiled for (its guard's, trainer/fan/presets.py init_defaults)."""
    return range(hp.max_train_n + 1, (hp.guard_max_n or hp.max_train_n) + 1)


def best_step(acc: torch.Tensor, trained_at: int) -> int:
    """The 1-based step of highest exact match acc [T]; the step the model was
    trained to answer at (T(n) of a held-in length) when it is among the best,
    else the first best one."""
    top = float(acc.max())
    if 1 <= trained_at <= len(acc) and float(acc[trained_at - 1]) >= top:
        return trained_at
    return int(acc.argmax()) + 1


def calibrate(model, data, lengths, seed: int, samples: int = CALIBRATION_SAMPLES, device="cpu",
              beyond=()) -> Halting:
    """Fit the depth law and the halting head on `lengths` (the run's
    training lengths), `samples` fresh inputs each; a compiled start's head
    is read instead (its clock, checked on these inputs and CLOCK_CHECK_SAMPLES
    of each size in `beyond`, or T(n) from the program)."""
    compiled = compiled_start(model)
    reads = ("clock" if has_clock(model) else "program") if compiled else "state"
    best, feats, done, held_in, misses = [], [], [], {}, {}
    for n in lengths:
        rng = np.random.default_rng([seed, n, 24])
        b = data.batch(rng, [n] * samples, train=True).to(device)
        t_max = int(b.steps.max()) + data.task.t_max_extra
        logits, f = trajectory(model, b.tokens, b.mask, t_max, reads)
        stats = stopping.step_stats(logits, b.targets, b.mask)
        acc = stats.correct.float().mean(1)                         # [T]
        best.append(best_step(acc, int(b.steps[0])))
        held_in[n] = float(acc.max())
        if reads == "clock" and data.task.draw_exact is None:      # (a file's sampler: sizes as named, below)
            _count_misses(misses, logits, b)
        elif reads == "state":
            t = torch.arange(1, t_max + 1, device=f.device)[:, None]
            feats.append(f.reshape(-1, f.shape[-1]))
            done.append((t >= b.steps[None, :]).reshape(-1))
    law = DepthLaw.fit(list(lengths), best)
    lengths = [int(n) for n in lengths]
    fitted = law.steps(torch.tensor(lengths, device="cpu")).tolist()       # read on the host
    record = {"lengths": lengths, "samples": samples, "best_step": best,
              "best_exact_match": [held_in[n] for n in lengths],
              "depth_law": {"slope": law.slope, "intercept": law.intercept,
                            "misses": [n for n, f, b in zip(lengths, fitted, best) if f != b]}}
    if compiled:
        head, reads, record["head"] = _compiled_head(model, data, reads, misses, lengths, samples, beyond, seed,
                                                     device)
        return Halting(law, head, record, reads)
    with torch.device(device):      # made where its features are
        head = HaltingHead(feats[0].shape[-1])
    trained = getattr(model.cfg, "halt_unit", False)       # the model's own unit (--halt): read, not fitted
    feats, done = torch.cat(feats), torch.cat(done)
    if trained:
        with torch.no_grad():
            if getattr(model.cfg, "halt_marker", False):
                head.weight.fill_(1.0)          # the feature is already the unit's logit
            else:
                head.weight.copy_(model.halt_weight)
                head.bias.copy_(model.halt_bias)
            loss = float(F.binary_cross_entropy_with_logits(head.logit(feats), done.float()))
    else:
        loss = head.fit(feats, done)
    if not trained:         # what decides "done"
        unit = tuple(head.parameters())
    elif getattr(model, "clock", None) is not None:
        unit = tuple(model.clock.parameters())
    else:
        unit = (model.halt_weight, model.halt_bias)
    record["head"] = {"parameters": sum(p.numel() for p in unit), "fit_loss": loss,
                      "trained_with_model": bool(trained), "reads": "state"}
    return Halting(law, head, record)


def _count_misses(misses: dict, logits: torch.Tensor, b) -> None:
    """Add, per size, the inputs of batch `b` whose compiled clock does not stop at T(n)."""
    wrong = (clock_stops(logits, b.mask) != b.steps).cpu()
    for n, bad in zip(b.lengths.tolist(), wrong.tolist()):
        misses[int(n)] = misses.get(int(n), 0) + int(bad)


def _compiled_head(model, data, reads: str, misses: dict, lengths: list, samples: int, beyond, seed: int,
                   device) -> tuple:
    """(head, what it reads, its record) of a compiled start: its clock, once it stops at
    T(n) on every input checked (the calibration inputs and CLOCK_CHECK_SAMPLES of each
    size in `beyond`, of exactly that size), else T(n) from the program.  A task whose
    inputs come from files checks `samples` inputs of exactly each calibration size here
    (its sampler gives a size it lacks as the nearest it has)."""
    with torch.device(device):
        head = HaltingHead(1)
    counts = {n: CLOCK_CHECK_SAMPLES for n in beyond}
    if data.task.draw_exact is None:
        inputs = len(lengths) * samples         # counted in calibrate's loop
    else:
        inputs, counts = 0, {**{n: samples for n in lengths}, **counts}
    if reads == "clock" and counts:
        rng = np.random.default_rng([seed, 54])
        for b in exact_size_batches(data, counts, rng):
            b = b.to(device)
            _count_misses(misses, model.all_steps(b.tokens, int(b.steps.max()) + data.task.t_max_extra), b)
            inputs += len(b)
    sizes = sorted(misses)
    record = {"parameters": 0, "fit_loss": None, "trained_with_model": False, "compiled": True, "reads": reads,
              "checked": {"sizes": size_list(sizes), "inputs": inputs} if reads == "clock" else None}
    if reads == "clock":
        with torch.no_grad():
            head.weight.fill_(1.0)          # the feature is the clock's margin
            head.bias.fill_(-CLOCK_MARGIN)
        wrong = {n: k for n, k in misses.items() if k}
        if not wrong:
            return head, "clock", record
        record.update(reads="program", why=f"the compiled halting clock stopped {sum(wrong.values())} of {inputs} "
                      f"checked inputs away from T(n) (sizes {size_list(sorted(wrong))})")
        return head, "program", record
    record["why"] = ("the compiled model has no halting clock (its loop count is not known at the scored "
                     "positions as the input is read: compiler/clock.py)")
    return head, "program", record
