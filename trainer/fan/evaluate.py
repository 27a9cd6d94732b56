"""`rasp eval` of a Fan-task run: exact match per test length under a
stopping rule, with the chosen steps, the compute used and per-step curves.

The file it writes is every run's evaluation schema (trainer/fan/evalfile.py)."""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from rasp.errors import RaspError, RaspFileError
from rasp.readfile import is_finite_number, read_json
from trainer.run import checkpoint
from trainer.fan import objectives
from trainer.models import get_model_spec
from trainer.run.progress import bar as progress_bar
from trainer.settings import evaluation
from trainer.settings.hparams import HParams
from trainer.fan.evalfile import bands, describe_inputs, document, rows
from trainer.fan.coverage import beyond_compiled, coverage
from trainer.fan.data import scored_once
from trainer.fan.halting import saved_or_fit
from rasp.stop import CALIBRATED, RULES, THRESHOLD, unknown_rule
from trainer.fan.kind import build_data
from trainer.tasks.program import inputs_origin, task_of


def load_run(run_dir, device="cpu"):
    """(run description, model, step) of the newest intact checkpoint, with
    run.json checked against the copy the checkpoint keeps."""
    run_dir = Path(run_dir)
    if not checkpoint.has_run(run_dir):
        raise RaspError(f"{run_dir} does not exist" if not Path(run_dir).exists() else
                        f"{run_dir} is not a training run (no run.json)")
    ckpt = checkpoint.latest(run_dir)
    if ckpt is None:
        raise RaspError(f"{run_dir} holds no checkpoint yet")
    run = checkpoint.read_run(run_dir, ckpt)
    checkpoint.check_run_matches(run, ckpt, run_dir / "run.json")
    model = checkpoint.load_model(ckpt, device)
    model.eval()
    return run, model, checkpoint.load_state(ckpt)["step"]


def evaluate_model(spec, hp, model, data, lengths, rule: str, samples: int, batch_size: int,
                   threshold: float, seed: int, device, progress: bool = False, halting=None) -> list:
    """Rows per length.  Inputs from a file (data.task.pools) are each scored
    once: all the distinct inputs of a length, or `samples` of them drawn
    without replacement when there are more; a row that scored every one has
    no standard error (se None: nothing was sampled) and says how many there
    are ("distinct")."""
    rows = []
    files = data.file_inputs(False)
    bar = progress_bar(total=samples * len(lengths), enabled=progress, unit="input", desc=f"eval {rule}")
    for n in lengths:
        bar.set_postfix(n=n)
        rng = np.random.default_rng([seed, n])
        correct, chosen, ran, T, secs, curves, at_t = [], [], [], [], 0.0, [], []
        pool = None if files is None else files.get(int(n), [])
        todo = list(scored_once(rng, pool, samples)) if pool is not None else None
        left = samples if todo is None else len(todo)
        while left > 0:
            b = min(batch_size, left)
            left -= b
            if todo is None:
                batch = data.batch(rng, [n] * b, train=False).to(device)
            else:
                batch = data.make_batch(todo[:b], [n] * b).to(device)
                todo = todo[b:]
            out = objectives.evaluate_batch(spec, hp, model, batch, rule, data.task.t_max_extra, threshold,
                                            halting)
            correct.append(out["correct"].cpu())
            if "oracle_correct" in out:
                at_t.append(out["oracle_correct"].cpu())
            chosen.append(out["chosen"].cpu())
            ran.append(out["ran"].cpu())
            T.append(batch.steps.cpu())
            secs += out["seconds"]
            bar.update(b)
            if "curve_acc" in out:
                curves.append((b, out["curve_acc"].cpu(), out["curve_true_ce"].cpu(), out["curve_conf_ce"].cpu()))
        if not correct:         # (cli refuses a length the file lacks; a caller may not have)
            raise RaspError(f"the evaluation inputs hold no input of size {n}")
        c = torch.cat(correct).float()
        p = float(c.mean())
        every = pool is not None and len(pool) <= samples        # the whole file's inputs of this length
        row = {"length": int(n), "exact_match": p, "se": None if every else math.sqrt(max(p * (1 - p), 0.0) / len(c)),
               "n": len(c), "chosen_step": float(torch.cat(chosen).float().mean()),
               "oracle_step": float(torch.cat(T).float().mean()),
               "iterations": float(torch.cat(ran).float().mean()), "seconds": secs,
               "step_error": float((torch.cat(chosen) - torch.cat(T)).abs().float().mean())}
        if at_t and rule != "oracle":
            row["oracle_exact_match"] = float(torch.cat(at_t).float().mean())
        if curves:
            L = min(len(cv[1]) for cv in curves)   # T_max may differ per batch; keep the common part
            w = sum(cv[0] for cv in curves)
            row["curve"] = {key: [float(sum(cv[0] * cv[i][t] for cv in curves) / w) for t in range(L)]
                            for i, key in ((1, "acc"), (2, "loss"), (3, "confidence_ce"))}
        row["seed"] = seed
        if pool is not None:
            row["distinct"] = len(pool)
        rows.append(row)
    bar.close()
    return rows


