"""Issue 54, a program of your own measured as the built-in tasks are:

* `rasp eval` of a run trained on files scores each distinct input once (n =
  their count, no standard error where every one was scored), says where the
  inputs came from, and reports the sizes the training drew apart from the
  others; the training summary line says the same of its inputs;
* one answer shape whatever the scoring: a run trained with `--score` and its
  program loaded with the same scoring answer the same positions, and their
  repr says which; a scoring whose targets never vary is refused at start;
* loops the program runs 0 times (a zero count at the smallest size, a count
  that is 0 for some inputs) train, or are refused at once at the loop.

Width-8 models, 1-2 steps: these test what is measured and refused, not how
well a model learns."""
from __future__ import annotations

import json
from typing import NamedTuple

import pytest

import rasp as api
from test_train_program import RUNMAX      # a running maximum in FAP form (tests/ is on the path)

TINY = ["--steps", "1", "--d-model", "8", "--n-head", "2", "--batch-size", "4", "--eval-every", "1",
        "--eval-samples", "8", "--no-progress"]

# a running maximum after '=': the program has no '>', so by default every position is scored
AFTER_EQ = """\
const EQ = "="
input seq: {0..3, EQ}
require count(seq, EQ) == 1, "one '='"
sample n in 1..4: {0..3}[n] EQ {0}[n]
param n = count_before(seq, EQ)
prompt = 1 - has_seen(seq, EQ)
best = where(prompt, seq, 0)
loop n:
    best = max(best, shift_right(best, 1))
output best
"""

# the answer sits on the input's own positions; the program ends in '>', where its output is always '>'
ON_INPUT = """\
const EOQ = ">"
input seq: {0, 1, EOQ}
require count(seq, EOQ) == 1, "one '>'"
sample n in 1..4: {0, 1}[n] EOQ
param n = count_before(seq, EOQ)
x = seq
loop n:
    x = where(seq == EOQ, EOQ, 1 - x)
output x
"""

# the word problem over Z4 (programs/word_z60.rasp's loop): 0 iterations at n = 1, where
# one more iteration changes nothing (it adds the 0 shifted in)
WORD_Z4 = """\
input seq: {0..3}
sample n in 1..4: {0..3}[n]
param n = len(seq)
acc = seq
older = seq
loop max(n - 1, 0):
    older = shift_right(older, 1)
    acc = seq_map(older, acc, lambda a, b: (a + b) % 4)
output acc
"""

# 0 iterations at n = 1, where one more iteration would change the answer
ZERO_THEN_INC = """\
input seq: {0..3}
sample n in 1..4: {0..3}[n]
param n = len(seq)
acc = seq
loop max(n - 1, 0):
    acc = (acc + 1) % 4
output acc
"""

# a count that is 0 on inputs without a 1
COUNT_ONES = """\
const EOQ = ">"
input seq: {0, 1, EOQ}
require count(seq, EOQ) == 1, "one '>'"
require where(has_seen(seq, EOQ), seq == EOQ, 1), "nothing after '>'"
sample n in 1..5: {0, 1}[n] EOQ
param k = count(seq, 1)
x = where(seq == EOQ, 0, 0)
loop k:
    x = x + 1
output where(seq == EOQ, x % 2, seq)
"""


