"""The training loop (Fan et al. §4.2.2): online batches, loss at each
sample's step T_i, AdamW with warm-up + cosine, gradient clipping, a length
curriculum, periodic in-distribution evaluation, atomic checkpoints and a
`--resume` that continues bit-identically."""
from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from tqdm import tqdm

from rasp.errors import RaspError
from trainer import checkpoint, distributed, ema, objectives, stopping, validate
from trainer.compiled import finetune_stop_reason, has_clock
from trainer.data import TaskData
from trainer.initialise import initial_model
from trainer.labels import ProgramLabeler
from trainer.models import get_model_spec
from trainer.presets import HParams
from trainer.schedule import curriculum_max_n, lr_at, sample_lengths
from trainer.tasks import get_task


@dataclass
class RunConfig:
    task: str
    out: str
    model: str = "looped"
    init: str = "random"            # "random" | "compiled"
    compress: Optional[int] = None  # compiled init projected into this width
    compress_method: str = "merge"
    preset: str = "cpu"
    device: str = "cpu"
    hp: HParams = field(default_factory=HParams)
    resume: bool = False
    progress: bool = True
    max_wall: Optional[float] = None   # stop (after a checkpoint) once this many seconds pass

    def to_dict(self):
        d = {k: getattr(self, k) for k in ("task", "model", "init", "compress", "compress_method",
                                           "preset", "device")}
        d["hparams"] = self.hp.to_dict()
        return d


def build_data(task_name: str, spec, hp, labeler=None) -> TaskData:
    task = get_task(task_name)
    labeler = labeler or ProgramLabeler(task.program_path)
    return TaskData(task, labeler, spec.layout(), spec.pause_count(hp))


def in_distribution_accuracy(spec, hp, model, data, seed: int, n_samples: int, device) -> float:
    """Exact match over lengths uniform on 1..max_train_n, oracle stop; own RNG
    so evaluating never changes the training stream."""
    rng = np.random.default_rng([seed, 12345])
    lengths = rng.integers(data.task.min_n, hp.max_train_n + 1, size=n_samples)
    correct = 0
    for n in np.unique(lengths):
        k = int((lengths == n).sum())
        batch = data.batch(rng, [int(n)] * k, train=False).to(device)
        correct += int(objectives.evaluate_batch(spec, hp, model, batch, "oracle", 0)["correct"].sum())
    return correct / n_samples


def train_padding(hp, data, step: int) -> dict:
    """make_batch arguments of a training batch.  padding "scored" (Fan et al.,
    generate_training_data.py:7-29): every row is padded to the length of a row
    of the curriculum's current longest size and the padding is scored (`#`),
    so the loss sees answer and padding tokens of every row."""
    if not (getattr(hp, "padding", "ignored") == "scored" and data.layout == "fap" and data.task.target == "fap"):
        return {}
    return {"pad_to": data.row_length(curriculum_max_n(step, hp)), "score_padding": True}


def param_groups(model, weight_decay: float, which: str = "all") -> list:
    """AdamW parameter groups.  "all": every parameter decays (Fan et al.'s
    `AdamW(model.parameters(), lr)`, default decay 0.01); "matrices": only
    weight matrices and embeddings decay, biases and LayerNorm gains do not."""
    params = [p for p in model.parameters()]
    if which == "all":
        return [{"params": params, "weight_decay": weight_decay}]
    if which != "matrices":
        raise ValueError(f"unknown wd_params {which!r}")
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def _read_metrics(path: Path, upto: int) -> list:
    rows = checkpoint.read_jsonl(path)         # a torn last line (killed mid-write) is dropped
    return [r for r in rows if isinstance(r.get("step", 0), int) and r.get("step", 0) <= upto]


def train(cfg: RunConfig, labeler=None) -> dict:
    """Run (or resume) training; returns a summary dict."""
    d = distributed.setup(cfg.device)
    try:
        with checkpoint.run_lock(cfg.out, cfg.resume, enabled=d.main):   # one writer per --out
            return _train(cfg, d, labeler)
    except OSError as e:            # a full disk: the last checkpoint is intact (checkpoint.save)
        raise checkpoint.write_failed(e, cfg.out, "the run") from None
    finally:
        distributed.teardown(d)


