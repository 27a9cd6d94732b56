"""The compiled group-word program as a comparison model (trainer/benchmark/compiled.py,
`rasp train --task words_* --model looped --init compiled`): its answers are
the task's labels (the interpreter's) at every length up to the design
length, longer inputs are refused, and the words suite has its row.

Compiled at --set compile_max_len=2 (design length 8) to stay fast."""
import json

import numpy as np
import pytest
import torch

from rasp.cli import main
from rasp.errors import RaspError
from trainer.benchmark import scoring, compiled as benchmark_compiled
from trainer.benchmark.data import collate
from trainer.settings.hparams import defaults
from trainer.benchmark.presets import apply
from trainer.benchmark.kind import seq_task

pytestmark = pytest.mark.heavy          # tests/conftest.py: run these first

MAX_LEN = 2                 # design length 4 x 2 = 8


def _words(task, lengths, n, seed=0):
    """Uniform random words of each length, labelled by the task (its program, interpreted)."""
    rng = np.random.default_rng(seed)
    return [ex for L in lengths for ex in task.generate(rng, {"min_len": L, "max_len": L}, n)]


@pytest.fixture(scope="module")
def z60():
    task = seq_task("words_z60")
    model, info = benchmark_compiled.build(task, apply(defaults("seq"), {"compile_max_len": MAX_LEN}))
    return task, model.eval(), info


@pytest.mark.parametrize("group", ["z60", "a5"])
def test_compiled_run_answers_the_task_labels_up_to_the_design_length(group, z60):
    task, model, info = z60 if group == "z60" else (seq_task(f"words_{group}"), None, None)
    if model is None:
        model, info = benchmark_compiled.build(task, apply(defaults("seq"), {"compile_max_len": MAX_LEN}))
        model.eval()
    assert info["design_length"] == 4 * MAX_LEN == model.encoder.max_length
    examples = _words(task, [1, 2, 5, 7, 8], 6, seed=len(group))
    batch = collate(task, examples)          # mixed lengths: right padding in one batch
    with torch.no_grad():
        logits, enc = model(batch.tokens, batch.mask)
    pred = scoring.predictions(logits)
    scored = batch.targets >= 0
    assert bool(scored.sum() == sum(len(e.target) for e in examples))
    assert torch.equal(pred[scored], batch.targets[scored])
    # T(n) = n - 1 iterations of the body, as the program's loop says (two layers each: the
    # group product, compiler/groups.py)
    c = model.encoder.core.cfg
    assert (c.n_prelude, c.n_body, c.n_postlude) == (0, 2, 0)
    assert enc.stats["depth"].tolist() == [float(2 * max(len(e.input) - 1, 0)) for e in examples]


def test_longer_inputs_are_refused(z60):
    task, model, _ = z60
    batch = collate(task, _words(task, [4 * MAX_LEN + 1], 2))
    with pytest.raises(RaspError, match="longer than the 8 tokens"):
        model(batch.tokens, batch.mask)


