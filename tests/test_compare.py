"""`rasp compare`: suite files, grid expansion, skip/resume, the runner (with
a fake trainer script: no real training here), the report from fixture run
directories, the published tables of every suite, and the submitit path."""
from __future__ import annotations

import json
import math
import re
import sys
import textwrap
from pathlib import Path

import pytest

from rasp import cli as rasp_cli
from rasp.errors import RaspError, RaspFileError
from trainer.compare import grid as G
from trainer.compare import report as R
from trainer.compare import runner
from trainer.compare.results import cell_value, normalize
from trainer.compare.suite import available_suites, load_suite

ROOT = Path(__file__).resolve().parents[1]

SUITE = textwrap.dedent("""
    [suite]
    name = "mini"
    title = "Mini suite"
    seeds = 2

    [sources.P]
    cite = "Someone (2024), A Paper"

    [train]
    steps = { cpu = 5, paper = 500 }

    [eval]
    n = 16

    [[evals]]
    name = "default"
    file = "eval.json"

    [[tasks]]
    name = "flip"
    task = "flipflop"
    train = { set = ["length=16", "p_i=0.8"] }

    [[tasks]]
    name = "boom"
    task = "boom"
    models = ["gru"]

    [[models]]
    name = "gru"
    label = "GRU"

    [[models]]
    name = "tf"
    model = "transformer"
    label = "Transformer"
    train = { steps = { cpu = 7 } }

    [[tables]]
    id = "t1"
    title = "Accuracy"
    source = "P"
    paper_table = "Table 9"
    statistic = "mean of 3 runs"
    task = "flip"
    metric = "accuracy"
    scale = 100
    columns = [
      { label = "dense", split = "dense" },
      { label = "sparse", split = "sparse", paper_column = "p_i 0.98" },
    ]
      [[tables.rows]]
      label = "GRU"
      model = "gru"
      published = [100, 91.5]
      published_sd = [0, 1.5]
      [[tables.rows]]
      label = "Transformer"
      model = "tf"
      published = [99, "—"]
      [[tables.rows]]
      label = "Boom GRU"
      model = "gru"
      task = "boom"
      published = [50, 50]
      [[tables.rows]]
      label = "SUT"
      paper_row = "SUT (Tan et al.)"
      published = [98, 97]
""")