def _train(cfg: RunConfig, d, labeler) -> dict:
    hp, out = cfg.hp, Path(cfg.out)
    device = torch.device(d.device if d.on else cfg.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RaspError("--device cuda: no CUDA device is available")
    if hp.batch_size % d.world:
        raise RaspError(f"batch size {hp.batch_size} is not divisible by {d.world} processes")
    spec = get_model_spec(cfg.model)
    data = build_data(cfg.task, spec, hp, labeler)
    validate.check_hparams(hp, data.task)
    if cfg.init == "random":        # a compiled start's size comes from its program
        validate.check_memory(spec, hp, data, device)

    ckpt = checkpoint.latest(out, repair=d.main)
    if ckpt is not None and not cfg.resume:
        raise RaspError(f"{out} already holds a run (step {checkpoint.load_state(ckpt)['step']}); "
                        f"pass --resume to continue it or choose another --out")
    if cfg.resume and ckpt is None and not out.exists():
        raise RaspError(f"--resume: {out} does not exist")
    # (--resume on a run killed before its first checkpoint starts from step 0: same result)

    torch.manual_seed(hp.seed)
    rng = np.random.default_rng(hp.seed)
    step, acc_sums, init_info = 0, {"loss": 0.0, "acc": 0.0, "k": 0, "t0": None}, {}
    guard, rejected = {"scale": 1.0}, 0
    if ckpt is not None:
        model = checkpoint.load_model(ckpt, device)
        state = checkpoint.load_state(ckpt)
        step = state["step"]
        rng.bit_generator.state = state["numpy_rng"]
        acc_sums = state["accumulators"]
        init_info = state.get("init_info", {})
        guard, rejected = state.get("guard", guard), state.get("rejected", 0)
    else:
        model, init_info = initial_model(cfg, spec, hp, data, device)
    model.to(device)
    opt = torch.optim.AdamW(param_groups(model, hp.weight_decay, hp.wd_params), lr=hp.lr)
    if ckpt is not None:
        checkpoint.restore_optimizer(ckpt, opt, state)
    net = torch.nn.parallel.DistributedDataParallel(model) if d.on else model
    # a compiled start's length-fragile tensors (initialise.fragile_tensors) never move
    frozen = [p for n, p in model.named_parameters() if n in set(init_info.get("frozen", []))]

    metrics_path = out / "metrics.jsonl"
    if d.main:
        out.mkdir(parents=True, exist_ok=True)
        checkpoint.write_json_atomic(out / "run.json", cfg.to_dict() | {"init_info": init_info,
                                                                        "world_size": d.world})
        kept = _read_metrics(metrics_path, step)     # drop rows written after the checkpoint
        checkpoint.write_text_atomic(metrics_path, "".join(json.dumps(r) + "\n" for r in kept))
        if step == 0:
            acc0 = in_distribution_accuracy(spec, hp, model, data, hp.seed, hp.eval_samples, device)
            _append(metrics_path, {"step": 0, "eval_acc": acc0})
    d.barrier()

    bar = tqdm(total=hp.steps, initial=step, disable=not (cfg.progress and d.main),
               dynamic_ncols=True, desc=f"{cfg.task}/{cfg.model}")
    t_start, t_last, last_step = time.perf_counter(), time.perf_counter(), step
    history = _read_metrics(metrics_path, step)      # logged rows (every rank: the stop rule must agree)
    gb = guard_batch(data, hp, device) if hp.guard else None
    # a compiled start's halting clock: the guard also keeps Eq. 2 finding T(n)
    clock_extra = data.task.t_max_extra if hp.guard and spec.adaptive and has_clock(model) else 0

    verified = _Snapshot(model, opt) if hp.guard else None    # the last state the wide guard passed

    def verify():           # a checkpoint, a log row or the end never holds unchecked guarded steps
        nonlocal rejected
        if hp.guard and guard.get("pending"):
            rejected += _verify_guard(spec, hp, net, model, opt, guard, gb, clock_extra, verified)

    def save(at: int):
        verify()
        if d.main:
            checkpoint.save(out, at, model, opt, {
                "numpy_rng": rng.bit_generator.state, "accumulators": acc_sums,
                "curriculum": {"max_n": curriculum_max_n(at, hp), "start_n": hp.start_n,
                               "interval": hp.interval, "max_train_n": hp.max_train_n},
                "init_info": init_info, "guard": guard, "rejected": rejected,
                "model_name": cfg.model, "task": cfg.task,
            }, keep=hp.keep_ckpts)
        d.barrier()
    while step < hp.steps:
        lr = lr_at(step, hp) * guard["scale"]
        for g in opt.param_groups:
            g["lr"] = lr
        lengths = sample_lengths(rng, step, hp, data.task.min_n, hp.batch_size)
        inputs = data.sample_inputs(rng, lengths, train=True)
        sl = d.slice(hp.batch_size)
        batch = data.make_batch(inputs[sl], lengths[sl], **train_padding(hp, data, step)).to(device)
        model.train()
        # token-mean loss under DDP: divide by the mean shard token count (exact full-batch gradient)
        per_shard = d.mean(float(batch.mask.sum())) if d.on else None
        loss, acc = objectives.train_step_outputs(spec, hp, net, batch, per_shard)
        if not math.isfinite(d.mean(float(loss.detach()))):     # every rank sees the same verdict
            raise RaspError(f"training diverged at step {step + 1}: the loss is not finite "
                            f"(lr {lr:.3g}; try a smaller --lr, or --guard on).  The last checkpoint in "
                            f"{out} is intact")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if hp.keep_zeros:   # a compiled circuit's zero weights stay exactly zero
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.mul_(p.detach() != 0)
        for p in frozen:
            p.grad = None           # AdamW skips it: no update, no moments
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), hp.grad_clip)
        if hp.guard:
            rejected += _guarded_step(spec, hp, net, model, opt, batch, d, float(loss.detach()), float(acc),
                                      guard, gb, clock_extra, verified)
        else:
            opt.step()
        step += 1
        if hp.ema and step > hp.decay_from():      # Fan et al.: average from the start of the decay
            ema.update(opt, hp.ema)
        acc_sums["loss"] += float(loss.detach())
        acc_sums["acc"] += float(acc)
        acc_sums["k"] += 1

        stopped = None
        if step % hp.log_every == 0 or step == hp.steps:
            verify()
            now = time.perf_counter()
            row = {"step": step, "loss": d.mean(acc_sums["loss"] / acc_sums["k"]),
                   "acc": d.mean(acc_sums["acc"] / acc_sums["k"]), "lr": lr,
                   "max_n": curriculum_max_n(step - 1, hp), "grad_norm": float(gnorm),
                   "steps_per_s": (step - last_step) / max(now - t_last, 1e-9)}
            if hp.guard:
                row.update(rejected=rejected, guard_scale=guard["scale"])
            t_last, last_step = now, step
            acc_sums = {"loss": 0.0, "acc": 0.0, "k": 0, "t0": None}
            history.append(row)
            # a compiled start that is exact and no longer improves ends here (every rank agrees)
            stopped = finetune_stop_reason(hp, history, guard) if step < hp.steps else None
            if ((hp.eval_every and step % hp.eval_every == 0) or stopped) and d.main:
                row["eval_acc"] = in_distribution_accuracy(spec, hp, model, data, hp.seed,
                                                           hp.eval_samples, device)
            if stopped:
                row["stopped"] = stopped
                if d.main:
                    tqdm.write(f"stopping at step {step} of {hp.steps}: {stopped}")
            if d.main:
                _append(metrics_path, row)
                bar.set_postfix(loss=f"{row['loss']:.4f}", acc=f"{row['acc']:.3f}", n=row["max_n"],
                                **({"eval": f"{row['eval_acc']:.3f}"} if "eval_acc" in row else {}))
        bar.update(1)
        stop_now = bool(stopped) or (cfg.max_wall is not None and time.perf_counter() - t_start > cfg.max_wall)
        if step % hp.ckpt_every == 0 or step == hp.steps or stop_now:
            save(step)
        if stop_now:
            break
    if checkpoint.latest(out) is None:      # --steps 0: keep the starting weights as a run
        save(step)
    bar.close()
    summary = None
    if d.main:
        summary = _final_summary(spec, hp, model, opt, data, device, metrics_path, step,
                                 time.perf_counter() - t_start, init_info)
        checkpoint.write_json_atomic(out / "summary.json", summary)
        try:
            from trainer.plots import train_curves
            summary["curves"] = train_curves(_read_metrics(metrics_path, step), out / "train_curves.png",
                                             f"{cfg.task} / {cfg.model} ({cfg.init} init)")
        except Exception as e:                      # a plot must never lose a finished run
            summary["curves"] = f"not written: {e}"
        checkpoint.write_json_atomic(out / "summary.json", summary)
    d.barrier()
    return summary if summary is not None else {"step": step}


