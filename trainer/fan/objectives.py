"""How a model is trained and decoded, per objective.

FAP (full-answer prediction): the loss is the cross-entropy at the scored
positions of the output after each sample's own number of iterations —
T_i for adaptive models (Fan et al. Eq. 1), a fixed count for baselines.

NTP (next-token prediction): teacher-forced next-token loss over the solved
sequence; evaluation decodes greedily from the prompt `q >`.
"""
from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

from trainer.fan import stopping
from rasp.stop import THRESHOLD
from trainer.fan.halting import trajectory
from trainer.settings.hparams import HParams, clock_plan


def iterations(spec, hp, batch) -> torch.Tensor:
    fixed = spec.iterations(hp)
    return batch.steps if fixed is None else torch.full_like(batch.steps, fixed)


def train_step_outputs(spec, hp, model, batch, tokens_per_shard=None, step=None):
    """-> (loss, exact-match fraction) on a training batch at optimiser step
    `step` (None: a batch outside training, such as the guard's, scored by the
    recipe in force at the end)."""
    reduction = getattr(hp, "loss_reduction", "sample")
    settle, unsure, halt = getattr(hp, "settle", 0), getattr(hp, "unsure", 0.0), getattr(hp, "halt", 0.0)
    if halt and not clock_due(hp, step, batch.need is not None):
        halt = 0.0
    if spec.adaptive and (settle or unsure or halt) and (step is None or step >= getattr(hp, "halting_from", 0)):
        return settle_loss(model, batch, settle, unsure, reduction, tokens_per_shard, halt,
                           getattr(hp, "halt_past", HParams.halt_past))
    return loss_and_accuracy(model(batch.tokens, iterations(spec, hp, batch)), batch, reduction, tokens_per_shard)


def clock_due(hp, step, needs: bool = False) -> bool:
    """Whether a halting clock trains on optimiser step `step` (`--clock-every`, or every
    step where `--clock-reach auto` teaches each position's need, `needs`: clock_plan): the clock
    has parameters of its own, so on the other steps it is not run and its optimiser state
    stands still (no gradient: AdamW skips it); the answering model trains on every step.
    A step outside training (None) scores the clock."""
    every = clock_plan(hp, needs)[1]
    return step is None or every <= 1 or getattr(hp, "halt_target", "answer") != "clock" or step % every == 0


def steps_after_t(settle: int, halt: float, halt_past: int) -> int:
    """The most loop steps `settle_loss` runs past an input's T(n)."""
    return max(settle, halt_past if halt else 0)


def settle_loss(model, batch, settle: int, unsure: float, reduction: str = "sample", tokens_per_shard=None,
                halt: float = 0.0, halt_past: int = HParams.halt_past):
    """The loss of a looped model that must know when it is done (issue 39).

    * The answer at T(n) (Fan et al.'s Eq. 1) and at each of the `settle`
      steps after it, averaged: the answer becomes a fixed point of the loop
      once reached, so stopping a step or two late costs nothing.  After
      Bansal et al. 2022 ("End-to-end Algorithm Synthesis with Recurrent
      Networks: Logical Extrapolation Without Overthinking"), whose
      progressive loss trains a recurrent network to stay right for more
      iterations than a problem needs; here T(n) is known for every training
      input, so the loss is placed on the steps from T(n) on.
    * `unsure` times the divergence KL(uniform || p_t) of every scored token
      at every step t < T(n): before T(n) the model is trained not to commit,
      so its first confident step is T(n) and a confidence threshold stops it
      there, per input (the early exit of Fan et al.'s footnote 9 and of
      Schuster et al. 2022, "Confident Adaptive Language Modeling", whose exit
      rule is a confidence threshold; the training signal is ours).  The mean
      runs over every (step, token) before T(n) of the batch, whatever
      `reduction` (under DDP: of this shard).
    * `halt` times the binary cross-entropy of the model's halting unit
      (model/looped.py `done_logits`, averaged over the scored positions)
      against "t >= T(n)", at every step t up to T(n) + `halt_past`: ACT's
      halting unit (Graves 2016, "Adaptive Computation Time for Recurrent
      Neural Networks") and PonderNet's lambda_t (Banino et al. 2021), with
      the step supervision the loop already has (each training input's T(n))
      as the target in place of their ponder cost or prior.  The unit is
      trained with the model, so the trunk learns to make "done" readable;
      the answer is still scored at T(n) only (unless `settle`).

    Returns (loss, exact match at T(n))."""
    T = batch.steps
    module = getattr(model, "module", model)        # a DistributedDataParallel wrapper's model
    if halt and not settle and not unsure and getattr(module, "clock", None) is not None:
        # the answer at T(n) only, from a trunk the clock does not read: each input runs its own
        # T(n), and the clock its own T(n) + halt_past, the last step its loss is taught at
        at_t, done = model(batch.tokens, T, done_steps=T + halt_past)
        loss, acc = loss_and_accuracy(at_t, batch, reduction, tokens_per_shard)
        return loss + halt * unit_loss(module, done, batch, halt_past), acc
    if halt:        # [T + settle, B, L, V], [T + halt_past, B, L]
        every, done = model(batch.tokens, T + settle, every=True, done_steps=int((T + halt_past).max()))
    else:
        every = model(batch.tokens, T + settle, every=True)
    rows = torch.arange(len(T), device=T.device)
    loss, acc = loss_and_accuracy(every[T - 1, rows], batch, reduction, tokens_per_shard)
    for k in range(1, settle + 1):
        loss = loss + loss_and_accuracy(every[T - 1 + k, rows], batch, reduction, tokens_per_shard)[0]
    loss = loss / (settle + 1)
    if unsure:
        logp = F.log_softmax(every.float(), dim=-1)
        kl = -logp.mean(-1) - math.log(logp.shape[-1])               # KL(uniform || p) per token [T, B, L]
        t = torch.arange(1, every.shape[0] + 1, device=T.device)[:, None, None]
        before = (t < T[None, :, None]) & batch.mask[None]
        loss = loss + unsure * (kl * before).sum() / before.sum().clamp(min=1)
    if halt:
        loss = loss + halt * unit_loss(module, done, batch, halt_past)
    return loss, acc


