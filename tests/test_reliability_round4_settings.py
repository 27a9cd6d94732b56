"""Issue 55, the fourth round of hostile input, on how a run is asked for:
settings files whose errors sit at the line of the key or table at fault, an
empty --out, --compile on a CPU, `rasp.load`'s device, advice that names only
flags of the command in use and the line of the user's --inputs file, one
rule for settings the run would not use (from a flag, a settings file or
--set), and a run stopped by --max-wall that says how to go on.  Each ends in
the right output or a located error (exit status 2), never a traceback, a
hang or a run written where the user did not ask."""
from __future__ import annotations

import argparse
import re
import shlex
import shutil
import time
from pathlib import Path

import pytest
import torch

import rasp
from rasp.cli import _build_parser, main
from rasp.errors import RaspError

ROOT = Path(__file__).resolve().parents[1]
RUNS_V1 = ROOT / "tests" / "data" / "runs_v1"
PARITY = ROOT / "programs" / "parity.rasp"
LOOP = ["--batch-size", "4", "--max-train-n", "3", "--eval-every", "0", "--eval-samples", "2", "--no-progress"]
TINY = ["--d-model", "8", "--n-head", "2", "--n-layer", "1", *LOOP]      # (a compiled start takes only LOOP)


def run(capsys, *argv) -> tuple:
    """`rasp ARGV` in this process: (status, stdout, stderr); argparse's exit is a status too."""
    try:
        status = main([str(a) for a in argv])
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err, err
    return status, out, err


def train_flags() -> set:
    parser = _build_parser("train")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]
    return {flag for action in sub._actions for flag in action.option_strings}


def flags_named(text: str) -> set:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", text))


# ---- settings files: located at the key or table at fault; no run in the current folder ----

@pytest.mark.parametrize("text, line, key", [("# my run\n\n[model]\nd_model = 8\n", 3, "model"),
                                             ("# my run\nsteps = 1\n\n[train]\nsteps = 2\n", 4, "train"),
                                             ("# my run\nsteps = 1\n'model'.width = 8\n", 3, "model")])
def test_a_table_in_a_settings_file_is_located_at_its_line(tmp_path, capsys, text, line, key):
    cfg = tmp_path / "run.toml"
    cfg.write_text(text)
    status, _, err = run(capsys, "train", "--task", "parity", "--config", cfg, "--out", tmp_path / "r", *TINY)
    assert status == 2 and f"{cfg}:{line}:1: error: {key}: a table" in err, err
    assert not (tmp_path / "r").exists()


