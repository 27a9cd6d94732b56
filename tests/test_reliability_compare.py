"""Issue 26: the comparison workbench under damage.  `rasp compare` result
folders, suite files and comparison run directories are truncated, flipped,
replaced by garbage JSON, by directories or by links to a file outside;
`rasp compare --report`, `rasp compare --dry-run`, `rasp eval` and
`rasp train --resume` must then give the right result or a clean error (exit 2),
never a traceback, and never write outside the folder they were given."""
from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rasp.cli import main
from rasp.errors import RaspFileError
from test_compare import FAKE_TRAINER, SUITE, finished_run, write
from trainer.compare import report as R
from trainer.compare import runner
from trainer.compare.suite import load_suite

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.heavy          # tests/conftest.py: run these first

SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck))
JSON = st.recursive(st.none() | st.booleans() | st.integers(-10 ** 20, 10 ** 20) | st.floats() | st.text(max_size=6),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=8)


def examples_for(fast: int, thorough: int) -> list:
    """Hypothesis example counts: a few in the fast suite, many in the slow one."""
    return [fast, pytest.param(thorough, marks=pytest.mark.slow)]


def property_test(examples: int, case):
    """Run case(data) on `examples` hypothesis draws."""
    @settings(max_examples=examples, **SETTINGS)
    @given(data=st.data())
    def run(data):
        case(data)
    run()


