"""The command line as a researcher meets it (issue 25): unknown flags named,
grouped help with defaults, no progress bars in logs, experiment logging to
TensorBoard, and `rasp data --stats` in seconds.  Each test is quick."""
import io
import json
import re
import sys
from pathlib import Path

import pytest

from rasp.cli import main

ROOT = Path(__file__).resolve().parents[1]
PARITY = str(ROOT / "programs" / "parity.rasp")
TINY = ["--d-model", "16", "--n-head", "2", "--eval-samples", "8", "--log-every", "2"]


def run(capsys, *argv):
    """(status, stdout, stderr) of `rasp ARGV`, argparse's exits included."""
    try:
        status = main(list(argv))
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err, err
    return status, out, err


# ---- unknown flags ---------------------------------------------------------------------

@pytest.mark.parametrize("argv,named", [
    (["run", PARITY, "--inptu", "1 0 > # #"], "unrecognized argument --inptu (did you mean --input?)"),
    (["run", PARITY, "--inp", "1 0 > # #"], "unrecognized argument --inp (did you mean --input?)"),  # no abbreviations
    (["--verison"], "unrecognized argument --verison (did you mean --version?)"),
    (["train", "--tsak", "parity", "--out", "{d}/r"], "unrecognized argument --tsak (did you mean --task?)"),
    (["eval", "{d}", "--stpo", "oracle"], "unrecognized argument --stpo (did you mean --stop?)"),
    (["data", "flipflop", "--stat"], "unrecognized argument --stat (did you mean --stats?)"),
    (["compare", "fan", "--dry-rn"], "unrecognized argument --dry-rn (did you mean --dry-run?)"),
    (["run", PARITY, "--input", "1 0 > # #", "--zzz"], "unrecognized argument --zzz"),
    (["trian", "--task", "parity"], "invalid choice: 'trian'"),
    (["trian"], "(did you mean train?)"),
    (["eval", "{d}", "--stop", "oracel"], "(did you mean oracle?)"),
])
def test_an_unknown_flag_is_named_before_anything_else(capsys, tmp_path, argv, named):
    status, out, err = run(capsys, *[a.format(d=tmp_path) for a in argv])
    assert status == 2 and named in err, err
    assert "is required" not in err and not (tmp_path / "r").exists()


def test_values_that_look_like_flags_are_values():
    from rasp.options import ArgumentParser
    p = ArgumentParser(prog="x")
    p.add_argument("--lr", type=float)
    p.add_argument("--input")
    p.add_argument("-n", type=int)
    assert p.unknown_flags(["--lr", "-0.5", "--input=-1 0 > #", "-n5", "--", "--whatever"]) == []
    assert p.parse_args(["--lr", "-0.5", "-n5"]).lr == -0.5
    assert p.unknown_flags(["--lr", "1", "--nope", "-q"]) == ["--nope", "-q"]


# ---- help ------------------------------------------------------------------------------------

def test_train_help_all_is_grouped_with_defaults_and_lists_every_task_and_model(capsys):
    from trainer.models import MODELS
    from trainer.tasks import TASKS
    from trainer.settings.args import RECIPE_HELP
    from trainer.settings.validate import HP_FLAG_TYPES
    status, out, _ = run(capsys, "train", "--help-all")
    assert status == 0 and "override the preset" not in out
    heads = re.findall(r"^(\S[^:\n]*):$", out, re.M)
    assert heads[:5] == ["options", "training on a program of your own (docs/tutorial.md)", "the starting weights",
                         "comparison tasks", "model size"], heads
    common = out.split("training on a program of your own")[0]
    for flag in ("--task", "--out", "--model", "--preset", "--resume", "--log"):
        assert flag in common, flag
    for name in HP_FLAG_TYPES:                       # every recipe flag: a line and its default
        flag = "--" + name.replace("_", "-")
        entry = re.search(rf"^  {flag} .*?(?=^  -|^\S|\Z)", out, re.M | re.S)
        assert entry and "default " in re.sub(r"\s+", " ", entry.group(0)), flag
    assert re.search(r"--steps N\s+optimizer steps in all \(default 2000\)", out)
    assert "(default 2; 1 for parity, padded_parity)" in re.sub(r"\s+", " ", out)        # a value that differs per task
    for name in list(TASKS) + list(MODELS) + list(RECIPE_HELP):
        assert re.search(rf"^  {re.escape(name)}\s", out, re.M), name