def evaluate_run(run_dir, lengths, rule: str = "oracle", samples: int = evaluation.SAMPLES,
                 batch_size: int = evaluation.BATCH, threshold: float = THRESHOLD, seed: int = evaluation.SEED,
                 device="cpu", labeler=None,
                 out_json: Optional[str] = None, plots: bool = True, progress: bool = False) -> dict:
    """Evaluate and store the rows.  Results accumulate: the rows are merged by
    length into the file of the same stopping rule (and threshold) for the
    same checkpoint step, so the table and plots cover every length evaluated
    so far; a file from an earlier step is kept under a name with its step."""
    if rule not in RULES:
        raise RaspError(unknown_rule(rule))
    name = f"eval_{rule}.json" if rule != "threshold" else f"eval_threshold_{threshold:g}.json"
    path = checkpoint.check_json_target(out_json or Path(run_dir) / name)
    run, model, step = load_run(run_dir, device)
    spec = get_model_spec(run["model"])
    hp = HParams.from_dict(run["hparams"])
    data = build_data(task_of(run), spec, hp, labeler)
    if data.input_tokens != model.cfg.extra.get("input_tokens"):
        raise RaspError(f"{run_dir}: the checkpoint's token table does not match task {run['task']}")
    halting = None
    if rule in CALIBRATED and spec.adaptive:
        halting = saved_or_fit(run_dir, step, model, data, hp, seed, device)     # fitted once, saved in the run
    fresh = evaluate_model(spec, hp, model, data, lengths, rule, samples, batch_size, threshold, seed, device,
                           progress, halting)
    head = {"format": checkpoint.RUN_FORMAT, "kind": "fan", "task": run["task"], "model": run["model"],
            "init": run["init"], "run": str(run_dir), "step": step, "seed": seed, "headline": "exact_match",
            "train_range": [data.task.min_n, hp.max_train_n], "stop": rule,
            "threshold": threshold if rule == "threshold" else None,
            "inputs": inputs_origin(data.task, False), "trained_sizes": trained_sizes(data.task, hp)}
    if halting is not None:
        head["calibration"] = halting.record
    missing, note = coverage(data.task, hp, run["init"], step)     # a fine-tuned compiled start's unchecked sizes
    if missing:
        head["never_checked"] = missing
    beyond, past_note = beyond_compiled(data.task, hp, run["init"], [r["length"] for r in fresh])
    if beyond:
        head["beyond_compiled"] = beyond
    earlier = _earlier_rows(path, head, fresh[0] if fresh else None)
    new = {r["length"] for r in fresh}
    kept = [r for r in earlier if r["length"] not in new]
    result = document(head, sorted(kept + fresh, key=lambda r: r["length"]), head["trained_sizes"])
    checkpoint.write_json_atomic(path, result)
    warnings = halting_warnings(rule, fresh, head.get("calibration"), head["train_range"]) if spec.adaptive else []
    warnings += [f"warning: {line}" for line in (note, past_note) if line]
    result.update(json=str(path), kept=len(kept), warnings=warnings)
    if plots:
        from trainer.run import plots as P
        result["plots"] = P.eval_plots(result, rows(result), Path(path).with_suffix(""))
    return result


def trained_sizes(task, hp) -> list:
    """The sizes n the training drew inputs of: min_n..max_train_n, or, from a
    file, the sizes it holds up to max_train_n (a size it lacks was drawn from
    the nearest size below it)."""
    files = task.pools
    if files is None:
        return list(range(task.min_n, hp.max_train_n + 1))
    return sorted(n for n in files[True] if n <= hp.max_train_n)


