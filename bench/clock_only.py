"""A run's halting clock trained alone, and where it stops (issue 54).

The clock (`--halt-target clock`, model/looped.py) reads only the input
tokens, its loss only its own outputs, its gradient is clipped apart and its
initialisation draws on a forked random stream: the answering trunk never
changes it.  So the clock of a `rasp train` run can be trained without the
trunk's forward and backward passes (which cost most of a step on a CPU), on
the same batches, and the clock's stop can be measured without any trunk:
where it says "done" against each input's T(n) (early / at T(n) / late) at
every length, in distribution and beyond.

    python -m bench.clock_only train -- --program P.rasp --out RUN --seed S [rasp train flags]
    python -m bench.clock_only stops RUN [--lengths 1:30] [--samples 128]
    python -m bench.clock_only graft CLOCK_RUN TRUNK_RUN OUT   # CLOCK_RUN with TRUNK_RUN's trunk

`train` runs `rasp train` with the trunk's loop replaced by zeros (its loss a
constant, so its weights keep their initialisation and the clock's
gradients are those of the full run).  `stops` writes RUN/clock_stops.json
and prints, per length, the shares of inputs the default rule (`head`: the
first step where the clock says done) stops early, at T(n) and late.
`graft` copies a clock-only run and puts a trained trunk in (the trunk of a
run with the same preset, program and seed, which trains bit for bit alike
beside any clock), for `rasp eval` and bench.halting.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

from model.files import write_manifest
from model.looped import LoopedTransformer
from rasp.readfile import read_json
from trainer.fan import stopping
from trainer.fan.evaluate import load_run
from trainer.fan.kind import build_data
from trainer.models import get_model_spec
from trainer.run import checkpoint
from trainer.run.checkpoint import write_json_atomic
from trainer.settings.hparams import HParams, clock_plan
from trainer.tasks.program import task_of

OUT = "clock_stops.json"


def clock_alone(self, tokens, answer_steps, done_steps):
    """`steps_and_done` without the trunk: zeros for its logits (no gradient), the clock's outputs as in training."""
    every = torch.zeros(answer_steps, *tokens.shape, int(self.cfg.out_vocab_size), device=tokens.device)
    return every, self.clock_targets(tokens, done_steps)


def train(argv) -> int:
    from rasp.cli import main
    from trainer.fan import objectives
    LoopedTransformer.steps_and_done = clock_alone      # this process only
    full_step = objectives.train_step_outputs

    def clock_steps_only(spec, hp, model, batch, tokens_per_shard=None, step=None):
        """A step the clock skips (`--clock-every`) trains only the trunk: nothing, here."""
        if step is not None and not objectives.clock_due(hp, step, batch.need is not None):
            return torch.zeros((), requires_grad=True), torch.zeros(())
        return full_step(spec, hp, model, batch, tokens_per_shard, step)
    objectives.train_step_outputs = clock_steps_only
    return main(["train", *argv])


@torch.no_grad()
def stops(run_dir: Path, lengths, samples: int, seed: int) -> dict:
    t0 = time.perf_counter()
    run, model, step = load_run(run_dir)
    spec, hp = get_model_spec(run["model"]), HParams.from_dict(run["hparams"])
    data = build_data(task_of(run), spec, hp)
    rows = {}
    for n in lengths:
        b = data.batch(np.random.default_rng([seed, n]), [n] * samples, train=False)
        t_max = int(b.steps.max()) + data.task.t_max_extra
        done = model.done_every(b.tokens, t_max).amin(-1) > 0          # what `head` reads (trainer/fan/halting.py)
        chosen = stopping.first_done(done)
        rows[str(n)] = {"early": float((chosen < b.steps).float().mean()),
                        "at_t": float((chosen == b.steps).float().mean()),
                        "late": float((chosen > b.steps).float().mean()),
                        "steps_off": float((chosen - b.steps).abs().float().mean()),
                        "oracle_step": float(b.steps.float().mean())}
    doc = {"run": str(run_dir), "task": run["task"], "seed": hp.seed, "step": step, "samples": samples,
           "clock_reach": clock_plan(hp, data.needs, data.count_by_size)[0], "max_train_n": hp.max_train_n,
           "clock_params": sum(p.numel() for p in model.clock.parameters()) if model.clock is not None else 0,
           "seconds": time.perf_counter() - t0, "load": os.getloadavg()[0], "lengths": rows}
    write_json_atomic(run_dir / OUT, doc)
    return doc


def band(rows: dict, key: str, lo: int, hi: int) -> float:
    vals = [r[key] for n, r in rows.items() if lo <= int(n) <= hi]
    return float(np.mean(vals)) if vals else float("nan")


def summary(doc: dict) -> str:
    rows, m = doc["lengths"], doc["max_train_n"]
    parts = []
    for name, lo, hi in (("in dist.", 1, m), ("beyond", m + 1, 10 ** 6)):
        parts.append(f"{name}: at T {band(rows, 'at_t', lo, hi):.3f}, early {band(rows, 'early', lo, hi):.3f}, "
                     f"late {band(rows, 'late', lo, hi):.3f}")
    return f"{doc['run']} ({doc['clock_reach']}, seed {doc['seed']}, step {doc['step']}): " + "; ".join(parts)