def unit_loss(module, done: torch.Tensor, batch, halt_past: int) -> torch.Tensor:
    """The loss of the model's halting unit on what it said after every step (`done`:
    `clock_targets` for a model with a clock), by what it is taught, on `batch`."""
    target = halting_target(module.cfg)
    if target == "global":
        return global_clock_loss(module.clock_unit(done), done[..., 1], batch.steps, halt_past)
    return halting_unit_loss(done, batch.steps, batch.mask, target, halt_past, batch.need)


def halting_target(cfg) -> str:
    """What a model's halting unit is taught (`rasp train --halt-target`), read off its config."""
    if getattr(cfg, "halt_clock", 0):
        return "global" if getattr(cfg, "clock_global_heads", 0) else "clock"
    return "marker" if getattr(cfg, "halt_marker", False) else "answer"


def first_positions(T: torch.Tensor, length: int) -> torch.Tensor:
    """[B, length] the clock's targets where the loop counts the first T(n) positions:
    position i < T(n) is done from step i + 1 on (a marker passing one position per
    step), the others at every step (0)."""
    i = torch.arange(length, device=T.device)
    return torch.where(i < T[:, None], i + 1, 0)


def halting_unit_loss(done: torch.Tensor, T: torch.Tensor, mask: torch.Tensor, target: str,
                      halt_past: int, need=None) -> torch.Tensor:
    """The binary cross-entropy of the halting unit's logits done [T', B, L]
    (after steps 1..T') at every step up to T(n) + halt_past.

    * answer: the unit on the answer's averaged state against "t >= T(n)".
      Beyond the trained lengths it has to count the steps against the
      input, and that count does not extrapolate (bench/BENCH.md).
    * marker: the unit at every position i.  At a position inside the
      loop's count (i < T(n)): "a marker moved one position per step has
      passed i", t > i.  The count becomes a local fact the loop can carry
      as it carries the answer: a shifted channel, as Fan et al.'s programs
      shift their bits one position per step (parity).  At the positions
      from T(n) on, which see every counted position: "t >= T(n)", the
      answer unit's target.  So every position says done from t = T(n) on
      and, before it, at least one does not.  Both parts are needed: in a
      model without positions (Fan et al.'s), the positions of a constant
      prefix (1 1 1 1 ...) are indistinguishable, so no marker can pass
      them one by one; the later positions count them as the answer unit
      does.  Beyond the trained lengths the count fires early and the
      marker holds it back.
    * clock: the marker alone, on a looped network of its own
      (model/looped.py `halt_clock`) with a BOS position and an attention
      window of a few positions back, so a constant prefix's positions
      differ by their distance to BOS and the marker moves one position
      back alike at every length.  The positions from T(n) on are "done"
      at every step: the window keeps the clock from counting the input,
      which is what failed beyond the trained lengths.  The answering
      trunk never sees this loss.  Where the batch carries `need` [B, L]
      (the program's own: rasp/interpreter/needs.py), position i is done
      from step need_i on: the positions the loop counts, wherever they
      are (the ones of `loop count(seq, 1)`, a run still eroding); the
      first T(n) positions with need_i = i + 1 where the loop counts the
      query's positions, the same targets as without it.
    For marker and clock, the AND of all positions, softened (minus the
    log-sum-exp of the negated logits, below their minimum), is also
    taught "t >= T(n)", so the position that decides is the one trained
    most.  Both need T(n) <= the input's positions (refused otherwise:
    trainer/settings/validate.py)."""
    t = torch.arange(1, done.shape[0] + 1, device=T.device)[:, None]
    taught = t <= (T + halt_past)[None]                                # [T', B]
    reached = (t >= T[None]).float()
    if target == "answer":
        z = stopping.masked_mean(done, mask)                            # [T', B]: the unit on the mean state
        return F.binary_cross_entropy_with_logits(z.float(), reached, reduction="none")[taught].mean()
    if target == "clock":
        if need is None:
            need = first_positions(T, done.shape[-1])
        else:       # the program's own count, also where --past-t scores the answer later
            reached = (t >= need.amax(-1)[None]).float()
        passed = t[..., None] >= need[None]                             # [T', B, L]
    else:
        i = torch.arange(done.shape[-1], device=T.device)
        outside = (i >= T[:, None])[None]                               # [1, B, L]: past the loop's count
        passed = (t[..., None] > i) | (outside & (t >= T[None])[..., None])
    z = done.float()
    per_position = F.binary_cross_entropy_with_logits(z, passed.float(), reduction="none")[taught].mean()
    every = -torch.logsumexp(-z, dim=-1)                                # [T', B]: a soft AND of the positions
    pooled = F.binary_cross_entropy_with_logits(every, reached, reduction="none")[taught].mean()
    return per_position + pooled