def in_process(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "internal error" not in err and "Traceback" not in err, err
    assert status in (0, 2), (status, err)
    return status, out, err


def tree(root: Path) -> dict:
    """sha256 of every plain file under root (links not followed)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def damage(path: Path, data, victim: Path) -> str:
    """One damage to `path` (a file, present or not); returns a label."""
    op = data.draw(st.sampled_from(["truncate", "flip", "delete", "garbage", "edit", "link", "directory", "deep"]))
    if op in ("truncate", "flip", "edit") and not path.is_file():
        op = "garbage"
    if path.is_symlink() or path.is_file():
        raw = path.read_bytes() if not path.is_symlink() else b""
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
        raw = b""
    else:
        raw = b""
    # an earlier damage may have turned a folder above into a link or a file: that damage gives way
    base = victim.parent
    for above in [q for q in path.parents if base in q.parents]:
        if above.is_symlink() or above.is_file():
            above.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if op == "truncate":
        path.write_bytes(raw[:data.draw(st.integers(0, max(len(raw) - 1, 0)))])
    elif op == "flip" and raw:
        b = bytearray(raw)
        i = data.draw(st.integers(0, len(b) - 1))
        b[i] ^= 1 << data.draw(st.integers(0, 7))
        path.write_bytes(bytes(b))
    elif op == "garbage":
        path.write_text(json.dumps(data.draw(JSON)))
    elif op == "edit":
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError):            # an earlier damage nested it too deeply
            obj = None
        if isinstance(obj, dict) and obj:
            obj[data.draw(st.sampled_from(sorted(obj)))] = data.draw(JSON)
        path.write_text(json.dumps(obj))
    elif op == "link":
        path.symlink_to(victim)
    elif op == "directory":
        path.mkdir()
    elif op == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    return f"{path.name}: {op}"


# ---- result folders: rasp compare --report ------------------------------------------

RESULT_FILES = ["compare.json", "report.md", "report.json", "plots",
                *[f"{run}/{f}" for run in ("flip__gru__cpu__s0", "flip__tf__cpu__s0", "boom__gru__cpu__s0")
                  for f in ("run.json", "summary.json", "eval.json", "failed.json")]]


def _result_folder(base: Path) -> Path:
    suite = load_suite(str(write(base / "mini.toml", SUITE)))
    out = base / "out"
    finished_run(out / "flip__gru__cpu__s0", {"dense": 0.9, "sparse": 0.5})
    finished_run(out / "flip__gru__cpu__s1", {"dense": 0.7, "sparse": 0.3})
    finished_run(out / "flip__tf__cpu__s0", {"dense": 0.6})
    write(out / "boom__gru__cpu__s0" / "failed.json", json.dumps({"exit_code": 3, "failed_step": "train",
                                                                   "stderr_tail": "boom"}))
    R.record_selection(out, suite, "cpu", None, None, None)
    return out


@pytest.mark.parametrize("edit, words", [
    (lambda o: (o / "flip__gru__cpu__s0" / "run.json").write_text("[1]"), None),
    (lambda o: (o / "flip__gru__cpu__s0" / "eval.json").write_text('{"splits": {"dense": 5}}'), None),
    (lambda o: (o / "flip__gru__cpu__s0" / "eval.json").write_text(
        '{"splits": {"dense": {"stats": {"depth": 5}, "by_length": {"x": {"accuracy": 1}, "1e999": {}}}}}'), None),
    (lambda o: (o / "boom__gru__cpu__s0" / "failed.json").write_text('{"stderr_tail": 5}'), None),
    (lambda o: (o / "compare.json").write_text('{"suites": {"mini/cpu": "x"}}'), "compare.json: error: suites.mini/cpu"),
    (lambda o: (o / "compare.json").write_text('{"suites": {"m": {"suite": "mini", "file": "f", "preset": "cpu", '
                                               '"seeds": 1000000000, "models": null, "tasks": null}}}'), "seeds"),
    (lambda o: (o / "report.md").mkdir(), "report.md: error: cannot write"),
    (lambda o: (o / "plots").write_text("x"), "plots: error: is not a directory"),
])
def test_damaged_result_folder_cases(tmp_path, capsys, edit, words):
    """The cases of issue 26, each alone."""
    out = _result_folder(tmp_path)
    edit(out)
    status, _, err = in_process(capsys, "compare", "--report", out)
    assert (status == 0) if words is None else (status == 2 and words in err), err


def test_planted_links_in_a_result_folder_are_replaced_not_written_through(tmp_path, capsys):
    out = _result_folder(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (out / "plots").mkdir()
    for name in ("report.md", "report.json", "plots/mini_cpu_flip_dense_accuracy.png"):
        (out / name).symlink_to(victim)
    status, _, err = in_process(capsys, "compare", "--report", out)
    assert status == 0 and victim.read_text() == "precious", err
    assert not (out / "report.md").is_symlink() and "# `rasp compare` report" in (out / "report.md").read_text()
    (out / "plots").rename(out / "plots.old")
    (out / "plots").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    status, _, err = in_process(capsys, "compare", "--report", out)
    assert status == 2 and "plots: error: is not a directory" in err and not any((tmp_path / "elsewhere").iterdir())


@contextlib.contextmanager
def damaged(make, files: list, data, most: int):
    """A folder made by make(base) in a fresh temporary base, with 1..most
    random damages to `files`; yields (base, folder, victim): the victim is
    the file outside that planted links point to."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        out = make(base)
        victim = base / "victim.txt"
        victim.write_text("precious")
        for _ in range(data.draw(st.integers(1, most))):
            damage(out / data.draw(st.sampled_from(files)), data, victim)
        yield base, out, victim


def _result_damage_case(capsys, data):
    with damaged(_result_folder, RESULT_FILES, data, 3) as (base, out, victim):
        outside = {p.name for p in base.iterdir()}
        plots = data.draw(st.booleans())
        status, _, err = in_process(capsys, "compare", "--report", out, *([] if plots else ["--no-plots"]))
        if status == 0:
            assert "# `rasp compare` report" in (out / "report.md").read_text()
        else:
            assert "error:" in err
        assert victim.read_text() == "precious" and {p.name for p in base.iterdir()} == outside


@pytest.mark.parametrize("examples", examples_for(6, 400))
def test_random_damage_to_a_result_folder(capsys, examples):
    property_test(examples, lambda data: _result_damage_case(capsys, data))


# ---- suite files: rasp compare SUITE --dry-run -----------------------------------

TOML_VALUES = st.one_of(st.integers(-10 ** 20, 10 ** 20).map(str), st.text(max_size=8).map(json.dumps),
                        st.just("[" * 5000 + "]" * 5000), st.just("{ x = { y = 1 } }"), st.just('"{model.__class__}"'),
                        st.just("[5]"), st.just("true"), st.just('"/elsewhere/x.json"'), st.just('"valid_{"'))


def _suite_damage_case(capsys, data):
    with tempfile.TemporaryDirectory() as tmp:
        lines = SUITE.splitlines()
        for _ in range(data.draw(st.integers(1, 3))):
            i = data.draw(st.integers(0, len(lines) - 1))
            op = data.draw(st.sampled_from(["value", "delete", "truncate", "duplicate"]))
            if op == "value" and "=" in lines[i]:
                lines[i] = lines[i].split("=", 1)[0] + "= " + data.draw(TOML_VALUES)
            elif op == "delete":
                del lines[i]
            elif op == "truncate":
                lines[i] = lines[i][:data.draw(st.integers(0, len(lines[i])))]
            else:
                lines.insert(i, lines[i])
        path = write(Path(tmp) / "mini.toml", "\n".join(lines))
        out = Path(tmp) / "out"
        status, _, err = in_process(capsys, "compare", path, "--dry-run", "--out", out)
        assert status == 0 or (status == 2 and "error:" in err)
        assert not out.exists() or not any(out.iterdir())          # a dry run writes nothing


@pytest.mark.parametrize("examples", examples_for(30, 500))
def test_random_damage_to_a_suite(capsys, examples):
    property_test(examples, lambda data: _suite_damage_case(capsys, data))


def test_suite_sizes_are_bounded_before_work(tmp_path, capsys):
    many = SUITE + "".join(f'\n[sources.S{i}]\ncite = "x"\n' for i in range(25_000))
    status, _, err = in_process(capsys, "compare", write(tmp_path / "big.toml", many), "--dry-run")
    assert status == 2 and "big.toml:" in err and "at most 100" in err
    deep = SUITE.replace('n = 16', 'n = ' + "[" * 10_000 + "]" * 10_000)
    status, _, err = in_process(capsys, "compare", write(tmp_path / "deep.toml", deep), "--dry-run")
    assert status == 2 and "deep.toml:" in err and "nested more than 100 deep" in err
    grid = SUITE + "".join(f'\n[[models]]\nname = "m{i}"\nlabel = "M"\n' for i in range(900))
    status, _, err = in_process(capsys, "compare", write(tmp_path / "grid.toml", grid), "--dry-run", "--seeds", "20")
    assert status == 2 and "the limit is 10,000" in err
    write(tmp_path / "huge.toml", SUITE + "#" * (1 << 20))
    status, _, err = in_process(capsys, "compare", tmp_path / "huge.toml", "--dry-run")
    assert status == 2 and "the limit is 1,048,576" in err


@pytest.mark.parametrize("argv, words", [
    (["--seeds", "1000000000000", "--dry-run"], "--seeds: must be in 1..100"),
    (["--jobs", "100000000"], "--jobs: must be in 1..256"),
    (["--launcher", "'unclosed"], "No closing quotation"),
    (["--executor", "slurm", "--slurm", "bogus_param=1"], "--slurm: Unknown executor 'bogus'"),
    (["--out", "{dangling}"], "a symbolic link to nothing"),
    (["--out", "{file}"], "not a directory"),
])
def test_compare_flags_are_checked_before_anything_is_written(tmp_path, capsys, argv, words):
    pytest.importorskip("submitit") if "slurm" in argv else None
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    argv = [a.format(dangling=tmp_path / "dangling", file=tmp_path / "file") for a in argv]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    before = sorted(p.name for p in tmp_path.iterdir())
    try:
        status = main(["compare", str(write(tmp_path / "mini.toml", SUITE)), "--tasks", "flip", *argv])
    except SystemExit as e:             # argparse's range errors
        status = e.code
    err = capsys.readouterr().err
    assert status == 2 and words in err and "internal error" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before + ["mini.toml"])


