"""Issue 54: a compiled start of a program of our own is exact and stays exact.

* Its default stop (`head`) reads what the compiler built, the compiled
  halting clock (or, without one, T(n) from the program), so before any step
  it answers every input up to the compile length as the program does; a
  probe fitted on the training sizes did not (it stopped a few inputs early).
* Its guard checks every size up to the compile length with inputs of
  exactly that size, from the program's `sample` statement or the files;
  a size no input has is named by the run's summary, `rasp eval` and the
  export's card instead of being passed off as exact.

Every model answer is checked input by input against the program (the
interpreter), on inputs longer than the training ones."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

import rasp as api
from rasp.cli import main

# parity of the bits, answered at `>` (then `#`); T(n) = n, known causally, so it compiles with a clock
PARITY = """\
const EOQ = ">"
const EOS = "#"
input seq: {0, 1, EOQ, EOS}
require count(seq, EOQ) == 1, "the input needs exactly one '>'"
require where(has_seen(seq, EOQ), seq == EOQ or seq == EOS, seq != EOS), "only bits before '>', only '#' after it"
SAMPLE
param n = count_before(seq, EOQ)
prompt = 1 - has_seen(seq, EOQ)
bits = mask(seq == 1, prompt)
partial = full(seq, 0)
end_seq = where(prompt == 1, 0, EOS)
loop n:
    bits = shift_right(bits, 1)
    partial = (partial | bits) & ~(partial & bits)
end_seq = shift_right(end_seq, 1)
output where(end_seq == EOS, end_seq, partial)
"""
# the parity of the bits before the padding `_`: T = their count, which depends on tokens not yet
# read at `>`'s left, so the compiled model has no clock
PADDED = """\
const EOQ = ">"
const EOS = "#"
const PAD = "_"
input seq: {0, 1, PAD, EOQ, EOS}
require count(seq, EOQ) == 1, "the input needs exactly one '>'"
require where(has_seen(seq, EOQ), seq == EOQ or seq == EOS, seq != EOS), "bits and '_' before '>', '#' after"
require where(has_seen(seq, PAD), seq != 0 and seq != 1, 1), "the padding comes after every bit"
sample n in 1..3: {0, 1}[n] PAD[0..1] EOQ EOS[2]
param k = count(seq, 0) + count(seq, 1)
is_bit = seq == 0 or seq == 1
bits = mask(seq == 1, is_bit)
partial = full(seq, 0)
end_seq = where(has_seen(seq, EOQ), EOS, 0)
loop k:
    bits = shift_right(bits, 1)
    partial = (partial | bits) & ~(partial & bits)
answer = index_select(partial, first_true(1 - is_bit))
end_seq = shift_right(end_seq, 1)
output where(end_seq == EOS, end_seq, answer)
"""
QUIET = ["--no-progress", "--threads", "1"]


def write_program(folder, name, sample="sample n in 1..4: {0, 1}[n] EOQ EOS[2]", text=PARITY):
    path = folder / name
    path.write_text(text.replace("SAMPLE", sample))
    return path


def every_input(sizes) -> list:
    return [" ".join(bits) + " > # #" for n in sizes for bits in itertools.product("01", repeat=n)]


def expected(program_path, inputs) -> list:
    """The program's answer from `>` on, by the interpreter."""
    from trainer.tasks.labels import ProgramLabeler
    labeler = ProgramLabeler(program_path)
    program = labeler.program
    parsed = [program.parse_input(x) for x in inputs]
    outputs, _ = labeler(parsed)
    eoq = program.ir.symbols[">"]
    return [[program.token_text(v) for v in out[x.index(eoq):]] for x, out in zip(parsed, outputs)]


def wrong_inputs(model_dir, program_path, inputs, stop=None) -> list:
    model = api.load(model_dir, stop=stop) if stop else api.load(model_dir)
    return [x for x, got, want in zip(inputs, model(inputs), expected(program_path, inputs)) if got != want]


def train(*args) -> None:
    assert main(["train", *map(str, args), *QUIET]) == 0


# ---- (a) the default stop of a compiled start -------------------------------------------------

def test_default_stop_of_a_compiled_start_equals_the_program_on_every_input(tmp_path):
    """--steps 0: the compiled start answers every input of sizes 1..8 (trained on 1..4, compiled
    for 8) as the program does under the default stop, as under the oracle; the fit says it read the
    compiled clock, and `rasp eval` says so."""
    prog = write_program(tmp_path, "par.rasp")
    train("--program", prog, "--init", "compiled", "--steps", "0", "--out", tmp_path / "run")
    inputs = every_input(range(1, 9))
    assert wrong_inputs(tmp_path / "run", prog, inputs, stop="oracle") == []
    assert wrong_inputs(tmp_path / "run", prog, inputs) == []            # the default stop, head
    fit = json.loads((tmp_path / "run" / "halting.json").read_text())
    assert fit["reads"] == "clock" and fit["record"]["head"]["checked"]["sizes"] == "1-8"


