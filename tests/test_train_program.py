"""`rasp train --program P.rasp` (issue 44): a program of our own (not in
programs/), with a declared `sample` or an inputs file, trained from random or
compiled weights, then evaluated, run, loaded and exported like any run;
a changed program refused on resume; hostile samplers and files refused
with located errors (exit 2, no traceback).  Each command runs in this process
(tests/inprocess.py), as `python -m rasp` would run it."""
from __future__ import annotations

import json

import pytest

import rasp as api
from inprocess import rasp

# a running maximum in FAP form: from '>' on, the largest query token, then '#'
RUNMAX = """\
const EOQ = ">"
const EOS = "#"
input seq: {0..5, EOQ, EOS}
require count(seq, EOQ) == 1, "the input needs exactly one '>'"
require where(has_seen(seq, EOQ), seq == EOQ or seq == EOS, seq != EOS), "digits before '>', '#' after it"
sample n in 1..4: {0..5}[n] EOQ EOS[2]
param n = count_before(seq, EOQ)

prompt = 1 - has_seen(seq, EOQ)
best = where(prompt, seq, 0)
loop n:
    best = max(best, shift_right(best, 1))
ends = shift_right(where(prompt == 1, 0, EOS), 1)
output where(ends == EOS, EOS, best)
"""
FAST = ["--steps", "4", "--d-model", "16", "--n-head", "2", "--batch-size", "8", "--eval-every", "2",
        "--log-every", "2", "--ckpt-every", "2", "--eval-samples", "16", "--no-progress"]


def refused(r, *needles):
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    for needle in needles:
        assert needle in r.stderr, r.stderr


@pytest.fixture
def prog(tmp_path):
    (tmp_path / "runmax.rasp").write_text(RUNMAX)
    return tmp_path


def test_random_init_trains_evaluates_runs_and_exports(prog):
    r = rasp("train", "--program", "runmax.rasp", "--out", "run", *FAST, cwd=prog)
    assert r.returncode == 0, r.stderr
    run = json.loads((prog / "run" / "run.json").read_text())
    assert run["task"] == "runmax.rasp" and run["program"]["text"] == RUNMAX
    assert run["program"]["score"] == "after:>" and len(run["program"]["sha256"]) == 64
    r = rasp("eval", "run", "--lengths", "1:6", "--samples", "4", "--no-plots", "--no-progress", "--stop", "oracle",
             cwd=prog)
    assert r.returncode == 0, r.stderr
    assert "    6 " in r.stdout
    r = rasp("run", "run", "--input", "3 1 4 > # #", cwd=prog)
    assert r.returncode == 0 and len(r.stdout.split()) == 3, r.stderr
    r = rasp("export", "run", "-o", "exported", cwd=prog)
    assert r.returncode == 0, r.stderr
    assert (prog / "exported" / "program.rasp").read_text() == RUNMAX
    answer = api.load(prog / "exported")(["3 1 4 > # #"])
    assert len(answer[0]) == 3
    # --resume goes on with the same program, and refuses an edited one (located at it)
    r = rasp("train", "--out", "run", "--resume", "--steps", "6", "--no-progress", cwd=prog)
    assert r.returncode == 0, r.stderr
    (prog / "runmax.rasp").write_text(RUNMAX + "# edited\n")
    r = rasp("train", "--out", "run", "--resume", "--steps", "8", "--no-progress", cwd=prog)
    refused(r, "runmax.rasp:1:1: error: the program changed since the run started")


def test_compiled_init_starts_exact(prog):
    r = rasp("train", "--program", "runmax.rasp", "--init", "compiled", "--out", "rc", "--steps", "2",
             "--freeze-fragile", "off", "--eval-samples", "32", "--no-progress", cwd=prog)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (prog / "rc" / "metrics.jsonl").read_text().splitlines()]
    evals = [row["eval_acc"] for row in rows if "eval_acc" in row]
    assert evals[0] == 1.0 and evals[-1] == 1.0, rows


def test_inputs_files(prog):
    (prog / "in.txt").write_text("3 1 4 > # #\n1 > # #\n5 0 2 > # #\n2 5 > # #\n")
    (prog / "held.txt").write_text("1 2 3 4 5 > # #\n0 0 0 0 1 > # #\n")
    r = rasp("train", "--program", "runmax.rasp", "--inputs", "in.txt", "--eval-inputs", "held.txt",
             "--out", "rf", *FAST, cwd=prog)
    assert r.returncode == 0, r.stderr
    r = rasp("eval", "rf", "--samples", "4", "--no-plots", "--no-progress", cwd=prog)
    assert r.returncode == 0, r.stderr
    assert "    5 " in r.stdout          # the held-out file's one size
    r = rasp("eval", "rf", "--lengths", "3", "--no-progress", cwd=prog)
    refused(r, "no input of size 3")


@pytest.mark.parametrize("lines, needle", [
    ("3 1 > # #\n1 > 3 #\n", "in.txt: line 2 breaks this require"),        # the require's line, located
    ("3 1 > # #\n1 7 > #\n", "in.txt:2: error: token '7'"),                  # wrong alphabet
    ("3 1 > # #\n1 a > #\n", "in.txt:2: error: unknown token 'a'"),
    ("", "holds no input"),
    ("1 " * 9000 + "> #\n", "in.txt:1: error: the input has 9002 tokens"),   # huge length
])
def test_hostile_inputs_files(prog, lines, needle):
    (prog / "in.txt").write_text(lines)
    r = rasp("train", "--program", "runmax.rasp", "--inputs", "in.txt", "--out", "bad", *FAST, cwd=prog)
    refused(r, needle)
    assert not (prog / "bad").exists()


@pytest.mark.parametrize("sample, needle", [
    ("sample n in 1..4: {0..5}[n] EOQ EOQ EOS", "runmax.rasp:4:1: error: the `sample` statement (line 6) drew"),
    ("sample n in 1..4: {0..9}[n] EOQ EOS", "runmax.rasp:6:20: error: token '6' is not in the input vocabulary"),
    ("sample n in 1..4: {0..5}[n * 5000] EOQ EOS", "runmax.rasp:6:1: error: at n = 2 an input could have more"),
    ("sample n in 1..100000: {0..5}[n] EOQ EOS", "runmax.rasp:6:1: error: the size range 1..100000"),
    ("sample n in 1..4: {0..5}[n - 2] EOQ EOS", "runmax.rasp:6:19: error: at n = 1 this segment's length is -1"),
    ("sample n in 1..4: {0..5}[seq] EOQ EOS", "runmax.rasp:6:26: error: a sample length is built from"),
    ("", "runmax.rasp:1:1: error: no inputs to train on: add a `sample` statement"),
])
def test_hostile_samplers(prog, sample, needle):
    (prog / "runmax.rasp").write_text(RUNMAX.replace("sample n in 1..4: {0..5}[n] EOQ EOS[2]", sample))
    r = rasp("train", "--program", "runmax.rasp", "--out", "bad", *FAST, cwd=prog)
    refused(r, needle)
    if "drew" not in needle and "no inputs" not in needle:    # the checker sees it too
        refused(rasp("check", "runmax.rasp", cwd=prog), needle)


def test_flags_need_a_program(prog):
    refused(rasp("train", "--task", "parity", "--inputs", "x.txt", "--out", "o", cwd=prog), "--inputs: only with")
    refused(rasp("train", "--program", "runmax.rasp", "--score", "after:@", "--out", "o", cwd=prog),
            "'@' is not a symbol")