# ---- comparison run directories: the runner, rasp eval, rasp train --resume --------

def test_planted_links_in_a_run_directory_are_never_written_through(tmp_path):
    """train.log, failed.json and compare_run.json planted as links to a file
    outside: the runner fails the run (or replaces the link), the file stays."""
    suite = load_suite(str(write(tmp_path / "mini.toml", SUITE)))
    fake = runner.TrainerCommands((sys.executable, str(write(tmp_path / "fake_trainer.py", FAKE_TRAINER))))
    from trainer.compare import grid as G
    spec = next(r for r in G.expand(suite, "cpu") if r.run_id == "flip__gru__cpu__s0")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    d = tmp_path / "out" / spec.run_id
    d.mkdir(parents=True)
    (d / "train.log").symlink_to(victim)
    (d / "failed.json").symlink_to(victim)
    rec = runner.execute(spec, d, fake)
    assert rec["status"] == "failed" and "train.log" in rec["stderr_tail"] and victim.read_text() == "precious"
    assert not (d / "failed.json").is_symlink() and json.loads((d / "failed.json").read_text())["failed_step"] == "train"
    (d / "train.log").unlink()
    (d / "compare_run.json").symlink_to(victim)
    rec = runner.execute(spec, d, fake)
    assert rec["status"] == "finished" and victim.read_text() == "precious"
    assert json.loads((d / "compare_run.json").read_text())["status"] == "finished"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(d)
    d.symlink_to(elsewhere, target_is_directory=True)          # the run directory itself a link
    with pytest.raises(RaspFileError, match="is a link or a file"):
        runner.execute(spec, d, fake)
    assert not any(elsewhere.iterdir())


TRAIN = ["train", "--task", "flipflop", "--model", "rnn", "--preset", "cpu", "--no-progress", "--set", "d_model=8",
         "--set", "batch_size=4", "--set", "ckpt_every=2"]