def test_train_help_shows_the_common_flags_on_a_screen_and_every_flag_is_in_help_all(capsys, monkeypatch):
    """Issue 56: `rasp train --help` fits a screen (the common flags, the tasks and models by
    name, a pointer to --help-all); every flag the parser takes is in --help-all."""
    from trainer.settings.args import TRAIN_COMMON, add_train_args
    from rasp.options import ArgumentParser
    monkeypatch.setenv("COLUMNS", "80")              # argparse wraps at the terminal's width
    status, short, _ = run(capsys, "train", "--help")
    lines = short.splitlines()
    assert status == 0 and len(lines) <= 50 and max(map(len, lines)) <= 120, (len(lines), max(map(len, lines)))
    shown = re.findall(r"^  (-[-\w]+)", short, re.M)
    assert shown == ["-h", "--help-all", *TRAIN_COMMON], shown
    assert "rasp train --help-all" in short and "--d-model N" in short and "(default 64)" in short
    names = re.sub(r"\s+", " ", short)
    for name in ("parity", "unique_set", "counting", "ntp_loop", "transformer_xpos", "clock", "fan"):
        assert re.search(rf"\b{name}\b", names), name
    status, full, _ = run(capsys, "train", "--help-all")
    parser = add_train_args(ArgumentParser(prog="rasp train"))
    listed = set(re.findall(r"^  (-[-\w]+)", full, re.M))
    every = {a.option_strings[0] for a in parser._actions if a.option_strings}
    assert status == 0 and every <= listed, every - listed
    assert len(full.splitlines()) > 2 * len(lines)


def test_the_name_tables_that_train_help_lists_are_the_registries():
    """trainer/registry.py's TASK_NAMES and MODEL_NAMES (read without torch) are the
    registries' names, in their order, per kind."""
    from trainer.models import MODELS
    from trainer.registry import COMPARISON, FAN, MODEL_NAMES, TASK_NAMES
    from trainer.tasks import TASKS
    from trainer.tasks.base import SeqTask
    assert list(TASK_NAMES[FAN]) == [n for n, t in TASKS.items() if not isinstance(t, SeqTask)]
    assert list(TASK_NAMES[COMPARISON]) == [n for n, t in TASKS.items() if isinstance(t, SeqTask)]
    for kind in (FAN, COMPARISON):
        assert list(MODEL_NAMES[kind]) == MODELS.names(kind), kind


def _entries(out: str) -> dict:
    """flag -> its help text (joined lines) of an argparse --help."""
    found = re.findall(r"^  (-[-\w]+)(.*?)(?=^  -|^\S|\Z)", out, re.M | re.S)
    return {flag: re.sub(r"\s+", " ", text) for flag, text in found}


def test_eval_and_compare_help_are_grouped_with_every_flag_and_its_default(capsys):
    """Issue 42: grouped as `rasp train --help` is; every flag with its default; the stopping
    rules listed compactly, one entry each, below the groups."""
    from trainer.fan.stopping import RULES
    status, out, _ = run(capsys, "eval", "--help")
    heads = re.findall(r"^(\S[^:\n]*):", out, re.M)
    assert status == 0 and heads[:5] == ["usage", "positional arguments", "options",
                                         "Fan-task runs (parity, copy, addition, ...)",
                                         "comparison-task runs (flipflop, words_*, listops, ...)"], heads
    assert "both kinds" in heads
    for flag, text in _entries(out).items():
        assert flag == "-h" or "default" in text, (flag, text)
    assert len(_entries(out)["--stop"]) < 250                           # short: the rules are listed below
    rules = out.split("stopping rules (--stop")[1]
    assert all(re.search(rf"^  {rule}\s", rules, re.M) for rule in RULES)
    status, out, _ = run(capsys, "compare", "--help")
    assert status == 0 and "default cpu" in re.sub(r"\s+", " ", out.split("--preset {cpu,paper}  ")[1])
    assert {"what to run", "where and how the runs go", "checking before running", "the report"} <= \
        set(re.findall(r"^(\S[^:\n]*):", out, re.M))
    for flag, text in _entries(out).items():
        assert flag == "-h" or "default" in text, (flag, text)


def test_compile_names_every_file_it_writes(capsys, tmp_path):
    status, _, err = run(capsys, "compile", PARITY, "--max-len", "8", "-o", str(tmp_path / "m"))
    written = sorted(p.name for p in (tmp_path / "m").iterdir())
    assert status == 0 and written == ["config.json", "manifest.json", "model.safetensors", "program.rasp"]
    assert all(name in err for name in written), err