def test_a_compiled_start_without_a_clock_stops_at_the_programs_count(tmp_path, capsys):
    """A loop count the compiled model cannot know causally (a count over the whole input): no
    clock, so the default stop takes T(n) from the program, and says so."""
    prog = write_program(tmp_path, "pad.rasp", text=PADDED)
    train("--program", prog, "--init", "compiled", "--steps", "0", "--out", tmp_path / "run")
    inputs = [" ".join(bits) + " _" * pad + " > # #" for n in range(1, 6) for pad in (0, 1)
              for bits in itertools.product("01", repeat=n)]
    assert wrong_inputs(tmp_path / "run", prog, inputs) == []
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--lengths", "1:6", "--samples", "8", "--no-plots", *QUIET]) == 0
    assert "head reads T(n) from the program: the compiled model has no halting clock" in capsys.readouterr().out


def test_a_clock_that_misses_t_is_not_read(tmp_path):
    """A clock that stops inputs away from T(n) (here: its margins halved, so none passes the
    midpoint) is not read: the head falls back to the program's T(n), and the record says why."""
    from trainer.fan.evaluate import load_run
    from trainer.fan.halting import calibrate, checked_beyond
    from trainer.fan.kind import build_data
    from trainer.models import get_model_spec
    from trainer.settings.hparams import HParams
    from trainer.tasks.program import task_of
    prog = write_program(tmp_path, "par.rasp", sample="sample n in 1..2: {0, 1}[n] EOQ EOS[2]")
    train("--program", prog, "--init", "compiled", "--steps", "0", "--out", tmp_path / "run")
    run, model, _ = load_run(tmp_path / "run")
    hp = HParams.from_dict(run["hparams"])
    data = build_data(task_of(run), get_model_spec("looped"), hp)
    assert calibrate(model, data, [1, 2], 0, samples=4, beyond=checked_beyond(data, hp)).reads == "clock"
    with torch.no_grad():
        model.unembed.weight.mul_(0.5)
    fit = calibrate(model, data, [1, 2], 0, samples=4, beyond=checked_beyond(data, hp))
    assert fit.reads == "program" and "stopped 40 of 40 checked inputs away from T(n) (sizes 1-4)" in fit.record["head"]["why"]


def test_the_clock_reads_the_least_sure_scored_position():
    from trainer.fan.halting import CLOCK_MARGIN, clock_stops
    logits = torch.zeros(4, 2, 3, 2)          # [T, B, L, V]
    logits[..., 0] = CLOCK_MARGIN - 5           # every step open
    logits[1, 0, :, 0] = CLOCK_MARGIN + 5       # input 0 done at step 2
    logits[2, 1, :, 0] = CLOCK_MARGIN + 5       # input 1 done at step 3 ...
    logits[2, 1, 0, 0] = 0.0                    # ... but one scored position is not sure there
    mask = torch.tensor([[False, True, True], [True, True, True]])
    assert clock_stops(logits, mask).tolist() == [2, 4]
    mask[1, 0] = False                          # a position that is not scored does not count
    assert clock_stops(logits, mask).tolist() == [2, 3]


def test_a_saved_probe_of_a_compiled_start_is_fitted_again(tmp_path):
    """halting.json written before issue 54 (a fitted probe of a compiled start) is not read."""
    from trainer.fan.halting import current
    compiled = type("M", (), {"cfg": type("C", (), {"extra": {"compile_max_len": 20}})()})()
    random = type("M", (), {"cfg": type("C", (), {"extra": {}})()})()
    assert not current({"head": {}}, compiled) and current({"reads": "clock"}, compiled)
    assert current({"head": {}}, random)


# ---- (b) the guard of a fine-tune: every size up to the compile length ------------------------

def _file_task(tmp_path, with_sample: bool):
    from trainer.fan.kind import build_data
    from trainer.fan.presets import make_hparams
    from trainer.models import get_model_spec
    from trainer.tasks.program import program_record, task_of
    prog = write_program(tmp_path, "par.rasp", sample="sample n in 1..4: {0, 1}[n] EOQ EOS[2]" if with_sample else "")
    (tmp_path / "train.txt").write_text("\n".join(every_input(range(1, 5))) + "\n")
    (tmp_path / "held.txt").write_text("\n".join(every_input(range(1, 7))) + "\n")
    record = program_record(prog, inputs=tmp_path / "train.txt", eval_inputs=tmp_path / "held.txt")
    task = task_of({"program": record})
    spec = get_model_spec("looped")
    hp = make_hparams("cpu", task, "compiled")
    return task, hp, build_data(task, spec, hp)