def global_clock_loss(unit: torch.Tensor, marker: torch.Tensor, T: torch.Tensor, halt_past: int) -> torch.Tensor:
    """The loss of a clock with global reach (`--clock-reach global`) after steps
    1..T': its unit [T', B] (the sum of a score over the positions, model/looped.py
    `clock_unit`) taught "t >= T(n)" at every step up to T(n) + halt_past, and its marker
    [T', B, L] taught at every position i "passed", t > i, whatever T(n): a step count
    made of positions, which the window carries alike at every length and the sum
    weighs against the input's counts (parity: passed minus bits; a count of ones:
    passed minus ones)."""
    t = torch.arange(1, unit.shape[0] + 1, device=T.device)[:, None]
    taught = t <= (T + halt_past)[None]                                # [T', B]
    reached = (t >= T[None]).float()
    done = F.binary_cross_entropy_with_logits(unit.float(), reached, reduction="none")[taught].mean()
    i = torch.arange(marker.shape[-1], device=T.device)
    passed = (t[..., None] > i).expand(-1, marker.shape[1], -1).float()      # [T', B, L]
    marks = F.binary_cross_entropy_with_logits(marker.float(), passed, reduction="none")[taught].mean()
    return done + marks


def loss_and_accuracy(logits, batch, reduction: str = "sample", tokens_per_shard=None):
    """FAP loss and exact match of the logits [B, L, V] each sample stopped at.

    reduction "token" (Fan et al.'s code, train.py:89): cross-entropy averaged
    over every scored token of the batch, so long answers weigh more;
    "sample": each sample's token-averaged loss, averaged over samples.
    Under DDP, "token" divides by the mean scored-token count of a shard
    (`tokens_per_shard`), so the averaged shard gradients equal the
    full-batch gradient exactly; alone it is this batch's count."""
    tok = F.cross_entropy(logits.float().transpose(1, 2), batch.targets, reduction="none")
    m = batch.mask.float()
    if reduction == "token":
        denom = float(m.sum()) if tokens_per_shard is None else tokens_per_shard
        loss = (tok * m).sum() / max(denom, 1.0)
    elif reduction == "sample":
        loss = ((tok * m).sum(1) / m.sum(1).clamp(min=1)).mean()
    else:
        raise ValueError(f"unknown loss reduction {reduction!r}")
    with torch.no_grad():
        pred = logits.argmax(-1)
        acc = exact_match(pred, batch).float().mean()
    return loss, acc


def exact_match(pred: torch.Tensor, batch) -> torch.Tensor:
    """Per sample [B]: every scored position of `pred` [B, L] equals the target."""
    return ((pred == batch.targets) | ~batch.mask).all(-1)


@torch.no_grad()
def oracle_correct(spec, hp, model, batch) -> torch.Tensor:
    """Exact match per sample under the oracle stop (training's periodic evaluation):
    `evaluate_batch`'s "correct" with rule "oracle", for a looped model from each input's
    answer at T(n) alone (`answer_at_t`)."""
    if spec.objective == "ntp" or not spec.adaptive:
        return evaluate_batch(spec, hp, model, batch, "oracle", 0)["correct"]
    return exact_match(answer_at_t(model, batch), batch)


