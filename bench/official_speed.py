"""Training speed beside Fan et al.'s own code (issue 56): the README's
`rasp train --task parity --preset cpu` (the default recipe, with its halting
clock), the same with `--recipe fan`, and looped-tf's training loop on the same
configuration (bench/official_fan_parity.py --train-only), the three started
together, one torch thread each, over the whole curriculum; then the clock's
share of a default-recipe step, timed in this process.

    git clone https://github.com/truongbuu/looped-tf /path/looped-tf      # tested at 7570c59
    python -m bench.official_speed --src /path/looped-tf/src [--quick] [--rounds R] [--alone]

`--quick`: the curriculum shortened to +1 length every 20 steps, 400 steps
(lengths 1..10 as in the full one, which is +1 every 100 steps, 2000 steps;
`--interval N` sets another pace, 20 N steps).
Each round starts the three trainings at once; steps/s is each one's steps
over its training loop's seconds (ours: summary.json, the loop with its
periodic evaluations and checkpoints, as the command runs for a user; theirs:
the loop only, which has neither); like for like, over the training steps'
seconds (ours less summary.json's `seconds_evaluating` and `seconds_saving`);
and per CPU second of each loop (summary.json's `cpu_seconds`; theirs
measured the same way): three runs on two cores do not end together, and the
last one has a core to itself at the end, which steps/s over wall time
credits to it.  `--alone`: the three of a round one after the other instead,
so each has a core to itself throughout.  The ratios are taken within a round (the same load for all
three), and their median over rounds is printed.  The clock's share: full
training steps (forward, backward, clipping, AdamW) of the default recipe
against the same steps with the clock's loss left out (the answering model
alone, `--recipe fan`'s loss, on the same model and batches, interleaved),
on whole cycles of `--clock-every` steps drawn across the curriculum.  Targets (issue 56): the default
recipe at least 1.5 times the official code's steps/s, the clock at most a
fifth of a step.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rasp import atomic
from rasp.readfile import read_json

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("default", "fan", "official")


def curriculum(interval: int) -> dict:
    """The cpu preset's curriculum (+1 length every 100 steps, 2000 steps) at another pace."""
    return {"steps": 20 * interval, "interval": interval}


def commands(src: Path, out: Path, seed: int, cur: dict) -> dict:
    """The three trainings of a round: argv per run."""
    ours = [sys.executable, "-m", "trainer", "train", "--task", "parity", "--preset", "cpu", "--seed", str(seed),
            "--threads", "1", "--no-progress", "--steps", str(cur["steps"]), "--interval", str(cur["interval"])]
    return {"default": ours + ["--out", str(out / "default")],
            "fan": ours + ["--recipe", "fan", "--out", str(out / "fan")],
            "official": [sys.executable, "-m", "bench.official_fan_parity", "--src", str(src), "--seed", str(seed),
                         "--steps", str(cur["steps"]), "--interval", str(cur["interval"]), "--train-only",
                         "--out", str(out)]}


def side_by_side(src: Path, out: Path, seed: int, cur: dict, alone: bool = False) -> dict:
    """One round: the three trainings started together (`alone`: one after the other);
    -> steps/s of each and the 1-minute load, sampled every 5 s while they ran."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    theirs = dict(env, PYTHONPATH=os.pathsep.join([str(ROOT), str(src)]))    # their modules import each other
    errs = {name: open(out / f"{name}.stderr", "w") for name in RUNS}      # a file: a full pipe would stall a run
    loads = [os.getloadavg()[0]]

    def wait(running: list):
        while any(p.poll() is None for p in running):
            time.sleep(5)
            loads.append(os.getloadavg()[0])

    procs = {}
    for name, argv in commands(src, out, seed, cur).items():
        procs[name] = subprocess.Popen(argv, cwd=ROOT, env=theirs if name == "official" else env,
                                       stdout=subprocess.DEVNULL, stderr=errs[name])
        if alone:
            wait([procs[name]])
    wait(list(procs.values()))
    for name, p in procs.items():
        errs[name].close()
        if p.returncode:
            why = (out / f"{name}.stderr").read_text()[-3000:]
            sys.exit(f"error: the {name} run failed (exit {p.returncode}):\n{why}")
    summary = {n: read_json(out / n / "summary.json") for n in ("default", "fan")}
    theirs = read_json(out / f"official_seed{seed}" / "speed.json")
    return speeds(summary, theirs) | {"load": {"min": min(loads), "mean": statistics.mean(loads), "max": max(loads)}}


def speeds(summary: dict, theirs: dict) -> dict:
    """Steps/s of each run by the three timings, from our runs' summary.json (by run name)
    and the official loop's speed.json."""
    speed = {n: s["step"] / s["seconds"] for n, s in summary.items()} | {"official": theirs["steps_per_s"]}
    # like for like: the official loop times its training steps only (no evaluation, no checkpoint)
    stepping = {n: s["step"] / (s["seconds"] - s["seconds_evaluating"] - s["seconds_saving"])
                for n, s in summary.items()} | {"official": theirs["steps_per_s"]}
    # per CPU second of each loop (ours with its evaluations): the run that ends last has the cores to
    # itself at the end, which wall time credits to it
    cpu = {n: s["step"] / s["cpu_seconds"] for n, s in summary.items()} | \
        {"official": theirs["steps"] / theirs["train_cpu_seconds"]}
    return {"steps_per_s": speed, "training_steps_per_s": stepping, "steps_per_cpu_s": cpu}


