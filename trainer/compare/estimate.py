"""Wall-time estimates for `rasp compare --dry-run`, from measured speeds.

Every run the runner trains from scratch records what it cost in
DIR/speeds.json (one entry per task x model x preset of a suite: the steps
it trained, the seconds training and evaluation took as whole processes, and
the machine's 1-minute load average around it).  Runs trained before that
file existed are read from their own compare_run.json and summary.json.  A
cell with no measurement can be probed: a few training steps of its own
command line in DIR/_probes/ (`--probe STEPS`), which measures training only.

A cell measured nowhere in DIR falls back to the reference speeds shipped
with the trainer (reference_speeds.json, written by `python
-m bench.compare_speeds SUITE...`: a few steps of every cell on one named
machine, each evaluation timed at two sizes), labelled "reference" with
that machine and its load.

An estimate scales the measured seconds per training step to the steps the
planned run trains, adds the measured start-up and evaluation time, and says
where its speed came from.
Speeds measured at another load, or on another machine, scale with it: the
load is printed beside each source."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from rasp import atomic
from rasp.errors import RaspError, RaspFileError
from rasp.readfile import MAX_LOG, read_bytes
from trainer.compare.grid import RunSpec
from trainer.compare.runner import TrainerCommands, load_average, read_json, render_options, train_args

SPEEDS = "speeds.json"
REFERENCE = Path(__file__).with_name("reference_speeds.json")
PROBES = "_probes"
MAX_KEPT = 20                 # measurements kept per cell (the newest)
MAX_PROBE_STEPS = 1000


def cell_key(spec: RunSpec) -> str:
    """Seeds of one grid cell train at the same speed."""
    return "/".join((spec.suite, spec.task_entry, spec.model_entry, spec.preset))


def measurement(record: dict, summary: dict) -> Optional[dict]:
    """What one finished run of compare_run.json cost, or None when its
    record does not cover the whole training (a resumed run: only its tail)."""
    if record.get("state") not in ("new", "stale") or record.get("status") != "finished":
        return None
    steps = {s["step"]: s for s in record.get("steps", []) if s.get("exit_code") == 0}
    trained = summary.get("step") if isinstance(summary, dict) else None
    if "train" not in steps or not isinstance(trained, int) or trained < 1:
        return None
    loads = [x for x in (record.get("load"), record.get("load_end")) if isinstance(x, (int, float))]
    wall = float(steps["train"]["seconds"])
    # the training loop's own seconds (summary.json) apart from the process's start-up (importing
    # torch, building the data): a run of another length scales only the loop
    loop = summary.get("seconds")
    loop = float(loop) if isinstance(loop, (int, float)) and 0 < loop <= wall else wall
    return {"run_id": record.get("run_id"), "steps": trained, "train_s": round(loop, 2),
            "startup_s": round(wall - loop, 2),
            "eval_s": round(sum(float(s["seconds"]) for n, s in steps.items() if n.startswith("eval_")), 2),
            "load": max(loads) if loads else None, "source": "measured"}


def record_speed(out: Path, spec: RunSpec, record: dict) -> None:
    """Add a finished run's cost to DIR/speeds.json (called by the runner)."""
    m = measurement(record, read_json(Path(out) / spec.run_id / "summary.json"))
    if m is None:
        return
    _add(Path(out), cell_key(spec), m)


def _add(out: Path, key: str, m: dict) -> None:
    path = out / SPEEDS
    doc = read_json(path)
    doc = doc if isinstance(doc, dict) else {}
    kept = [x for x in doc.get(key, []) if isinstance(x, dict) and x.get("run_id") != m.get("run_id")]
    doc[key] = (kept + [m])[-MAX_KEPT:]
    atomic.write_json_atomic(path, doc, indent=1)      # a link planted in the folder is replaced, not followed


