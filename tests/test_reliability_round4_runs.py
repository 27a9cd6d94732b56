"""Issue 55, the fourth round of hostile input, on what a command reads from a
pipe and back from a run: `--config` naming a FIFO nobody writes to, `--inputs`
and `--eval-inputs` given as a pipe (process substitution, /dev/stdin), a
damaged `halting.json`, evaluation file or `metrics.jsonl`, and `rasp run RUN`
on an inputs file the run's model never saw the answers of, or a long one.
Each ends in the right output or a located error (exit status 2), never a
traceback, a hang or a damaged number used."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rasp import readfile
from rasp.cli import main
from rasp.errors import RaspFileError

ROOT = Path(__file__).resolve().parents[1]
PARITY = ROOT / "programs" / "parity.rasp"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
TINY = ["--preset", "cpu", "--steps", "2", "--d-model", "8", "--n-head", "2", "--max-train-n", "3", "--no-progress",
        "--threads", "1"]
# a program whose answer (the number of 1s) grows with the input: a run trained on short inputs never saw
# the answers of long ones
ONES = """const EOQ = ">"
const EOS = "#"
input seq: {0, 1, EOQ, EOS}
require count(seq, EOQ) == 1, "the input needs exactly one '>'"
param n = count_before(seq, EOQ)
ones = full(seq, 0)
loop n:
    ones = ones + 0
end_seq = shift_right(where(has_seen(seq, EOQ), EOS, 0), 1)
output where(end_seq == EOS, end_seq, full(seq, count(seq, 1)))
"""

pytestmark = pytest.mark.heavy          # tests/conftest.py: run these first


def cli(*argv, timeout=60, **kw):
    """`rasp ARGV` in a child (a read that waits on a FIFO fails the test by its timeout)."""
    kw.setdefault("cwd", ROOT)
    r = subprocess.run([sys.executable, "-m", "rasp.cli", *map(str, argv)], env=ENV, capture_output=True,
                       text=True, timeout=timeout, **kw)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    return r


def in_process(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "internal error" not in err and "Traceback" not in err, err
    return status, out, err


def pipe_with(text: str) -> tuple:
    """(path, read fd) of a pipe holding `text` whose writer has finished: what
    `<(printf TEXT)` gives a command (/dev/fd/N)."""
    r, w = os.pipe()
    os.write(w, text.encode())
    os.close(w)
    return f"/dev/fd/{r}", r


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A width-8 parity run of 2 steps with its fitted halting head (`--recipe fan`: a head as
    wide as the model); `ones` (below) adds the ONES program's."""
    base = tmp_path_factory.mktemp("round4")
    assert main(["train", "--task", "parity", "--recipe", "fan", "--out", str(base / "parity"), *TINY]) == 0
    return base


@pytest.fixture(scope="module")
def ones(trained):
    """The ONES program trained from --inputs/--eval-inputs given as pipes."""
    (trained / "ones.rasp").write_text(ONES)
    train, r1 = pipe_with("1 > #\n0 > #\n1 0 > # #\n")
    evals, r2 = pipe_with("0 1 > # #\n")
    try:
        status = main(["train", "--program", str(trained / "ones.rasp"), "--inputs", train, "--eval-inputs", evals,
                       "--out", str(trained / "ones"), *TINY])
    finally:
        os.close(r1)
        os.close(r2)
    assert status == 0
    return trained / "ones"


@pytest.fixture
def parity_run(trained, tmp_path):
    shutil.copytree(trained / "parity", tmp_path / "run")
    return tmp_path / "run"


# ---- item 1: settings and inputs files read from pipes --------------------------------

def test_a_config_fifo_with_no_writer_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "settings.toml"
    os.mkfifo(fifo)
    r = cli("train", "--config", fifo, "--task", "parity", "--out", tmp_path / "run", timeout=30)
    assert r.returncode == 2 and f"{fifo}: error: a FIFO with no writer" in r.stderr, r.stderr
    assert not (tmp_path / "run").exists()