def clock_share(seed: int, cur: dict, batches: int, profile: int = 0) -> dict:
    """Seconds of a full default-recipe training step against the same step with the
    clock's loss left out, on the same model and batches (drawn at steps spread
    over the curriculum), interleaved; -> the clock's share of a step."""
    import torch
    from trainer.fan.kind import FanKind, RunConfig
    from trainer.fan.presets import RECIPES, make_hparams
    from trainer.run.loop import adamw
    from trainer.settings.hparams import DEFAULT_RECIPE, clock_plan
    from trainer.tasks import get_task
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    kinds = {}
    for name, recipe in (("with_clock", DEFAULT_RECIPE), ("answering_only", "fan")):
        hp = make_hparams("cpu", get_task("parity"), "random", seed=seed, **cur, **RECIPES[recipe])
        kinds[name] = FanKind(RunConfig(task="parity", out="unused", hp=hp, progress=False))
        kinds[name].prepare(cpu)
        kinds[name].seed_rng()
    full = kinds["with_clock"]
    torch.manual_seed(seed)
    model, _ = full.initial_model(cpu)
    opt = adamw(full, model, full.hp.lr)         # as a training run makes it
    groups = model.clip_groups()
    # whole cycles of --clock-every steps (one teaches the clock, the others skip it), spread
    # over the curriculum, so the mean is that of a run's steps
    every = clock_plan(full.hp, full.data.needs, full.data.count_by_size)[1]
    starts = [round(i * (cur["steps"] - every) / max(batches - 1, 1)) // every * every for i in range(batches)]
    drawn = [(step, full.train_batch(step, slice(None), cpu)) for s in starts for step in range(s, s + every)]

    def timed(kind, step, batch) -> float:
        t0 = time.perf_counter()
        kind.before_step(model, step)
        loss, _ = kind.loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        for group in groups:
            torch.nn.utils.clip_grad_norm_(group, full.hp.grad_clip)
        opt.step()
        return time.perf_counter() - t0

    model.train()
    timed(full, *drawn[-1])             # warm-up (first calls allocate)
    seconds = {name: 0.0 for name in kinds}
    for step, batch in drawn:
        for name, kind in kinds.items():
            seconds[name] += timed(kind, step, batch)
    if profile:         # where a default step's time goes, by operator (the notes in bench/BENCH.md)
        from torch.profiler import profile as profiler
        with profiler() as prof:
            for step, batch in drawn:
                timed(full, step, batch)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=profile))
    return {"seconds_per_step": {k: v / len(drawn) for k, v in seconds.items()},
            "share": 1 - seconds["answering_only"] / seconds["with_clock"], "batches": len(drawn),
            "load": os.getloadavg()[0]}