class Result(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def rasp(tmp_path, monkeypatch, capsys):
    """`rasp ARGS` run in this process (no interpreter and torch start per command), in tmp_path."""
    from rasp.cli import main
    monkeypatch.chdir(tmp_path)

    def run(*args, cwd=None):
        capsys.readouterr()
        status = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return Result(status, out, err)
    return run


def refused(r, *needles):
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    for needle in needles:
        assert needle in r.stderr, r.stderr


def write(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    return tmp_path


# ---- 3. an evaluation that says what it measured ------------------------------------

def test_file_inputs_are_scored_once_and_named(tmp_path, rasp):
    write(tmp_path, "runmax.rasp", RUNMAX)
    (tmp_path / "in.txt").write_text("3 1 4 > # #\n1 > # #\n5 0 2 > # #\n2 5 > # #\n1 > # #\n")
    # size 1: one input; size 5: two distinct inputs, one of them given twice
    (tmp_path / "held.txt").write_text("1 2 3 4 5 > # #\n0 0 0 0 1 > # #\n1 2 3 4 5 > # #\n3 > # #\n")
    r = rasp("train", "--program", "runmax.rasp", "--inputs", "in.txt", "--eval-inputs", "held.txt",
             "--out", "rf", *TINY, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # the summary scored the held-out file's one input of a training size, once, and names the file
    assert "the 1 distinct input of size 1 in the file held.txt, each scored once" in r.stdout, r.stdout
    r = rasp("eval", "rf", "--stop", "oracle", "--no-plots", "--no-progress", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "inputs: the file held.txt" in r.stdout, r.stdout
    doc = json.loads((tmp_path / "rf" / "eval_oracle.json").read_text())
    assert doc["inputs"] == {"source": "file", "file": "held.txt"}
    assert doc["trained_sizes"] == [1, 2, 3]
    split = doc["splits"]["test"]
    five = split["by_length"]["5"]
    assert (five["n"], five["distinct"], five["se"]) == (2, 2, None)       # not 256 draws, no standard error
    assert split["by_length"]["1"]["n"] == 1 and split["metrics"]["exact_match"]["se"] is None
    assert split["bands"]["trained"]["lengths"] == [1] and split["bands"]["untrained"]["lengths"] == [5]
    assert split["bands"]["untrained"]["n"] == 2
    # fewer samples than the file holds: drawn without replacement, with a standard error
    r = rasp("eval", "rf", "--stop", "oracle", "--lengths", "5", "--samples", "1", "--no-plots", "--no-progress",
             "--json", "one.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    five = json.loads((tmp_path / "one.json").read_text())["splits"]["test"]["by_length"]["5"]
    assert five["n"] == 1 and five["distinct"] == 2 and five["se"] is not None


def test_sampled_inputs_name_the_sample_statement(tmp_path, rasp):
    write(tmp_path, "runmax.rasp", RUNMAX)
    r = rasp("train", "--program", "runmax.rasp", "--out", "rs", *TINY, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "8 inputs of lengths 1..4, drawn by the `sample` statement (line 6)" in r.stdout, r.stdout
    r = rasp("eval", "rs", "--stop", "oracle", "--lengths", "3:5", "--samples", "4", "--no-plots", "--no-progress",
             cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "drawn fresh by the `sample` statement (line 6): sample n in 1..4" in r.stdout, r.stdout
    assert "sizes the training drew: exact" in r.stdout and "sizes it never drew: exact" in r.stdout
    doc = json.loads((tmp_path / "rs" / "eval_oracle.json").read_text())
    assert doc["inputs"]["source"] == "sample" and doc["inputs"]["line"] == 6
    split = doc["splits"]["test"]
    assert split["bands"]["trained"]["lengths"] == [3, 4] and split["bands"]["untrained"]["lengths"] == [5]
    assert all(row["n"] == 4 and row["se"] is not None for row in split["by_length"].values())


# ---- 4. one answer shape, whatever the scoring --------------------------------------

@pytest.mark.parametrize("score, where", [("after:=", "answer from = on"), ("all", "answer every position")])
def test_run_and_program_answer_the_scored_positions(tmp_path, rasp, score, where):
    write(tmp_path, "p.rasp", AFTER_EQ)
    r = rasp("train", "--program", "p.rasp", "--score", score, "--out", "run", *TINY, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    model = api.load(tmp_path / "run", stop="oracle")
    program = api.load(tmp_path / "p.rasp", score=run["program"]["score"])
    assert model.score == run["program"]["score"] == score
    inputs = ["1 3 2 = 0 0 0", "2 = 0", "0 1 = 0 0"]
    assert [len(a) for a in model(inputs)] == [len(a) for a in program(inputs)]
    assert where in repr(model) and where in repr(program)
    if score == "after:=":
        assert program(["1 3 2 = 0 0 0"]) == [["3", "3", "2", "0"]]
    with pytest.raises(api.RaspError, match="score= is for a .rasp program"):
        api.load(tmp_path / "run", score=score)


def test_program_scoring_is_checked():
    program = api.loads(AFTER_EQ, "p.rasp", score="last")
    assert program(["1 3 = 0 0"]) == [["0"]] and "answer at the last position" in repr(program)
    assert "answer every position" in repr(api.loads(AFTER_EQ, "p.rasp"))      # no '>': the default
    plain = api.loads('const EQ = "="\ninput seq: {0, 1, EQ}\noutput seq\n', "plain.rasp", score="after:=")
    assert plain(["0 1 = 1"]) == [["=", "1"]]
    with pytest.raises(api.RaspInputError, match="input 1.*no '='|no '='"):
        plain(["0 1"])
    with pytest.raises(api.RaspError, match="'@' is not a symbol"):
        api.loads(AFTER_EQ, "p.rasp", score="after:@")
    with pytest.raises(api.RaspError, match="one of all, last, after:TOKEN"):
        api.loads(AFTER_EQ, "p.rasp", score="first")


def test_constant_targets_are_refused_with_a_hint(tmp_path, rasp):
    write(tmp_path, "on_input.rasp", ON_INPUT)
    r = rasp("train", "--program", "on_input.rasp", "--out", "bad", *TINY, cwd=tmp_path)
    refused(r, "on_input.rasp:9:1: error: --score after:> (the default): the program's answer from '>' on is '>'",
            "--score all")
    assert not (tmp_path / "bad").exists()
    write(tmp_path, "p.rasp", AFTER_EQ)
    refused(rasp("train", "--program", "p.rasp", "--score", "last", "--out", "bad", *TINY, cwd=tmp_path),
            "p.rasp:10:1: error: --score last: the program's answer at the last position is '0'")
    # scored where it varies, the same program is accepted
    from trainer.tasks.program import program_record
    assert program_record(tmp_path / "on_input.rasp", "all")["score"] == "all"


# ---- 5. every program rasp check accepts trains, or is refused at once ---------------

@pytest.mark.parametrize("text", [WORD_Z4, COUNT_ONES], ids=["zero_at_smallest", "zero_for_some"])
def test_zero_loop_counts_train(tmp_path, rasp, text):
    write(tmp_path, "p.rasp", text)
    assert rasp("check", "p.rasp", cwd=tmp_path).returncode == 0
    r = rasp("train", "--program", "p.rasp", "--out", "run", *TINY, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = rasp("eval", "run", "--lengths", "1:2", "--samples", "4", "--no-plots", "--no-progress", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    model, program = api.load(tmp_path / "run"), api.load(tmp_path / "p.rasp")
    inputs = ["3"] if text is WORD_Z4 else ["0 0 >", "1 >"]
    assert [len(a) for a in model(inputs)] == [len(a) for a in program(inputs)]


def test_compiled_start_with_a_zero_loop(tmp_path, rasp):
    # one more iteration changes nothing at n = 1: the compiled start is exact before any step
    write(tmp_path, "z4.rasp", WORD_Z4)
    r = rasp("train", "--program", "z4.rasp", "--init", "compiled", "--steps", "0", "--out", "rc",
             "--no-progress", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (tmp_path / "rc" / "metrics.jsonl").read_text().splitlines()]
    assert [row["eval_acc"] for row in rows if "eval_acc" in row] == [1.0]
    # one more iteration changes the answer: refused at the loop, naming the way out
    write(tmp_path, "inc.rasp", ZERO_THEN_INC)
    r = rasp("train", "--program", "inc.rasp", "--init", "compiled", "--steps", "0", "--out", "bad",
             "--no-progress", cwd=tmp_path)
    refused(r, "inc.rasp:5:1: error: --init compiled: this loop runs 0 times on some inputs", "--init random")


def test_count_longer_than_the_input_is_refused_at_the_loop(tmp_path, rasp):
    write(tmp_path, "long.rasp", RUNMAX.replace("loop n:", "loop 3 * n + 2:"))
    r = rasp("train", "--program", "long.rasp", "--out", "bad", *TINY, cwd=tmp_path)
    refused(r, "long.rasp:11:1: error: --halt-target clock", "--recipe halting")