def _earlier_rows(path: Path, head: dict, like: Optional[dict]) -> list:
    """The rows stored in `path` by an earlier evaluation of the same
    checkpoint and settings (the table and plots then cover every length
    evaluated so far), each of the shape of `like` (a fresh row) with finite
    numbers, or dropped, saying so; an earlier file of another step or rule is
    moved to PATH_stepN.json and contributes nothing."""
    if not path.exists():
        return []
    try:
        old = read_json(path, finite=True)
        same = all(old.get(k) == head[k] for k in ("run", "task", "model", "step", "stop", "threshold", "inputs"))
        old_rows = rows(old) if same else []
        if not isinstance(old_rows, list):
            raise TypeError("rows")
        step = old.get("step")
        if not same and not (isinstance(step, int) and not isinstance(step, bool) and step >= 0):
            raise ValueError("step")        # it would name the file the old results move to
    except (RaspFileError, KeyError, TypeError, AttributeError, ValueError):
        print(f"warning: {path} was damaged; replacing it", file=sys.stderr)
        return []
    if not same:
        keep = path.with_name(f"{path.stem}_step{old.get('step')}{path.suffix}")
        os.replace(path, keep)
        print(f"note: the results of step {old.get('step')} in {path.name} were moved to {keep.name}",
              file=sys.stderr)
        return []
    kept = []
    for r in old_rows:
        problem = "not an object" if not isinstance(r, dict) else row_problem(r, like) if like else "no fresh row"
        if problem is None:
            kept.append(r)
        else:
            length = r.get("length") if isinstance(r, dict) else None
            print(f"warning: {path}: an earlier row{f' (length {length})' if isinstance(length, int) else ''} is "
                  f"not of the shape rasp eval writes ({problem}); dropped", file=sys.stderr)
    return kept


def row_problem(row: dict, like: dict) -> Optional[str]:
    """What keeps an earlier evaluation row from standing beside the fresh row
    `like`: a field missing, or not of its kind (a number, a per-step curve)."""
    for key, value in like.items():
        if key not in row:
            return f"no {key!r}"
        got = row[key]
        if value is None or key == "se":        # a length whose inputs were each scored once has no error
            if got is not None and not is_finite_number(got):
                return f"{key!r} is not a finite number"
            continue
        if isinstance(value, int) and not (isinstance(got, int) and not isinstance(got, bool) and got >= 0):
            return f"{key!r} is not a count"
        if isinstance(value, float) and not is_finite_number(got):
            return f"{key!r} is not a finite number"
        if isinstance(value, dict) and not (isinstance(got, dict) and set(got) == set(value) and all(
                isinstance(v, list) and all(map(is_finite_number, v)) for v in got.values())):
            return f"{key!r} is not a per-step curve"
    return None


# `rasp eval` warns when the chosen steps look degenerate
FAR_FROM_T = 1.0        # mean |chosen step - T(n)| over a length, in steps
# ... or when the rule answers worse than the oracle on the same inputs by more than this,
# averaged over the lengths inside the training range and over those beyond it (issue 39's bar)
SHORT_IN, SHORT_BEYOND = 0.01, 0.03