def test_inputs_take_a_pipe_with_a_writer_as_config_does(tmp_path):
    path, fd = pipe_with("1 0 > # #\n1 > # #\n")
    try:
        r = cli("run", PARITY, "--inputs", path, pass_fds=(fd,))
    finally:
        os.close(fd)
    assert r.returncode == 0 and r.stdout == "0 1 1 # #\n0 1 # #\n", r.stderr
    for stdin in ("/dev/stdin", "-"):
        r = cli("run", PARITY, "--inputs", stdin, input="1 1 > # #\n")
        assert r.returncode == 0 and r.stdout == "0 1 0 # #\n", r.stderr
    fifo = tmp_path / "in.txt"                  # a FIFO nobody writes to: refused, not waited on
    os.mkfifo(fifo)
    r = cli("run", PARITY, "--inputs", fifo, timeout=30)
    assert r.returncode == 2 and f"{fifo}: error: a FIFO with no writer" in r.stderr, r.stderr


def test_train_read_its_inputs_from_pipes(ones):
    program = json.loads((ones / "run.json").read_text())["program"]
    assert program["inputs"] == ["1 > #", "0 > #", "1 0 > # #"] and program["eval_inputs"] == ["0 1 > # #"]


def test_a_pipe_is_read_with_a_bound_and_a_silent_writer_is_given_up(monkeypatch):
    path, fd = pipe_with("x" * 100)
    try:
        with pytest.raises(RaspFileError, match="too large"):
            readfile.read_user_bytes(path, 50)
    finally:
        os.close(fd)
    r, w = os.pipe()                            # a writer that holds the pipe and writes nothing
    monkeypatch.setattr(readfile, "PIPE_SILENCE", 0.3)
    try:
        with pytest.raises(RaspFileError, match="wrote nothing"):
            readfile.read_user_bytes(f"/dev/fd/{r}", 50)
    finally:
        os.close(r)
        os.close(w)


# ---- item 2: numbers read back from a run ---------------------------------------------

def _edit(path: Path, change):
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def test_a_halting_fit_of_the_wrong_width_is_fitted_again_not_used(parity_run, capsys):
    assert in_process(capsys, "run", parity_run, "--input", "1 0 > # #", "--stop", "head")[0] == 0
    fit = parity_run / "halting.json"
    width = len(json.loads(fit.read_text())["head"]["weight"])
    assert width == 8                           # the model's read-out state

    def narrow(doc):
        for k in ("weight", "mean", "std"):
            doc["head"][k] = [1.0, 2.0, 3.0]
    _edit(fit, narrow)
    status, out, err = in_process(capsys, "run", parity_run, "--input", "1 0 > # #", "--stop", "head")
    assert status == 0 and out and f"{fit}: not a halting fit" in err and "fitting it again" in err, err
    assert len(json.loads(fit.read_text())["head"]["weight"]) == width


def test_a_nan_slope_in_a_halting_fit_is_never_used(parity_run, capsys):
    assert in_process(capsys, "run", parity_run, "--input", "1 0 > # #", "--stop", "depth_law")[0] == 0
    fit = parity_run / "halting.json"
    _edit(fit, lambda doc: doc["depth_law"].update(slope=float("nan")))
    status, out, err = in_process(capsys, "eval", parity_run, "--stop", "depth_law", "--lengths", "1:3",
                                  "--samples", "2", "--no-plots", "--no-progress")
    assert status == 0 and "depth_law.slope is NaN or infinite" in err, err
    assert math.isfinite(json.loads(fit.read_text())["depth_law"]["slope"])


def test_an_exported_halting_fit_is_checked_where_it_is_read(tmp_path):
    import torch
    from trainer.fan.halting import DepthLaw, Halting, HaltingHead
    good = Halting(DepthLaw(1.0, 0.0), HaltingHead(4),
                   {"lengths": [1, 2], "depth_law": {"slope": 1.0, "intercept": 0.0, "misses": []}})
    doc = json.loads(json.dumps(good.to_json(step=3)))
    assert torch.equal(Halting.from_json(doc, tmp_path / "config.json", 4).head.std, torch.ones(4))
    for change, says in [(lambda d: d["head"].update(std=[1.0, 0.0, 1.0, 1.0]), "not positive"),
                         (lambda d: d["depth_law"].update(intercept=float("inf")), "NaN or infinite"),
                         (lambda d: d["record"].update(lengths="1..2"), "record"),
                         (lambda d: d["head"].update(bias=[]), "head.bias")]:
        bad = json.loads(json.dumps(doc))
        change(bad)
        with pytest.raises(RaspFileError, match=says):
            Halting.from_json(bad, tmp_path / "config.json", 4)
    with pytest.raises(RaspFileError, match="8 numbers"):
        Halting.from_json(doc, tmp_path / "config.json", 8)