FAKE_TRAINER = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    args = sys.argv[1:]
    if args[0] == "train":
        out = Path(args[args.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "calls.log", "a") as f:
            f.write(" ".join(args) + "\\n")
        if "--task" in args and args[args.index("--task") + 1] == "boom":
            print("something broke", file=sys.stderr)
            sys.exit(3)
        (out / "run.json").write_text("{}")
        (out / "summary.json").write_text(json.dumps({"finished": True}))
    else:
        out = Path(args[1])
        with open(out / "calls.log", "a") as f:
            f.write(" ".join(args) + "\\n")
        seed = 0.1 * len(out.name)
        (out / "eval.json").write_text(json.dumps({"splits": {
            "dense": {"n": 4, "metrics": {"accuracy": {"mean": 0.5, "se": 0}}, "by_length": {}},
            "sparse": {"n": 4, "metrics": {"accuracy": {"mean": 0.25, "se": 0}}, "by_length": {}}}}))
""")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def suite(tmp_path):
    return load_suite(str(write(tmp_path / "mini.toml", SUITE)))


@pytest.fixture
def fake(tmp_path):
    return runner.TrainerCommands((sys.executable, str(write(tmp_path / "fake_trainer.py", FAKE_TRAINER))))


def finished_run(run_dir: Path, splits: dict):
    write(run_dir / "run.json", "{}")
    write(run_dir / "summary.json", json.dumps({"finished": True}))
    write(run_dir / "eval.json", json.dumps({"task": "flipflop", "model": "gru", "splits": {
        s: {"n": 10, "metrics": {"accuracy": {"mean": v, "se": 0.0}},
            "by_length": {"8": {"accuracy": v, "n": 5}, "16": {"accuracy": v / 2, "n": 5}},
            "stats": {"depth": {"mean": 3, "max": 4, "by_length": {"8": 2.0, "16": 4.0}}}}
        for s, v in splits.items()}}))


# ---- grid ---------------------------------------------------------------------

def test_grid_expansion(suite):
    runs = G.expand(suite, "cpu")
    ids = [r.run_id for r in runs]
    # flip x {gru, tf} x 2 seeds, boom x {gru} x 2 seeds
    assert ids == ["flip__gru__cpu__s0", "flip__gru__cpu__s1", "flip__tf__cpu__s0", "flip__tf__cpu__s1",
                   "boom__gru__cpu__s0", "boom__gru__cpu__s1"]
    tf = runs[2]
    assert (tf.task, tf.model, tf.seed) == ("flipflop", "transformer", 0)
    assert tf.train == {"steps": 7, "set": ["length=16", "p_i=0.8"]}       # model over task over suite
    assert runs[0].train["steps"] == 5 and runs[0].evals[0].options == {"n": 16}
    paper = G.expand(suite, "paper", seeds=1, models=["tf"])
    assert [r.run_id for r in paper] == ["flip__tf__paper__s0"]
    assert "steps" not in paper[0].train          # the tf entry has no paper steps, and it replaces the suite's
    assert G.expand(suite, "cpu", seeds=3, tasks=["flip"])[-1].run_id == "flip__tf__cpu__s2"
    with pytest.raises(RaspError, match="not a model"):
        G.expand(suite, "cpu", models=["lstm"])
    with pytest.raises(RaspError, match="leaves no runs"):
        G.expand(suite, "cpu", models=["tf"], tasks=["boom"])


def test_command_lines(suite, tmp_path):
    r = G.expand(suite, "cpu")[2]
    cmd = runner.TrainerCommands().train(r, tmp_path / r.run_id)
    assert cmd[:3] == [sys.executable, "-m", "trainer"]
    assert cmd[3:] == ["train", "--task", "flipflop", "--model", "transformer", "--preset", "cpu", "--seed", "0",
                       "--steps", "7", "--set", "length=16", "--set", "p_i=0.8", "--out", str(tmp_path / r.run_id)]
    assert runner.TrainerCommands().eval(r, r.evals[0], tmp_path / "x")[3:] == ["eval", str(tmp_path / "x"), "-n", "16"]
    assert runner.render_options({"no_progress": True, "plots": False}) == ["--no-progress"]


# ---- skip and resume ----------------------------------------------------------------

def test_a_run_trained_with_settings_the_suite_no_longer_gives_is_stale_set_aside_and_retrained(suite, fake, tmp_path,
                                                                                              monkeypatch):
    """A preset edited after a run trained must not let the report pass the old
    result off as the new recipe's: the run is "stale" (never a number), and
    `rasp compare` moves its files to RUN_ID.stale1 and trains anew."""
    from trainer.settings.resolve import planned_hparams
    from trainer.compare.results import load_run
    out = tmp_path / "out"
    spec = G.expand(suite, "cpu", seeds=1, models=["gru"], tasks=["flip"])[0]
    d = out / spec.run_id
    now = planned_hparams(runner.train_args(spec, d))
    assert now["steps"] == 5                                   # the suite's own option reaches the trainer
    finished_run(d, {"dense": 1.0, "sparse": 0.5})
    write(d / "run.json", json.dumps({"hparams": {**now, "a_retired_option": 1}}))
    assert runner.stale_settings(spec, d) == [] and runner.state(spec, d) == "done"
    # a run recorded before a setting existed trained with the value it had then (hparams.ADDED)
    from trainer.settings import hparams
    added = sorted(hparams.ADDED.keys() & now.keys())[0]
    write(d / "run.json", json.dumps({"hparams": {k: v for k, v in now.items() if k != added}}))
    assert runner.stale_settings(spec, d) == (
        [] if hparams.ADDED[added] == now[added] else [f"{added}: {hparams.ADDED[added]!r} -> {now[added]!r}"])
    monkeypatch.setitem(hparams.ADDED, added, "before")
    assert runner.stale_settings(spec, d) == [f"{added}: 'before' -> {now[added]!r}"]
    write(d / "run.json", json.dumps({"hparams": {**now, "lr": now["lr"] * 2}}))
    assert runner.stale_settings(spec, d) == [f"lr: {now['lr'] * 2!r} -> {now['lr']!r}"]
    assert runner.state(spec, d) == "stale" and load_run(spec, out).status == "stale"
    assert [n for n, _ in runner.planned_commands(spec, d)] == ["train", "eval_default"]
    rec = runner.execute(spec, d, fake)
    assert (rec["state"], rec["status"]) == ("stale", "finished")
    kept = out / (spec.run_id + ".stale1")
    assert rec["set_aside"] == str(kept) and rec["stale_settings"] == [f"lr: {now['lr'] * 2!r} -> {now['lr']!r}"]
    assert json.loads((kept / "run.json").read_text())["hparams"]["lr"] == now["lr"] * 2   # nothing lost
    assert (kept / "eval.json").exists() and not (d / runner.LOCK).exists() and not (kept / runner.LOCK).exists()
    assert runner.state(spec, d) == "done"                      # the fake trainer's fresh run


def test_a_run_another_invocation_finished_keeps_its_record(suite, fake, tmp_path):
    """Two `rasp compare` invocations over the same runs: the one that finds a run
    already done when its turn comes leaves that run's compare_run.json (its
    commands and timings) as the other wrote it."""
    spec = G.expand(suite, "cpu", seeds=1, models=["gru"], tasks=["flip"])[0]
    d = tmp_path / spec.run_id
    first = runner.execute(spec, d, fake)
    assert first["status"] == "finished" and [s["step"] for s in first["steps"]] == ["train", "eval_default"]
    kept = (d / "compare_run.json").read_text()
    again = runner.execute(spec, d, fake)
    assert (again["state"], again["status"], again["steps"]) == ("done", "finished", [])
    assert (d / "compare_run.json").read_text() == kept
    assert (d / "calls.log").read_text().count("train") == 1          # nothing ran twice


def test_skip_finished_resume_interrupted(suite, tmp_path):
    r = G.expand(suite, "cpu")[0]
    d = tmp_path / r.run_id
    plan = runner.planned_commands(r, d)
    assert [n for n, _ in plan] == ["train", "eval_default"] and "--resume" not in plan[0][1]
    write(d / "run.json", "{}")                                   # killed mid-training
    write(d / "checkpoints" / "step_100" / "state.json", "{}")
    plan = runner.planned_commands(r, d)
    assert runner.state(r, d) == "resume"
    assert plan[0][1][-1] == "--resume" and plan[0][1][-3:-1] == ["--out", str(d)]
    write(d / "summary.json", json.dumps({"finished": False}))     # a summary without finished: still resume
    assert runner.state(r, d) == "resume"
    write(d / "summary.json", json.dumps({"finished": True}))      # trained, not evaluated
    assert [n for n, _ in runner.planned_commands(r, d)] == ["eval_default"]
    finished_run(d, {"dense": 1.0})
    assert runner.state(r, d) == "done" and runner.planned_commands(r, d) == []
    write(d / "eval.json", "{trunc")                               # a damaged eval file is redone
    assert runner.state(r, d) == "evaluate"
    r.evals[0].options["splits"] = "dense,sparse"                  # an eval that names its splits
    finished_run(d, {"dense": 1.0})
    assert runner.state(r, d) == "evaluate"                        # sparse is not in eval.json yet
    finished_run(d, {"dense": 1.0, "sparse": 0.5})
    assert runner.state(r, d) == "done"


def test_fan_summary_without_finished_key_counts_as_trained(suite, tmp_path):
    write(tmp_path / "summary.json", json.dumps({"step": 2000, "final_eval_acc": 1.0}))
    assert runner.trained(tmp_path)


def test_local_runner_skips_and_records_failures(suite, fake, tmp_path):
    out = tmp_path / "out"
    runs = G.expand(suite, "cpu")
    records = runner.run_local(runs, out, jobs=2, commands=fake)
    status = {r["run_id"]: r["status"] for r in records}
    assert status["flip__gru__cpu__s0"] == "finished" and status["boom__gru__cpu__s1"] == "failed"
    failed = json.loads((out / "boom__gru__cpu__s0" / "failed.json").read_text())
    assert failed["exit_code"] == 3 and failed["failed_step"] == "train"
    assert "something broke" in failed["stderr_tail"]
    calls = (out / "flip__gru__cpu__s0" / "calls.log").read_text()
    # second invocation: the finished runs are skipped, only the failed ones retried
    records = runner.run_local(runs, out, jobs=1, commands=fake)
    assert sorted(r["run_id"] for r in records) == ["boom__gru__cpu__s0", "boom__gru__cpu__s1"]
    assert (out / "flip__gru__cpu__s0" / "calls.log").read_text() == calls


def test_a_lock_file_planted_as_a_link_is_refused_and_its_target_kept(suite, tmp_path, capsys):
    """Issue 26: RUN_DIR/.compare.lock as a link to another file is refused
    (exit 2, located) before anything runs, and the file it names is kept."""
    out = tmp_path / "out"
    victim = write(tmp_path / "victim.txt", "precious")
    d = out / "flip__gru__cpu__s0"
    d.mkdir(parents=True)
    (d / runner.LOCK).symlink_to(victim)
    assert rasp_cli.main(["compare", suite.path, "--models", "gru", "--tasks", "flip", "--seeds", "1",
                          "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{d / runner.LOCK}: error: is a symbolic link" in err and "Traceback" not in err, err
    assert victim.read_text() == "precious" and not (d / "train.log").exists()


def test_runner_exit_zero_without_outputs_is_a_failure(suite, tmp_path):
    quiet = runner.TrainerCommands((sys.executable, "-c", "pass"))
    r = G.expand(suite, "cpu")[0]
    rec = runner.execute(r, tmp_path / r.run_id, quiet)
    assert rec["status"] == "failed" and (tmp_path / r.run_id / "failed.json").exists()


def test_interrupted_child_is_not_a_failure(suite, tmp_path):
    killed = runner.TrainerCommands((sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"))
    r = G.expand(suite, "cpu")[0]
    rec = runner.execute(r, tmp_path / r.run_id, killed)
    assert rec["status"] == "interrupted" and not (tmp_path / r.run_id / "failed.json").exists()


def test_stop_children_interrupts_a_running_run(suite, tmp_path):
    import threading
    import time
    sleeper = runner.TrainerCommands((sys.executable, "-c", "import time; time.sleep(60)"))
    r = G.expand(suite, "cpu")[0]
    box = {}
    t = threading.Thread(target=lambda: box.update(rec=runner.execute(r, tmp_path / r.run_id, sleeper)))
    t.start()
    for _ in range(100):
        if runner.live_children():
            break
        time.sleep(0.05)
    runner.stop_children()
    t.join(20)
    assert box["rec"]["status"] == "interrupted" and not (tmp_path / r.run_id / "failed.json").exists()


def test_train_launcher_only_changes_training(suite, tmp_path):
    cmds = runner.TrainerCommands(train_launcher=("torchrun", "--nproc_per_node", "2", "-m", "trainer"))
    r = G.expand(suite, "cpu")[0]
    (train, t), (_, e) = runner.planned_commands(r, tmp_path / r.run_id, cmds)
    assert t[:5] == ["torchrun", "--nproc_per_node", "2", "-m", "trainer"] and t[5] == "train"
    assert e[:3] == [sys.executable, "-m", "trainer"]


# ---- report -------------------------------------------------------------------------

def test_report_from_fixture_runs(suite, tmp_path):
    out = tmp_path / "out"
    finished_run(out / "flip__gru__cpu__s0", {"dense": 0.9, "sparse": 0.5})
    finished_run(out / "flip__gru__cpu__s1", {"dense": 0.7, "sparse": 0.3})
    finished_run(out / "flip__tf__cpu__s0", {"dense": 0.6})           # no sparse split
    write(out / "flip__tf__cpu__s1" / "failed.json", json.dumps({"exit_code": 1, "failed_step": "train",
                                                                  "stderr_tail": "Traceback\nValueError: x"}))
    write(out / "boom__gru__cpu__s0" / "failed.json", json.dumps({"exit_code": 3, "failed_step": "train"}))
    # boom__gru__cpu__s1: missing
    R.record_selection(out, suite, "cpu", None, None, None)
    doc = R.write_report(out)
    cell = R.find_report_cell(doc, "mini", "t1", "GRU", "dense")
    assert cell["ours"]["mean"] == pytest.approx(0.8)
    assert cell["ours"]["se"] == pytest.approx(math.sqrt(0.02 / 2))     # sd 0.1414 / sqrt(2)
    assert cell["ours"]["text"] == "80.0 ± 10.0 (2 seeds)"
    assert cell["published"]["value"] == 100 and cell["published"]["citation"]["table"] == "Table 9"
    tf = R.find_report_cell(doc, "mini", "t1", "Transformer", "dense")
    assert tf["ours"]["values"] == [0.6] and "1/2 seeds" in tf["ours"]["text"] and "1 failed" in tf["ours"]["text"]
    tf_sparse = R.find_report_cell(doc, "mini", "t1", "Transformer", "sparse")
    assert tf_sparse["ours"]["status"] == "failed" and tf_sparse["ours"]["text"] == "1 failed, no split 'sparse'"
    boom = R.find_report_cell(doc, "mini", "t1", "Boom GRU", "dense")
    assert boom["ours"]["status"] == "failed" and "mean" not in boom["ours"]      # never a 0 %
    assert R.find_report_cell(doc, "mini", "t1", "SUT", "dense")["ours"]["status"] == "paper only"
    md = (out / "report.md").read_text()
    assert "| GRU | 80.0 ± 10.0 (2 seeds) | 100 (sd 0) | 40.0 ± 10.0 (2 seeds) | 91.5 (sd 1.5) |" in md
    assert "| Boom GRU | 1 failed, 1 missing | 50 | 1 failed, 1 missing | 50 |" in md
    assert "boom__gru__cpu__s0`: exit 3 in train" in md
    assert "Someone (2024), A Paper [P], Table 9 (mean of 3 runs)" in md
    assert (out / "plots" / "mini_cpu_flip_dense_accuracy.png").exists()     # accuracy vs length
    assert (out / "plots" / "mini_cpu_flip_dense_depth.png").exists()        # depth vs length
    # remove a run: it becomes "missing"; --report through the CLI rebuilds without training
    for f in (out / "boom__gru__cpu__s0").iterdir():
        f.unlink()
    (out / "boom__gru__cpu__s0").rmdir()
    assert rasp_cli.main(["compare", "--report", str(out), "--no-plots"]) == 0
    doc = json.loads((out / "report.json").read_text())
    assert R.find_report_cell(doc, "mini", "t1", "Boom GRU", "dense")["ours"]["text"] == "missing"


def test_cell_values_by_length_and_group():
    split = normalize({"splits": {"test": {"n": 3, "metrics": {"acc": {"mean": 0.5, "se": 0.1}},
                                           "by_length": {"12": {"acc": 0.25, "n": 1}},
                                           "by_group": {"7": {"acc": 0.75, "n": 2}}}}})["test"]
    assert cell_value(split, "acc") == 0.5 and cell_value(split, "acc", length=12) == 0.25
    assert cell_value(split, "acc", group=7) == 0.75 and cell_value(split, "acc", group=8) is None
    assert cell_value(split, "seq_acc") is None


def test_selections_accumulate_in_the_manifest(suite, tmp_path):
    R.record_selection(tmp_path, suite, "cpu", 1, ["tf"], ["flip"])
    R.record_selection(tmp_path, suite, "cpu", 3, ["gru"], ["flip"])
    sel = R.read_manifest(tmp_path)["suites"]["mini/cpu"]
    assert (sel["models"], sel["tasks"], sel["seeds"]) == (["gru", "tf"], ["flip"], 3)
    R.record_selection(tmp_path, suite, "cpu", None, None, ["boom"])
    sel = R.read_manifest(tmp_path)["suites"]["mini/cpu"]
    assert (sel["models"], sel["tasks"], sel["seeds"]) == (None, ["boom", "flip"], 3)


def test_a_suite_name_beside_a_folder_of_that_name(tmp_path, monkeypatch):
    # `rasp compare counting --out counting` run from the folder above: the name stays the suite
    (tmp_path / "counting").mkdir()
    monkeypatch.chdir(tmp_path)
    assert load_suite("counting").name == "counting"


def test_report_reads_fan_eval_files(tmp_path):
    suite = load_suite("fan")
    out = tmp_path / "out"
    run = out / "parity__looped__cpu__s0"
    write(run / "run.json", "{}")
    write(run / "summary.json", json.dumps({"step": 2000}))
    for stop, acc in (("oracle", 1.0), ("confidence", 0.5), ("depth_law", 0.75)):
        rows = [{"length": n, "exact_match": acc if n > 10 else 1.0, "stderr": 0, "chosen_step": n + 1,
                 "oracle_step": n, "iterations": n + 20} for n in range(1, 21)]
        write(run / f"eval_{stop}.json", json.dumps({"stop": stop, "train_max_n": 10, "rows": rows}))
    R.record_selection(out, suite, "cpu", 1, ["looped"], ["parity"])
    doc = R.write_report(out)
    assert R.find_report_cell(doc, "fan", "parity", "Looped, max. confidence", "longest test")["ours"]["mean"] == 0.5
    assert R.find_report_cell(doc, "fan", "parity", "Looped, depth law (a schedule fitted on the training lengths)",
                              "longest test")["ours"]["mean"] == 0.75
    cell = R.find_report_cell(doc, "fan", "parity", "Looped, oracle stop", "n = longest train")
    assert cell["ours"]["text"] == "1.000 (1 seed)" and cell["attrs"]["length"] == 10
    assert (out / "plots" / "fan_cpu_parity_test_iterations.png").exists()   # confidence only: chosen steps
    md = (out / "report.md").read_text()
    assert "### Parity: exact match" in md and "### Copy: exact match" not in md      # copy: nothing selected
    assert "Tables with no run in this selection (in report.json): Copy: exact match by length;" in md


# ---- the published tables of every suite -----------------------------------------------

def test_every_suite_parses_and_every_published_number_is_cited(tmp_path):
    assert {"fan", "flipflop", "listops", "logic", "words", "memory", "counting"} <= set(available_suites())
    numbers = 0
    for name in available_suites():
        s = load_suite(name)
        assert G.expand(s, "cpu", seeds=1)
        for t in s.tables:
            for row in t.rows:
                for i, v in enumerate(row.published):
                    cell = R.published_cell(t, row, i, s)
                    if v is None:
                        continue
                    numbers += 1
                    c = cell["citation"]
                    assert c["cite"] and c["table"] and c["row"] and c["column"], (name, t.id, row.label)
    assert numbers > 300


def test_suite_cells_name_splits_and_metrics_the_tasks_have():
    """Every table cell of a run row reads a split and metric its trainer task
    defines (for the tasks this trainer has), and evals ask for known splits."""
    from trainer.tasks import TASKS
    from trainer.tasks.base import SeqTask
    from trainer.compare.schema import absent_at_preset, cell_attrs, row_runs
    checked = 0
    for name in available_suites():
        s = load_suite(name)
        for preset in s.presets:
            for t in s.tables:
                for row in t.rows:
                    if not row_runs(t, row):
                        continue
                    for col in t.columns:
                        if absent_at_preset(t, col, row, preset):
                            continue
                        a = cell_attrs(t, col, row, preset)
                        task = TASKS.get(s.task(a["task"]).task)
                        if not isinstance(task, SeqTask):
                            continue
                        assert a.get("split") in task.splits, (name, preset, t.id, row.label, col.label, a.get("split"))
                        assert a["metric"] in task.metrics, (name, t.id, a["metric"], task.metrics)
                        checked += 1
            for r in G.expand(s, preset, seeds=1):
                task = TASKS.get(r.task)
                for item in r.train.get("set", []):
                    key, _, value = item.partition("=")
                    if key in ("train_split", "valid_split") and isinstance(task, SeqTask):
                        assert value in task.splits, (name, r.run_id, item)
                for e in r.evals:
                    for sp in str(e.options.get("splits", "")).split(","):
                        if sp and isinstance(task, SeqTask):
                            assert sp in task.splits, (name, r.run_id, sp)
    assert checked > 500


@pytest.mark.parametrize("suite_name,table,row,col,value", [
    ("listops", "table1", "GUT", "near-IID", 83.2),
    ("listops", "table1", "TLB", "900-1000", 25.0),
    ("logic", "table2", "GUT", "7", 96.36),
    ("logic", "table2", "Transformer", "12", 53.88),
    ("flipflop", "table3", "GUTLB", "p_i 0.98, 2T", 96),
    ("flipflop", "table3", "TLB Fixed Recurrence (k=5)", "p_i 0.98, 2T", 92.71),
    ("words", "p3_table1", "512", "Z60 LSTM", "✓"),
    ("words", "p3_table1", "256", "A4×Z5 GRU", "✗"),
    ("memory", "p3_table3", "Denoising S=10, T≤50", "RNN 2-layer", "✓"),
    ("counting", "p3_table4", "1000", "NRU h64", "✗"),
])
def test_published_numbers_match_the_papers(suite_name, table, row, col, value):
    s = load_suite(suite_name)
    t = next(t for t in s.tables if t.id == table)
    r = next(r for r in t.rows if r.label == row)
    i = next(i for i, c in enumerate(t.columns) if c.label == col)
    assert r.published[i] == value


PAPERS = Path(__file__).resolve().parents[2] / "shared" / "papers"   # beside the checkout; users lack it


def _marks(line: str) -> str:
    return "".join(c for c in line if c in "✓✗")


def test_published_tables_match_the_paper_texts():
    """Every P1 number (with its sd) is one table line of the paper, and
    every P3 ✓/✗ row is one line of marks in the paper's text."""
    p1, p3 = PAPERS / "recurrent-transformers-dynamic-halt-UT-GUT-TLB.md", PAPERS / "memory-and-generalization-linear-recurrence.txt"
    if not (p1.exists() and p3.exists()):
        pytest.skip("the papers are not beside this checkout")
    number = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")
    p1_lines = [[float(x) for x in number.findall(l.split("|", 2)[-1])] for l in p1.read_text().splitlines()
                if l.startswith("|")]
    checked = 0
    for name, tid in (("flipflop", "table3"), ("listops", "table1"), ("logic", "table2")):
        for r in next(t for t in load_suite(name).tables if t.id == tid).rows:
            seq = []
            for i, v in enumerate(r.published):
                if v is not None:
                    seq.append(float(v))
                    if r.published_sd and r.published_sd[i] not in (None, "—"):
                        seq.append(float(r.published_sd[i]))
            if seq:
                assert seq in p1_lines, (name, r.label)
                checked += 1
    p3_lines = {_marks(l) for l in p3.read_text().splitlines()}
    for name, tid in (("words", "p3_table1"), ("words", "p3_table2"), ("memory", "p3_table3"),
                      ("counting", "p3_table4"), ("counting", "p3_table5")):
        for r in next(t for t in load_suite(name).tables if t.id == tid).rows:
            if any(r.published):
                assert "".join(r.published) in p3_lines, (name, tid, r.label)
                checked += 1
    assert checked == 27 + 3 + 8 + 4 + 3 + 2


