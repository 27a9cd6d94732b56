"""Per-position learning curve of a word-problem model on Z60 words of one length
(bench/implicit.md, issue 28): which positions of the prefix product a model
has learned after how many steps.

    python -m bench.implicit_llama_probe MODEL L STEPS [--every N] [--eval-len L] [--loss-first K [--grow-every N]] [KEY=VALUE ...]

Trains MODEL (any comparison-task model: implicit_llama, llama, implicit_mamba2, ...)
with the words cpu preset's recipe (`trainer/benchmark/presets.py` and the model's preset;
KEY=VALUE as `python -m trainer train --set`), on fresh random Z60 words of length L
each step (the task's `train_k` is the same distribution at L = 8), and every N steps
prints one JSON line: step, seconds, token / sequence accuracy and the accuracy at each
position on 512 fixed words of length --eval-len (default L), and the encoder's mean
iterations.  `--loss-first K` trains on the loss of positions 0..K-1 only (the
rest of each word is still read); with `--grow-every N` one more position every N steps
(a curriculum over positions).  One torch thread.  Z60 is the cyclic group: the target at position t is
(x_0 + ... + x_t) mod 60 (checked against the task's own labels at start).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from trainer.models import get_encoder_spec
from trainer.models.base import param_groups
from trainer.benchmark.data import generate_split
from trainer.benchmark.presets import lr_at, make_seq_hparams, parse_set
from trainer.benchmark.kind import build_model, seq_task
from trainer.settings.hparams import scored_positions

ORDER = 60


def words(rng: np.random.Generator, n: int, length: int):
    w = rng.integers(0, ORDER, size=(n, length))
    return (torch.tensor(w + 1), torch.ones(n, length, dtype=torch.bool),
            torch.tensor(np.cumsum(w, axis=1) % ORDER))


def check_labels(task):
    """Our cumulative sum is the task's label (its RASP program's prefix product)."""
    for ex in generate_split(task, "valid", 8, 0):
        w = np.asarray(ex.input) - 1
        if list(np.cumsum(w) % ORDER) != list(ex.target):
            raise SystemExit("words_z60 labels are not prefix sums mod 60: probe out of date")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("length", type=int)
    ap.add_argument("steps", type=int)
    ap.add_argument("--every", type=int, default=250)
    ap.add_argument("--eval-len", type=int, default=None)
    ap.add_argument("--loss-first", type=int, default=None, help="train on positions 0..K-1 only")
    ap.add_argument("--grow-every", type=int, default=None, help="with --loss-first: one more position every N steps")
    ap.add_argument("sets", nargs="*", help="KEY=VALUE, as --set")
    a = ap.parse_intermixed_args(argv)
    if not (1 <= a.length <= 64 and 0 <= a.steps <= 100_000 and 1 <= a.every
            and 1 <= (a.eval_len or a.length) <= 64 and 1 <= (a.loss_first or 1) <= a.length and 1 <= (a.grow_every or 1)):
        ap.error("length and --eval-len in 1..64, steps in 0..100000, --every >= 1, --loss-first in 1..length, --grow-every >= 1")
    torch.set_num_threads(1)
    task = seq_task("words_z60")
    check_labels(task)
    hp = make_seq_hparams("cpu", task, get_encoder_spec(a.model), {"steps": a.steps}, parse_set(a.sets))
    torch.manual_seed(hp.seed)
    rng = np.random.default_rng(hp.seed)
    net = build_model(task, a.model, hp)
    opt = torch.optim.AdamW(param_groups(net, hp.lr, hp.weight_decay), lr=hp.lr, betas=tuple(hp.betas), eps=hp.eps)
    vx, vm, vy = words(np.random.default_rng(999), 512, a.eval_len or a.length)
    t0 = time.time()
    for step in range(a.steps + 1):
        if step % a.every == 0 or step == a.steps:
            net.eval()
            with torch.no_grad():
                logits, enc = net(vx, vm)
            hit = (logits.argmax(-1) == vy).float()
            it = (enc.stats or {}).get("iterations")
            print(json.dumps({"step": step, "s": round(time.time() - t0), "token": round(hit.mean().item(), 3),
                              "seq": round(hit.min(1).values.mean().item(), 3),
                              "position": [round(v, 2) for v in hit.mean(0).tolist()],
                              "iterations": None if it is None else round(it.float().mean().item(), 1)}),
                  flush=True)
            net.train()
        if step == a.steps:
            break
        net.set_progress(step, a.steps)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, hp) * g["lr_scale"]
        x, m, y = words(rng, hp.batch_size, a.length)
        logits, _ = net(x, m)
        k = min(a.length, scored_positions(step, a.loss_first or 0, a.grow_every or 0) or a.length)
        loss = torch.nn.functional.cross_entropy(logits[:, :k].reshape(-1, logits.shape[-1]), y[:, :k].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), hp.grad_clip)
        opt.step()


if __name__ == "__main__":
    main()