def test_an_earlier_evaluation_with_rows_missing_a_field_is_dropped_by_name(parity_run, capsys):
    ev = ["--lengths", "1:2", "--samples", "2", "--no-plots", "--no-progress"]
    assert in_process(capsys, "eval", parity_run, "--stop", "oracle", *ev)[0] == 0
    path = parity_run / "eval_oracle.json"

    def damage(doc):
        rows = doc["splits"]["test"]["by_length"]
        del rows["1"]["iterations"]
        rows["2"]["exact_match"] = float("nan")
    _edit(path, damage)
    status, out, err = in_process(capsys, "eval", parity_run, "--stop", "oracle", "--lengths", "3:3",
                                  *ev[2:])
    assert status == 0 and "was damaged; replacing it" in err, err
    _edit(path, lambda doc: doc["splits"]["test"]["by_length"]["3"].pop("iterations"))
    status, out, err = in_process(capsys, "eval", parity_run, "--stop", "oracle", *ev)
    assert status == 0 and f"{path}: an earlier row (length 3)" in err and "no 'iterations'" in err, err
    assert sorted(json.loads(path.read_text())["splits"]["test"]["by_length"]) == ["1", "2"]


def test_a_damaged_metrics_row_is_dropped_at_its_line_not_used(parity_run, capsys):
    metrics = parity_run / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    at = next(i for i, r in enumerate(rows) if "loss" in r)
    rows[at]["loss"], rows[at]["acc"] = float("nan"), "zero"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    status, _, err = in_process(capsys, "train", "--resume", "--out", parity_run, "--steps", "3", "--no-progress",
                                "--threads", "1")
    assert status == 0 and f"{metrics}:{at + 1}: dropped a damaged line (loss:" in err, err
    kept = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert all(math.isfinite(r["loss"]) for r in kept if "loss" in r) and kept[-1]["step"] == 3


# ---- item 3: rasp run RUN --inputs ------------------------------------------------------

def test_an_answer_the_run_never_saw_does_not_refuse_the_input(ones, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "in.txt"
    f.write_text("1 > #\n1 1 1 1 1 > #\n")       # the answer of line 2, 5, is no output token of the run
    status, out, err = in_process(capsys, "run", ones, "--inputs", "in.txt")
    assert status == 0 and len(out.splitlines()) == 2, err
    f.write_text("1 > #\n1 2 > #\n")                # an input token the run never saw: named at its line
    status, out, err = in_process(capsys, "run", ones, "--inputs", "in.txt")
    assert status == 2 and err.startswith("in.txt:2: error: token '2'"), err
    f.write_text("1 > #\n1 0 #\n")                  # one the task program's require rejects: its line too
    status, out, err = in_process(capsys, "run", ones, "--inputs", "in.txt")
    assert status == 2 and err.startswith("in.txt:2: error: input rejected: the input needs"), err
    assert str(tmp_path) not in err and str(ones) not in err


def test_a_long_inputs_file_runs_under_a_per_input_bound(trained, tmp_path, capsys):
    """The bound is per input, as for a compiled model: 300 inputs that together take more than
    --max-work, each well under it, are answered (in batches), one input over it is refused at its line."""
    from compiler.limits import flops
    import rasp
    model = rasp.load(trained / "parity", stop="oracle")
    one = flops(model.module.cfg, 6 + model.data.pause, 1, 3)      # "1 0 1 > # #": 6 tokens, T(n) = 3
    f = tmp_path / "many.txt"
    f.write_text("1 0 1 > # #\n" * 300)
    status, out, err = in_process(capsys, "run", trained / "parity", "--inputs", f, "--stop", "oracle",
                                  "--max-work", int(one * 2))
    assert status == 0 and out.splitlines() == out.splitlines()[:1] * 300, err
    f.write_text("1 0 1 > # #\n" * 3 + "1 0 1 1 1 1 1 1 > # #\n")
    status, out, err = in_process(capsys, "run", trained / "parity", "--inputs", f, "--stop", "oracle",
                                  "--max-work", int(one * 2))
    assert status == 2 and f"{f}:4: error: this input would take about" in err and not out, err
