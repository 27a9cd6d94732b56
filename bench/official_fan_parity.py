"""Fan et al.'s own code on issue 15's configuration, on the CPU, for the
side-by-side with `fan_parity.py` (a measurement harness: it calls their
modules, it ships none of their code).

Needs a checkout of github `truongbuu/looped-tf` (tested at 7570c59):

    git clone https://github.com/truongbuu/looped-tf /path/looped-tf
    PYTHONPATH=/path/looped-tf/src OMP_NUM_THREADS=1 python -m bench.official_fan_parity \\
        --src /path/looped-tf/src --seed 0 --out runs/fan_parity
    python -m bench.fan_parity table --out runs/fan_parity   # both codes, one table

(`--train-only`: the training loop's speed alone, OUT/official_seedS/speed.json, no
tests; bench/official_speed.py runs it beside ours.)

What it runs is their `train.py:50-100` on the parity task (their
`GeneralTransformerModel(n_dims 6, d 64, 1 layer, 16 heads, linear read-in)`,
`generate_prompt_matrix_parity`, AdamW lr 1e-3, clip 1.0, curriculum from 2
points +1 every 100 steps to end 11 (lengths 1..10), cosine to 0 from step
end·interval, 2000 steps, batch 64; no wandb, no EMA (off in their configs)),
then their `test_model` (oracle step) and `test_model_adaptive` (Eq. 2, one
step per test batch over T(n) + 20) on 512 inputs per length n = 1..30.
Three things make their code import on a CPU without network access, none of
which touches what it computes: `.cuda()` is a no-op, the vendored
transformers' import-time dependency-version check is skipped, and
`huggingface_hub` (imported by the vendored transformers, never called) is an
empty stand-in module.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
import types
from pathlib import Path

from bench.fan_parity import RANGES, range_means  # one table for both codes


def _importable(src: Path):
    """Their modules importable on a CPU-only, offline machine.  Their code imports its
    own modules by top-level name (`import utils`), so their src/ folder must be on
    PYTHONPATH (checked here; nothing in this repository edits sys.path)."""
    import torch
    hub = types.ModuleType("huggingface_hub")
    def stand_in(name):                        # names imported, never called
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: None
    hub.__getattr__ = stand_in
    sys.modules.setdefault("huggingface_hub", hub)
    check = types.ModuleType("transformers.dependency_versions_check")
    check.dep_version_check = lambda pkg, hint=None: None       # pins we do not install (tokenizers, ...)
    sys.modules["transformers.dependency_versions_check"] = check
    torch.Tensor.cuda = lambda self, *a, **k: self
    if src.resolve() not in {Path(p or ".").resolve() for p in sys.path}:
        sys.exit(f"--src {src}: put it on PYTHONPATH too (PYTHONPATH={src} python -m bench.official_fan_parity ...): "
                 f"their modules import each other by top-level name")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", required=True, help="looped-tf's src/ folder")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--interval", type=int, default=100)
    ap.add_argument("--end", type=int, default=11, help="curriculum end (max length end - 1)")
    ap.add_argument("--samples", type=int, default=512, help="test inputs per length")
    ap.add_argument("--out", default="runs/fan_parity")
    ap.add_argument("--train-only", action="store_true", help="no tests after training (bench/official_speed.py)")
    a = ap.parse_args(argv)
    src = Path(a.src)
    if not (src / "models.py").is_file():
        sys.exit(f"--src {src}: not looped-tf's src/ folder (no models.py)")

    import numpy as np
    import torch
    torch.set_num_threads(1)
    _importable(src)
    import utils
    from generate_training_data import generate_prompt_matrix_parity
    from models import GeneralTransformerModel
    from test_func import test_model, test_model_adaptive

    np.random.seed(a.seed)
    torch.manual_seed(a.seed)
    one_hot = lambda xs, n_dims=6: utils.convert_to_one_hot(xs)
    model = GeneralTransformerModel(6, 4096, 64, 1, 16, True).float()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, a.steps - a.end * a.interval, eta_min=0.0)
    loss_fn = torch.nn.CrossEntropyLoss()
    n_points, batch, losses = 2, 64, []
    load_before = os.getloadavg()
    t0, cpu0 = time.perf_counter(), time.process_time()
    for i in range(a.steps):
        xs, lengths, ys, mask = generate_prompt_matrix_parity(batch, min_num_digits=1, max_num_digits=n_points,
                                                              max_len=n_points + 1)
        states = model.looped_forward(torch.tensor(one_hot(xs)), horizon=n_points + 2)
        out = torch.stack([states[lengths[t].item() - 1][t] for t in range(batch)])
        opt.zero_grad()
        loss = loss_fn(out[mask == 1], ys[mask == 1])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i > a.end * a.interval:
            sched.step()
        if (i + 1) % a.interval == 0:              # their Curriculum.update
            n_points = min(n_points + 1, a.end)
        losses.append(loss.item())
    train_s, train_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    run_dir = Path(a.out) / f"official_seed{a.seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    if a.train_only:
        speed = {"tag": "official", "seed": a.seed, "steps": a.steps, "interval": a.interval,
                 "train_seconds": train_s, "steps_per_s": a.steps / train_s, "train_cpu_seconds": train_cpu_s}
        (run_dir / "speed.json").write_text(json.dumps(speed, indent=2))
        return

    model.eval()
    args = (generate_prompt_matrix_parity, one_hot, utils.one_hot_to_int, utils.exact_match_accuracy)
    oracle, conf, chosen = {}, {}, {}
    for n in range(1, 31):
        oracle[n] = float(test_model(model, n, a.samples, *args))
        with contextlib.redirect_stdout(io.StringIO()):          # it prints every step's accuracy
            acc, idx = test_model_adaptive(model, n, a.samples, *args)
        conf[n], chosen[n] = float(acc), int(idx) + 1 - n
    rules = {name: {"by_length": v, **range_means(v)}
             for name, v in (("oracle", oracle), ("confidence", conf))}
    rules["confidence"]["chosen_minus_T"] = chosen
    result = {"tag": "official", "seed": a.seed, "code": "truongbuu/looped-tf", "lr": a.lr, "steps": a.steps,
              "train_seconds": train_s, "steps_per_s": a.steps / train_s, "load_before": load_before,
              "final_loss": float(np.mean(losses[-50:])), "rules": rules, "load_after": os.getloadavg()}
    (run_dir / "fan_parity.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({"seed": a.seed, "steps_per_s": round(result["steps_per_s"], 2)} |
                     {r: {k: round(v[k], 3) for k in RANGES} for r, v in rules.items()}))


if __name__ == "__main__":
    main()
