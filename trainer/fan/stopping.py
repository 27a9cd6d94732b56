"""When to stop looping at test time (Fan et al. §4.3).

* oracle: run each sample's T(n) iterations.
* confidence (Eq. 2, as Fan et al.'s code runs it, test_func.py:19-40): run
  up to T_max iterations and pick ONE step for the whole test batch (one
  length): the step whose decoded outputs have the lowest cross-entropy
  against their own argmax, averaged over every scored token of the batch.
* confidence_sample: the same criterion per sample (each input its own
  step).  Both need all T_max iterations.
* threshold (footnote 9): stop a sample at the first step whose confidence
  cross-entropy is below a threshold; finished samples leave the batch, so
  the compute is really saved.

Rules that read more than the confidence (issue 24: on the small models we
train, outputs saturate, so Eq. 2 cannot tell T(n) from its neighbours):

* depth_law (the default of every command before issue 39): the depth the model itself needs,
  read off held-in lengths and extrapolated.  On each training length the
  step with the best exact match is found (labels from the task program, as
  in training; T(n) itself when it is among the best); a line step = a*n + b
  is fitted through those points (Theil-Sen: the median of the pairwise
  slopes, robust to a bad length) and each input of size n stops at
  round(a*n + b).  It needs no T(n) at test time, only the input's size, and
  runs just the chosen steps.  It is a depth schedule learned from the
  training lengths, not a per-input decision of the model, and it assumes
  the depth is linear in n (T(n) = n or n + 1 for the Fan tasks but
  multiplication, T = n1 * n2).
* stable: the first step after which the decoded answer stays the same for
  `STABLE_K` more steps (a fixed point of the loop's output; the compiled
  `loop N until stable` halts the same way on its state).
* head (the default of every command, rasp/stop.py DEFAULT_RULE): a halting
  probe, a logistic unit on the step's pooled state trained
  by step supervision to say "done" once t >= T(n) (ACT's halting unit,
  Graves 2016, sigmoid(w.h + b); PonderNet's per-step lambda_t, Banino et al.
  2021, with the known T(n) as the target instead of its prior); stops at the
  first step where it says done.  Fitted on the trained model's detached
  states (trainer/fan/halting.py), so the model's weights are untouched; or,
  for a model trained with `--halt`, the model's own unit, trained with it
  (trainer/fan/objectives.py settle_loss), so nothing is fitted; a marker
  unit (`--recipe marker`) and the halting clock of `rasp train`'s default
  recipe (`--recipe clock`, a small looped network of its own beside the
  answering model) stop at the first step where every position says done
  (trainer/fan/halting.py trajectory).  A compiled start's head is not
  fitted (issue 54): it reads the compiled halting clock (the first step
  whose output margin says done), or, where the compiled model has no clock
  or the clock was not verified to stop at T(n), T(n) from the program
  (trainer/fan/halting.py calibrate).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from rasp.stop import CALIBRATED, DEFAULT_RULE, RULE_HELP, RULES, STABLE_K, THRESHOLD  # noqa: F401


@dataclass
class StepStats:
    conf_ce: torch.Tensor   # [T, B] mean CE of each step's output against its own argmax
    true_ce: torch.Tensor   # [T, B] mean CE against the true targets
    correct: torch.Tensor   # [T, B] exact match at each step
    pred: torch.Tensor      # [T, B, L] argmax ids
    scored: torch.Tensor    # [B] scored positions per sample (weights of the batch rule's token mean)
    mask: Optional[torch.Tensor] = None      # [B, L] scored positions
    features: Optional[torch.Tensor] = None  # [T, B, d] pooled state the halting head reads


def masked_mean(x, mask):
    """Mean over the last dim of x [..., L] where mask [..., L] (broadcast) is True."""
    m = mask.to(x.dtype)
    return (x * m).sum(-1) / m.sum(-1).clamp(min=1)


def confidence_ce(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """logp [..., L, V] -> [...]: CE of the greedy output against itself."""
    return masked_mean(-logp.max(-1).values, mask)


def step_stats(all_logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor,
               features: Optional[torch.Tensor] = None) -> StepStats:
    logp = F.log_softmax(all_logits.float(), dim=-1)                  # [T, B, L, V]
    pred = logp.argmax(-1)
    tgt = targets.unsqueeze(0).expand_as(pred)
    true = -logp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    correct = ((pred == tgt) | ~mask).all(-1)
    return StepStats(confidence_ce(logp, mask), masked_mean(true, mask), correct, pred,
                     mask.sum(-1).to(logp.dtype), mask, features)


def choose_steps(rule: str, stats: StepStats, oracle_steps: torch.Tensor, sizes: Optional[torch.Tensor] = None,
                 halting=None, threshold: float = THRESHOLD) -> torch.Tensor:
    """1-based chosen step per sample [B].  `sizes` (the problem size n of
    each input) and `halting` (trainer/halting.Halting, fitted on held-in
    lengths) are what depth_law and head read."""
    T = stats.conf_ce.shape[0]
    if rule == "oracle":
        return oracle_steps.clamp(1, T)
    if rule == "threshold":
        return threshold_steps(stats.conf_ce, threshold)
    if rule == "stable":
        return stable_steps(stats.pred, stats.mask, STABLE_K)
    if rule == "depth_law":
        return halting.law.steps(sizes).clamp(1, T)
    if rule == "head":
        if halting.reads == "program":      # a compiled start without a verified clock: the program's T(n)
            return oracle_steps.clamp(1, T)
        return first_done(halting.head.done(stats.features))
    if rule == "confidence":
        t = int(batch_confidence_ce(stats).argmin()) + 1
        return torch.full_like(oracle_steps, t)
    if rule == "confidence_sample":
        return stats.conf_ce.argmin(0) + 1
    raise ValueError(f"rule {rule!r} is not chosen from all steps")


def stable_steps(pred: torch.Tensor, mask: Optional[torch.Tensor], k: int) -> torch.Tensor:
    """[B]: the first step t (1-based) whose decoded answer (scored positions
    of pred [T, B, L]) equals that of each of the k steps after it; a sample
    that never settles gets the last step that has k successors (T - k)."""
    T = pred.shape[0]
    if T <= k:
        return torch.full(pred.shape[1:2], T, dtype=torch.long, device=pred.device)
    scored = torch.ones_like(pred[0], dtype=torch.bool) if mask is None else mask
    same = ((pred[1:] == pred[:-1]) | ~scored).all(-1)          # [T-1, B]: step t+1 answers as step t
    # settled[t] = same[t] & ... & same[t+k-1]: the answer of step t+1 (1-based) holds k more steps
    settled = same.unfold(0, k, 1).all(-1)                       # [T-k, B]
    return first_done(settled)


def threshold_steps(conf_ce: torch.Tensor, threshold: float) -> torch.Tensor:
    """[B]: what `threshold_run` chooses, read off a whole trajectory's
    confidence CE [T, B]: the first step below `threshold`, else the most
    confident step."""
    below = conf_ce < threshold
    return torch.where(below.any(0), first_done(below), conf_ce.argmin(0) + 1)


def first_done(done: torch.Tensor) -> torch.Tensor:
    """[B]: the first step (1-based) where done [T, B] is true; the last step if never."""
    T = done.shape[0]
    idx = torch.arange(1, T + 1, device=done.device)[:, None].expand_as(done)
    return torch.where(done, idx, torch.full_like(idx, T)).min(0).values


def iterations_run(rule: str, chosen: torch.Tensor, t_max: int, conf_ce: Optional[torch.Tensor] = None,
                   threshold: float = THRESHOLD) -> torch.Tensor:
    """[B]: the loop iterations a sample needs under `rule`: the chosen step
    for rules that decide as they go (oracle, depth_law, head; threshold
    where a step got below it, read off conf_ce [T, B]), k more for stable
    (it must see the answer hold), every step for Eq. 2."""
    if rule in ("oracle", "depth_law", "head"):
        return chosen
    if rule == "threshold" and conf_ce is not None:
        return torch.where(conf_ce.lt(threshold).any(0), chosen, torch.full_like(chosen, t_max))
    if rule == "stable":
        return (chosen + STABLE_K).clamp(max=t_max)
    return torch.full_like(chosen, t_max)


def batch_confidence_ce(stats: StepStats) -> torch.Tensor:
    """[T]: each step's confidence CE averaged over all scored tokens of the batch."""
    w = stats.scored
    return (stats.conf_ce * w).sum(1) / w.sum().clamp(min=1)