@pytest.mark.parametrize("with_sample", [False, True])
def test_the_guard_draws_every_size_as_itself(tmp_path, with_sample):
    """Files of sizes 1..4 (training) and 1..6 (held out), compiled for n <= 8: the guard's inputs
    are each of the size they are checked as (a file's sampler used to answer size 8 with a size-4
    input); sizes 7 and 8 come from the program's `sample` statement, or are named as never checked."""
    from trainer.fan.coverage import guard_sizes, never_checked
    from trainer.fan.kind import guard_batch
    task, hp, data = _file_task(tmp_path, with_sample)
    assert hp.guard_max_n == 8 and list(guard_sizes(task, hp)) == list(range(1, 9))
    batches = guard_batch(data, hp, "cpu")
    eoq = data.in_id[data.sym[">"]]
    sizes = [int((row == eoq).nonzero()[0, 0]) for b in batches for row in b.tokens]
    assert sizes == [int(n) for b in batches for n in b.lengths]            # each input is its own size
    assert sorted(set(sizes)) == (list(range(1, 9)) if with_sample else list(range(1, 7)))
    assert never_checked(task, guard_sizes(task, hp)) == ([] if with_sample else [7, 8])


def test_a_fine_tune_reports_the_sizes_it_never_checked(tmp_path, capsys):
    """A fine-tune on files with no input of sizes 7 and 8 says so in summary.json, in `rasp eval`'s
    warnings and in the export's card; a run that takes no step keeps the compiled guarantee."""
    _file_task(tmp_path, with_sample=False)
    common = ["--program", tmp_path / "par.rasp", "--init", "compiled", "--inputs", tmp_path / "train.txt",
              "--eval-inputs", tmp_path / "held.txt"]
    train(*common, "--steps", "3", "--out", tmp_path / "ft")
    assert "never checked at sizes n = 7-8" in capsys.readouterr().err
    summary = json.loads((tmp_path / "ft" / "summary.json").read_text())
    assert summary["never_checked"] == [7, 8]
    assert main(["eval", str(tmp_path / "ft"), "--samples", "4", "--no-plots", *QUIET]) == 0
    assert "warning: never checked at sizes n = 7-8" in capsys.readouterr().err
    assert json.loads((tmp_path / "ft" / "eval_head.json").read_text())["never_checked"] == [7, 8]
    assert main(["export", str(tmp_path / "ft"), "-o", str(tmp_path / "exported")]) == 0
    assert "never checked at sizes n = 7-8" in (tmp_path / "exported" / "README.md").read_text()
    train(*common, "--steps", "0", "--out", tmp_path / "s0")
    assert "never checked" not in capsys.readouterr().err
    assert "never_checked" not in json.loads((tmp_path / "s0" / "summary.json").read_text())


@pytest.mark.slow
def test_a_fine_tune_on_short_files_stays_exact_on_longer_inputs(tmp_path):
    """The issue's case: 30 steps on a file of sizes 1..8, held-out inputs of sizes 1..14 and a
    `sample` statement; every held-out input longer than the training ones is answered as the
    program does, under the default stop and the oracle (the guard used to check sizes 9..16
    with size-8 inputs, and the model came out wrong at sizes 13 and 14)."""
    prog = write_program(tmp_path, "par.rasp", sample="sample n in 1..8: {0, 1}[n] EOQ EOS[2]")
    rng = np.random.default_rng(1)
    lines = lambda sizes, k: sorted({" ".join(map(str, rng.integers(0, 2, n))) + " > # #"        # noqa: E731
                                     for n in sizes for _ in range(k)})
    (tmp_path / "train.txt").write_text("\n".join(lines(range(1, 9), 16)) + "\n")
    held = lines(range(9, 15), 20)
    (tmp_path / "held.txt").write_text("\n".join(lines(range(1, 9), 4) + held) + "\n")
    train("--program", prog, "--init", "compiled", "--steps", "30", "--inputs", tmp_path / "train.txt",
          "--eval-inputs", tmp_path / "held.txt", "--out", tmp_path / "ft")
    assert wrong_inputs(tmp_path / "ft", prog, held) == []
    assert wrong_inputs(tmp_path / "ft", prog, held, stop="oracle") == []


def test_an_evaluation_past_the_compiled_size_says_nothing_promises_it(tmp_path, capsys):
    """Trained on 1..4, compiled (and guarded) for sizes up to 8: `rasp eval` at 7..10 names
    9 and 10 as beyond the compiled start's sizes, in its warning and its JSON; 7..8 are not."""
    prog = write_program(tmp_path, "par.rasp")
    train("--program", prog, "--init", "compiled", "--steps", "0", "--out", tmp_path / "run")
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--lengths", "7:10", "--samples", "4", "--no-plots", *QUIET]) == 0
    out = capsys.readouterr()
    assert "warning: n = 9-10: beyond n = 8, the largest size this compiled start was built for" in out.err + out.out
    assert json.loads((tmp_path / "run" / "eval_head.json").read_text())["beyond_compiled"] == [9, 10]
    train("--program", prog, "--steps", "2", "--out", tmp_path / "random")
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "random"), "--lengths", "7:10", "--samples", "4", "--no-plots", *QUIET]) == 0
    assert "beyond n =" not in "".join(capsys.readouterr())
