"""Every model keeps to its device, checked without a GPU (issue 41).

The technique: torch's default device is set to `meta` while the run's model
and inputs are on the CPU.  A tensor that the code makes without `device=`
(inside a forward, a loss, a stopping rule, a halting clock) is then a meta
tensor, and the first operation that mixes it with the run's CPU tensors
fails, as a CPU tensor mixed with CUDA ones fails on a GPU; one read on the
host (`.tolist()`, `float()`) fails too.  Only what the code builds on the
host on purpose, with `trainer.run.device.on_host` (batches, before they are
moved; weights, drawn there so a seed gives the same start on every device),
is exempt.  test_a_tensor_made_without_a_device_is_found plants such a
tensor in a forward and checks that it is caught.

Each registered model (every Fan model, every comparison encoder, the compiled
starts of both kinds of run) trains a step and is evaluated (`rasp eval`,
every stopping rule for the looped model) and answers through `rasp.load`
and `rasp run RUN --device cpu`, all at tiny sizes.
"""
from __future__ import annotations

import contextlib
import math
import json

import pytest
import torch

import rasp
from rasp.cli import main
from seq_toys import TOYS, register_toys
from rasp.stop import RULES
from trainer.models import comparison_models, fan_models


@pytest.fixture(autouse=True)
def toys():
    """The toy comparison tasks, registered for each test: other test modules in
    the same worker take them out again after theirs (tests/test_seqtrain.py)."""
    from trainer.tasks import TASKS
    register_toys()
    yield
    for t in TOYS:
        TASKS.pop(t.name, None)

FAN_FAST = ["--steps", "1", "--max-train-n", "3", "--d-model", "8", "--n-head", "2", "--batch-size", "4",
            "--eval-samples", "4"]


def baseline_flags(model: str) -> list:
    """The small depth, pause and loop count of a baseline that has them (another model refuses them)."""
    from trainer.models import get_model_spec
    spec = get_model_spec(model)
    return (["--baseline-depth", "2"] * spec.deep + ["--pause-tokens", "2"] * spec.pause
            + ["--loop-steps", "2"] * (spec.fixed_steps == "loop"))
SEQ_FAST = ["--steps", "1", "--d-model", "8", "--n-head", "2", "--batch-size", "4", "--eval-samples", "4",
            "--set", "d_ff=16"]
# a model's own options, where its defaults do not fit width 8
SEQ_SETS = {"mamba2": ["--set", "headdim=8"], "implicit_mamba2": ["--set", "headdim=8"]}
WORDS_COMPILED = ["--task", "words_z60", "--model", "looped", "--init", "compiled", "--set", "compile_max_len=2",
                  "--steps", "1", "--batch-size", "4", "--set", "guard_samples=4", "--eval-samples", "4"]


@contextlib.contextmanager
def default_device_meta():
    """torch's default device is `meta`; torch's AdamW keeps its step count in
    a tensor it makes without a device on purpose (read on the host), so its
    step runs with the host as the default."""
    step = torch.optim.AdamW.step

    def host_step(self, *a, **k):
        with torch.device("cpu"):
            return step(self, *a, **k)
    torch.optim.AdamW.step = host_step
    try:
        with torch.device("meta"):
            yield
    finally:
        torch.optim.AdamW.step = step


@pytest.fixture(autouse=True)
def tracebacks(monkeypatch):
    monkeypatch.setenv("RASP_DEBUG", "1")       # a failure raises, with its traceback


def run_cli(capsys, *argv) -> str:
    with default_device_meta():
        status = main([str(a) for a in argv])
    out = capsys.readouterr()
    assert status == 0, out.err[-2000:]
    return out.out


def _answer(capsys, run, line: str):
    """rasp.load and rasp run RUN --device cpu, both under the meta default."""
    with default_device_meta():
        model = rasp.load(str(run), device="cpu")
        assert model([line])
    run_cli(capsys, "run", run, "--input", line, "--device", "cpu")


FAN_CASES = [(m, ()) for m in fan_models()] + [("looped", ("--init", "compiled")),
                                               ("looped", ("--halt", "1", "--settle", "1", "--unsure", "0.5"))]


@pytest.mark.parametrize("model,extra", FAN_CASES, ids=[m + (e[0] if e else "") for m, e in FAN_CASES])
def test_fan_model_trains_evaluates_and_answers_on_its_device(tmp_path, capsys, model, extra):
    run = tmp_path / "run"
    run_cli(capsys, "train", "--task", "parity", "--model", model, "--out", run, "--no-progress",
            *(FAN_FAST + baseline_flags(model) if "compiled" not in extra
              else ["--steps", "1", "--max-train-n", "3", "--eval-samples", "4"]),
            *extra)
    adaptive = json.loads((run / "run.json").read_text())["model"] in ("looped", "looped_noinj")
    learned = model == "looped" and "compiled" not in extra
    for rule in (RULES if learned else ["oracle"] if not adaptive else ["confidence"]):
        run_cli(capsys, "eval", run, "--lengths", "1:4", "--stop", rule, "--samples", "4", "--no-plots",
                "--no-progress", "--device", "cpu")
    _answer(capsys, run, "1 0 1 > # #")