def _final_summary(spec, hp, model, opt, data, device, metrics_path: Path, step: int, seconds: float,
                   init_info: dict) -> dict:
    """The run's metrics AT ITS FINAL STEP, each with the steps it was measured
    over: in-distribution exact match (oracle stop) is measured at the final
    step itself (and appended to metrics.jsonl) if the last periodic
    evaluation was earlier -- also after a --resume or with --eval-every 0;
    the training loss and accuracy are the means over the last logging window."""
    rows = _read_metrics(metrics_path, step)
    last_eval = next((r for r in reversed(rows) if "eval_acc" in r), None)
    if last_eval is None or last_eval["step"] != step:
        acc = in_distribution_accuracy(spec, hp, model, data, hp.seed, hp.eval_samples, device)
        row = {"step": step, "eval_acc": acc}
        _append(metrics_path, row)
        rows.append(row)
        last_eval = row
    train_rows = [r for r in rows if "loss" in r]
    last = train_rows[-1] if train_rows else None
    prev = [r["step"] for r in train_rows[:-1]]
    window = [(prev[-1] if prev else 0) + 1, last["step"]] if last else None
    evals = [r for r in rows if "eval_acc" in r]
    solved = [r["step"] for r in evals if r["eval_acc"] >= 1.0]
    summary = {
        "step": step, "seconds": seconds,
        "final_eval_acc": last_eval["eval_acc"], "final_eval_step": last_eval["step"],
        "final_eval": f"in-distribution exact match, oracle stop, {hp.eval_samples} inputs of "
                      f"lengths {data.task.min_n}..{hp.max_train_n}, at step {last_eval['step']}",
        "final_loss": last["loss"] if last else None,
        "final_train_acc": last["acc"] if last else None,
        "final_loss_steps": window,
        "first_step_at_100": solved[0] if solved else None, "init_info": init_info,
        "stopped": next((r["stopped"] for r in rows if "stopped" in r), None)}
    if hp.ema and ema.has_average(opt):
        avg = copy.deepcopy(model)
        avg.load_state_dict(ema.averaged_state_dict(model, opt))
        summary["final_eval_acc_ema"] = in_distribution_accuracy(spec, hp, avg, data, hp.seed,
                                                                 hp.eval_samples, device)
    return summary


