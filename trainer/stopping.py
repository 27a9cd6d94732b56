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
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

RULES = ("oracle", "confidence", "confidence_sample", "threshold")
# one line each, for --help
RULE_HELP = {"oracle": "each input's own T(n) iterations (the task's known count)",
             "confidence": "one step for all inputs of a length: the lowest mean confidence cross-entropy "
                           "over T_max iterations (Fan et al.'s Eq. 2)",
             "confidence_sample": "the same criterion, each input its own step",
             "threshold": "stop each input at its first step whose confidence cross-entropy is below "
                          "--threshold"}


@dataclass
class StepStats:
    conf_ce: torch.Tensor   # [T, B] mean CE of each step's output against its own argmax
    true_ce: torch.Tensor   # [T, B] mean CE against the true targets
    correct: torch.Tensor   # [T, B] exact match at each step
    pred: torch.Tensor      # [T, B, L] argmax ids
    scored: torch.Tensor    # [B] scored positions per sample (weights of the batch rule's token mean)


def _masked_mean(x, mask):
    m = mask.to(x.dtype)
    return (x * m).sum(-1) / m.sum(-1).clamp(min=1)


def confidence_ce(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """logp [..., L, V] -> [...]: CE of the greedy output against itself."""
    return _masked_mean(-logp.max(-1).values, mask)


def step_stats(all_logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> StepStats:
    logp = F.log_softmax(all_logits.float(), dim=-1)                  # [T, B, L, V]
    pred = logp.argmax(-1)
    tgt = targets.unsqueeze(0).expand_as(pred)
    true = -logp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    correct = ((pred == tgt) | ~mask).all(-1)
    return StepStats(confidence_ce(logp, mask), _masked_mean(true, mask), correct, pred,
                     mask.sum(-1).to(logp.dtype))


def choose_steps(rule: str, stats: StepStats, oracle_steps: torch.Tensor) -> torch.Tensor:
    """1-based chosen step per sample [B]."""
    T = stats.conf_ce.shape[0]
    if rule == "oracle":
        return oracle_steps.clamp(1, T)
    if rule == "confidence":
        t = int(batch_confidence_ce(stats).argmin()) + 1
        return torch.full_like(oracle_steps, t)
    if rule == "confidence_sample":
        return stats.conf_ce.argmin(0) + 1
    raise ValueError(f"rule {rule!r} is not chosen from all steps")


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