SEQ_CASES = ([("toy_parity", m, SEQ_FAST + SEQ_SETS.get(m, [])) for m in comparison_models()]
             + [("toy_sum", "ut_act", SEQ_FAST), ("toy_pair", "transformer", SEQ_FAST), ("words_z60", "looped",
                                                                                          WORDS_COMPILED[4:])])


@pytest.mark.parametrize("task,model,args", SEQ_CASES, ids=[f"{t}-{m}" + ("-compiled" if "compiled" in a else "")
                                                             for t, m, a in SEQ_CASES])
def test_comparison_model_trains_evaluates_and_answers_on_its_device(tmp_path, capsys, task, model, args):
    run = tmp_path / "run"
    run_cli(capsys, "train", "--task", task, "--model", model, "--out", run, "--no-progress", *args)
    run_cli(capsys, "eval", run, "--splits", "valid", "-n", "4", "--no-plots", "--no-progress", "--device", "cpu")
    if task == "toy_parity":
        _answer(capsys, run, "1 0 1")


def test_a_tensor_made_without_a_device_is_found(tmp_path, capsys, monkeypatch):
    """The check itself: a forward that adds a tensor made without `device=`
    (a bug on a GPU, invisible on a CPU) fails the run under the meta default,
    and the same run passes without the planted tensor."""
    from model.looped import LoopedTransformer
    argv = ["train", "--task", "parity", "--out", tmp_path / "ok", "--no-progress", *FAN_FAST]
    run_cli(capsys, *argv)
    forward = LoopedTransformer.forward

    def planted(self, *a, **k):
        out = forward(self, *a, **k)
        if isinstance(out, tuple):      # (logits, the halting unit's): forward with done_steps
            return (out[0] + torch.zeros(out[0].shape[-1]), *out[1:])
        return out + torch.zeros(out.shape[-1])
    monkeypatch.setattr(LoopedTransformer, "forward", planted)
    argv[4] = tmp_path / "planted"
    with default_device_meta(), pytest.raises(RuntimeError, match="device meta"):
        main([str(a) for a in argv])
    assert main([str(a) for a in argv[:4]] + [str(tmp_path / "cpu")] + [str(a) for a in argv[5:]]) == 0


# ---- the GPU options, on the CPU ------------------------------------------------------

def _rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_bf16_autocast_trains_with_a_finite_loss_recorded_and_kept_on_resume(tmp_path, capsys):
    run = tmp_path / "bf16"
    base = ["train", "--out", run, "--no-progress", "--log-every", "2", "--ckpt-every", "2"]
    assert main([str(a) for a in base + ["--task", "parity", *FAN_FAST[2:], "--steps", "4",
                                         "--precision", "bf16"]]) == 0
    hp = json.loads((run / "run.json").read_text())["hparams"]
    assert (hp["precision"], hp["tf32"], hp["compile"]) == ("bf16", "off", "off")
    assert json.loads((run / "run.json").read_text())["device"] == "cpu"      # --device auto, resolved
    losses = [r["loss"] for r in _rows(run) if "loss" in r]
    assert len(losses) == 2 and all(math.isfinite(v) for v in losses)
    capsys.readouterr()
    assert main([str(a) for a in base + ["--resume", "--steps", "6", "--precision", "fp32"]]) == 2
    assert "precision 'bf16'" in capsys.readouterr().err          # a resumed run keeps its precision
    assert main([str(a) for a in base + ["--resume", "--steps", "6", "--tf32", "on"]]) == 0     # speed only
    hp = json.loads((run / "run.json").read_text())["hparams"]
    assert (hp["precision"], hp["tf32"]) == ("bf16", "on")
    assert [r["step"] for r in _rows(run) if "loss" in r] == [2, 4, 6]


def test_fp32_is_the_default_and_bf16_changes_the_numbers(tmp_path):
    """fp32 (every run before the option) is what a run gets unasked; bf16 differs."""
    def losses(name, *extra):
        assert main([str(a) for a in ["train", "--task", "parity", "--out", tmp_path / name, "--no-progress",
                                      *FAN_FAST[2:], "--steps", "2", "--log-every", "1", *extra]]) == 0
        return [r["loss"] for r in _rows(tmp_path / name) if "loss" in r]
    default = losses("default")
    assert default == losses("fp32", "--precision", "fp32", "--device", "cpu")
    assert default != losses("bf16", "--precision", "bf16")


@pytest.mark.slow       # torch.compile builds its kernels first (a CPU run refuses it)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="--compile on is for CUDA devices")
def test_compile_trains_and_checkpoints_the_same_module(tmp_path):
    run = tmp_path / "c"
    assert main([str(a) for a in ["train", "--task", "parity", "--out", run, "--no-progress", *FAN_FAST[2:],
                                  "--steps", "2", "--compile", "on", "--device", "cuda"]]) == 0
    assert json.loads((run / "run.json").read_text())["hparams"]["compile"] == "on"
    with default_device_meta():
        assert rasp.load(str(run), device="cpu")(["1 0 > # #"])
