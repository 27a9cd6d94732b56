"""One prepared run for a lent GPU (issue 41): `python -m bench.gpu` writes bench/gpu.md.

    python -m bench.gpu                                   # cuda, 8-minute budget, bench/gpu.md
    python -m bench.gpu --device cpu --budget 20 --out /tmp/gpu.md     # dry run on a CPU (the test's)

Stages, each skipped with a note when the deadline is near:
1. the device's name;
2. every registered model's training step and evaluation on the device
   (`rasp train` one step at tiny sizes, then `rasp eval`): pass / fail;
3. steps per second at the cpu and paper presets, one model per family, on
   the device beside the same on the host's CPU, with the device's peak memory;
4. the longest Fan et al. parity run at the paper preset that fits the time
   left (`--max-wall`), and its accuracy by length (oracle stop).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import platform
import sys
import tempfile
import time
from pathlib import Path

from rasp.atomic import write_text_atomic
from rasp.cli import main as rasp_main
from rasp.readfile import read_json

# (label, task, model) per model family: Fan et al.'s looped model and a baseline, then one
# comparison encoder per family module
FAN_FAMILIES = [("looped (Fan)", "parity", "looped"), ("fap baseline (Fan)", "parity", "fap"),
                ("ntp baseline (Fan)", "parity", "ntp")]
SEQ_TASK = "words_z60"
EVAL_RESERVE = 60        # seconds kept for the parity run's evaluation and the page (at most 10% of the budget)


class Clock:
    """The deadline of a stage: `share` of the budget left when it starts
    (the parity run takes what the others leave)."""

    def __init__(self, end: float, share: float = 1.0):
        self.end = time.monotonic() + share * (end - time.monotonic())

    def left(self) -> float:
        return self.end - time.monotonic()


def quiet(argv: list) -> tuple:
    """rasp ARGV in this process, its output kept: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = rasp_main([str(a) for a in argv])
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else 1
    return status, out.getvalue(), err.getvalue()


def device_name(device: str) -> str:
    import torch
    if device.startswith("cuda"):
        return f"{torch.cuda.get_device_name(device)} (torch {torch.__version__}, CUDA {torch.version.cuda})"
    return f"CPU: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads (torch " \
           f"{torch.__version__})"


def model_cases() -> list:
    """(task, model, train flags) of every registered model at tiny sizes."""
    from trainer.models import comparison_models, fan_models
    from trainer.models import get_model_spec
    fan = ["--steps", "1", "--max-train-n", "3", "--d-model", "16", "--n-head", "2", "--batch-size", "4",
           "--eval-samples", "4"]

    def baseline(model: str) -> list:   # a baseline's depth, pause and loop count (other models refuse them)
        spec = get_model_spec(model)
        return (["--baseline-depth", "2"] * spec.deep + ["--pause-tokens", "2"] * spec.pause
                + ["--loop-steps", "2"] * (spec.fixed_steps == "loop"))
    seq = ["--steps", "1", "--d-model", "16", "--n-head", "2", "--batch-size", "4", "--eval-samples", "4",
           "--set", "d_ff=32"]
    own = {"mamba2": ["--set", "headdim=8"], "implicit_mamba2": ["--set", "headdim=8"]}
    cases = [("parity", m, fan + baseline(m)) for m in fan_models()]
    cases.append(("parity", "looped", ["--init", "compiled", "--steps", "1", "--max-train-n", "3",
                                       "--eval-samples", "4"]))
    cases += [(SEQ_TASK, m, seq + own.get(m, [])) for m in comparison_models()]
    cases.append((SEQ_TASK, "looped", ["--init", "compiled", "--set", "compile_max_len=2", "--steps", "1",
                                       "--batch-size", "4", "--set", "guard_samples=4", "--eval-samples", "4"]))
    return cases


def check_models(device: str, clock: Clock, work: Path) -> list:
    rows = []
    for i, (task, model, flags) in enumerate(model_cases()):
        name = f"{task} / {model}" + (" (compiled start)" if "compiled" in flags else "")
        if i and clock.left() <= 0:      # the first always runs: does the device train at all
            rows.append((name, "skipped: out of time"))
            continue
        run = work / f"m{i}"
        status, _, err = quiet(["train", "--task", task, "--model", model, "--out", run, "--no-progress",
                                "--device", device, *flags])
        if status == 0:
            ev = (["--splits", "valid", "-n", "4"] if task == SEQ_TASK else ["--lengths", "1:4", "--samples", "4"])
            status, _, err = quiet(["eval", run, *ev, "--no-plots", "--no-progress", "--device", device])
        rows.append((name, "pass" if status == 0 else "FAIL: " + (err.strip().splitlines() or ["?"])[-1][:160]))
    return rows


def families() -> list:
    """(label, task, model) of one model per family."""
    from trainer.models import MODELS, comparison_models
    seen, out = set(), list(FAN_FAMILIES)
    for m in comparison_models():
        fam = MODELS.spec(m, "comparison").family
        if fam not in seen:
            seen.add(fam)
            out.append((f"{m} ({fam})", SEQ_TASK, m))
    return out