def guard_batch(data, hp, device):
    """The guard's fixed sample, drawn from its own seed, so it is the same on
    every rank and after a resume: lengths uniform on 1..max_train_n, or, with
    `guard_max_n` (a compiled start: every length it was compiled for), each
    length 1..guard_max_n equally often.  Returned as a list of batches of
    similar lengths (a batch runs to its longest sample's T)."""
    rng = np.random.default_rng([hp.seed, 999])
    hi = hp.guard_max_n or hp.max_train_n
    if hi <= hp.max_train_n:
        lengths = rng.integers(data.task.min_n, hp.max_train_n + 1, size=hp.guard_samples)
        return [data.batch(rng, lengths, train=True).to(device)]
    # labels at every length come from the task program (the interpreter), as in training
    lengths = np.sort(np.resize(np.arange(data.task.min_n, hi + 1), max(hp.guard_samples, hi)))
    return [data.batch(rng, chunk, train=True).to(device) for chunk in np.array_split(lengths, 4)]


def _guard_eval(spec, hp, net, gb, clock_extra: int = 0):
    """-> (mean per-sample loss, exact-match fraction, fraction where maximum
    confidence over T(n) + clock_extra steps picks T(n)) over the guard
    batches (the last is 1 without a clock: clock_extra = 0)."""
    loss, correct, confident = 0.0, 0, 0
    total = sum(len(b) for b in gb)
    with torch.no_grad():
        for b in gb:
            if clock_extra:
                every = getattr(net, "module", net).all_steps(b.tokens, int(b.steps.max()) + clock_extra)
                l, a = objectives.loss_and_accuracy(every[b.steps - 1, torch.arange(len(b))], b)
                stats = stopping.step_stats(every, b.targets, b.mask)
                confident += int(stopping.confidence_finds(stats, b.steps).sum())
            else:
                l, a = objectives.train_step_outputs(spec, hp, net, b)
                confident += len(b)
            loss += float(l) * len(b) / total
            correct += round(float(a) * len(b))
    return loss, correct / total, confident / total


