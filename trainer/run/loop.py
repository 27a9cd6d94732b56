"""The training loop: one for every task and model.

    run = Kind(...)        # FanKind (trainer/fan/kind.py) or SeqKind (trainer/benchmark/kind.py)
    summary = train(run)

The loop owns everything a run does the same way whatever it trains: the
run directory (one writer, `run.json`, `metrics.jsonl` cut back to the
checkpoint on `--resume`), data parallelism under `torchrun` (every rank
draws the same global batch and trains on its slice), the learning rate
set per step, the divergence check, gradient clipping, the descent guard
(trainer/run/guard.py), frozen and zero-kept weights of a compiled start, the
EMA of the weights, the log / eval / checkpoint cadence, `max_wall`, the
progress bar, the early stop of a finished fine-tune, the summary and the
training-curve plot.

A kind supplies the rest, by the contract `RunKind` (trainer/run/kind.py)
that `FanKind` (trainer/fan/kind.py) and `SeqKind` (trainer/benchmark/kind.py)
implement: the model, the optimiser's parameter groups, the learning-rate
schedule, the batches, the loss, the evaluation, the guard sample, and the
RNG state its checkpoint keeps.  Fan et al.'s tasks (per-sample T(n), FAP/NTP objectives, length
curriculum) and the comparison tasks (split generators, pooled heads,
auxiliary losses) are two kinds.
"""
from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path

import torch
from tqdm import tqdm

from rasp.errors import RaspError, RaspFileError
from rasp.readfile import is_finite_number
from trainer.run import checkpoint, distributed, ema, explog
from trainer.run.device import autocast, on_host, use_tf32
from trainer.run.guard import Guard, finetune_stop_reason
from trainer.run.kind import FRAGILE_NOT_PROBED, RunKind
from trainer.run.progress import bar as progress_bar


def train(kind: RunKind, log=()) -> dict:
    """Run (or resume) `kind`'s training; returns the summary.  `log`: the
    experiment loggers that also get metrics.jsonl's rows (trainer/run/explog.py)."""
    cfg = kind.cfg
    loggers = explog.Loggers(log)        # a missing optional package is refused before any work
    d = distributed.setup(cfg.device)
    try:
        with checkpoint.run_lock(cfg.out, cfg.resume, enabled=d.main), loggers:   # one writer per --out
            return _train(kind, d, loggers)
    except OSError as e:            # a full disk: the last checkpoint is intact (checkpoint.save)
        raise checkpoint.write_failed(e, cfg.out, "the run") from None
    finally:
        distributed.teardown(d)


def read_metrics(path: Path, upto: int) -> list:
    """The rows of metrics.jsonl up to step `upto`; a torn last line (killed
    mid-write) or a damaged row is dropped, saying so (and the file is then
    rewritten without it: `_train`)."""
    rows = checkpoint.read_jsonl(path, metrics_row_problem)
    return [r for r in rows if r["step"] <= upto]


def metrics_row_problem(row: dict):
    """What is wrong with a row of metrics.jsonl, or None: its step a count,
    every figure a finite number (an evaluation metric a split does not
    define is None), `stopped` a reason."""
    step = row.get("step")
    if not (isinstance(step, int) and not isinstance(step, bool) and step >= 0):
        return "no step count"
    for key, value in row.items():
        if key == "stopped":
            ok = isinstance(value, str)
        else:
            ok = is_finite_number(value) or (value is None and key.startswith("eval_"))
        if not ok:
            return f"{key}: {str(value)[:20]!r} is not {'a reason' if key == 'stopped' else 'a finite number'}"
    return None


# the files a run writes beside its checkpoints (each replaced atomically: a link is replaced, not followed)
RUN_FILES = ("run.json", "metrics.jsonl", "summary.json", "train_curves.png")


def append_row(path: Path, row: dict):
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def adamw(kind: RunKind, model, lr: float) -> torch.optim.AdamW:
    """The kind's AdamW over its parameter groups, fused into one kernel per step where torch
    has one for the parameters' device (a CPU from torch 2.4; CUDA): the same update without a
    Python loop over the tensors, which cost 2-3% of a small model's CPU step.  A resumed run
    keeps the implementation its checkpoint recorded (torch restores the group's `fused`)."""
    try:
        return torch.optim.AdamW(kind.param_groups(model), lr=lr, fused=True, **kind.adam_options())
    except (RuntimeError, ValueError):          # no fused kernel here: torch's default loop (fresh groups)
        return torch.optim.AdamW(kind.param_groups(model), lr=lr, **kind.adam_options())