def report(rounds: list, clock: dict, cur: dict, alone: bool = False) -> str:
    timings = {"steps_per_s": "wall, whole loop", "training_steps_per_s": "wall, training steps",
               "steps_per_cpu_s": "CPU, whole loop"}
    ratio = lambda r, key, a: r[key][a] / r[key]["official"]      # noqa: E731
    lines = [f"parity, cpu preset, {cur['steps']} steps, +1 length every {cur['interval']} steps, "
             f"one torch thread each, {len(rounds)} round(s) of the three "
             f"{'run one after the other' if alone else 'started together'}", "",
             "steps/s over each one's training loop (wall; ours with its evaluations every 100 steps and its "
             "checkpoints, as the command runs; theirs has neither):", "",
             "| round | default steps/s | --recipe fan steps/s | official steps/s | load (1 min: min / mean / max) |",
             "|---|---|---|---|---|"]
    for i, r in enumerate(rounds):
        s, load = r["steps_per_s"], r["load"]
        lines.append(f"| {i + 1} | {s['default']:.2f} | {s['fan']:.2f} | {s['official']:.2f} | "
                     f"{load['min']:.1f} / {load['mean']:.1f} / {load['max']:.1f} |")
    lines += ["", "ratios to the official code by timing: wall, whole loop (as above); wall, training steps "
              "(ours less its evaluations and checkpoints, like for like with theirs); CPU, whole loop (steps "
              "per CPU second of each loop: the run that ends last has a core to itself at the end, which "
              "wall time credits to it):", "",
              "| round | " + " | ".join(f"default / official, {t}" for t in timings.values()) + " | " +
              " | ".join(f"fan / official, {t}" for t in timings.values()) + " |", "|---" * 7 + "|"]
    for i, r in enumerate(rounds):
        lines.append(f"| {i + 1} | " + " | ".join(f"{ratio(r, k, who):.2f}" for who in ("default", "fan")
                                                   for k in timings) + " |")
    if rounds:
        lines += [""] + [f"median over rounds, {t}: default / official "
                         f"{statistics.median(ratio(r, k, 'default') for r in rounds):.2f} (target >= 1.5), "
                         f"fan / official {statistics.median(ratio(r, k, 'fan') for r in rounds):.2f}"
                         for k, t in timings.items()]
    c = clock["seconds_per_step"]
    lines += ["", f"the clock's share of a default step: {clock['share']:.2f} (target <= 0.20): "
              f"{c['with_clock'] * 1e3:.0f} ms a step with it, {c['answering_only'] * 1e3:.0f} ms without, "
              f"{clock['batches']} batches across the curriculum, load {clock['load']:.1f}"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", required=True, help="looped-tf's src/ folder")
    pace = ap.add_mutually_exclusive_group()
    pace.add_argument("--quick", action="store_true", help="+1 length every 20 steps, 400 steps (--interval 20)")
    pace.add_argument("--interval", type=int, default=100,
                    help="steps per +1 length; 20 x as many steps in all (default 100: the cpu preset's 2000)")
    ap.add_argument("--alone", action="store_true",
                    help="run the three trainings of a round one after the other, not together")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds of the three started together (default 1; 0: the clock's share only)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clock-batches", type=int, default=20, help="batches timed for the clock's share")
    ap.add_argument("--profile", type=int, default=0, metavar="ROWS",
                    help="also print torch.profiler's ROWS costliest operators of the default recipe's steps")
    ap.add_argument("--out", default=None, help="also write the figures here as JSON")
    a = ap.parse_args(argv)
    src = Path(a.src)
    if not (src / "models.py").is_file():
        ap.error(f"--src {src}: not looped-tf's src/ folder (no models.py)")
    if not 0 <= a.rounds <= 20 or not 2 <= a.clock_batches <= 1000 or not 1 <= a.interval <= 1000:
        ap.error("--rounds must be 0-20, --clock-batches 2-1000 and --interval 1-1000")
    if not 0 <= a.profile <= 200:
        ap.error("--profile must be 0-200")
    cur = curriculum(20 if a.quick else a.interval)
    rounds = []
    for i in range(a.rounds):
        with tempfile.TemporaryDirectory(prefix="official_speed_") as work:
            rounds.append(side_by_side(src.resolve(), Path(work), a.seed + i, cur, a.alone))
        print(f"round {i + 1}: " + ", ".join(f"{k} {v:.2f} steps/s" for k, v in rounds[-1]["steps_per_s"].items()),
              flush=True)
    clock = clock_share(a.seed, cur, a.clock_batches, a.profile)
    print(report(rounds, clock, cur, a.alone))
    if a.out:
        atomic.write_json_atomic(Path(a.out), {"curriculum": cur, "alone": a.alone, "rounds": rounds, "clock": clock},
                                 indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