# ---- suite validation -----------------------------------------------------------------

@pytest.mark.parametrize("old,new,message,line", [
    ('seeds = 2', 'seeds = 2\ncolour = "red"', "unknown key 'colour'", 6),
    ('published = [100, 91.5]', 'published = [100]', "one value per column", 56),
    ('label = "Transformer"\n  model = "tf"', 'label = "Transformer"\n  model = "lstm"', "model 'lstm' is not", 60),
    ('cite = "Someone (2024), A Paper"', 'cite = "unclosed', "not valid TOML", 8),
    ('source = "P"', 'source = "Q"', "source 'Q' is not one of", 43),
    ('models = ["gru"]', 'models = ["rnn"]', "unknown model entry 'rnn'", 28),
    ('name = "tf"', 'name = "gru"', "duplicate model name 'gru'", 35),
])
def test_suite_errors_are_located(tmp_path, old, new, message, line):
    assert old in SUITE
    bad = write(tmp_path / "bad.toml", SUITE.replace(old, new, 1))
    with pytest.raises(RaspError) as e:
        load_suite(str(bad))
    assert message in e.value.message
    assert e.value.loc.path == str(bad) and e.value.loc.line == line


def test_names_that_could_make_two_cells_share_a_run_directory_are_refused(tmp_path, capsys):
    """Issue 26: task `x__rnn` + model `h8` and task `x` + model `rnn__h8` were
    both run `x__rnn__h8__cpu__s0`.  '__' in a name is a located error, and
    any two cells whose ids agree (up to case) are refused before anything runs."""
    two = SUITE.replace('name = "boom"\ntask = "boom"', 'name = "flip__gru"\ntask = "flipflop"')
    bad = write(tmp_path / "bad.toml", two)
    out = tmp_path / "out"
    assert rasp_cli.main(["compare", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:26:1: error: [[tasks]]: name 'flip__gru' may not contain '__'" in err, err
    cased = write(tmp_path / "cased.toml", SUITE + '\n[[tasks]]\nname = "FLIP"\ntask = "flipflop"\n')
    assert rasp_cli.main(["compare", str(cased), "--dry-run", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{cased}: error: tasks 'flip' / 'FLIP' with models 'gru' / 'gru' give the same run directory" in err, err
    assert "Traceback" not in err and not out.exists()


_NO_ROWS = SUITE[:SUITE.index("  [[tables.rows]]")]


@pytest.mark.parametrize("text,message,line", [
    (SUITE.replace("n = 16", 'n = 16\njson = "/elsewhere/x.json"'), "option 'json' (--json) cannot be set", 15),
    (SUITE.replace("n = 16", 'n = 16\njs = "x.json"'), "option 'js' (--json) cannot be set", 15),
    (SUITE.replace('train = { set = ["length=16", "p_i=0.8"] }', 'train = { out = "/tmp/x" }'),
     "[[tasks]] flip: option 'out' (--out) cannot be set", 23),
    (SUITE.replace("n = 16", 'n = 16\n"json=/tmp/x.json" = true'), "option name 'json=/tmp/x.json' may only use", 15),
    (SUITE.replace('split = "dense"', 'split = "valid_{"'), "split = 'valid_{': a '{' or '}' must enclose", 50),
    (SUITE.replace('task = "flip"\n', 'task = "{model.__class__.x}"\n'),
     "task = '{model.__class__.x}': a '{' or '}' must enclose", 46),
    (_NO_ROWS.replace("scale = 100", "scale = 100\nrows = [5]"), "[[tables]] t1: 'rows' must be", 49),
    (_NO_ROWS.replace("scale = 100", "scale = 100\nattrs = 5"), "[[tables]] t1: 'attrs' must be a table", 49),
    (_NO_ROWS.replace("scale = 100", 'scale = 100\ndigits = "x"'), "'digits' must be an integer from 0 to", 49),
    (_NO_ROWS.replace("scale = 100", "scale = 100\nattrs = { k = [1] }"), "attribute 'k' must be a string", 49),
])
def test_hostile_suite_options_and_templates_are_located_errors(tmp_path, capsys, text, message, line):
    """Issue 26: suite options that would write outside the run directory
    (`json = "/elsewhere/x.json"`, an abbreviation, a key with '='), templates
    that reach attributes or do not parse, and tables of the wrong types are
    `FILE:LINE` errors with exit status 2, before anything runs."""
    bad = write(tmp_path / "bad.toml", text)
    out = tmp_path / "out"
    assert text != SUITE and rasp_cli.main(["compare", str(bad), "--tasks", "flip", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{bad}:{line}:1: error: ") and message in err and "Traceback" not in err, err
    assert not out.exists() and not (tmp_path / "x.json").exists()


def test_templates_fill_plain_names_only():
    from trainer.compare.schema import TemplateError, fill_templates
    assert fill_templates({"task": "z{n}_k{k}", "k": "{n}0", "n": 6, "m": "{{k}}"}) == \
        {"task": "z6_k60", "k": "60", "n": 6, "m": "{k}"}
    for bad in ({"a": "{b}", "b": "{a}"}, {"a": "{0}"}, {"a": "{a!r}"}, {"a": "x}"}, {"a": "{b:>9}", "b": 1}):
        with pytest.raises(TemplateError):
            fill_templates(bad)
    with pytest.raises(KeyError):
        fill_templates({"a": "{nope}"})


def test_seeds_per_preset(tmp_path):
    per = load_suite(str(write(tmp_path / "per.toml", SUITE.replace("seeds = 2", "seeds = { cpu = 1, paper = 3 }"))))
    assert [r.seed for r in G.expand(per, "cpu", models=["tf"], tasks=["flip"])] == [0]
    assert [r.seed for r in G.expand(per, "paper", models=["tf"], tasks=["flip"])] == [0, 1, 2]
    assert [r.seed for r in G.expand(per, "cpu", seeds=2, models=["tf"], tasks=["flip"])] == [0, 1]
    for bad in ("{ cpu = 1 }", "{ cpu = 1, paper = 0 }", "{ cpu = 1, paper = 2, gpu = 2 }", '"3"', "true"):
        with pytest.raises(RaspError, match=r"seeds must be .* one such integer per preset \(cpu, paper\)"):
            load_suite(str(write(tmp_path / "bad.toml", SUITE.replace("seeds = 2", f"seeds = {bad}"))))


def test_a_model_entry_may_give_its_own_seeds(tmp_path):
    """The rows that carry a paper's claim get more seeds than the rest; --seeds K gives every model K."""
    text = SUITE.replace('label = "Transformer"', 'label = "Transformer"\nseeds = { cpu = 1, paper = 4 }')
    s = load_suite(str(write(tmp_path / "own.toml", text)))
    by = lambda runs: sorted((r.model_entry, r.seed) for r in runs)        # noqa: E731
    assert by(G.expand(s, "cpu", tasks=["flip"])) == [("gru", 0), ("gru", 1), ("tf", 0)]
    assert by(G.expand(s, "paper", tasks=["flip"], models=["tf"])) == [("tf", k) for k in range(4)]
    assert by(G.expand(s, "cpu", seeds=3, tasks=["flip"])) == [("gru", k) for k in range(3)] + [("tf", k) for k in range(3)]
    out = tmp_path / "out"
    out.mkdir()
    R.record_selection(out, s, "cpu", None, None, ["flip"])
    doc = R.write_report(out, plots=False)
    assert doc["suites"][0]["seeds_by_model"] == {"Transformer": 1}
    assert "(suite `mini`, preset `cpu`, 2 seed(s); 1 seed for Transformer)" in (out / "report.md").read_text()
    bad = write(tmp_path / "bad.toml", SUITE.replace('label = "Transformer"', 'label = "Transformer"\nseeds = 0'))
    with pytest.raises(RaspError, match=r"\[\[models\]\] tf: seeds must be an integer from 1"):
        load_suite(str(bad))
    # a task entry's own count: a cell gets the fewer of its task's and its model's
    s = load_suite(str(write(tmp_path / "task.toml", text.replace('name = "boom"', 'name = "boom"\nseeds = 1')
                             .replace('label = "GRU"', 'label = "GRU"\nseeds = 3'))))
    assert by(G.expand(s, "cpu")) == [("gru", 0), ("gru", 0), ("gru", 1), ("gru", 2), ("tf", 0)]
    assert [r.run_id for r in G.expand(s, "cpu", tasks=["boom"])] == ["boom__gru__cpu__s0"]


def test_a_task_entry_may_give_one_cell_its_own_seeds(tmp_path):
    """A single-seed cell whose result contradicts its paper gets the seeds
    that can test it (`cell_seeds`), in place of the fewer of its task's and
    its model's count; the other cells keep theirs and the report's heading
    names the cell."""
    text = (SUITE.replace('name = "flip"\n', 'name = "flip"\nseeds = 1\ncell_seeds = { tf = { cpu = 3, paper = 5 } }\n', 1)
            .replace('label = "GRU"', 'label = "GRU"\nseeds = 1'))
    s = load_suite(str(write(tmp_path / "cell.toml", text)))
    by = lambda runs: sorted((r.model_entry, r.seed) for r in runs)        # noqa: E731
    assert by(G.expand(s, "cpu", tasks=["flip"])) == [("gru", 0), ("tf", 0), ("tf", 1), ("tf", 2)]
    assert by(G.expand(s, "paper", tasks=["flip"], models=["tf"])) == [("tf", k) for k in range(5)]
    assert by(G.expand(s, "cpu", seeds=2, tasks=["flip"])) == [("gru", 0), ("gru", 1), ("tf", 0), ("tf", 1)]
    out = tmp_path / "out"
    out.mkdir()
    R.record_selection(out, s, "cpu", None, None, ["flip"])
    doc = R.write_report(out, plots=False)
    assert doc["suites"][0]["seeds_by_model"] == {"GRU": 1, "task flip": 1, "Transformer on flip": 3}
    assert "2 seed(s); 1 seed for GRU, task flip; 3 seeds for Transformer on flip)" in (out / "report.md").read_text()
    for bad, message in (("{ nope = 2 }", r"\[\[tasks\]\] flip: unknown model entry 'nope' in 'cell_seeds'"),
                         ("{ tf = 0 }", r"\[\[tasks\]\] flip cell_seeds.tf: seeds must be an integer from 1"),
                         ("3", r"\[\[tasks\]\] flip: cell_seeds must be a table")):
        with pytest.raises(RaspError, match=message):
            load_suite(str(write(tmp_path / "bad.toml", SUITE.replace('name = "flip"\n', f'name = "flip"\ncell_seeds = {bad}\n', 1))))


def test_a_rerun_with_other_seeds_starts_at_first_seed_in_its_own_folder(tmp_path, capsys):
    """`--first-seed S` runs seeds S..S+K-1, to check a report's stated
    uncertainty with seeds it never saw (bench/check_rerun.py); one folder
    holds one seed range of a suite, so a second range is refused before
    anything runs, and a manifest with a bad first seed is a located error."""
    s = load_suite(str(write(tmp_path / "s.toml", SUITE)))
    ids = ["flip__gru__cpu__s100", "flip__gru__cpu__s101"]
    assert [r.run_id for r in G.expand(s, "cpu", models=["gru"], tasks=["flip"], first_seed=100)] == ids
    out = tmp_path / "out"
    out.mkdir()
    R.record_selection(out, s, "cpu", None, ["gru"], ["flip"], first_seed=100)
    doc = R.write_report(out, plots=False)
    assert doc["suites"][0]["tables"][0]["rows"][0]["cells"][0]["ours"]["runs"] == ids
    assert "preset `cpu`, 2 seed(s) from seed 100)" in (out / "report.md").read_text()
    before = (out / "compare.json").read_text()
    assert rasp_cli.main(["compare", str(tmp_path / "s.toml"), "--models", "gru", "--tasks", "flip",
                          "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds suite mini at preset cpu from seed 100; a run from seed 0 (--first-seed) needs its own --out" in err
    assert (out / "compare.json").read_text() == before and not (out / "flip__gru__cpu__s0").exists()
    write(out / "compare.json", before.replace('"first_seed": 100', '"first_seed": -1'))
    with pytest.raises(RaspFileError, match="first_seed must be an integer from 0"):
        R.read_manifest(out)


def test_a_preset_that_cannot_rank_its_models_says_so_instead_of_a_summary(tmp_path):
    text = SUITE.replace('seeds = 2', 'seeds = 2\nno_summary = { cpu = "Every model at chance." }')
    s = load_suite(str(write(tmp_path / "chance.toml", text)))
    out = tmp_path / "out"
    finished_run(out / "flip__gru__cpu__s0", {"dense": 0.9, "sparse": 0.5})
    finished_run(out / "flip__tf__cpu__s0", {"dense": 0.6, "sparse": 0.5})
    R.record_selection(out, s, "cpu", 1, None, ["flip"])
    summ = R.write_report(out, plots=False)["suites"][0]["summary"]
    assert summ["rows"] == [] and summ["withheld"] == "Every model at chance."
    md = (out / "report.md").read_text()
    assert "Not ranked at preset `cpu`: Every model at chance." in md and "| GRU | 90.0 (1 seed)" in md
    assert R.suite_report(out, {**R.read_manifest(out)["suites"]["mini/cpu"], "preset": "paper"})["summary"]["withheld"] is None
    for bad in ('no_summary = 3', 'no_summary = { gpu = "x" }', 'no_summary = ""'):
        with pytest.raises(RaspError, match="no_summary must be a sentence"):
            load_suite(str(write(tmp_path / "bad.toml", SUITE.replace('seeds = 2', 'seeds = 2\n' + bad))))


def test_a_table_that_cannot_rank_its_models_is_shown_but_kept_out_of_the_summary(tmp_path):
    text = SUITE.replace('scale = 100\n', 'scale = 100\nno_summary = { cpu = "Every model at zero." }\n', 1)
    s = load_suite(str(write(tmp_path / "zero.toml", text)))
    out = tmp_path / "out"
    for seed in (0, 1):
        finished_run(out / f"flip__gru__cpu__s{seed}", {"dense": 0.9, "sparse": 0.5})
        finished_run(out / f"flip__tf__cpu__s{seed}", {"dense": 0.6, "sparse": 0.5})
    R.record_selection(out, s, "cpu", None, None, ["flip"])
    summ = R.write_report(out, plots=False)["suites"][0]["summary"]
    assert summ["rows"] == [] and summ["withheld"] is None
    assert summ["withheld_tables"] == [{"table": "Accuracy", "why": "Every model at zero."}]
    md = (out / "report.md").read_text()
    assert md.count("Every model at zero.") == 2 and "| GRU | 90.0 ± 0.0 (2 seeds)" in md
    # without the sentence the same runs are ranked (the test above fails on a report that ignores it)
    R.record_selection(out, load_suite(str(write(tmp_path / "ranked.toml", SUITE))), "cpu", None, None, ["flip"])
    assert [r["best"] for r in R.write_report(out, plots=False)["suites"][0]["summary"]["rows"]] == ["GRU", "GRU"]
    with pytest.raises(RaspError, match=r"\[\[tables\]\] t1: no_summary must be a sentence"):
        load_suite(str(write(tmp_path / "bad.toml", SUITE.replace('scale = 100\n', 'scale = 100\nno_summary = 1\n', 1))))


def test_a_column_only_the_paper_preset_evaluates_is_left_out_at_cpu(tmp_path):
    text = SUITE.replace('{ label = "sparse", split = "sparse",', '{ label = "sparse", split = { paper = "sparse" },')
    s = load_suite(str(write(tmp_path / "paper_col.toml", text)))
    out = tmp_path / "out"
    finished_run(out / "flip__gru__cpu__s0", {"dense": 0.9, "sparse": 0.5})
    R.record_selection(out, s, "cpu", 1, ["gru"], ["flip"])
    doc = R.write_report(out, plots=False)
    cell = R.find_report_cell(doc, "mini", "t1", "GRU", "sparse")
    assert cell["ours"] == {"status": "not run", "text": "not at preset cpu"}
    table = doc["suites"][0]["tables"][0]
    assert [c["shown"] for c in table["columns"]] == [True, False]


def test_a_task_only_the_paper_preset_runs_has_no_cpu_cells(tmp_path):
    """A [[tasks]] entry with presets = ["paper"]: a table row naming it per preset has no
    cell at cpu (no run, nothing to check, not in the seed line), while a plain name is refused."""
    text = SUITE.replace('name = "boom"\ntask = "boom"', 'name = "boom"\ntask = "boom"\npresets = ["paper"]')
    bad = write(tmp_path / "plain.toml", text)
    with pytest.raises(RaspError, match=r"task 'boom' has no cpu runs \(its presets: paper\)"):
        load_suite(str(bad))
    s = load_suite(str(write(tmp_path / "paper_task.toml", text.replace('  task = "boom"\n', '  task = { paper = "boom" }\n'))))
    assert [r.task_entry for r in G.expand(s, "cpu")] == ["flip"] * 4
    out = tmp_path / "out"
    finished_run(out / "flip__gru__cpu__s0", {"dense": 0.9, "sparse": 0.5})
    R.record_selection(out, s, "cpu", 1, ["gru"], None)
    doc = R.write_report(out, plots=False)
    cell = R.find_report_cell(doc, "mini", "t1", "Boom GRU", "dense")
    assert cell["ours"] == {"status": "not run", "text": "not at preset cpu"}
    assert R.find_report_cell(doc, "mini", "t1", "GRU", "dense")["ours"]["status"] == "ok"


def test_cli_errors_exit_2(tmp_path, capsys):
    bad = write(tmp_path / "bad.toml", SUITE.replace("seeds = 2", "seeds = 0"))
    assert rasp_cli.main(["compare", str(bad), "--dry-run"]) == 2
    assert f"{bad}:5:1: error: [suite]: seeds must be" in capsys.readouterr().err
    assert rasp_cli.main(["compare", "nosuchsuite"]) == 2
    assert rasp_cli.main(["compare", "--report", str(tmp_path)]) == 2        # no compare.json
    assert "Traceback" not in capsys.readouterr().err


def test_runs_the_trainer_lacks_are_refused_before_anything_starts(suite, tmp_path, capsys):
    out = tmp_path / "out"
    assert rasp_cli.main(["compare", suite.path, "--tasks", "boom", "--out", str(out)]) == 2
    assert "task 'boom'" in capsys.readouterr().err and not out.exists()


def test_dry_run_prints_the_commands(suite, tmp_path, capsys):
    out = tmp_path / "out"
    assert rasp_cli.main(["compare", suite.path, "--dry-run", "--models", "tf", "--tasks", "flip",
                          "--seeds", "1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "flip__tf__cpu__s0: new" in text and "--task flipflop --model transformer" in text
    assert not out.exists()


# ---- submitit -----------------------------------------------------------------------

def test_submitit_local_executor(suite, fake, tmp_path):
    out = tmp_path / "out"
    runs = G.expand(suite, "cpu", seeds=1, tasks=["flip"])
    records = runner.run_slurm(runs, out, {"timeout_min": 5}, cluster="local", commands=fake)
    assert sorted(r["status"] for r in records) == ["finished", "finished"]
    assert json.loads((out / "flip__tf__cpu__s0" / "eval.json").read_text())["splits"]["dense"]
    assert runner.run_slurm(runs, out, cluster="local", commands=fake) == []      # finished: nothing submitted


# ---- a program file as a task (issue 44) ------------------------------------------------

# a tiny program with its own sampler: the count of ones mod 3 at '>' (programs/ones_mod3.rasp, shortened)
PROGRAM = textwrap.dedent("""
    const EOQ = ">"
    const EOS = "#"
    input seq: {0, 1, EOQ, EOS}
    require count(seq, EOQ) == 1, "the input needs exactly one '>'"
    sample n in 1..4: {0, 1}[n] EOQ EOS[2]
    param n = count_before(seq, EOQ)
    prompt = 1 - has_seen(seq, EOQ)
    bits = mask(seq, prompt)
    ans = full(seq, 0)
    loop n:
        bits = shift_right(bits, 1)
        ans = (ans + bits) % 3
    output ans
""")
PROGRAM_TASK = '[[tasks]]\nname = "flip"\ntask = "flipflop"\ntrain = { set = ["length=16", "p_i=0.8"] }'


def program_suite(tmp_path, entry='program = "progs/ones.rasp"', program=PROGRAM) -> Path:
    """SUITE with its `flip` task entry replaced by a program file in progs/ beside the suite."""
    write(tmp_path / "progs" / "ones.rasp", program)
    assert PROGRAM_TASK in SUITE
    return write(tmp_path / "prog.toml", SUITE.replace(PROGRAM_TASK, f'[[tasks]]\nname = "flip"\n{entry}'))


def test_a_program_file_is_a_task(tmp_path, fake, capsys):
    suite = load_suite(str(program_suite(tmp_path)))
    path = str((tmp_path / "progs" / "ones.rasp").resolve())
    assert suite.task("flip").program == path and suite.task("flip").task == "progs/ones.rasp"
    runs = G.expand(suite, "cpu", seeds=1, tasks=["flip"])
    assert [(r.run_id, r.program) for r in runs] == [("flip__gru__cpu__s0", path), ("flip__tf__cpu__s0", path)]
    cmd = runner.TrainerCommands().train(runs[1], tmp_path / "r")
    assert cmd[3:] == ["train", "--program", path, "--model", "transformer", "--preset", "cpu", "--seed", "0",
                       "--steps", "7", "--out", str(tmp_path / "r")]
    assert G.RunSpec.from_dict(runs[1].to_dict()) == runs[1]
    # the dry run shows the command; the runner trains it end to end (the fake trainer)
    out = tmp_path / "out"
    assert rasp_cli.main(["compare", str(tmp_path / "prog.toml"), "--dry-run", "--tasks", "flip", "--models", "tf",
                          "--seeds", "1", "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    assert f"train --program {path} --model transformer" in shown, shown
    records = runner.run_local(runs, out, jobs=1, commands=fake)
    assert [r["status"] for r in records] == ["finished", "finished"]
    assert f"train --program {path} " in (out / "flip__tf__cpu__s0" / "calls.log").read_text()
    # the project's programs/ too, relative to its root
    other = load_suite(str(program_suite(tmp_path, 'program = "programs/ones_mod3.rasp"')))
    assert other.task("flip").program == str(ROOT / "programs" / "ones_mod3.rasp")


@pytest.mark.parametrize("entry, program, message", [
    ('program = "progs/nope.rasp"', PROGRAM, "program 'progs/nope.rasp': no such file (looked beside the suite"),
    ('program = "progs"', PROGRAM, "program 'progs': "),
    ('task = "flipflop"\nprogram = "progs/ones.rasp"', PROGRAM, "give 'task' (a registered task) or 'program'"),
    ('program = "progs/ones.rasp"', PROGRAM.replace("loop n:", "loop m:"),
     "program 'progs/ones.rasp' does not pass `rasp check`: "),
    ('program = "progs/ones.rasp"', PROGRAM.replace("sample n in 1..4: {0, 1}[n] EOQ EOS[2]\n", ""),
     "has no `sample` statement to draw inputs from"),
    ('program = ""', PROGRAM, "'program' must be a non-empty string"),
    ('program = "a\\u0000b"', PROGRAM, "no such file"),
])
def test_a_bad_program_task_is_a_located_error(tmp_path, capsys, entry, program, message):
    path = program_suite(tmp_path, entry, program)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.startswith("program"))
    assert rasp_cli.main(["compare", str(path), "--dry-run", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{line}:1: error: [[tasks]] flip: " in err and message in err, err
    assert "Traceback" not in err


@pytest.mark.slow
def test_a_program_task_trains_and_reports_end_to_end(tmp_path):
    """The real trainer, a few steps of a tiny model (a minute on 2 cores)."""
    suite = write(tmp_path / "p.toml", textwrap.dedent("""
        [suite]
        name = "progs"
        title = "A program as a task"
        seeds = 1
        presets = ["cpu"]
        [sources.P]
        cite = "Ours"
        [train]
        steps = 4
        d_model = 16
        n_head = 2
        batch_size = 8
        eval_samples = 8
        no_progress = true
        threads = 1
        [eval]
        lengths = "1:4"
        samples = 8
        no_plots = true
        no_progress = true
        threads = 1
        stop = "oracle"
        [[evals]]
        name = "oracle"
        file = "eval_oracle.json"
        [[tasks]]
        name = "ones"
        program = "progs/ones.rasp"
        [[models]]
        name = "looped"
        label = "Looped"
        [[tables]]
        id = "t1"
        title = "Exact match"
        source = "P"
        paper_table = "none"
        task = "ones"
        metric = "exact_match"
        columns = [{ label = "all" }]
          [[tables.rows]]
          label = "Looped"
          model = "looped"
          published = ["—"]
    """))
    write(tmp_path / "progs" / "ones.rasp", PROGRAM)
    out = tmp_path / "out"
    assert rasp_cli.main(["compare", str(suite), "--out", str(out), "--no-plots"]) == 0
    run = json.loads((out / "ones__looped__cpu__s0" / "run.json").read_text())
    assert run["program"]["text"] == PROGRAM
    assert R.find_report_cell(json.loads((out / "report.json").read_text()), "progs", "t1", "Looped",
                              "all")["ours"]["status"] == "ok"