def _train(kind: RunKind, d, loggers) -> dict:
    cfg, hp, out = kind.cfg, kind.hp, Path(kind.cfg.out)
    device = torch.device(d.device if d.on else cfg.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RaspError("--device cuda: no CUDA device is available")
    if hp.batch_size % d.world:
        raise RaspError(f"batch size {hp.batch_size} is not divisible by {d.world} processes")
    kind.prepare(device)

    for name in RUN_FILES:          # a folder where the run writes a file: refused before any work
        path = out / name           # (before any repair: a refused run leaves its checkpoints as they are)
        if path.exists() and not path.is_symlink() and not path.is_file():
            raise RaspFileError(path, "is not a file; remove it")
    for folder in explog.LOGGERS.values():      # written into, not replaced: a link there would be followed
        if (out / folder).is_symlink():
            raise RaspFileError(out / folder, "is a link; a run writes its logs only into its own folder "
                                              "(remove the link)")
    ckpt = checkpoint.latest(out, repair=d.main and cfg.resume)
    if ckpt is not None and not cfg.resume:
        raise RaspError(f"{out} already holds a run (step {checkpoint.load_state(ckpt)['step']}); "
                        f"pass --resume to continue it or choose another --out")
    if cfg.resume and ckpt is None and not out.exists():
        raise RaspError(f"--resume: {out} does not exist")
    # (--resume on a run killed before its first checkpoint starts from step 0: same result)

    torch.manual_seed(hp.seed)
    kind.seed_rng()
    step, sums, init_info = 0, _no_sums(), {}
    guard_state, rejected = {"scale": 1.0}, 0
    if ckpt is not None:
        state = checkpoint.load_state(ckpt)
        with on_host():         # (built there, then moved: trainer/run/device.py)
            model = kind.load_model(ckpt, state, device)
        try:         # state.json passed its manifest, but may have been edited with it (recomputed)
            step, sums = state["step"], state["accumulators"]
            init_info = state.get("init_info") or {}
            guard_state, rejected = state.get("guard", guard_state), state.get("rejected", 0)
            kind.restore(state)
        except (KeyError, ValueError, TypeError, AttributeError) as e:
            raise RaspFileError(Path(ckpt) / "state.json", f"cannot resume from it ({type(e).__name__}: "
                                f"{str(e)[:120]}); the checkpoint was edited") from None
        if init_info.get("fragile_probe") == FRAGILE_NOT_PROBED and step < hp.steps:
            raise RaspError(f"--resume --steps {hp.steps}: this run was started with --steps 0, so its compiled "
                            "start was not probed for the tensors --freeze-fragile keeps still; start a new run "
                            "with --steps N and another --out")
    else:
        kind.check_memory(device)
        with on_host():         # a seed draws the same weights whatever the device
            model, init_info = kind.initial_model(device)
        init_info = init_info or {}
    model.to(device)
    use_tf32(hp.tf32 == "on")
    if hp.compile == "on":
        model.compile()         # in place: the module, its state_dict and checkpoints stay as they are
    opt = adamw(kind, model, hp.lr)
    if ckpt is not None:
        checkpoint.restore_optimizer(ckpt, opt, state)          # also the torch RNG
    # a clock trained on every k-th step only (--clock-every) leaves its parameters unused on the others
    sometimes_unused = getattr(hp, "clock_every", 1) > 1 and getattr(model, "clock", None) is not None
    net = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=sometimes_unused) if d.on else model
    # a compiled start's length-fragile tensors (initialise.fragile_tensors) never move
    frozen = [p for n, p in model.named_parameters() if n in set(init_info.get("frozen", []))]
    keep_zeros = getattr(hp, "keep_zeros", False)
    ema_decay = getattr(hp, "ema", 0.0)
    clip = hp.grad_clip if hp.grad_clip > 0 else math.inf
    # clipped apart: a halting clock's gradients never scale the answering model's (model/looped.py)
    clip_groups = model.clip_groups() if hasattr(model, "clip_groups") else [list(model.parameters())]

    metrics_path = out / "metrics.jsonl"

    def record(row: dict):          # a row of metrics.jsonl, and of the experiment loggers
        append_row(metrics_path, row)
        loggers.write(row)

    if d.main:
        out.mkdir(parents=True, exist_ok=True)
        run_record = kind.run_record() | {
            "format": checkpoint.RUN_FORMAT, "n_params": n_params(model), "init_info": init_info, "world_size": d.world}
        checkpoint.write_json_atomic(out / "run.json", run_record)
        # drop rows written after the checkpoint (all of them at step 0: the run starts again)
        kept = read_metrics(metrics_path, step) if step else []
        checkpoint.write_text_atomic(metrics_path, "".join(json.dumps(r) + "\n" for r in kept))
        loggers.open(out, step, kept, run_record, cfg.resume)
        if step == 0:
            record({"step": 0, **kind.evaluate(model)})
    d.barrier()

    bar = progress_bar(total=hp.steps, initial=step, enabled=cfg.progress and d.main, desc=f"{cfg.task}/{cfg.model}")
    t_start = t_last = time.perf_counter()
    cpu_start = time.process_time()
    # the loop's seconds outside training steps (periodic evaluations, checkpoints): summary.json
    # reports them, so a speed comparison with a loop that has neither can leave them out
    aside = {"evaluating": 0.0, "saving": 0.0}
    last_step = step
    # logged rows (every rank: the stop rule must agree); evaluation-only rows -- the step-0
    # evaluation, or a periodic one between log rows -- carry no loss and are not among them
    history = [r for r in read_metrics(metrics_path, step) if "loss" in r]
    guard = Guard(kind, hp, net, model, opt, d, guard_state) if hp.guard else None

    def verify(confirm: bool = False):      # a checkpoint, a log row or the end never holds unchecked guarded steps
        nonlocal rejected
        if guard is not None:
            with autocast(device, hp.precision):       # measured as it was trained
                rejected += guard.verify()
                if confirm:                             # a checkpoint: the long sample too
                    rejected += guard.confirm()

    def save(at: int):
        t0 = time.perf_counter()
        verify(confirm=True)
        if d.main:
            checkpoint.save(out, at, model, opt, kind.state(at) | {
                "accumulators": sums, "init_info": init_info, "guard": guard_state, "rejected": rejected,
                "model_name": cfg.model, "task": cfg.task}, keep=hp.keep_ckpts)
        d.barrier()
        aside["saving"] += time.perf_counter() - t0

    while step < hp.steps:
        lr = kind.lr_at(step) * guard_state["scale"]
        for g in opt.param_groups:
            g["lr"] = lr * g.get("lr_scale", 1.0)
        kind.before_step(model, step)
        batch = kind.train_batch(step, d.slice(hp.batch_size), device)
        model.train()
        per_shard = d.mean(kind.batch_weight(batch)) if d.on else None
        with autocast(device, hp.precision):
            loss, acc = kind.loss(net, batch, per_shard)
        if not math.isfinite(d.mean(float(loss.detach()))):     # every rank sees the same verdict
            raise RaspError(f"training diverged at step {step + 1}: the loss is not finite "
                            f"(lr {lr:.3g}; try a smaller --lr, or --guard on).  The last checkpoint in "
                            f"{out} is intact")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if keep_zeros:      # a compiled circuit's zero weights stay exactly zero
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.mul_(p.detach() != 0)
        for p in frozen:
            p.grad = None           # AdamW skips it: no update, no moments
        gnorm = torch.nn.utils.clip_grad_norm_(clip_groups[0], clip)
        for group in clip_groups[1:]:
            torch.nn.utils.clip_grad_norm_(group, clip)
        if guard is not None:
            with autocast(device, hp.precision):
                rejected += guard.step(batch, float(loss.detach()), float(acc))
        else:
            opt.step()
        step += 1
        if ema_decay and step > hp.decay_from():      # Fan et al.: average from the start of the decay
            ema.update(opt, ema_decay)
        sums["loss"] += float(loss.detach())
        sums["acc"] += float(acc)
        sums["k"] += 1

        stopped, row = None, None
        if step % hp.log_every == 0 or step == hp.steps:
            verify()
            now = time.perf_counter()
            row = {"step": step, "loss": d.mean(sums["loss"] / sums["k"]),
                   "acc": d.mean(sums["acc"] / sums["k"]), "lr": lr, **kind.log_fields(step),
                   "grad_norm": float(gnorm), "steps_per_s": (step - last_step) / max(now - t_last, 1e-9)}
            if guard is not None:
                row.update(rejected=rejected, guard_scale=guard_state["scale"])
            t_last, last_step = now, step
            sums = _no_sums()
            history.append(row)
            # a compiled start that is exact and no longer improves ends here (every rank agrees)
            stopped = finetune_stop_reason(hp, history, guard_state, kind.guard_scope()) if step < hp.steps else None
            if stopped:
                row["stopped"] = stopped
                if d.main:
                    tqdm.write(f"stopping at step {step} of {hp.steps}: {stopped}")
        if ((hp.eval_every and step % hp.eval_every == 0) or stopped) and d.main:
            verify()
            t0 = time.perf_counter()
            row = (row or {"step": step}) | kind.evaluate(model)
            aside["evaluating"] += time.perf_counter() - t0
        if row is not None and d.main:
            record(row)
            if history:                 # an evaluation before the first log row has no loss to show yet
                bar.set_postfix(loss=f"{history[-1]['loss']:.4f}", acc=f"{history[-1]['acc']:.3f}",
                                **kind.bar_fields(history[-1]),
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
        summary = _summary(kind, model, opt, metrics_path, record, step, time.perf_counter() - t_start, init_info)
        summary.update({f"seconds_{k}": v for k, v in aside.items()}, cpu_seconds=time.process_time() - cpu_start)
        checkpoint.write_json_atomic(out / "summary.json", summary)
        try:
            from trainer.run.plots import train_curves
            summary["curves"] = train_curves(read_metrics(metrics_path, step), out / "train_curves.png",
                                             kind.plot_title(), *kind.curve_labels())
        except Exception as e:                      # a plot must never lose a finished run
            summary["curves"] = f"not written: {e}"
        checkpoint.write_json_atomic(out / "summary.json", summary)
    d.barrier()
    return summary if summary is not None else {"step": step}


def _no_sums() -> dict:
    return {"loss": 0.0, "acc": 0.0, "k": 0}


def _summary(kind: RunKind, model, opt, metrics_path: Path, record, step: int, seconds: float, init_info: dict) -> dict:
    """The run's metrics AT ITS FINAL STEP, each with the steps it was measured
    over: the evaluation is made at the final step itself (and appended to
    metrics.jsonl) if the last periodic one was earlier -- also after a
    --resume or with --eval-every 0; the training loss and accuracy are the
    means over the last logging window."""
    cfg, hp = kind.cfg, kind.hp
    rows = read_metrics(metrics_path, step)
    last_eval = next((r for r in reversed(rows) if "eval_acc" in r), None)
    if last_eval is None or last_eval["step"] != step:
        last_eval = {"step": step, **kind.evaluate(model)}
        record(last_eval)
        rows.append(last_eval)
    train_rows = [r for r in rows if "loss" in r]
    last = train_rows[-1] if train_rows else None
    prev = [r["step"] for r in train_rows[:-1]]
    solved = [r["step"] for r in rows if r.get("eval_acc", 0) >= 1.0]
    summary = {
        "format": checkpoint.RUN_FORMAT, "task": cfg.task, "model": cfg.model, "init": cfg.init,
        "step": step, "steps": hp.steps, "finished": step >= hp.steps or bool(_stopped(rows)),
        "seconds": seconds, "n_params": n_params(model),
        "final_eval_acc": last_eval["eval_acc"], "final_eval_step": last_eval["step"],
        "final_eval": kind.eval_description(last_eval),
        "final_eval_metrics": {k[len("eval_"):]: v for k, v in last_eval.items()
                               if k.startswith("eval_") and k != "eval_acc"},
        "final_loss": last["loss"] if last else None,
        "final_train_acc": last["acc"] if last else None,
        "final_loss_steps": [(prev[-1] if prev else 0) + 1, last["step"]] if last else None,
        "first_step_at_100": solved[0] if solved else None, "init_info": init_info,
        "stopped": _stopped(rows)} | kind.summary_fields()
    if getattr(hp, "ema", 0.0) and ema.has_average(opt):
        avg = copy.deepcopy(model)
        avg.load_state_dict(ema.averaged_state_dict(model, opt))
        summary["final_eval_acc_ema"] = kind.evaluate(avg)["eval_acc"]
    return summary


def _stopped(rows: list):
    return next((r["stopped"] for r in rows if "stopped" in r), None)