def confidence_finds(stats: StepStats, oracle_steps: torch.Tensor) -> torch.Tensor:
    """[B] bool: Eq. 2 applied to each sample alone picks its own T(n)."""
    return choose_steps("confidence_sample", stats, oracle_steps) == oracle_steps


def pick(stats: StepStats, chosen: torch.Tensor):
    """Exact match and predictions at each sample's chosen step."""
    idx = torch.arange(chosen.shape[0], device=chosen.device)
    return stats.correct[chosen - 1, idx], stats.pred[chosen - 1, idx]


@torch.no_grad()
def threshold_run(model, tokens, mask, threshold: float, t_max: int):
    """Early exit per sample.  Returns (pred ids [B, L], chosen steps [B],
    iterations each sample ran [B]).  A sample that never gets below the
    threshold keeps its most confident step."""
    e = model.encode(tokens)
    h = model.initial_state(e)
    B = tokens.shape[0]
    active = torch.arange(B, device=tokens.device)
    chosen = torch.full((B,), t_max, dtype=torch.long, device=tokens.device)
    best_ce = torch.full((B,), float("inf"), device=tokens.device)
    ran = torch.full((B,), t_max, dtype=torch.long, device=tokens.device)
    pred = torch.zeros(mask.shape, dtype=torch.long, device=tokens.device)
    for t in range(1, t_max + 1):
        h = model.step(h, e)
        logp = F.log_softmax(model.decode(h).float(), dim=-1)
        ce = confidence_ce(logp, mask[active])
        better = ce < best_ce[active]
        upd = active[better]
        best_ce[upd] = ce[better]
        pred[upd] = logp.argmax(-1)[better]
        chosen[upd] = t
        done = ce < threshold
        ran[active[done]] = t
        if bool(done.all()):
            break
        keep = ~done
        active, h, e = active[keep], h[keep], e[keep]
    return pred, chosen, ran