def halting_warnings(rule: str, fresh: list, calibration: Optional[dict] = None, train_range=None) -> list:
    """One line per symptom of a halting rule that does not find the depth:
    it answers worse than the oracle on the same inputs, the same step at
    every length, steps far from T(n) (T(n) is known to every Fan task: the
    task program's step count), or a depth law that is not a line through
    the best held-in steps."""
    if rule == "oracle" or not fresh:
        return []
    out = []
    hi = train_range[1] if train_range else max(r["length"] for r in fresh)
    for where, rows_, bar in (("inside the training range", [r for r in fresh if r["length"] <= hi], SHORT_IN),
                              ("beyond it", [r for r in fresh if r["length"] > hi], SHORT_BEYOND)):
        paired = [r for r in rows_ if "oracle_exact_match" in r]
        if paired:
            short = sum(r["oracle_exact_match"] - r["exact_match"] for r in paired) / len(paired)
            if short > bar:
                out.append(f"warning: --stop {rule} answers {short:.3f} worse than the oracle on the same inputs "
                           f"(mean over the {len(paired)} lengths {where}): it does not stop where T(n) does "
                           "(docs/tasks.md, \"Teaching the model when it is done\")")
    misses = ((calibration or {}).get("depth_law") or {}).get("misses")
    if rule == "depth_law" and misses:
        out.append(f"warning: the depth law (a line through the best step of each training length) misses the "
                   f"best step at n = {', '.join(map(str, misses))}: the depth this model needs is not linear "
                   f"in n there")
    steps = {round(r["chosen_step"], 6) for r in fresh}
    if len(fresh) > 1 and len(steps) == 1:
        out.append(f"warning: --stop {rule} chose step {fresh[0]['chosen_step']:g} at every length "
                   f"({fresh[0]['length']}..{fresh[-1]['length']}): it is not finding the depth each length needs")
    far = [r["length"] for r in fresh if r.get("step_error", 0.0) > FAR_FROM_T]
    if far:
        worst = max(fresh, key=lambda r: r.get("step_error", 0.0))
        out.append(f"warning: --stop {rule} stops more than {FAR_FROM_T:g} step from T(n) on average at "
                   f"{len(far)} of {len(fresh)} lengths (worst n = {worst['length']}: {worst['step_error']:.1f} "
                   f"steps off); compare the oracle column")
    return out


def format_table(result: dict) -> str:
    head = f"{result['task']} / {result['model']} ({result['init']} init, step {result['step']}), stop = {result['stop']}"
    table = rows(result)
    oracle = result["stop"] != "oracle" and any("oracle_exact_match" in r for r in table)
    seen = set(result.get("trained_sizes") or range(1, result["train_range"][1] + 1))
    lines = [head]
    if result.get("inputs"):
        lines.append(f"inputs: {describe_inputs(result['inputs'], table)}")
    lines.append(f"{'length':>6} {'exact':>7} {'stderr':>7} {'n':>5}" + (f" {'oracle':>7}" if oracle else "")
                 + f" {'step':>6} {'T(n)':>6} {'iters':>6}")
    for r in table:
        mark = "*" if r["length"] in seen else " "
        at_t = (f" {r['oracle_exact_match']:7.3f}" if "oracle_exact_match" in r else f" {'':>7}") if oracle else ""
        se = f"{r['se']:7.3f}" if r.get("se") is not None else f"{'-':>7}"
        lines.append(f"{r['length']:>5}{mark} {r['exact_match']:7.3f} {se} {r['n']:>5}{at_t} "
                     f"{r['chosen_step']:6.1f} {r['oracle_step']:6.1f} {r['iterations']:6.1f}")
    for band in bands(table, seen, oracle).values():
        lines.append(f"{band['title']}: exact {band['exact_match']:.3f} over {band['n']} inputs of "
                     f"{len(band['lengths'])} length{'s' * (len(band['lengths']) != 1)}"
                     + (f" (oracle {band['oracle_exact_match']:.3f})" if "oracle_exact_match" in band else ""))
    whole = any(r.get("se") is None for r in table)
    lines.append("* = a size the training drew inputs of; n = inputs scored"
                 + ("; stderr - = each of the length's inputs scored once (nothing sampled)" if whole else "")
                 + "; step = chosen step (mean), iters = loop iterations run (mean)"
                 + ("; oracle = exact match at T(n) on the same inputs" if oracle else ""))
    read = ((result.get("calibration") or {}).get("head") or {})
    if result["stop"] == "head" and read.get("reads") in ("clock", "program"):
        lines.append(head_reads(read))
    law = (result.get("calibration") or {}).get("depth_law")
    if law and result["stop"] == "depth_law":
        lines.append(f"depth law fitted on lengths {result['calibration']['lengths'][0]}.."
                     f"{result['calibration']['lengths'][-1]}: step = {law['slope']:.3g} * n + {law['intercept']:.3g}")
    return "\n".join(lines)


def head_reads(record: dict) -> str:
    """The line saying what a compiled start's head read (trainer/fan/halting.py calibrate)."""
    if record["reads"] == "clock":
        checked = record.get("checked") or {}
        return (f"head reads the compiled halting clock, checked to stop at T(n) on {checked.get('inputs')} inputs "
                f"of sizes {checked.get('sizes')}")
    return f"head reads T(n) from the program: {record.get('why', '')}"