def test_an_empty_out_is_refused_from_a_file_and_from_a_flag(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text("the user's file\n")
    cfg = tmp_path / "run.toml"
    cfg.write_text('task = "parity"\nout = ""\nsteps = 1\n')
    status, _, err = run(capsys, "train", "--config", cfg, *TINY)
    assert status == 2 and f"{cfg}:2:1: error: out = ''" in err, err
    for out in ("", "  "):
        status, _, err = run(capsys, "train", "--task", "parity", "--out", out, "--steps", "1", *TINY)
        assert status == 2 and "--out: expected a folder name" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt", "run.toml"]


# ---- --compile on a CPU: refused at once, as its help says -----------------------------

def test_compile_on_a_cpu_is_refused_at_once_with_the_reason(tmp_path, capsys):
    start = time.perf_counter()
    status, _, err = run(capsys, "train", "--task", "parity", "--out", tmp_path / "r", "--steps", "2",
                         "--device", "cpu", "--compile", "on", *TINY)
    assert status == 2 and "--compile on: torch.compile is for CUDA devices" in err, err
    assert time.perf_counter() - start < 60 and not (tmp_path / "r").exists()


# ---- rasp.load's device ------------------------------------------------------------------

def test_rasp_load_takes_none_a_torch_device_or_a_cuda_index(tmp_path):
    shutil.copytree(RUNS_V1 / "fan_v1", tmp_path / "run")
    answers = {str(d): rasp.load(tmp_path / "run", device=d)(["1 0 1 > # #"])
               for d in (None, torch.device("cpu"), "cpu")}
    assert len({str(a) for a in answers.values()}) == 1, answers
    if not torch.cuda.is_available():
        with pytest.raises(RaspError, match="device cuda:0: no CUDA device"):
            rasp.load(tmp_path / "run", device=0)
    for bad in ("gpu", -1, 1.5, "cuda:x"):
        with pytest.raises(RaspError, match="unknown device"):
            rasp.load(tmp_path / "run", device=bad)


# ---- advice names flags of the command in use, and the user's line -------------------------

@pytest.fixture
def long_loop(tmp_path):
    """Parity whose loop runs 1000 x n steps: past the interpreter's 10,000 from n = 11."""
    text = PARITY.read_text().replace("\nloop n:", "\nloop n * 1000:")
    prog = tmp_path / "long.rasp"
    prog.write_text(text.replace("sample n in 1..20:", "sample n in 1..12:"))
    return prog


def test_an_inputs_line_the_program_cannot_label_is_named_without_a_foreign_flag(tmp_path, capsys, long_loop):
    inputs = tmp_path / "in.txt"
    inputs.write_text("1 0 > # #\n0 1 1 > # #\n" + "1 " * 11 + "> # #\n1 > # #\n")
    status, _, err = run(capsys, "train", "--program", long_loop, "--inputs", inputs, "--out", tmp_path / "r",
                         "--steps", "1", *TINY)
    assert status == 2 and f"{inputs}:3: error:" in err and "ran more than 10000 steps" in err, err
    assert flags_named(err) <= train_flags() and "input 1" not in err, err
    inputs.write_text("1 0 > # #\n" + "1 " * 9000 + "> # #\n")
    status, _, err = run(capsys, "train", "--program", PARITY, "--inputs", inputs, "--out", tmp_path / "r",
                         "--steps", "1", *TINY)
    assert status == 2 and f"{inputs}:2: error: the input has 9003 tokens" in err, err
    assert flags_named(err) <= train_flags(), err
    assert not (tmp_path / "r").exists()


def test_a_drawn_input_the_program_cannot_label_is_shown_without_a_foreign_flag(tmp_path, capsys, long_loop):
    status, _, err = run(capsys, "train", "--program", long_loop, "--out", tmp_path / "r", "--steps", "1", *TINY)
    assert status == 2 and "ran more than 10000 steps" in err and "on a drawn input of" in err, err
    assert flags_named(err) <= train_flags() and "(input " not in err, err


# ---- one rule: a setting the run does not use is refused, wherever it is given ---------------

@pytest.mark.parametrize("flags, said", [
    (["--recipe", "fan", "--halt-past", "5"], "--halt-past 5: not used without a halting unit"),
    (["--recipe", "fan", "--halt-target", "marker"], "--halt-target marker: not used without a halting unit"),
    (["--recipe", "fan", "--halting-from", "3"], "--halting-from 3: not used without --settle, --unsure or --halt"),
    (["--model", "fap", "--settle", "2"], "--settle 2: not used by model fap, which runs a fixed depth"),
    (["--baseline-depth", "2"], "--baseline-depth 2: not used by model looped"),
    (["--model", "fap", "--loop-steps", "3"], "--loop-steps 3: not used by model fap"),
    (["--guard-every", "3"], "--guard-every 3: not used without the descent guard"),
    (["--init", "compiled", "--read-in", "embedding"], "--read-in embedding: not used by a compiled start"),
    (["--compress-method", "pca"], "--compress-method pca: not used without --compress D"),
    (["--compress", "8"], "--compress 8: only a compiled start (--init compiled) is compressed"),
    (["--freeze-fragile", "off"], "--freeze-fragile off: only a compiled start")])
def test_a_flag_the_run_does_not_use_is_refused(tmp_path, capsys, flags, said):
    status, _, err = run(capsys, "train", "--task", "parity", "--out", tmp_path / "r", "--steps", "1",
                         *(LOOP if "compiled" in flags else TINY), *flags)
    assert status == 2 and f"error: {said}" in err, err
    assert not (tmp_path / "r").exists()


def test_a_settings_file_line_the_run_does_not_use_is_refused_at_its_line(tmp_path, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text('# parity, Fan et al.\'s recipe\ntask = "parity"\nrecipe = "fan"\n\nhalt_past = 5\n')
    status, _, err = run(capsys, "train", "--config", cfg, "--out", tmp_path / "r", "--steps", "1", *TINY)
    assert status == 2 and f"{cfg}:5:1: error: halt_past = 5: not used without a halting unit" in err, err
    # the command line's flag overrides the file's line, and the error names the flag
    status, _, err = run(capsys, "train", "--config", cfg, "--out", tmp_path / "r", "--steps", "1",
                         "--halt-past", "4", *TINY)
    assert status == 2 and "error: --halt-past 4: not used" in err and str(cfg) not in err, err
    # where a halting unit is trained, the same line is used
    status, out, err = run(capsys, "train", "--config", cfg, "--out", tmp_path / "r", "--steps", "1",
                           "--recipe", "clock", *TINY)
    assert status == 0, err
    assert '"halt_past": 5' in (tmp_path / "r" / "run.json").read_text()


@pytest.mark.parametrize("sets, said", [(["--set", "halt_past=3"], "--set halt_past=3: a Fan-task option"),
                                        (["--set", "guard_every=3"], "--set guard_every=3: not used without the "
                                                                     "descent guard"),
                                        (["--set", "loss_grow_every=5"], "--set loss_grow_every=5: not used without"),
                                        (["--set", "out="], "--set out=: out is the flag --out of rasp train"),
                                        (["--halt-past", "3"], "--halt-past 3: a Fan-task option, not used by "
                                                               "comparison tasks")])
def test_a_comparison_run_refuses_what_it_does_not_use(tmp_path, capsys, sets, said):
    status, _, err = run(capsys, "train", "--task", "flipflop", "--model", "lstm", "--out", tmp_path / "r",
                         "--steps", "1", "--no-progress", *sets)
    assert status == 2 and f"error: {said}" in err, err
    assert not (tmp_path / "r").exists()


# ---- a stop before the step count says so, and how to go on --------------------------------

def test_a_run_stopped_by_max_wall_says_so_and_prints_the_command_that_continues_it(tmp_path, capsys):
    out_dir = tmp_path / "r"
    status, out, err = run(capsys, "train", "--task", "parity", "--out", out_dir, "--steps", "100000",
                           "--max-wall", "0.5", "--ckpt-every", "100000", *TINY)
    assert status == 0, err
    step = int(re.search(r"to step (\d+) of 100000 \(stopped early\)", out).group(1))
    said = re.search(r"stopped early: --max-wall 0.5 seconds passed at step (\d+) of 100000 \(checkpointed\); "
                     r"continue it with: (rasp train .*)$", out, re.M)
    assert said and int(said.group(1)) == step < 100000, out
    command = shlex.split(said.group(2))
    assert command == ["rasp", "train", "--out", str(out_dir), "--resume"], command
    status, out, err = run(capsys, *command[1:], "--steps", str(step + 1), "--no-progress")
    assert status == 0 and f"to step {step + 1} in" in out and "stopped early" not in out, (out, err)