def steps_per_second(task: str, model: str, preset: str, device: str, seconds: float) -> tuple:
    """(steps/s, peak MiB or None) of training steps at the preset's longest
    lengths, timed for about `seconds` after one warm-up step."""
    import torch
    from trainer.start import train_kind
    from trainer.run.device import autocast, check_device
    from trainer.run.loop import adamw
    from trainer.settings.args import add_train_args
    from rasp.options import ArgumentParser
    p = ArgumentParser(prog="bench")
    add_train_args(p)
    args = p.parse_args(["--task", task, "--model", model, "--preset", preset, "--out", tempfile.mkdtemp(),
                         "--device", device, "--no-progress"])
    kind = train_kind(args)
    dev = torch.device(check_device(device))
    kind.prepare(dev)
    torch.manual_seed(0)
    kind.seed_rng()
    model_, _ = kind.initial_model(dev)
    model_.to(dev)
    opt = adamw(kind, model_, kind.hp.lr)
    at = kind.hp.curriculum_end() if kind.hp.kind == "fan" else 0       # the longest training inputs
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    n, start = -1, time.perf_counter()
    while True:
        kind.before_step(model_, at)
        batch = kind.train_batch(at, slice(None), dev)
        with autocast(dev, kind.hp.precision):
            loss, _ = kind.loss(model_, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        n += 1
        if n == 0:
            start = time.perf_counter()          # the first step (allocations, kernels' choice) is not timed
        elif time.perf_counter() - start > seconds or n >= 200:
            break
    rate = n / (time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated(dev) / 2 ** 20 if dev.type == "cuda" else None
    return rate, peak


def speed_table(device: str, clock: Clock, per: float) -> list:
    rows = []
    for label, task, model in families():
        for preset in ("cpu", "paper"):
            cells = []
            for dev in dict.fromkeys([device, "cpu"]):
                if clock.left() < per:
                    cells.append("skipped: out of time")
                    continue
                try:
                    rate, peak = steps_per_second(task, model, preset, dev, per)
                    cells.append(f"{rate:.1f}" + (f" ({peak:.0f} MiB peak)" if peak is not None else ""))
                except Exception as e:         # a model too large for the host: noted, the bench goes on
                    cells.append(f"failed: {type(e).__name__}: {str(e)[:80]}")
            rows.append((label, task, preset, *cells))
    return rows


def parity_run(device: str, clock: Clock, work: Path, reserve: float) -> dict:
    wall = clock.left() - reserve
    if wall < 10:
        return {"note": f"skipped: {max(0.0, clock.left()):.0f} s left"}
    run = work / "parity_paper"
    status, out, err = quiet(["train", "--task", "parity", "--preset", "paper", "--out", run, "--device", device,
                              "--no-progress", "--max-wall", f"{wall:.0f}", "--eval-every", "0"])
    if status != 0:
        return {"note": "training failed: " + err.strip()[-300:]}
    summary = read_json(run / "summary.json")
    status, out, err = quiet(["eval", run, "--lengths", "1:40", "--stop", "oracle", "--samples", "64",
                              "--no-plots", "--no-progress", "--device", device])
    from trainer.fan.evaluate import rows
    res = rows(read_json(run / "eval_oracle.json")) if status == 0 else None
    return {"steps": summary["step"], "of": summary["steps"], "seconds": summary["seconds"],
            "train_acc": summary.get("final_eval_acc"), "rows": res,
            "note": "" if res else "evaluation failed: " + err.strip()[-300:]}


def page(device: str, name: str, budget: float, checks: list, speeds: list, parity: dict, took: float) -> str:
    lines = ["# The trainer on a GPU (`python -m bench.gpu`)", "",
             f"Device: {name}.  Requested `--device {device}`, budget {budget:.0f} s, took {took:.0f} s.", "",
             "## Every model's training step and evaluation on the device", "", "| model | result |", "|---|---|"]
    lines += [f"| {m} | {r} |" for m, r in checks]
    passed = sum(r == "pass" for _, r in checks)
    lines += ["", f"{passed} of {len(checks)} passed.", "",
              "## Steps per second (training, at the preset's longest inputs)", "",
              f"| model (family) | task | preset | {device} | cpu (host) |" if device != "cpu" else
              "| model (family) | task | preset | cpu |", "|---|---|---|---|" + ("---|" if device != "cpu" else "")]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in speeds]
    lines += ["", "## Fan et al.'s parity at the paper preset (d_model 256), as long as the budget allows", ""]
    if parity.get("steps") is not None:
        lines += [f"{parity['steps']} of {parity['of']} steps in {parity['seconds']:.0f} s "
                  f"({parity['steps'] / max(parity['seconds'], 1e-9):.1f} steps/s); in-distribution exact match "
                  f"at the last step {parity['train_acc']}.", ""]
        if parity["rows"]:
            lines += ["| n | exact match (oracle stop) |", "|---|---|"]
            lines += [f"| {r['length']} | {r['exact_match']:.3f} |" for r in parity["rows"]]
    if parity.get("note"):
        lines += [parity["note"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (a dry run)")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds in all (default 480: 8 minutes)")
    ap.add_argument("--per", type=float, default=3.0, help="seconds per steps-per-second measurement")
    ap.add_argument("--out", default=str(Path(__file__).with_name("gpu.md")))
    args = ap.parse_args(argv)
    start = time.monotonic()
    end, reserve = start + args.budget, min(EVAL_RESERVE, 0.1 * args.budget)
    import torch
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench.gpu: no CUDA device here; nothing written (--device cpu for a dry run)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        name = device_name(args.device)
        checks = check_models(args.device, Clock(end - reserve, 0.3), work)
        speeds = speed_table(args.device, Clock(end - reserve, 0.45), args.per)
        parity = parity_run(args.device, Clock(end), work, reserve)
        text = page(args.device, name, args.budget, checks, speeds, parity, time.monotonic() - start)
    write_text_atomic(args.out, text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