def graft(clock_run: Path, trunk_run: Path, out: Path) -> None:
    """OUT: a copy of CLOCK_RUN (its settings, its clock) whose answering trunk is
    TRUNK_RUN's (the two runs' trunks must have the same shapes: same preset, task, seed)."""
    if out.exists():
        raise SystemExit(f"{out} exists")
    shutil.copytree(clock_run, out)
    for stale in ("halting.json", OUT, "halting_bench.json"):
        (out / stale).unlink(missing_ok=True)
    ckpt, src = checkpoint.latest(out), checkpoint.latest(trunk_run)
    from safetensors.torch import load_file, save_file
    weights, trunk = load_file(str(ckpt / "model.safetensors")), load_file(str(src / "model.safetensors"))
    keys = sorted(k for k in weights if not k.startswith("clock."))
    if keys != sorted(k for k in trunk if not k.startswith("clock.")) or \
            any(weights[k].shape != trunk[k].shape for k in keys):
        raise SystemExit("the two runs' answering trunks differ in shape")
    weights.update({k: trunk[k] for k in keys})
    save_file(weights, str(ckpt / "model.safetensors"))
    write_manifest(ckpt, checkpoint.FILES, checkpoint.KIND)       # the checkpoint's own hashes, of the new weights


def step_costs(task_name: str, n: int, reps: int, seed: int = 0) -> dict:
    """CPU seconds of one training step (forward, backward, AdamW) of the cpu preset on a
    batch of size-n inputs: Fan et al.'s recipe (no clock), the clock recipe (its narrow
    clock taught on every `clock_every`-th step: the mean step of such a cycle), the
    full-width window clock taught on every step (the recipe before issue 56) and the
    global one, interleaved rep by rep (so a change of load falls on all alike); the
    median of `reps`."""
    from dataclasses import replace
    from trainer.fan import objectives
    from trainer.fan.presets import RECIPES, make_hparams
    from trainer.tasks import get_task
    task = get_task(task_name)
    spec = get_model_spec("looped")
    full = dict(clock_width=0, clock_every=1)
    variants = {"fan": {**RECIPES["fan"]}, "clock": {**RECIPES["clock"]},
                "window": {**RECIPES["clock"], **full, "clock_reach": "window"},
                "global": {**RECIPES["clock"], **full, "clock_reach": "global"}}
    base = make_hparams("cpu", task)
    setups = {}
    for name, fields in variants.items():
        hp = replace(base, **fields)
        data = build_data(task, spec, hp)
        torch.manual_seed(seed)
        model = spec.make(hp, data)
        opt = torch.optim.AdamW(model.parameters(), lr=hp.lr)
        setups[name] = (hp, model, opt)
    batch = build_data(task, spec, base).batch(np.random.default_rng(seed), [n] * base.batch_size)
    times = {k: [] for k in setups}
    for _ in range(reps):
        for name, (hp, model, opt) in setups.items():
            cycle = getattr(hp, "clock_every", 1) if name != "fan" else 1
            c = time.process_time()
            for step in range(cycle):       # one step that teaches the clock, the rest that skip it
                loss, _ = objectives.train_step_outputs(spec, hp, model, batch, step=step)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            times[name].append((time.process_time() - c) / cycle)
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {"task": task_name, "n": n, "reps": reps, "cpu_seconds": med,
            "clock_share": {k: (med[k] - med["fan"]) / med[k] for k in med if k != "fan"},
            "params": {k: sum(p.numel() for p in m.parameters()) for k, (_, m, _) in setups.items()},
            "load": os.getloadavg()[0], "threads": torch.get_num_threads()}


def lengths_arg(text: str) -> list:
    lo, hi = (int(x) for x in text.split(":"))
    return list(range(lo, hi + 1))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["train"]:
        rest = argv[1:]
        return train(rest[1:] if rest[:1] == ["--"] else rest)
    ap = argparse.ArgumentParser(prog="python -m bench.clock_only")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stops")
    s.add_argument("runs", nargs="+", type=Path)
    s.add_argument("--lengths", type=lengths_arg, default=lengths_arg("1:30"))
    s.add_argument("--samples", type=int, default=128)
    s.add_argument("--seed", type=int, default=1234)
    g = sub.add_parser("graft")
    g.add_argument("clock_run", type=Path)
    g.add_argument("trunk_run", type=Path)
    g.add_argument("out", type=Path)
    c = sub.add_parser("cost")
    c.add_argument("--task", default="parity")
    c.add_argument("--n", type=int, default=10)
    c.add_argument("--reps", type=int, default=20)
    t = sub.add_parser("summary")
    t.add_argument("runs", nargs="+", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "stops":
        for r in a.runs:
            print(summary(stops(r, a.lengths, a.samples, a.seed)), flush=True)
    elif a.cmd == "cost":
        import json
        print(json.dumps(step_costs(a.task, a.n, a.reps), indent=1))
    elif a.cmd == "graft":
        graft(a.clock_run, a.trunk_run, a.out)
    else:
        for r in a.runs:
            print(summary(read_json(r / OUT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
