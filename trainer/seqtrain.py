"""The training loop of the comparison tasks (SeqTask x encoder, BENCHMARKS.md).

Batches come from the task's train split, generated online by a seeded
NumPy generator (or read from `--data FILE.jsonl`, reshuffled every epoch);
AdamW with clipping and a cosine / constant / linear / root schedule; the
encoder's `aux_loss` (ACT ponder cost) is added to the task loss and its
`set_progress(step, total)` is called before every step.  The run directory
is the Fan trainer's (trainer/checkpoint.py: atomic safetensors checkpoints,
a `--resume` that continues bit-identically, one writer per directory):

    run.json        kind "seq", task, model, preset, data, every hyper-parameter
    metrics.jsonl   loss, acc (the task's headline metric on the batch), lr,
                    grad_norm, steps_per_s; eval_<metric> on the validation split
    checkpoints/, latest.json
    summary.json    written last, {"finished": true, ...}
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from tqdm import tqdm

from rasp.errors import RaspError
from trainer import checkpoint, scoring
from trainer.models import ENCODERS, get_encoder_spec
from trainer.models.base import EncoderConfig, param_groups
from trainer.models.heads import SeqModel, make_head
from trainer.seqdata import collate, example_length, read_jsonl
from trainer.seqpresets import SeqHParams, lr_at
from trainer.tasks import get_task
from trainer.tasks.base import SeqTask


@dataclass
class SeqRunConfig:
    task: str
    model: str
    out: str
    preset: str = "cpu"
    hp: SeqHParams = field(default_factory=SeqHParams)
    data: Optional[str] = None          # a JSON-lines train set instead of online generation
    device: str = "cpu"
    resume: bool = False
    progress: bool = True
    max_wall: Optional[float] = None
    init: str = "random"                # or "compiled": the task's program (trainer/seqcompiled.py)

    def to_dict(self) -> dict:
        return {"kind": "seq", "task": self.task, "model": self.model, "init": self.init,
                "preset": self.preset, "data": self.data, "device": self.device, "hparams": self.hp.to_dict()}


def seq_task(name: str) -> SeqTask:
    task = get_task(name)
    if not isinstance(task, SeqTask):
        raise RaspError(f"task {name!r} is a Fan task, not a comparison task")
    return task


def encoder_config(task: SeqTask, hp: SeqHParams) -> EncoderConfig:
    return EncoderConfig(vocab_size=len(task.vocab) + 1, causal=task.causal, extra=dict(hp.extra),
                         **hp.encoder_fields())


def build_model(task: SeqTask, model_name: str, hp: SeqHParams) -> SeqModel:
    spec = get_encoder_spec(model_name) if model_name in ENCODERS else None
    if spec is None:
        raise RaspError(f"unknown model {model_name!r} for comparison tasks (known: {', '.join(ENCODERS)})")
    cfg = encoder_config(task, hp)
    try:
        encoder = spec.build(cfg)
    except (ValueError, KeyError, TypeError) as e:
        raise RaspError(f"model {model_name}: cannot build it with these settings ({e})") from None
    return SeqModel(encoder, make_head(task.kind, hp.d_model, len(task.labels), hp.pooling))


def model_config(cfg: SeqRunConfig, task: SeqTask, model: SeqModel) -> dict:
    """What a checkpoint records to rebuild its model."""
    out = {"kind": "seq", "task": task.name, "model": cfg.model, "encoder": asdict(encoder_config(task, cfg.hp)),
           "n_labels": len(task.labels), "pooling": cfg.hp.pooling, "init": cfg.init}
    if cfg.init == "compiled":
        from trainer import seqcompiled
        out["looped"] = seqcompiled.model_config(model)
    return out


def initial_model(cfg: SeqRunConfig, task: SeqTask, hp: SeqHParams) -> tuple:
    """(model, init_info or None): random weights, or the task's program compiled."""
    if cfg.init == "compiled":
        from trainer import seqcompiled
        seqcompiled.check_steps(hp)          # (also on --resume --steps N)
        return seqcompiled.build(task, hp)
    if cfg.init != "random":
        raise RaspError(f"unknown --init {cfg.init!r} (random or compiled)")
    return build_model(task, cfg.model, hp), None


def check_splits(task: SeqTask, hp: SeqHParams):
    for s in (hp.train_split, hp.valid_split):
        if s not in task.splits:
            raise RaspError(f"task {task.name} has no split {s!r} (splits: {', '.join(task.splits)})")


class TrainStream:
    """The training batches, a pure function of (seed, step) and the RNG state
    the checkpoint keeps."""

    def __init__(self, task: SeqTask, hp: SeqHParams, data: Optional[list] = None):
        self.task, self.hp, self.data = task, hp, data
        self.params = task.splits[hp.train_split].params
        self.rng = np.random.default_rng(hp.seed)
        self.lengths = None             # [shortest, longest] example trained on so far

    def examples(self, step: int) -> list:
        out = self._examples(step)
        lengths = [example_length(e) for e in out]
        lo, hi = self.lengths or (min(lengths), max(lengths))
        self.lengths = [min(lo, *lengths), max(hi, *lengths)]
        return out

    def _examples(self, step: int) -> list:
        if self.data is None:
            return self.task.generate(self.rng, self.params, self.hp.batch_size)
        n, b = len(self.data), self.hp.batch_size
        out = []
        for i in range(step * b, (step + 1) * b):          # epoch e = a fresh permutation of the file
            epoch, pos = divmod(i, n)
            out.append(self.data[int(_permutation(self.hp.seed, epoch, n)[pos])])
        return out