def known_speeds(out: Path, runs: list) -> dict:
    """{cell key: [measurement]} from DIR/speeds.json, and from the run
    directories themselves for runs finished before it was kept."""
    out = Path(out)
    doc = read_json(out / SPEEDS)
    speeds = {k: [m for m in v if isinstance(m, dict)] for k, v in doc.items() if isinstance(v, list)} \
        if isinstance(doc, dict) else {}
    for spec in runs:
        have = {m.get("run_id") for m in speeds.get(cell_key(spec), [])}
        if spec.run_id in have:
            continue
        rec = read_json(out / spec.run_id / "compare_run.json")
        m = measurement(rec, read_json(out / spec.run_id / "summary.json")) if isinstance(rec, dict) else None
        if m is not None:
            speeds.setdefault(cell_key(spec), []).append(m)
    return speeds


def planned(spec: RunSpec) -> Optional[dict]:
    """The hyper-parameters the run's train command gives (its preset, the suite's options)."""
    from trainer.settings.resolve import planned_hparams        # here: planning loads the model registry (torch)
    try:
        return planned_hparams(train_args(spec, Path("/nonexistent")))
    except RaspError:
        return None


def planned_steps(spec: RunSpec) -> Optional[int]:
    steps = (planned(spec) or {}).get("steps")
    return steps if isinstance(steps, int) else None


# hyper-parameters that change a run's length but not its speed per step
LENGTH_ONLY = ("steps", "seed", "eval_every", "log_every", "ckpt_every", "interval", "decay_start")


def settings_key(spec: RunSpec) -> str:
    """A short fingerprint of what sets a cell's speed: its hyper-parameters
    (less those in LENGTH_ONLY) and its evaluations' options.  A reference
    speed measured under another fingerprint is flagged as such."""
    hp = {k: v for k, v in (planned(spec) or {}).items() if k not in LENGTH_ONLY}
    doc = {"hp": hp, "evals": [[e.name, e.options] for e in spec.evals]}
    return hashlib.sha1(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:12]


def reference_speeds(path: Optional[Path] = None) -> dict:
    """{cell key: reference measurement} from the shipped table ({} when absent or damaged)."""
    doc = read_json(REFERENCE if path is None else path)
    cells = doc.get("cells") if isinstance(doc, dict) else None
    return {k: m for k, m in cells.items() if isinstance(m, dict)} if isinstance(cells, dict) else {}


def reference_estimate(spec: RunSpec, state: str, m: dict) -> "Estimate":
    """The shipped reference measurement `m` of the run's cell, scaled to its
    planned steps and validations."""
    hp = planned(spec) or {}
    steps = hp.get("steps") if isinstance(hp.get("steps"), int) else m["steps"]
    every = hp.get("eval_every") if isinstance(hp.get("eval_every"), int) and hp["eval_every"] > 0 else None
    validations = steps // every if every else 0
    label = f"reference speed, {m.get('machine', 'unknown machine')}, measured at load {m.get('load', '?')}"
    if m.get("settings") != settings_key(spec):
        label += "; measured with other settings (rerun python -m bench.compare_speeds)"
    if state == "evaluate":
        return Estimate(m["eval_s"], "reference", f"evaluation only; {label}")
    seconds = m["startup_s"] + m["per_step_s"] * steps + m["valid_s"] * validations + m["eval_s"]
    speed = f"at {1 / m['per_step_s']:.3g} steps/s" if m["per_step_s"] > 0 else "(none measured)"
    note = f"{steps} steps {speed}, {validations} validations; {label}"
    return Estimate(seconds, "reference", note + ("; resumes: at most this" if state == "resume" else ""))


@dataclass
class Estimate:
    seconds: Optional[float]      # None: nothing to estimate from
    source: str                   # "measured", "probe" or "none"
    note: str