def test_train_eval_cli_writes_an_exact_run_and_refuses_splits_beyond_the_design_length(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--task", "words_z60", "--model", "looped", "--init", "compiled", "--set",
                 f"compile_max_len={MAX_LEN}", "--set", "eval_samples=16", "--out", str(out), "--no-progress"]) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["init"] == "compiled" and run["hparams"]["steps"] == 0
    assert run["init_info"]["design_length"] == 4 * MAX_LEN
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] and summary["final_eval_metrics"] == {"token_acc": 1.0, "seq_acc": 1.0}
    assert main(["eval", str(out), "--splits", "valid", "-n", "20", "--no-progress", "--no-plots"]) == 0
    res = json.loads((out / "eval.json").read_text())
    assert res["splits"]["valid"]["metrics"]["seq_acc"]["mean"] == 1.0
    capsys.readouterr()
    assert main(["eval", str(out), "--splits", "valid,test_16", "-n", "5", "--no-progress", "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "split test_16: inputs up to 16 tokens, longer than the 8 tokens" in err


def test_init_compiled_is_refused_where_there_is_nothing_to_compile(tmp_path, capsys):
    for argv, message in [(["--task", "words_z60", "--model", "gru"], "--model gru has no compiled form"),
                          (["--task", "flipflop", "--model", "looped"], "names no program")]:
        assert main(["train", *argv, "--init", "compiled", "--out", str(tmp_path / "x"), "--no-progress"]) == 2
        assert message in capsys.readouterr().err


def test_compiled_start_fine_tunes_under_the_guard_and_stays_exact(tmp_path):
    """Given steps, a compiled comparison run trains in the one loop under the
    descent guard (unguarded, one AdamW step took Z60 from 1.0 to 0.19), and is
    still exact on every split within its design length."""
    out = tmp_path / "ft"
    assert main(["train", "--task", "words_z60", "--model", "looped", "--init", "compiled", "--set",
                 f"compile_max_len={MAX_LEN}", "--steps", "6", "--batch-size", "8", "--set", "guard_samples=16",
                 "--set", "log_every=3", "--set", "eval_samples=32", "--out", str(out), "--no-progress"]) == 0
    hp = json.loads((out / "run.json").read_text())["hparams"]
    assert hp["guard"] and hp["keep_zeros"] and hp["steps"] == 6
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in rows if "loss" in r]
    assert [r["step"] for r in logged] == [3, 6] and all("rejected" in r for r in logged)
    assert json.loads((out / "summary.json").read_text())["final_eval_metrics"]["seq_acc"] == 1.0
    assert main(["eval", str(out), "--splits", "train,valid,train_k", "-n", "64", "--no-plots",
                 "--no-progress"]) == 0
    res = json.loads((out / "eval.json").read_text())["splits"]
    assert all(res[s]["metrics"]["seq_acc"]["mean"] == 1.0 for s in ("train", "valid", "train_k"))


def test_default_compile_length_covers_every_split():
    from trainer.settings.resolve import planned_hparams
    hp = planned_hparams(["--task", "words_a5", "--model", "looped", "--init", "compiled", "--out", "x"])
    assert hp["steps"] == 0 and hp["extra"] == {"compile_max_len": 128}      # longest split: test_512
    hp = planned_hparams(["--task", "words_mixed", "--model", "looped", "--init", "compiled", "--out", "x"])
    assert hp["extra"] == {"compile_max_len": 256}                              # test_1024_p*


def test_words_suite_has_the_compiled_row():
    from trainer.compare import grid
    from trainer.compare.suite import load_suite
    suite = load_suite("words")
    runs = grid.expand(suite, "cpu", seeds=1, models=["compiled"])
    assert {r.task for r in runs} == {"words_z60", "words_a4z5", "words_a5", "words_mixed"}
    for r in runs:
        assert r.model == "looped" and r.train["init"] == "compiled" and r.train["steps"] == 0
        assert "steps=" not in " ".join(r.train.get("set", []))      # nothing sets the steps back
    rows = {t.id: [row for row in t.rows if row.attrs.get("model") == "compiled"] for t in suite.tables}
    assert len(rows["p3_table2"]) == 1 and len(rows["p2_mixed"]) == 1
    assert set(rows["p3_table2"][0].published) == {None}        # "—": the papers have none


def test_compiled_fine_tune_confirms_its_long_sample_at_the_checkpoint(tmp_path):
    """The guard's long part (words longer than guard_short_factor x the longest
    training word) is checked before the checkpoint, and the length-fragile
    tensors probed at the compile length are frozen (issue 41)."""
    out = tmp_path / "ft"
    assert main(["train", "--task", "words_z60", "--model", "looped", "--init", "compiled", "--set",
                 "compile_max_len=4", "--steps", "4", "--batch-size", "8", "--set", "guard_samples=16",
                 "--set", "guard_short_factor=1", "--set", "guard_long_samples=2", "--set", "log_every=2",
                 "--set", "eval_samples=16", "--out", str(out), "--no-progress"]) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["hparams"]["freeze_fragile"] and isinstance(run["init_info"]["frozen"], list)
    ckpt = out / json.loads((out / "latest.json").read_text())["path"]
    guard = json.loads((ckpt / "state.json").read_text())["guard"]
    assert guard["unconfirmed"] == 0 and "long_measured" in guard         # confirmed before it was saved
    assert main(["eval", str(out), "--splits", "valid,test_16", "-n", "16", "--no-plots", "--no-progress"]) == 0
    res = json.loads((out / "eval.json").read_text())["splits"]
    assert all(res[s]["metrics"]["seq_acc"]["mean"] == 1.0 for s in ("valid", "test_16"))


def test_a_compiled_start_that_trains_no_step_is_not_probed_and_cannot_be_extended(tmp_path, capsys):
    """--steps 0 (the suites' compiled rows, evaluated as compiled): nothing moves, so the
    length-fragile probe is not run; a resume that would train refuses, as it cannot know
    which tensors to keep still."""
    from trainer.run.kind import FRAGILE_NOT_PROBED
    out = tmp_path / "c"
    base = ["train", "--task", "words_z60", "--model", "looped", "--init", "compiled", "--set",
            "compile_max_len=4", "--batch-size", "8", "--set", "eval_samples=16", "--out", str(out), "--no-progress"]
    assert main([*base, "--steps", "0"]) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["hparams"]["freeze_fragile"] and "frozen" not in run["init_info"]
    assert run["init_info"]["fragile_probe"] == FRAGILE_NOT_PROBED
    capsys.readouterr()
    assert main([*base, "--steps", "2", "--resume"]) == 2
    assert "was not probed for the tensors --freeze-fragile keeps still" in capsys.readouterr().err


def test_freeze_fragile_on_needs_a_compiled_start_on_comparison_tasks_too(tmp_path, capsys):
    assert main(["train", "--task", "words_z60", "--model", "gru", "--freeze-fragile", "on",
                 "--out", str(tmp_path / "x"), "--no-progress"]) == 2
    assert "only a compiled start (--init compiled) has length-fragile tensors" in capsys.readouterr().err
    from trainer.settings.resolve import planned_hparams
    hp = planned_hparams(["--task", "words_z60", "--model", "looped", "--init", "compiled", "--freeze-fragile", "off",
                          "--out", "x"])
    assert hp["freeze_fragile"] is False and hp["guard_short_factor"] == 2
    assert planned_hparams(["--task", "words_z60", "--model", "gru", "--out", "x"])["guard_short_factor"] == 0