_PERM_CACHE: dict = {}


def _permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    key = (seed, epoch, n)
    if key not in _PERM_CACHE:
        _PERM_CACHE.clear()
        _PERM_CACHE[key] = np.random.default_rng([seed, epoch, 7]).permutation(n)
    return _PERM_CACHE[key]


def validation_set(task: SeqTask, hp: SeqHParams) -> list:
    """Fixed validation examples from their own generator (never the training stream)."""
    return task.generate(np.random.default_rng([hp.seed, 1]), task.splits[hp.valid_split].params, hp.eval_samples)


@torch.no_grad()
def score_examples(task: SeqTask, model: SeqModel, examples: list, metrics, device, batch_size: int = 64):
    """Per-example metric values (None = nothing to score), lengths, groups
    and encoder stats, batching examples of similar length together."""
    from trainer.models.heads import sample_stat
    model.eval()
    order = sorted(range(len(examples)), key=lambda i: example_length(examples[i]))
    values = {m: np.full(len(examples), None, dtype=object) for m in metrics}
    lengths, groups = np.zeros(len(examples), dtype=int), np.zeros(len(examples), dtype=int)
    stats: dict = {}
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        batch = collate(task, [examples[i] for i in idx]).to(device)
        logits, enc = model(batch.tokens, batch.mask, batch.tokens2, batch.mask2)
        pred = scoring.predictions(logits)
        for m in metrics:
            for i, v in zip(idx, scoring.example_values(m, pred, batch)):
                values[m][i] = v
        lengths[idx], groups[idx] = batch.lengths.cpu().numpy(), batch.groups.cpu().numpy()
        for k, v in enc.stats.items():
            if torch.is_tensor(v):
                stats.setdefault(k, np.zeros(len(examples)))[idx] = sample_stat(v, enc.mask).cpu().numpy()
    return {"values": values, "lengths": lengths, "groups": groups, "stats": stats}


def evaluate_metrics(task, model, examples, device) -> dict:
    r = score_examples(task, model, examples, task.metrics, device)
    return {m: scoring.summary(r["values"][m])["mean"] for m in task.metrics}


def train_seq(cfg: SeqRunConfig) -> dict:
    try:
        with checkpoint.run_lock(cfg.out, cfg.resume):
            return _train(cfg)
    except OSError as e:
        raise checkpoint.write_failed(e, cfg.out, "the run") from None


