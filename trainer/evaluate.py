"""`rasp eval`: exact match per test length under a stopping rule, with the
chosen steps, the compute used and per-step curves."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from rasp.errors import RaspError
from trainer import checkpoint, objectives
from trainer.models import get_model_spec
from trainer.presets import HParams
from trainer.stopping import RULES
from trainer.train import build_data


def load_run(run_dir, device="cpu"):
    run_dir = Path(run_dir)
    if not (run_dir / "run.json").exists():
        raise RaspError(f"{run_dir} is not a training run (no run.json)")
    ckpt = checkpoint.latest(run_dir)
    if ckpt is None:
        raise RaspError(f"{run_dir} holds no checkpoint yet")
    run = json.loads((run_dir / "run.json").read_text())
    model = checkpoint.load_model(ckpt, device)
    model.eval()
    return run, model, checkpoint.load_state(ckpt)["step"]


def evaluate_model(spec, hp, model, data, lengths, rule: str, samples: int, batch_size: int,
                   threshold: float, seed: int, device) -> list:
    rows = []
    for n in lengths:
        rng = np.random.default_rng([seed, n])
        correct, chosen, ran, T, secs, curves = [], [], [], [], 0.0, []
        left = samples
        while left > 0:
            b = min(batch_size, left)
            left -= b
            batch = data.batch(rng, [n] * b, train=False).to(device)
            out = objectives.evaluate_batch(spec, hp, model, batch, rule, data.task.t_max_extra, threshold)
            correct.append(out["correct"].cpu())
            chosen.append(out["chosen"].cpu())
            ran.append(out["ran"].cpu())
            T.append(batch.steps.cpu())
            secs += out["seconds"]
            if "curve_acc" in out:
                curves.append((b, out["curve_acc"].cpu(), out["curve_true_ce"].cpu(), out["curve_conf_ce"].cpu()))
        c = torch.cat(correct).float()
        p = float(c.mean())
        row = {"length": int(n), "exact_match": p, "stderr": math.sqrt(max(p * (1 - p), 0.0) / len(c)),
               "samples": len(c), "chosen_step": float(torch.cat(chosen).float().mean()),
               "oracle_step": float(torch.cat(T).float().mean()),
               "iterations": float(torch.cat(ran).float().mean()), "seconds": secs}
        if curves:
            L = min(len(cv[1]) for cv in curves)   # T_max may differ per batch; keep the common part
            w = sum(cv[0] for cv in curves)
            row["curve"] = {key: [float(sum(cv[0] * cv[i][t] for cv in curves) / w) for t in range(L)]
                            for i, key in ((1, "acc"), (2, "loss"), (3, "confidence_ce"))}
        rows.append(row)
    return rows


def evaluate_run(run_dir, lengths, rule: str = "oracle", samples: int = 256, batch_size: int = 128,
                 threshold: float = 0.01, seed: int = 1234, device="cpu", labeler=None,
                 out_json: Optional[str] = None, plots: bool = True) -> dict:
    if rule not in RULES:
        raise RaspError(f"unknown --stop {rule!r} (one of {', '.join(RULES)})")
    run, model, step = load_run(run_dir, device)
    spec = get_model_spec(run["model"])
    hp = HParams.from_dict(run["hparams"])
    data = build_data(run["task"], spec, hp, labeler)
    if data.input_tokens != model.cfg.extra.get("input_tokens"):
        raise RaspError(f"{run_dir}: the checkpoint's token table does not match task {run['task']}")
    rows = evaluate_model(spec, hp, model, data, lengths, rule, samples, batch_size, threshold, seed, device)
    result = {"run": str(run_dir), "task": run["task"], "model": run["model"], "init": run["init"],
              "step": step, "stop": rule, "threshold": threshold if rule == "threshold" else None,
              "train_max_n": hp.max_train_n, "rows": rows}
    path = Path(out_json) if out_json else Path(run_dir) / f"eval_{rule}.json"
    checkpoint.write_json_atomic(path, result)
    result["json"] = str(path)
    if plots:
        from trainer import plots as P
        result["plots"] = P.eval_plots(result, Path(path).with_suffix(""))
    return result


def format_table(result: dict) -> str:
    head = f"{result['task']} / {result['model']} ({result['init']} init, step {result['step']}), stop = {result['stop']}"
    lines = [head, f"{'length':>6} {'exact':>7} {'stderr':>7} {'step':>6} {'T(n)':>6} {'iters':>6}"]
    for r in result["rows"]:
        mark = "*" if r["length"] <= result["train_max_n"] else " "
        lines.append(f"{r['length']:>5}{mark} {r['exact_match']:7.3f} {r['stderr']:7.3f} "
                     f"{r['chosen_step']:6.1f} {r['oracle_step']:6.1f} {r['iterations']:6.1f}")
    lines.append("* = inside the training range; step = chosen step (mean), iters = loop iterations run (mean)")
    return "\n".join(lines)
