"""`rasp train --recipe`: each recipe sets every halting field it names, flags
still override it, and a resumed run keeps its recipe (issue 39)."""
from __future__ import annotations

import json

from rasp.cli import main
from trainer.fan.presets import RECIPES
from trainer.settings.validate import marker_check_sizes

TINY = ["--task", "padded_parity", "--d-model", "16", "--n-head", "2", "--eval-samples", "8", "--steps", "2",
        "--no-progress", "--threads", "1"]


def _cli(capsys, *argv):
    """(exit status, stderr) of `rasp ARGV`, argparse's exits included."""
    try:
        status = main(list(argv))
    except SystemExit as e:
        status = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return status, err


def _train(capsys, *argv):
    return _cli(capsys, "train", *TINY, *argv)


def _hparams(run) -> dict:
    return json.loads((run / "run.json").read_text())["hparams"]


def test_each_recipe_records_its_halting_fields_and_a_flag_overrides_one(capsys, tmp_path):
    for name, fields in RECIPES.items():
        status, err = _train(capsys, "--recipe", name, "--out", str(tmp_path / name))
        assert status == 0, err
        hp = _hparams(tmp_path / name)
        assert {k: hp[k] for k in fields} == fields, name
    status, err = _train(capsys, "--recipe", "marker", "--halt", "0.5", "--out", str(tmp_path / "half"))
    assert status == 0, err
    assert _hparams(tmp_path / "half")["halt"] == 0.5 and _hparams(tmp_path / "half")["halt_target"] == "marker"


def test_a_resumed_run_keeps_its_recipe(capsys, tmp_path):
    run = tmp_path / "m"
    assert _train(capsys, "--recipe", "marker", "--out", str(run))[0] == 0
    status, err = _train(capsys, "--recipe", "fan", "--resume", "--out", str(run))
    assert status == 2 and "--recipe fan (the run has marker)" in err, err
    status, err = _train(capsys, "--recipe", "marker", "--resume", "--steps", "3", "--out", str(run))
    assert status == 0, err


def test_the_marker_recipe_is_refused_for_a_fixed_depth_model(capsys, tmp_path):
    status, err = _train(capsys, "--recipe", "marker", "--model", "fap", "--out", str(tmp_path / "f"))
    assert status == 2 and "--recipe marker" in err and "fixed depth" in err, err


LONG_LOOP = """const EOQ = ">"
const EOS = "#"
input seq: {0, 1, EOQ, EOS}
require count(seq, EOQ) == 1, "one '>'"
sample n in 1..8: {0, 1}[n] EOQ EOS[1]
param n = count_before(seq, EOQ)
x = seq
loop 3 * n:
    x = max(x, shift_right(x, 1))       # from '>' on: whether a bit is 1 (an answer that varies)
output x
"""


def test_the_marker_is_refused_where_the_loop_count_exceeds_the_positions(capsys, tmp_path):
    """A marker passes one position per step: T(n) = 3n does not fit in n + 2 positions."""
    program = tmp_path / "long.rasp"
    program.write_text(LONG_LOOP)
    status, err = _cli(capsys, "train", "--program", str(program), "--recipe", "marker", "--steps", "2",
                       "--no-progress", "--threads", "1", "--out", str(tmp_path / "r"))
    assert status == 2 and "T(n) = 6 at n = 2 exceeds its 4 positions" in err, err


def test_a_marker_model_stops_where_every_position_says_done_through_rasp_load(capsys, tmp_path):
    """`rasp.load(RUN, stop="head")` on a --recipe marker run answers with the step at which
    every position's unit first says done (the last step, T(n) + the task's extra steps, if
    none), found here step by step on the model itself."""
    import torch

    import rasp
    run = tmp_path / "m"
    assert _train(capsys, "--recipe", "marker", "--steps", "30", "--out", str(run))[0] == 0
    texts = ["1 0 1 _ _ > # #", "1 > # #", "0 0 1 1 0 1 _ > # #", "_ _ > # #"]
    model = rasp.load(run, stop="head")
    module, data = model.module, model.data
    assert module.cfg.halt_marker
    for text, answer in zip(texts, model(texts)):
        x = model.program.parse_input(text, 1, "input")
        _, (T,) = model.labeler([x])
        batch = data.make_batch([x], [data.task.size_of(x, data.sym)])
        with torch.no_grad():
            e = module.encode(batch.tokens)
            h = module.initial_state(e)
            for _ in range(T + data.task.t_max_extra):
                h = module.step(h, e)
                r = module.readout(h)
                if bool((r @ module.halt_weight + module.halt_bias > 0).all()):
                    break
            ids = module.unembed(r).argmax(-1)[0][batch.mask[0]]
        assert [model._output_text(int(v)) for v in ids] == answer, text


def test_a_run_recorded_before_the_halting_fields_matches_one_that_has_their_defaults():
    """A resume rewrites run.json with every field; until its next checkpoint the checkpoint
    keeps the older copy without the halting fields.  Both describe the same model."""
    from trainer.run.checkpoint import run_fingerprint
    from trainer.settings.hparams import HParams
    fields = RECIPES["fan"] | {"halting_from": 0}
    new = {"task": "parity", "model": "looped", "hparams": {"seed": 1, **fields}}
    old = {"task": "parity", "model": "looped", "hparams": {"seed": 1}}
    assert all(getattr(HParams(), k) == v for k, v in fields.items())
    assert run_fingerprint(old) == run_fingerprint(new)
    assert run_fingerprint(old) != run_fingerprint({**new, "hparams": {**new["hparams"], "halt_target": "marker"}})


def test_the_clocks_fit_check_reads_every_short_size_and_the_longest():
    """validate.marker_check_sizes: every size up to 64, then doubling sizes and the largest, so a
    long --max-train-n is checked in seconds, before which the memory check has already run."""
    assert marker_check_sizes(1, 10) == list(range(1, 11))
    long = marker_check_sizes(3, 2000)
    assert long[:62] == list(range(3, 65)) and long[62:] == [128, 256, 512, 1024, 2000]
    assert marker_check_sizes(1, 128) == list(range(1, 65)) + [128]