def test_a_run_shorter_than_its_curriculum_trains_with_a_warning(capsys, tmp_path):
    """Issue 42: a smoke run of implicit Llama's words preset (a curriculum over positions
    of 6000 steps) trains, saying which positions it will not reach."""
    status, _, err = run(capsys, "train", "--task", "words_z60", "--model", "implicit_llama", "--preset", "cpu",
                         "--steps", "3", "--out", str(tmp_path / "w"), "--no-progress", "--threads", "1")
    assert status == 0, err
    assert "warning: " in err and "positions 3..8 will never be trained" in err, err
    assert (tmp_path / "w" / "summary.json").is_file()


def test_a_run_from_a_toml_file_equals_the_run_from_flags(capsys, tmp_path):
    """Issue 42: `rasp train --config FILE.toml`: the flags' names as keys, the command line
    overriding the file, the file's settings recorded in run.json; bad files are located errors."""
    flags = ["--task", "parity", "--steps", "4", "--no-progress", "--threads", "1", "--lr", "0.003", *TINY]
    assert run(capsys, "train", "--out", str(tmp_path / "flags"), *flags)[0] == 0
    cfg = tmp_path / "run.toml"
    cfg.write_text('# a short parity run\ntask = "parity"\nsteps = 9\nno_progress = true\nthreads = 1\n'
                   'lr = 0.003\nd_model = 16\nn_head = 2\neval_samples = 8\nlog_every = 2\n')
    status, _, err = run(capsys, "train", "--config", str(cfg), "--steps", "4", "--out", str(tmp_path / "file"))
    assert status == 0, err
    a, b = (json.loads((tmp_path / d / "run.json").read_text()) for d in ("flags", "file"))
    assert a["hparams"] == b["hparams"] and b["hparams"]["steps"] == 4          # the command line won
    assert b["config"]["steps"] == 9 and "config" not in a
    for text, says in [("task = \"parity\"\nd_modle = 3\n", ":2:1: error: unknown setting 'd_modle'"),
                       ("task = \"parity\"\n\nsteps = -5\n", ":3:1: error: steps = -5: must be in"),
                       ("task = \"parity\"\npreset = \"gpu\"\n", ":2:1: error: preset = 'gpu': one of"),
                       ("task = \"parity\"\nno_progress = 3\n", ":2:1: error: no_progress = 3: true or false"),
                       ("task = [\n", "error: not valid TOML")]:
        cfg.write_text(text)
        status, _, err = run(capsys, "train", "--config", str(cfg), "--out", str(tmp_path / "bad"))
        assert status == 2 and says in err and not (tmp_path / "bad").exists(), (text, err)


# ---- progress bars ---------------------------------------------------------------------------

class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("terminal", [False, True])
def test_a_progress_bar_only_on_a_terminal(tmp_path, capsys, monkeypatch, terminal):
    """tqdm's disable=None: a bar on a terminal, none in a redirected log
    (training, and `rasp eval` of a Fan run)."""
    err = Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    out = tmp_path / "r"
    assert main(["train", "--task", "parity", "--out", str(out), "--steps", "4", *TINY]) == 0
    assert main(["eval", str(out), "--lengths", "1:2", "--samples", "4", "--no-plots", "--stop", "oracle"]) == 0
    text = err.getvalue()
    bars = re.findall(r"parity/looped:|eval oracle:", text)
    assert (sorted(set(bars)) == ["eval oracle:", "parity/looped:"]) if terminal else bars == [], text


# ---- experiment logging ----------------------------------------------------------------------

def _events(log_dir: Path) -> dict:
    """tag -> [(step, value)] read back from TensorBoard's event files."""
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = accumulator.EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _expected(metrics: Path) -> dict:
    from trainer.run.explog import scalars
    out = {}
    for row in (json.loads(line) for line in metrics.read_text().splitlines()):
        for tag, value in scalars(row).items():
            out.setdefault(tag, []).append((row["step"], value))
    return out


def _same(events: dict, expected: dict):
    assert sorted(events) == sorted(expected)
    for tag, points in expected.items():
        assert [s for s, _ in events[tag]] == [s for s, _ in points], tag       # none lost, none twice
        assert [v for _, v in events[tag]] == pytest.approx([v for _, v in points], rel=1e-6), tag


