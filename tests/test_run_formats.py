"""Run directories written before the one training loop (run format 1) still
load, evaluate and resume, bit-identically to what the old code would have
trained; a run of a format this code does not know is refused with a message.

tests/data/runs_v1/ holds two tiny runs written by the two training loops
that came before trainer/run/loop.py (commit 0461801), each cut back to its
step-10 checkpoint as a `kill -9` after that checkpoint leaves it:

    fan_v1  rasp train --task parity --steps 20 --d-model 16 --n-head 2 --ckpt-every 10 --log-every 5
            --eval-every 10 --eval-samples 16 --max-train-n 4 --interval 5 --batch-size 8
    seq_v1  rasp train --task words_z60 --model gru --steps 20 --batch-size 8 --d-model 8 --set log_every=5
            --set eval_every=10 --set eval_samples=16 --set ckpt_every=10

The losses below are what the old code logged up to step 20 when it ran
those commands to the end, on another machine: a resume here matches them
within LOSS_TOLERANCE (float32 kernels differ between instruction sets, so no
bytes or hashes of trained weights are compared across machines; that a resume
is bit-identical to a straight run on one machine is tested in
tests/test_train.py and tests/test_seqtrain.py)."""
import json
import shutil
from pathlib import Path

import pytest

from rasp.cli import main
from trainer.settings.resolve import planned_hparams

DATA = Path(__file__).parent / "data" / "runs_v1"
OLD_LOSSES = {
    "fan_v1": [2.279127, 2.021129, 1.727983, 1.464882],
    "seq_v1": [4.141486, 4.191443, 4.139522, 4.119769],
}
LOSS_TOLERANCE = 1e-4   # relative; AVX-512 against AVX2 kernels moved these by < 1e-5
COMMANDS = {
    "fan_v1": ["--task", "parity", "--steps", "20", "--d-model", "16", "--n-head", "2", "--ckpt-every", "10",
               "--log-every", "5", "--eval-every", "10", "--eval-samples", "16", "--max-train-n", "4", "--interval",
               "5", "--batch-size", "8"],
    "seq_v1": ["--task", "words_z60", "--model", "gru", "--steps", "20", "--batch-size", "8", "--d-model", "8",
               "--set", "log_every=5", "--set", "eval_every=10", "--set", "eval_samples=16", "--set", "ckpt_every=10"],
}


def _copy(name, tmp_path) -> Path:
    run = tmp_path / name
    shutil.copytree(DATA / name, run)
    return run


@pytest.mark.parametrize("name", sorted(OLD_LOSSES))
def test_a_format_1_run_resumes_to_what_the_old_code_trained(name, tmp_path):
    run = _copy(name, tmp_path)
    assert "format" not in json.loads((run / "run.json").read_text())
    assert main(["train", "--resume", "--out", str(run), "--no-progress"]) == 0
    assert (run / "checkpoints" / "step_0000020" / "model.safetensors").is_file()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in rows if "loss" in r] == pytest.approx(OLD_LOSSES[name], rel=LOSS_TOLERANCE)
    assert json.loads((run / "run.json").read_text())["format"] == 2
    summary = json.loads((run / "summary.json").read_text())
    assert summary["format"] == 2 and summary["finished"] and summary["step"] == 20


@pytest.mark.parametrize("name", sorted(OLD_LOSSES))
def test_a_format_1_run_is_not_stale_for_the_command_that_made_it(name):
    """`rasp compare` compares a run's recorded hyper-parameters with what its
    command gives a new run now: the new settings must not flag old runs."""
    recorded = json.loads((DATA / name / "run.json").read_text())["hparams"]
    now = planned_hparams(COMMANDS[name] + ["--out", "x"])
    assert {k: (recorded[k], now[k]) for k in recorded.keys() & now.keys() if recorded[k] != now[k]} == {}


def test_a_format_1_run_evaluates(tmp_path):
    fan, seq = _copy("fan_v1", tmp_path), _copy("seq_v1", tmp_path)
    assert main(["eval", str(fan), "--lengths", "1:2", "--samples", "4", "--no-plots", "--no-progress"]) == 0
    assert main(["eval", str(seq), "--splits", "valid", "-n", "8", "--no-plots", "--no-progress"]) == 0


def test_a_run_of_an_unknown_format_is_refused(tmp_path, capsys):
    run = _copy("seq_v1", tmp_path)
    doc = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(doc | {"format": 99}))
    assert main(["eval", str(run), "--splits", "valid", "-n", "8", "--no-plots", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "run format 99" in err and "reads run formats 1 to 2" in err and "Traceback" not in err


@pytest.mark.parametrize("name, argv, named", [
    ("seq_v1", ["eval", "--samples", "8"], "--samples"),
    ("seq_v1", ["eval", "--stop", "confidence"], "--stop"),
    ("fan_v1", ["eval", "--splits", "valid"], "--splits"),
    ("fan_v1", ["eval", "-n", "8"], "-n"),
    ("fan_v1", ["train", "--resume", "--lr", "0.5"], "lr 0.001"),
    ("seq_v1", ["train", "--resume", "--set", "d_ff=64"], "d_ff 128"),
])
def test_a_flag_that_does_not_apply_is_refused(name, argv, named, tmp_path, capsys):
    run = _copy(name, tmp_path)
    cmd = [argv[0], *(["--out", str(run)] if argv[0] == "train" else [str(run)]), *argv[1:], "--no-progress"]
    assert main(cmd) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
    assert not (run / "checkpoints" / "step_0000020").exists()


def test_resume_applies_the_bookkeeping_flags(tmp_path):
    run = _copy("seq_v1", tmp_path)
    assert main(["train", "--resume", "--out", str(run), "--set", "log_every=2", "--no-progress"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [5, 10, 12, 14, 16, 18, 20]


@pytest.mark.parametrize("name, flags, named", [
    ("fan_v1", ["--model", "ntp"], "--model ntp (the run has looped)"),
    ("seq_v1", ["--task", "words_a5"], "--task words_a5 (the run has words_z60)"),
    ("seq_v1", ["--preset", "paper"], "--preset paper (the run has cpu)"),
])
def test_resume_refuses_flags_that_name_another_run(name, flags, named, tmp_path, capsys):
    run = _copy(name, tmp_path)
    assert main(["train", "--resume", "--out", str(run), *flags, "--no-progress"]) == 2
    assert named in capsys.readouterr().err
    # the same values as the run's are fine
    same = {"fan_v1": ["--model", "looped", "--task", "parity"], "seq_v1": ["--model", "gru", "--preset", "cpu"]}
    assert main(["train", "--resume", "--out", str(run), *same[name], "--no-progress"]) == 0


@pytest.mark.parametrize("flags, named", [(["--compress-method", "pca"], "--compress-method pca: not used without"),
                                          (["--freeze-fragile", "on"], "--freeze-fragile on: only a compiled start")])
def test_fan_flags_that_do_not_apply_are_refused(flags, named, tmp_path, capsys):
    assert main(["train", "--task", "parity", *flags, "--out", str(tmp_path / "x")]) == 2
    assert named in capsys.readouterr().err and not (tmp_path / "x").exists()