def estimate_run(spec: RunSpec, state: str, speeds: dict, reference: Optional[dict] = None) -> Estimate:
    """The wall time `state`'s remaining work on the run should take: from
    the speeds measured in the output folder, else from `reference`
    (reference_speeds()), else none."""
    if state == "done":
        return Estimate(0.0, "done", "finished")
    ms = speeds.get(cell_key(spec), [])
    if not ms and reference and cell_key(spec) in reference:
        return reference_estimate(spec, state, reference[cell_key(spec)])
    if not ms:
        return Estimate(None, "none", "no measured speed (run one seed first, or --probe STEPS)")
    per_step = statistics.median(m["train_s"] / m["steps"] for m in ms)
    startup = statistics.median(m.get("startup_s") or 0.0 for m in ms)
    evals = [m["eval_s"] for m in ms if m.get("eval_s") is not None and m["source"] == "measured"]
    eval_s = statistics.median(evals) if evals else None
    steps = planned_steps(spec) or statistics.median(m["steps"] for m in ms)
    loads = [m["load"] for m in ms if isinstance(m.get("load"), (int, float))]
    where = (f"{len(ms)} {'probe' if ms[0]['source'] == 'probe' else 'measured run'}{'s' if len(ms) > 1 else ''}"
             f", {1 / per_step:.3g} steps/s" + (f" at load {load_range(loads)}" if loads else ""))
    if state == "evaluate":
        if eval_s is None:
            return Estimate(None, "none", f"evaluation only; no evaluation measured ({where})")
        return Estimate(eval_s, ms[0]["source"], f"evaluation only ({where})")
    seconds = startup + per_step * steps + (eval_s or 0.0)
    note = f"{steps} steps ({where})" + ("" if eval_s is not None else "; evaluation not measured, not included")
    if state == "resume":
        note += "; resumes: at most this"
    return Estimate(seconds, ms[0]["source"], note)


def probe(spec: RunSpec, out: Path, steps: int, commands=TrainerCommands()) -> dict:
    """Train the run's own command for `steps` steps in DIR/_probes/ and
    record the speed; the probe directory is removed afterwards."""
    if not 1 <= steps <= MAX_PROBE_STEPS:
        raise RaspError(f"--probe must be from 1 to {MAX_PROBE_STEPS} steps, got {steps}")
    pdir = Path(out) / PROBES / spec.run_id
    shutil.rmtree(pdir, ignore_errors=True)
    pdir.parent.mkdir(parents=True, exist_ok=True)
    short = dataclasses.replace(spec, train={**spec.train, "steps": steps})
    cmd = commands.train(short, pdir)
    load = load_average()
    t = time.time()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    seconds = time.time() - t
    summary = read_json(pdir / "summary.json")
    shutil.rmtree(pdir, ignore_errors=True)
    if done.returncode != 0 or not isinstance(summary, dict):
        tail = (done.stderr or "").strip().splitlines()
        raise RaspError(f"probe of {spec.run_id} failed (exit {done.returncode})"
                        + (f": {tail[-1][:200]}" if tail else ""))
    loop = float(summary.get("seconds") or seconds)          # the training loop (and its final validation)
    m = {"run_id": f"probe:{spec.run_id}", "steps": int(summary.get("step") or steps), "train_s": round(loop, 2),
         "startup_s": round(max(seconds - loop, 0.0), 2), "eval_s": None,
         "load": max(x for x in (load, load_average(), -1.0) if x is not None), "source": "probe"}
    _add(Path(out), cell_key(spec), m)
    return m


def window_seconds(metrics_path: Path) -> tuple:
    """(steps, seconds) of the training loop's logged windows (metrics.jsonl:
    steps_per_s between log rows), without what ran after the last one."""
    steps = seconds = 0.0
    try:
        lines = read_bytes(metrics_path, MAX_LOG).decode("utf-8", errors="replace").splitlines()
    except RaspFileError:
        return 0, 0.0
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        rate, at = row.get("steps_per_s"), row.get("step")
        if isinstance(rate, (int, float)) and rate > 0 and isinstance(at, int) and at > steps:
            seconds += (at - steps) / rate
            steps = at
    return int(steps), seconds


def size_option(options: dict) -> Optional[str]:
    """The evaluation option its cost grows with: samples per length (Fan's
    tasks) or examples per split (-n), when the suite sets one."""
    return next((k for k in ("samples", "n") if isinstance(options.get(k), int) and options[k] > 1), None)


