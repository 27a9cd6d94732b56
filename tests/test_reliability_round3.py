"""Issue 40, the third round of hostile input: files of a run, an export, a
compiled folder, a results folder or an `--inputs` file that are FIFOs,
links to /dev/zero or far too large; damaged reports and run files of the
wrong shape; planted links and `../` names in result folders; NaN in a
report; options that silently meant the default.  Each ends in the right
output or a located error (exit status 2), never a traceback, a hang, an
unbounded read or a write outside the folder named."""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import check_rerun as CR
from bench import results_page as RP
from rasp import readfile
from rasp.cli import main
from rasp.errors import RaspFileError
from test_compare_page import flip_folder

ROOT = Path(__file__).resolve().parents[1]
RUNS_V1 = ROOT / "tests" / "data" / "runs_v1"
PARITY = ROOT / "programs" / "parity.rasp"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}

pytestmark = pytest.mark.heavy          # tests/conftest.py: run these first


def _bounded():
    """A child that reads /dev/zero whole dies at 3 GiB instead of taking the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def cli(*argv):
    """`rasp ARGV` in a child with a memory cap and a time limit (a read that
    waits on a FIFO fails the test by its timeout, not by hanging it)."""
    r = subprocess.run([sys.executable, "-m", "rasp.cli", *map(str, argv)], cwd=ROOT, env=ENV, capture_output=True,
                       text=True, timeout=120, preexec_fn=_bounded)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    return r


# runs `rasp ARGV` for each argv of a JSON list, in one process; before each, its argv on
# stderr (a case that hangs is named by the timeout's output), after each, its result on stdout
_EACH = """import contextlib, io, json, sys
from rasp.cli import main
for argv in json.loads(sys.argv[1]):
    print("CASE", argv, file=sys.stderr, flush=True)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as e:
            status = e.code
    print(json.dumps([status, out.getvalue(), err.getvalue()]), flush=True)