EVAL = ["--splits", "valid_128", "-n", "4", "--no-progress", "--no-plots"]
RUN_FILES = ["run.json", "latest.json", "metrics.jsonl", "summary.json", "eval.json", "checkpoints",
             *[f"checkpoints/step_000000{s}/{f}" for s in (2, 4)
               for f in ("model.safetensors", "optimizer.safetensors", "state.json", "manifest.json")]]


@pytest.fixture(scope="module")
def seq_run(tmp_path_factory):
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("seqrun") / "r"
    assert main([*TRAIN, "--steps", "4", "--out", str(out)]) == 0
    assert main(["eval", str(out), *EVAL]) == 0
    yield out
    torch.set_num_threads(old)


def _checkpoints(out: Path) -> dict:
    return tree(out / "checkpoints") if (out / "checkpoints").is_dir() and not (out / "checkpoints").is_symlink() else {}


def _seq_run_damage_case(seq_run, capsys, data):
    with damaged(lambda base: Path(shutil.copytree(seq_run, base / "r")), RUN_FILES, data, 2) as (base, out, victim):
        in_process(capsys, "eval", out, *EVAL)
        before = _checkpoints(out)
        status, _, err = in_process(capsys, *TRAIN, "--steps", "6", "--out", out, "--resume")
        if status == 2:
            assert _checkpoints(out) == before, "a refused resume changed the checkpoints"
        assert victim.read_text() == "precious"
        assert sorted(p.name for p in base.iterdir()) == ["r", "victim.txt"]


@pytest.mark.parametrize("examples", examples_for(4, 150))
def test_random_damage_to_a_comparison_run(seq_run, capsys, examples):
    property_test(examples, lambda data: _seq_run_damage_case(seq_run, capsys, data))


def test_a_malformed_random_state_is_a_located_error(seq_run, tmp_path, capsys):
    from model.files import write_manifest
    out = tmp_path / "r"
    shutil.copytree(seq_run, out)
    ck = out / "checkpoints" / "step_0000004"
    state = json.loads((ck / "state.json").read_text())
    state["numpy_rng"] = {"bit_generator": "PCG64", "state": "x"}
    (ck / "state.json").write_text(json.dumps(state))
    write_manifest(ck, list(json.loads((ck / "manifest.json").read_text())["sha256"]), "rasp-checkpoint/1")
    status, _, err = in_process(capsys, *TRAIN, "--steps", "6", "--out", out, "--resume")
    assert status == 2 and f"{ck}/state.json: error: cannot resume from it" in err, err


def test_eval_json_targets_and_earlier_files(seq_run, tmp_path, capsys):
    out = tmp_path / "r"
    shutil.copytree(seq_run, out)
    (tmp_path / "d").mkdir()
    status, _, err = in_process(capsys, "eval", out, *EVAL, "--json", tmp_path / "d")
    assert status == 2 and "is a directory" in err
    status, _, err = in_process(capsys, "eval", out, *EVAL, "--json", tmp_path / "no" / "e.json")
    assert status == 2 and "does not exist" in err
    doc = json.loads((out / "eval.json").read_text())
    doc["splits"]["valid"] = 5
    doc["splits"]["valid_128"]["metrics"]["acc"] = "x"
    (out / "eval.json").write_text(json.dumps(doc))
    status, out_text, err = in_process(capsys, "eval", out, "--splits", "test_128_p0.1", "-n", "4", "--no-progress",
                                       "--no-plots")
    assert status == 0 and set(json.loads((out / "eval.json").read_text())["splits"]) == {"test_128_p0.1"}, err


def test_data_files_with_bad_lines_are_located_errors(tmp_path, capsys):
    good = tmp_path / "good.jsonl"
    status, _, _ = in_process(capsys, "data", "flipflop", "--split", "valid", "-n", "3", "-o", good)
    assert status == 0 and len(good.read_text().splitlines()) == 3          # a part of the mix got 0 examples
    line = good.read_text().splitlines()[0]
    cases = {"utf.jsonl": (line.encode() + b'\n{"input": "\xff"}\n', ":2: not UTF-8"),
             "group.jsonl": (json.dumps({**json.loads(line), "group": "abc"}).encode(), ":1: group must be an integer"),
             "deep.jsonl": (b"[" * 100_000 + b"]" * 100_000, ":1: JSON nested too deeply")}
    for name, (raw, words) in cases.items():
        (tmp_path / name).write_bytes(raw)
        status, _, err = in_process(capsys, *TRAIN, "--steps", "1", "--data", tmp_path / name, "--out",
                                    tmp_path / f"o_{name}")
        assert status == 2 and f"{tmp_path / name}{words}" in err, err