def reference_measurement(spec: RunSpec, workdir: Path, steps: int, call, startup_s: float,
                          machine: str, fraction: int = 8, wall_clock=time.perf_counter,
                          cpu_clock=time.process_time) -> dict:
    """A reference speed for the run's cell: `steps` training steps of its own
    settings (a length curriculum compressed into them, so they see its
    lengths in the same proportions; one validation, at the end), then each
    evaluation of the suite timed at 1 and at 1/`fraction` of its size and
    extrapolated linearly to the full size.  `call(argv)` runs `python -m
    trainer ARGV` in this process; `startup_s` is what a fresh process pays
    before it (the bench times it once).  Every figure is CPU seconds of
    this process (one torch thread): the wall time of a run with a core to
    itself, whatever the load while measuring (the wall clock only splits
    the training process's CPU time between its steps and its validation)."""
    hp = planned(spec) or {}
    if hp.get("steps") == 0:
        steps = 0         # a run that trains nothing (a compiled start as it is): time its start and evaluations
    full = hp.get("steps") if isinstance(hp.get("steps"), int) and hp["steps"] > 0 else steps
    short = {**spec.train, "steps": steps, "eval_every": max(1, steps), "log_every": max(1, steps // 10),
             "ckpt_every": max(1, steps)}
    if steps and isinstance(hp.get("interval"), int) and hp.get("max_train_n"):
        short["interval"] = max(1, round(hp["interval"] * steps / full))
    if steps and hp.get("loss_first") and isinstance(hp.get("loss_grow_every"), int) and hp["loss_grow_every"] > 0:
        # a curriculum over positions, compressed like the length curriculum (the
        # trainer refuses one that would not reach the last target in `steps`)
        grow = max(1, hp["loss_grow_every"] * steps // full)
        short["set"] = list(spec.train.get("set") or []) + [f"loss_grow_every={grow}"]
    run_dir = Path(workdir) / spec.run_id
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    load = load_average()
    t, c = wall_clock(), cpu_clock()
    if call(["train"] + train_args(dataclasses.replace(spec, train=short), run_dir)) != 0:
        raise RaspError(f"reference measurement of {spec.run_id}: training failed")
    wall, cpu = wall_clock() - t, cpu_clock() - c
    share = min(1.0, cpu / wall) if wall > 0 else 1.0          # of one core, while it trained
    summary = read_json(run_dir / "summary.json") or {}
    loop = float(summary.get("seconds") or wall)
    trained, in_windows = window_seconds(run_dir / "metrics.jsonl")
    if trained < 1 and steps:
        raise RaspError(f"reference measurement of {spec.run_id}: no logged training steps")
    eval_s = 0.0
    for e in spec.evals:
        key = size_option(e.options)
        sizes = [1, max(2, e.options[key] // fraction)] if key else [None]
        times = []
        for size in sizes:
            opts = {**e.options, **({key: size} if key else {}), "no_plots": True}
            c = cpu_clock()
            if call(["eval", str(run_dir)] + render_options(opts)) != 0:
                raise RaspError(f"reference measurement of {spec.run_id}: evaluation {e.name} failed")
            times.append(cpu_clock() - c)
        per_unit = max(0.0, (times[1] - times[0]) / (sizes[1] - 1)) if key else 0.0
        eval_s += startup_s + times[0] + (per_unit * (e.options[key] - 1) if key else 0.0)
    shutil.rmtree(run_dir, ignore_errors=True)
    return {"steps": trained, "per_step_s": round(in_windows * share / trained, 5) if trained else 0.0,
            "valid_s": round(max(0.0, loop - in_windows) * share, 3),
            "startup_s": round(startup_s + max(0.0, wall - loop) * share, 2), "eval_s": round(eval_s, 2),
            "load": max(x for x in (load, load_average(), -1.0) if x is not None),
            "machine": machine, "measured": time.strftime("%Y-%m-%d"), "settings": settings_key(spec),
            "source": "reference"}


def load_range(loads: list) -> str:
    lo, hi = min(loads), max(loads)
    return f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"


def duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