"""


def cli_each(*argvs) -> list:
    """`cli` for several commands in one child (one import of torch and the trainer, not
    one each), under the same memory cap and time limit: a CompletedProcess per command."""
    argvs = [[str(a) for a in argv] for argv in argvs]
    r = subprocess.run([sys.executable, "-c", _EACH, json.dumps(argvs)], cwd=ROOT, env=ENV, capture_output=True,
                       text=True, timeout=120, preexec_fn=_bounded)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    results = [subprocess.CompletedProcess(argv, *json.loads(line)) for argv, line in zip(argvs, r.stdout.splitlines())]
    assert len(results) == len(argvs), r.stdout
    for done in results:
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    return results


def in_process(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "internal error" not in err and "Traceback" not in err, err
    return status, out, err


@pytest.fixture(scope="module")
def fitted_run(tmp_path_factory):
    """tests/data/runs_v1/fan_v1 with its halting fit saved (RUN/halting.json, as the first
    command that loads a run writes it), made once: each command on a copy reads the fit
    instead of fitting it again (seconds each, in every child)."""
    run = tmp_path_factory.mktemp("fitted") / "run"
    shutil.copytree(RUNS_V1 / "fan_v1", run)
    import rasp
    rasp.load(run)
    assert (run / "halting.json").is_file()
    return run


@pytest.fixture
def fan_run(fitted_run, tmp_path):
    shutil.copytree(fitted_run, tmp_path / "run")
    return tmp_path / "run"


def _replace(path: Path, kind: str):
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


# ---- item 2: only regular files are read, with a bound ------------------------------

@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_an_inputs_file_or_a_program_that_is_a_fifo_or_a_device_is_refused(tmp_path, kind):
    f = tmp_path / "in.txt"
    f.write_text("1 0 > # #\n")
    _replace(f, kind)
    r = cli("run", PARITY, "--inputs", f)
    # issue 55: an --inputs file may be a pipe (`<(generate)`): one with no writer is refused, not waited on
    refused = "a FIFO with no writer" if kind == "fifo" else "not a regular file"
    assert r.returncode == 2 and f"{f}: error: {refused}" in r.stderr, r.stderr
    r = cli("run", f, "--input", "1 0 > # #")
    assert r.returncode == 2 and f"{f}: error: not a regular file" in r.stderr, r.stderr


def test_a_run_file_that_is_a_fifo_or_a_device_is_refused(fan_run, tmp_path):
    cases = [("run.json", "zero"), ("run.json", "fifo"), ("latest.json", "fifo"),
             ("checkpoints/step_10/state.json", "zero"), ("checkpoints/step_10/model.safetensors", "fifo")]
    step = max(p.name for p in (fan_run / "checkpoints").iterdir())
    runs = []
    for name, kind in cases:            # a copy of the run for each, with that one file replaced
        run = tmp_path / f"{name.replace('/', '_')}_{kind}"
        shutil.copytree(fan_run, run)
        _replace(run / name.replace("step_10", step), kind)
        runs.append(run)
    for (name, kind), r in zip(cases, cli_each(*[("run", run, "--input", "1 0 1 > # #") for run in runs])):
        assert r.returncode in (0, 2), (name, kind, r.stderr)
        assert r.returncode == 0 or "not a regular file" in r.stderr or "no checkpoint" in r.stderr, \
            (name, kind, r.stderr)


def test_an_export_and_a_compiled_folder_with_a_fifo_or_a_device_are_refused(fan_run, tmp_path, capsys):
    assert in_process(capsys, "export", fan_run, "-o", tmp_path / "exp")[0] == 0
    assert in_process(capsys, "compile", PARITY, "--max-len", "8", "-o", tmp_path / "comp")[0] == 0
    cases = [("exp", "config.json", "zero"), ("exp", "vocab.json", "fifo"), ("exp", "model.safetensors", "fifo"),
             ("comp", "config.json", "fifo"), ("comp", "program.rasp", "zero")]
    dirs = []
    for folder, name, kind in cases:
        d = tmp_path / f"{folder}_{name}_{kind}"
        shutil.copytree(tmp_path / folder, d)
        _replace(d / name, kind)
        dirs.append(d)
    for (_, name, _), d, r in zip(cases, dirs, cli_each(*[("run", d, "--input", "1 0 1 > # #") for d in dirs])):
        assert r.returncode == 2 and name in r.stderr and str(d) in r.stderr, (name, r.stderr)


def test_an_oversized_file_is_refused_before_it_is_read(fan_run, tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:             # sparse: no disk used
        f.truncate(readfile.MAX_JSON + 1)
    with pytest.raises(RaspFileError, match="too large"):
        readfile.read_json(big)
    assert readfile.read_bytes(big, readfile.MAX_JSON + 1) == b"\0" * (readfile.MAX_JSON + 1)
    (fan_run / "run.json").unlink()
    os.link(big, fan_run / "run.json")
    r = cli("run", fan_run, "--input", "1 0 1 > # #")          # falls back to the checkpoint's copy, saying why
    assert "too large" in r.stderr and r.returncode in (0, 2), r.stderr


# ---- item 3: run files of the wrong shape -------------------------------------------

def test_run_files_of_the_wrong_shape_are_left_out_of_an_export_by_name(fan_run, tmp_path, capsys):
    assert in_process(capsys, "eval", fan_run, "--lengths", "1:2", "--samples", "2", "--no-plots",
                      "--no-progress")[0] == 0
    ev = next(fan_run.glob("eval_*.json"))
    doc = json.loads(ev.read_text())
    doc["splits"]["test"]["by_length"] = {"x": 1}
    ev.write_text(json.dumps(doc))
    (fan_run / "summary.json").write_text(json.dumps({"step": 1, "seconds": "x", "final_loss": [1]}))
    status, _, err = in_process(capsys, "export", fan_run, "-o", tmp_path / "exp")
    assert status == 0, err
    assert f"{ev}: not of the shape rasp writes" in err and f"{fan_run / 'summary.json'}: not of the shape" in err
    # an earlier evaluation file of another step whose "step" would name a path: evaluated afresh
    doc["step"], doc["stop"] = "../../x", "other"
    ev.write_text(json.dumps(doc))
    status, _, err = in_process(capsys, "eval", fan_run, "--lengths", "1:2", "--samples", "2", "--no-plots",
                                "--no-progress")
    assert status == 0 and "was damaged; replacing it" in err, err
    assert not list(tmp_path.glob("x*")) and json.loads(ev.read_text())["step"] != "../../x"


def test_a_tensorboard_link_is_refused_like_the_other_run_files(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "run"
    out.mkdir()
    (out / "tensorboard").symlink_to(elsewhere)
    status, _, err = in_process(capsys, "train", "--task", "parity", "--preset", "cpu", "--no-progress", "--steps",
                                "1", "--d-model", "8", "--n-head", "1", "--log", "tensorboard", "--out", out)
    assert status == 2 and f"{out / 'tensorboard'}: error: is a link" in err, err
    assert not any(elsewhere.iterdir()) and not (out / "run.json").exists()


def test_a_data_row_too_long_for_memory_is_named(tmp_path, capsys):
    good = tmp_path / "good.jsonl"
    assert in_process(capsys, "data", "flipflop", "--split", "valid", "-n", "2", "-o", good)[0] == 0
    first, second = good.read_text().splitlines()
    d = json.loads(first)
    long = {"input": d["input"] * 59, "target": d["target"] * 59}        # 30,208 tokens
    data = tmp_path / "long.jsonl"
    data.write_text(second + "\n\n" + json.dumps(long) + "\n")
    status, _, err = in_process(capsys, "train", "--task", "flipflop", "--model", "transformer", "--preset", "cpu",
                                "--no-progress", "--set", "batch_size=4", "--steps", "1", "--data", data,
                                "--out", tmp_path / "o")
    assert status == 2 and f"{data}:3: error: example 2 is 30208 tokens long" in err, err


# ---- item 3: the results tools ------------------------------------------------------

def _report(values) -> dict:
    return {"suites": [{"suite": "mini", "preset": "cpu", "tables": [{"id": "t1", "rows": [
        {"label": "a", "cells": [{"column": "n", "ours": {"status": "ok", "values": values}}]}]}]}]}


@pytest.mark.parametrize("text, words", [
    (json.dumps(_report([0.5, float("nan"), 0.6])), "not a readable"),
    (json.dumps(_report([0.5, float("inf"), 0.6])), "not a readable"),
    (json.dumps(_report([0.5, "x", 0.6])), "suites[0].tables[0].rows[0].cells[0].ours.values[1]: expected a finite"),
    ("[" * 100_000 + "]" * 100_000, "not a readable"),
    (json.dumps({"suites": [{"suite": 1, "preset": "cpu", "tables": [{"id": "t"}]}]}), "suites[0].suite"),
    (json.dumps({"suites": [{"suite": "a", "preset": "cpu", "tables": 5}]}), "suites[0].tables: expected a list"),
    (json.dumps({"suites": [{"suite": "a", "preset": "cpu", "summary": {"rows": [{"table": "t", "range": "r",
                                                                                 "beyond_noise": True}]}}]}),
     "summary.rows[0].best"),
], ids=["nan", "inf", "text", "deep", "suite-not-a-name", "tables-not-a-list", "summary-row-without-models"])
def test_check_rerun_answers_a_damaged_report_with_a_located_error(tmp_path, capsys, text, words):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    (tmp_path / "a" / "report.json").write_text(json.dumps(_report([0.5, 0.55, 0.6])))
    (tmp_path / "b" / "report.json").write_text(text)
    assert CR.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'b' / 'report.json'}: " in err and words in err, err


def test_check_rerun_refuses_a_fifo_report(tmp_path):
    (tmp_path / "a").mkdir()
    os.mkfifo(tmp_path / "a" / "report.json")
    r = subprocess.run([sys.executable, "-m", "bench.check_rerun", str(tmp_path / "a"), str(tmp_path / "a")],
                       cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "not a regular file" in r.stderr and "Traceback" not in r.stderr, r.stderr


def _collect(capsys, results, src):
    status = RP.main(["--results", str(results), "--collect", str(src)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return status, err


def _tree(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(root.rglob("*"))} if root.exists() else {}


def test_collect_refuses_a_suite_name_that_is_a_path(tmp_path, capsys):
    runs, results = tmp_path / "runs" / "flip", tmp_path / "a" / "b" / "results"
    flip_folder(runs)
    doc = json.loads((runs / "compare.json").read_text())
    for sel in doc["suites"].values():
        sel["suite"] = "../../x"
    (runs / "compare.json").write_text(json.dumps(doc))
    status, err = _collect(capsys, results, runs)
    assert status == 2 and "../../x" in err and str(runs / "compare.json") in err, err
    assert not (tmp_path / "a" / "x").exists() and not results.exists()


def test_collect_never_writes_through_a_planted_link(tmp_path, capsys):
    runs, results = tmp_path / "runs" / "flip", tmp_path / "results"
    flip_folder(runs)
    assert _collect(capsys, results, runs)[0] == 0
    users = tmp_path / "users"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    # a run's folder in the destination planted as a link to the user's folder
    run = next(p.name for p in (results / "flipflop").iterdir() if p.is_dir())
    shutil.rmtree(results / "flipflop" / run)
    (results / "flipflop" / run).symlink_to(users)
    status, err = _collect(capsys, results, runs)
    assert status == 2 and "is a link" in err, err
    assert [p.name for p in users.iterdir()] == ["notes.txt"]
    # compare.json planted as a link to the user's file
    (results / "flipflop" / run).unlink()
    shutil.copytree(runs / run, results / "flipflop" / run)
    (results / "flipflop" / "compare.json").unlink()
    (results / "flipflop" / "compare.json").symlink_to(users / "notes.txt")
    status, err = _collect(capsys, results, runs)
    assert status == 2 and "compare.json" in err and (users / "notes.txt").read_text() == "mine", err
    # the destination itself a link
    (results / "flipflop" / "compare.json").unlink()
    shutil.rmtree(results / "flipflop")
    (results / "flipflop").symlink_to(users)
    status, err = _collect(capsys, results, runs)
    assert status == 2 and "is a link" in err and [p.name for p in users.iterdir()] == ["notes.txt"], err


def test_a_folder_is_never_collected_onto_itself(tmp_path, capsys):
    results = tmp_path / "results"
    flip_folder(results / "flipflop")
    before = _tree(results)
    status, err = _collect(capsys, results, results / "flipflop")
    assert status == 2 and "collect into another folder" in err, err
    assert _tree(results) == before


def test_collect_into_a_folder_that_is_not_a_result_folder_is_refused(tmp_path, capsys):
    runs, results = tmp_path / "runs" / "flip", tmp_path / "results"
    flip_folder(runs)
    (results / "flipflop").mkdir(parents=True)
    (results / "flipflop" / "thesis.tex").write_text("mine")
    status, err = _collect(capsys, results, runs)
    assert status == 2 and "not a result folder" in err, err
    assert [p.name for p in (results / "flipflop").iterdir()] == ["thesis.tex"]


def test_the_page_answers_a_damaged_run_record_with_a_located_error(tmp_path, capsys):
    runs, results = tmp_path / "runs" / "flip", tmp_path / "results"
    flip_folder(runs)
    assert _collect(capsys, results, runs)[0] == 0
    run = next(p for p in (results / "flipflop").iterdir() if p.is_dir())
    (run / "compare_run.json").write_text(json.dumps({"steps": [{"step": "train", "seconds": "x"}]}))
    page = tmp_path / "results.md"
    status = RP.main(["--results", str(results), "--page", str(page), "--bench-dir", str(tmp_path / "bench")])
    err = capsys.readouterr().err
    assert status == 2 and f"{run / 'compare_run.json'}: error: steps[0].seconds" in err, err
    assert not page.exists()


# ---- item 4: every option acts or is refused ----------------------------------------

def test_max_work_0_is_refused_for_a_run_as_for_a_program(fan_run, capsys):
    for target in (PARITY, fan_run):
        status, _, err = in_process(capsys, "run", target, "--max-work", "0", "--input", "1 0 1 > # #")
        assert status == 2 and "--max-work must be at least 1, got 0" in err, (target, err)


def test_threshold_under_a_rule_that_ignores_it_is_refused(fan_run, capsys):
    status, _, err = in_process(capsys, "eval", fan_run, "--threshold", "0.5", "--lengths", "1:2", "--samples", "2",
                                "--no-plots", "--no-progress")
    assert status == 2 and "--threshold 0.5: only with --stop threshold" in err, err
    assert not list(fan_run.glob("eval_*.json"))


def test_data_stats_writes_its_output_file(tmp_path, capsys):
    out = tmp_path / "stats.txt"
    status, stdout, err = in_process(capsys, "data", "flipflop", "--stats", "-n", "4", "--split", "valid", "-o", out)
    assert status == 0 and out.is_file(), err
    text = out.read_text()
    assert text.startswith("flipflop valid") and "length:" in text and "length:" not in stdout
    status, stdout, _ = in_process(capsys, "data", "flipflop", "--stats", "-n", "4", "--split", "valid")
    assert stdout == text


@pytest.mark.parametrize("value, words", [(float("nan"), "NaN or infinity"), (float("inf"), "NaN or infinity")])
def test_nan_in_a_result_folder_is_a_located_error(tmp_path, capsys, value, words):
    runs, results = tmp_path / "runs" / "flip", tmp_path / "results"
    flip_folder(runs)
    assert _collect(capsys, results, runs)[0] == 0
    ev = next((results / "flipflop").glob("*/eval.json"))
    doc = json.loads(ev.read_text())
    doc["splits"]["test_128_p0.1"]["metrics"]["last_read_acc"] = value
    ev.write_text(json.dumps(doc))
    page = tmp_path / "results.md"
    status = RP.main(["--results", str(results), "--page", str(page), "--bench-dir", str(tmp_path / "bench")])
    err = capsys.readouterr().err
    assert status == 2 and f"{ev}: error: splits.test_128_p0.1.metrics.last_read_acc: {words}" in err, err
    assert not page.exists()


def test_a_result_folder_planted_as_a_link_is_refused(tmp_path, capsys):
    outside, results = tmp_path / "outside", tmp_path / "results"
    flip_folder(outside / "flipflop")
    results.mkdir()
    (results / "flipflop").symlink_to(outside / "flipflop")
    before = _tree(outside)
    for extra in ([], ["--check"]):
        status = RP.main(["--results", str(results), "--page", str(tmp_path / "results.md"), "--bench-dir",
                          str(tmp_path / "bench"), *extra])
        err = capsys.readouterr().err
        assert status == 2 and f"{results / 'flipflop'}: error: is a link" in err, err
    assert _tree(outside) == before and not (tmp_path / "results.md").exists()