def _train(cfg: SeqRunConfig) -> dict:
    hp, out, device = cfg.hp, Path(cfg.out), torch.device(cfg.device)
    task = seq_task(cfg.task)
    check_splits(task, hp)
    data = read_jsonl(task, cfg.data) if cfg.data else None
    ckpt = checkpoint.latest(out, repair=True)
    if ckpt is not None and not cfg.resume:
        raise RaspError(f"{out} already holds a run (step {checkpoint.load_state(ckpt)['step']}); "
                        f"pass --resume to continue it or choose another --out")

    torch.manual_seed(hp.seed)
    model, init_info = initial_model(cfg, task, hp)
    model = model.to(device)
    stream = TrainStream(task, hp, data)
    step, sums = 0, {"loss": 0.0, "acc": 0.0, "k": 0}
    # groups: parameters tagged by their model (S4D's SSM lr cap, Mamba's no-decay A and D)
    opt = torch.optim.AdamW(param_groups(model, hp.lr, hp.weight_decay), lr=hp.lr,
                            betas=tuple(hp.betas), eps=hp.eps, weight_decay=hp.weight_decay)
    if ckpt is not None:
        state = checkpoint.load_state(ckpt)
        checkpoint.load_weights(ckpt, model, device)
        checkpoint.restore_optimizer(ckpt, opt, state)        # also the torch RNG
        step, sums = state["step"], state["accumulators"]
        stream.rng.bit_generator.state = state["numpy_rng"]
        stream.lengths = state.get("train_lengths")
    valid = validation_set(task, hp)
    headline = task.metrics[0]

    metrics_path = out / "metrics.jsonl"
    checkpoint.write_json_atomic(out / "run.json", cfg.to_dict() | {"n_params": _n_params(model)}
                                 | ({"init_info": init_info} if init_info else {}))
    kept = [r for r in checkpoint.read_jsonl(metrics_path) if r.get("step", 0) <= step]
    checkpoint.write_text_atomic(metrics_path, "".join(json.dumps(r) + "\n" for r in kept))

    def save(at: int):
        checkpoint.save(out, at, model, opt, {"numpy_rng": stream.rng.bit_generator.state, "accumulators": sums,
                                              "train_lengths": stream.lengths,
                                              "config": model_config(cfg, task, model), "model_name": cfg.model,
                                              "task": cfg.task}, keep=hp.keep_ckpts)

    def evaluate(at: int) -> dict:
        res = evaluate_metrics(task, model, valid, device)
        row = {"step": at, **{f"eval_{m}": v for m, v in res.items()}, "eval_acc": res[headline]}
        _append(metrics_path, row)
        return row

    if step == 0 and hp.eval_every:
        evaluate(0)
    bar = tqdm(total=hp.steps, initial=step, disable=not cfg.progress, dynamic_ncols=True,
               desc=f"{cfg.task}/{cfg.model}")
    t_start = t_last = time.perf_counter()
    last_step, last_eval = step, None
    while step < hp.steps:
        lr = lr_at(step, hp)
        for g in opt.param_groups:
            g["lr"] = lr * g.get("lr_scale", 1.0)
        model.set_progress(step, hp.steps)
        batch = collate(task, stream.examples(step)).to(device)
        model.train()
        logits, enc = model(batch.tokens, batch.mask, batch.tokens2, batch.mask2)
        loss = scoring.loss_fn(logits, batch)
        if enc.aux_loss is not None:
            loss = loss + enc.aux_loss
        if not math.isfinite(float(loss.detach())):
            raise RaspError(f"training diverged at step {step + 1}: the loss is not finite (lr {lr:.3g}; try a "
                            f"smaller --lr).  The last checkpoint in {out} is intact")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), hp.grad_clip if hp.grad_clip > 0 else math.inf)
        opt.step()
        step += 1
        batch_acc = scoring.summary(scoring.example_values(headline, scoring.predictions(logits.detach()), batch))
        sums["loss"] += float(loss.detach())
        sums["acc"] += batch_acc["mean"] or 0.0
        sums["k"] += 1
        if step % hp.log_every == 0 or step == hp.steps:
            now = time.perf_counter()
            row = {"step": step, "loss": sums["loss"] / sums["k"], "acc": sums["acc"] / sums["k"], "lr": lr,
                   "grad_norm": float(gnorm), "steps_per_s": (step - last_step) / max(now - t_last, 1e-9)}
            t_last, last_step = now, step
            sums = {"loss": 0.0, "acc": 0.0, "k": 0}
            _append(metrics_path, row)
            bar.set_postfix(loss=f"{row['loss']:.4f}", acc=f"{row['acc']:.3f}",
                            **({"valid": f"{last_eval['eval_acc']:.3f}"} if last_eval else {}))
        if hp.eval_every and step % hp.eval_every == 0:
            last_eval = evaluate(step)
        bar.update(1)
        stop_now = cfg.max_wall is not None and time.perf_counter() - t_start > cfg.max_wall
        if step % hp.ckpt_every == 0 or step == hp.steps or stop_now:
            save(step)
        if stop_now:
            break
    if checkpoint.latest(out) is None:
        save(step)
    bar.close()
    return _summary(cfg, task, model, valid, device, metrics_path, step, time.perf_counter() - t_start, out,
                    stream.lengths)


def _summary(cfg, task, model, valid, device, metrics_path, step, seconds, out, train_lengths) -> dict:
    rows = [r for r in checkpoint.read_jsonl(metrics_path) if r.get("step", 0) <= step]
    last_eval = next((r for r in reversed(rows) if "eval_acc" in r), None)
    if last_eval is None or last_eval["step"] != step:
        res = evaluate_metrics(task, model, valid, device)
        last_eval = {"step": step, **{f"eval_{m}": v for m, v in res.items()}, "eval_acc": res[task.metrics[0]]}
        _append(metrics_path, last_eval)
        rows.append(last_eval)
    train_rows = [r for r in rows if "loss" in r]
    summary = {"task": cfg.task, "model": cfg.model, "step": step, "steps": cfg.hp.steps, "seconds": seconds,
               "n_params": _n_params(model), "headline": task.metrics[0],
               "final_loss": train_rows[-1]["loss"] if train_rows else None,
               "final_train_acc": train_rows[-1]["acc"] if train_rows else None,
               "final_valid": {m: last_eval.get(f"eval_{m}") for m in task.metrics},
               "final_valid_step": last_eval["step"], "valid_split": cfg.hp.valid_split,
               "valid_samples": len(valid), "train_lengths": train_lengths}
    try:
        from trainer.plots import train_curves
        h = task.metrics[0]
        summary["curves"] = train_curves(rows, out / "train_curves.png", f"{cfg.task} / {cfg.model}",
                                         f"training batch {h}", f"{cfg.hp.valid_split} {h}")
    except Exception as e:          # a plot must never lose a finished run
        summary["curves"] = f"not written: {e}"
    summary["finished"] = step >= cfg.hp.steps
    checkpoint.write_json_atomic(out / "summary.json", summary)
    return summary


def _n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def _append(path: Path, row: dict):
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