@torch.no_grad()
def answer_at_t(model, batch) -> torch.Tensor:
    """The tokens a looped model answers at each input's T(n) [B, L]: the prediction of
    `evaluate_batch`'s "oracle" rule, from the input's own steps and one read-out instead of
    every step's read-out and statistics."""
    model.eval()
    logits = model(batch.tokens, batch.steps.clamp(min=1))       # the step the oracle rule picks
    return F.log_softmax(logits.float(), dim=-1).argmax(-1)         # as stopping.step_stats reads it


@torch.no_grad()
def evaluate_batch(spec, hp, model, batch, rule: str, t_extra: int, threshold: float = THRESHOLD,
                   halting=None) -> dict:
    """Exact match per sample plus the chosen step, the iterations run and,
    for adaptive models, per-step curves (Fan et al. Fig. 6) and the exact
    match at T(n) ("oracle_correct") beside the rule's.  `halting`: the
    held-in fit the depth_law and head rules read (trainer/fan/halting.py)."""
    model.eval()
    t0 = time.perf_counter()
    out: dict
    if spec.objective == "ntp":
        k = spec.iterations(hp)
        pred = ntp_generate(model, batch, k)
        out = {"correct": exact_match(pred, batch), "pred": pred,
               "chosen": torch.full_like(batch.steps, k), "ran": torch.full_like(batch.steps, k)}
    elif not spec.adaptive:
        k = spec.iterations(hp)
        pred = model(batch.tokens, k).argmax(-1)
        correct = exact_match(pred, batch)
        out = {"correct": correct, "pred": pred, "chosen": torch.full_like(batch.steps, k),
               "ran": torch.full_like(batch.steps, k)}
    else:
        t_max = int(batch.steps.max()) + t_extra
        if rule in stopping.CALIBRATED and halting is None:
            raise ValueError(f"rule {rule!r} needs the held-in fit (trainer/halting.calibrate)")
        if rule == "threshold":
            pred, chosen, ran = stopping.threshold_run(model, batch.tokens, batch.mask, threshold, t_max)
            correct = exact_match(pred, batch)
            at_t = model(batch.tokens, batch.steps).argmax(-1)
            out = {"correct": correct, "pred": pred, "chosen": chosen, "ran": ran,
                   "oracle_correct": exact_match(at_t, batch)}
        else:
            if rule == "head":
                logits, features = trajectory(model, batch.tokens, batch.mask, t_max, halting.reads)
            else:
                logits, features = model.all_steps(batch.tokens, t_max), None
            stats = stopping.step_stats(logits, batch.targets, batch.mask, features)
            chosen = stopping.choose_steps(rule, stats, batch.steps, batch.lengths, halting)
            correct, pred = stopping.pick(stats, chosen)
            out = {"correct": correct, "pred": pred, "chosen": chosen, "ran": stopping.iterations_run(rule, chosen, t_max),
                   "oracle_correct": stopping.pick(stats, batch.steps.clamp(1, t_max))[0],
                   "curve_conf_ce": stats.conf_ce.mean(1), "curve_true_ce": stats.true_ce.mean(1),
                   "curve_acc": stats.correct.float().mean(1)}
    out["seconds"] = time.perf_counter() - t0
    return out


@torch.no_grad()
def ntp_decode(model, batch, k: int) -> torch.Tensor:
    """Greedy decoding from each prompt; exact match of the generated answer."""
    return exact_match(ntp_generate(model, batch, k), batch)


@torch.no_grad()
def ntp_generate(model, batch, k: int) -> torch.Tensor:
    """Greedy decoding from each prompt: output ids [B, L] at the scored
    positions (the answer's), 0 elsewhere."""
    meta = model.cfg.extra
    out_vals, in_id = meta["output_tokens"], {v: i for i, v in enumerate(meta["input_tokens"])}
    to_input = torch.tensor([in_id[v] for v in out_vals], device=batch.tokens.device)
    pred = torch.zeros_like(batch.targets)
    for p in batch.prompt_len.unique().tolist():          # same prompt length -> decode together
        rows = (batch.prompt_len == p).nonzero().squeeze(1)
        m = batch.mask[rows].sum(1)
        n_ans = int(m.max())
        seq = batch.tokens[rows, :p]
        gen = []
        for _ in range(n_ans):
            nxt = model(seq, k)[:, -1].argmax(-1)
            gen.append(nxt)
            # a read-out wider than the outputs (read_out_dims) can pick a logit no token
            # has: that answer is already wrong (never a target); any token continues it
            seq = torch.cat([seq, to_input[nxt.clamp(max=len(to_input) - 1)][:, None]], dim=1)
        gen = torch.stack(gen, 1)                           # [b, n_ans]
        valid = torch.arange(n_ans, device=gen.device)[None] < m[:, None]
        pred[rows, p - 1:p - 1 + n_ans] = torch.where(valid, gen, pred[rows, p - 1:p - 1 + n_ans])
    return pred