class _Snapshot:
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


def _guarded_step(spec, hp, net, model, opt, batch, d, loss, acc, guard, gb, clock_extra=0, verified=None) -> int:
    """Keep the optimizer step only if the loss on the current batch does not
    rise (else undo it and halve the step size); `_verify_guard` then checks
    the kept steps on the fixed guard sample, after every step at first and
    less often while the checks pass (at most every `guard_every` steps).  Compiled
    weights sit on a knife edge (a 1e-9 change to a residual writer can flip
    a hard attention), so this is what keeps fine-tuning from destroying
    exactness.  Returns the number of steps rejected."""
    if "loss" not in guard:
        guard["loss"], guard["acc"], guard["confident"] = _guard_eval(spec, hp, net, gb, clock_extra)
    before_step = _Snapshot(model, opt)
    opt.step()
    with torch.no_grad():
        new_loss, new_acc = objectives.train_step_outputs(spec, hp, net, batch)
    before, after = d.mean(loss), d.mean(float(new_loss))
    if not (math.isfinite(after) and after <= before and d.mean(float(new_acc)) >= d.mean(acc)):
        before_step.restore(model, opt)
        guard["scale"] *= 0.5
        return 1
    guard["pending"] = guard.get("pending", 0) + 1
    if guard["pending"] >= guard.get("every", 1):
        return _verify_guard(spec, hp, net, model, opt, guard, gb, clock_extra, verified)
    return 0


def _verify_guard(spec, hp, net, model, opt, guard, gb, clock_extra, verified) -> int:
    """The steps kept since the last check stay only if, on the fixed guard
    sample, the loss did not rise and exact match did not fall (nor, for a
    start with a halting clock, the share where Eq. 2 picks T(n)); otherwise
    they are all undone and the step size halved (it regrows x2 per passed
    check, up to 1).  The interval between checks doubles after each pass
    (up to hp.guard_every) and drops back to 1 after a failure, so a stable
    fine-tune pays for a check every guard_every steps while a failing
    one loses a single step per rejection; what is kept is always a
    checked state.  Returns the number of steps undone."""
    pending, guard["pending"] = guard.get("pending", 0), 0
    g_loss, g_acc, g_conf = _guard_eval(spec, hp, net, gb, clock_extra)
    if g_loss <= guard["loss"] and g_acc >= guard["acc"] and g_conf >= guard.get("confident", 0.0):
        guard.update(scale=min(1.0, guard["scale"] * 2.0), loss=g_loss, acc=g_acc, confident=g_conf,
                     every=min(2 * guard.get("every", 1), max(1, hp.guard_every)))
        verified.take(model, opt)
        return 0
    verified.restore(model, opt)
    guard.update(scale=guard["scale"] * 0.5, every=1)
    return pending


def _append(path: Path, row: dict):
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