def _crash_back_to(run_dir: Path, step: int):
    """As if the run was killed after its checkpoint at `step` (and after
    writing rows and events beyond it)."""
    import shutil
    for ck in (run_dir / "checkpoints").iterdir():
        if int(ck.name.split("_")[1]) > step:
            shutil.rmtree(ck)
    (run_dir / "latest.json").write_text(json.dumps({"path": f"checkpoints/step_{step:07d}", "step": step}))


@pytest.mark.parametrize("task", [["--task", "parity"], ["--task", "flipflop", "--model", "gru"]])
def test_log_tensorboard_holds_the_scalars_of_metrics_jsonl_across_a_resume(tmp_path, capsys, task):
    pytest.importorskip("tensorboard")
    out = tmp_path / "r"
    base = ["train", *task, "--out", str(out), "--eval-every", "4", "--ckpt-every", "4", *TINY]
    status, _, err = run(capsys, *base, "--steps", "6", "--log", "tensorboard")
    assert status == 0, err
    assert not (out / ".lock").exists()
    before = _events(out / "tensorboard")
    assert {"train/loss", "train/lr", "eval/acc"} <= set(before) and before["eval/acc"][0][0] == 0
    _same(before, _expected(out / "metrics.jsonl"))
    _crash_back_to(out, 4)               # rows and events at steps 5..6 were written after that checkpoint
    status, _, err = run(capsys, "train", "--out", str(out), "--resume", "--steps", "8", "--no-progress")
    assert status == 0, err              # a run that logged goes on logging without --log
    after = _events(out / "tensorboard")
    _same(after, _expected(out / "metrics.jsonl"))
    assert after["train/loss"][-1][0] == 8 and after["train/loss"][:2] == before["train/loss"][:2]


def test_log_given_first_on_a_resume_starts_with_the_earlier_rows(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    out = tmp_path / "r"
    assert run(capsys, "train", "--task", "parity", "--out", str(out), "--steps", "4", *TINY)[0] == 0
    assert not (out / "tensorboard").exists()
    assert run(capsys, "train", "--out", str(out), "--resume", "--steps", "6", "--log", "tensorboard")[0] == 0
    events = _events(out / "tensorboard")
    _same(events, _expected(out / "metrics.jsonl"))
    assert [s for s, _ in events["train/loss"]] == [2, 4, 6]


def test_log_without_its_package_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)      # as if tensorboard were absent
    status, _, err = run(capsys, "train", "--task", "parity", "--out", str(tmp_path / "r"), "--steps", "1",
                         "--log", "tensorboard")
    assert status == 2 and "pip install -e '.[log]'" in err and "tensorboard" in err, err
    assert not (tmp_path / "r").exists()


# ---- rasp data --stats -----------------------------------------------------------------------

def test_stats_of_a_long_split_in_seconds_from_a_stated_sample(tmp_path, capsys):
    """The longest ListOps bin: a sample of 16 rows (1000 took a minute), the
    very rows `rasp data -n 16` writes, its shares rounded."""
    import time
    from trainer.datacli import split_stats
    from trainer.benchmark.data import read_jsonl
    from trainer.tasks import TASKS
    t0 = time.process_time()
    status, out, err = run(capsys, "data", "listops", "--split", "test_900_1000", "--stats")
    assert status == 0, err
    assert time.process_time() - t0 < 15
    k = int(re.search(r"from (\d+) rows \(seed 0; -n N for more\)", out).group(1))
    assert 16 <= k < 100
    shares = json.loads(re.search(r"labels: (\{.*\})", out).group(1))
    assert abs(sum(shares.values()) - 1) < 0.01 and all(round(v, 3) == v for v in shares.values())
    f = tmp_path / "bin.jsonl"
    assert run(capsys, "data", "listops", "--split", "test_900_1000", "-n", str(k), "-o", str(f))[0] == 0
    task = TASKS["listops"]
    assert split_stats(task, read_jsonl(task, f))["labels"] == shares


def test_stats_shares_of_a_per_position_task_are_rounded(capsys):
    status, out, _ = run(capsys, "data", "flipflop", "--split", "valid_128", "--stats", "-n", "7")
    assert status == 0 and "from 7 rows (seed 0)" in out
    numbers = re.findall(r"\d+\.\d+", out.split("labels:")[1].split("\n")[0])
    assert numbers and all(len(x.split(".")[1]) <= 3 for x in numbers), out
