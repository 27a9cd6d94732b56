"""Issue 16: damaged compiled-model and run directories, compiled-run limits,
`rasp eval` keeping its results.  Each outcome is the right output or a clean
`PATH: error: ...` with exit status 2 -- never a traceback, never a lost
checkpoint.  A few cases go through a real subprocess; the many random
damages call the same `rasp.cli.main` in-process (fast)."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rasp
from rasp.cli import main
from trainer.run import checkpoint
from trainer.fan.evaluate import rows

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.heavy          # tests/conftest.py: run these first

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
PARITY = ROOT / "programs" / "parity.rasp"
INPUT = "1 0 1 1 > # #"
TRAIN = ["train", "--task", "parity", "--preset", "cpu", "--no-progress", "--d-model", "16", "--n-head", "2",
         "--ckpt-every", "10", "--log-every", "10", "--eval-every", "0", "--max-train-n", "3", "--interval", "10",
         "--batch-size", "8", "--eval-samples", "8"]
EVAL = ["--lengths", "2", "--samples", "8", "--no-plots", "--no-progress"]


def cli(*argv, **kw):
    kw.setdefault("timeout", 300)
    return subprocess.run([sys.executable, "-m", "rasp.cli", *map(str, argv)], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, **kw)


def in_process(capsys, *argv):
    """(status, stdout, stderr) of `rasp ARGV` run by the CLI's own main()."""
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "internal error" not in err and "Traceback" not in err, err
    return status, out, err


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """A compiled parity model and a 20-step training run, built once."""
    from compiler import compile_program
    base = tmp_path_factory.mktemp("reliability")
    compile_program(rasp.load(str(PARITY)), 8).save(base / "compiled")
    assert main([*TRAIN, "--steps", "20", "--out", str(base / "run")]) == 0
    return base


@pytest.fixture
def compiled(dirs, tmp_path):
    shutil.copytree(dirs / "compiled", tmp_path / "m")
    return tmp_path / "m"


@pytest.fixture
def run(dirs, tmp_path):
    shutil.copytree(dirs / "run", tmp_path / "r")
    return tmp_path / "r"


def expected_output():
    prog = rasp.load(str(PARITY))
    return prog.format_output(prog.run(prog.parse_input(INPUT)))


# ---- compiled-model directories ---------------------------------------------------

def test_compiled_dir_writes_a_manifest_and_runs(compiled):
    assert json.loads((compiled / "manifest.json").read_text())["format"] == "rasp-compiled/1"
    r = cli("run", compiled, "--input", INPUT)
    assert r.returncode == 0 and r.stdout.strip() == expected_output(), r.stderr
    (compiled / "config.json").write_text("{not json")                 # one damage through a real process
    r = cli("run", compiled, "--input", INPUT)
    assert r.returncode == 2 and r.stderr.startswith(f"{compiled}/config.json: error: checksum mismatch")
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("damage, file, words", [
    ("not_json", "config.json", "checksum"),
    ("truncate", "model.safetensors", "checksum"),
    ("replace_program", "program.rasp", "checksum"),
])
def test_damaged_compiled_dir_is_a_located_error(compiled, capsys, damage, file, words):
    path = compiled / file
    if damage == "not_json":
        path.write_text("{not json")
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[:1000])
    else:
        path.write_text((ROOT / "programs" / "copy.rasp").read_text())
    status, _, err = in_process(capsys, "run", compiled, "--input", INPUT)
    assert status == 2 and err.startswith(f"{compiled}/{file}: error:") and words in err, err


def _without_manifest(d: Path):
    (d / "manifest.json").unlink()


def _edit_config(d: Path, edit):
    cfg = json.loads((d / "config.json").read_text())
    edit(cfg)
    (d / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("edit, words", [
    (lambda c: c.pop("d_model"), "missing key 'd_model'"),
    (lambda c: c.update(colour="blue"), "unknown key 'colour'"),
    (lambda c: c.update(d_model=-4), "d_model: expected an integer"),
    (lambda c: c.update(d_model=10 ** 12), "d_model: expected an integer"),
    (lambda c: c.update(n_body=3), "block_shapes: expected [] or one [n_head, d_head, d_mlp] per block"),
    (lambda c: c.update(n_body=3, block_shapes=[]), "tensors do not match"),
    (lambda c: c["block_shapes"][0].__setitem__(2, 48), "needs F32"),
    (lambda c: c["block_shapes"][0].__setitem__(0, -1), "block_shapes: expected"),
    (lambda c: c.pop("block_shapes"), "needs F32"),     # an older file: every block n_head, d_head, d_mlp
    (lambda c: c["extra"].update(input_tokens=[0, 1]), "extra.input_tokens"),
    (lambda c: c["extra"]["compiler"].pop("has_loop"), "extra.compiler.has_loop"),
])
def test_config_schema_without_a_manifest(compiled, capsys, edit, words):
    """An older directory (no checksums) is still checked for structure."""
    _without_manifest(compiled)
    _edit_config(compiled, edit)
    status, _, err = in_process(capsys, "run", compiled, "--input", INPUT)
    assert status == 2 and f"{compiled}/" in err and words in err, err


def test_old_dir_without_manifest_runs_with_a_warning(compiled, capsys):
    _without_manifest(compiled)
    status, out, err = in_process(capsys, "run", compiled, "--input", INPUT)
    assert status == 0 and out.strip() == expected_output() and "no manifest.json" in err


def test_replaced_program_of_another_vocabulary_without_manifest(compiled, capsys):
    _without_manifest(compiled)
    (compiled / "program.rasp").write_text((ROOT / "programs" / "sort.rasp").read_text())
    status, _, err = in_process(capsys, "run", compiled, "--input", INPUT)
    assert status == 2 and "program.rasp: error:" in err and "replaced" in err


def test_compiled_runs_obey_max_steps_and_max_len(compiled, tmp_path, capsys):
    status, _, err = in_process(capsys, "run", compiled, "--input", INPUT, "--param", "n=10000000")
    assert status == 2 and "the limit is 10000" in err and "--max-steps" in err
    status, _, err = in_process(capsys, "run", compiled, "--input", INPUT, "--param", "n=50", "--max-steps", "20")
    assert status == 2 and "50 iterations; the limit is 20" in err
    status, _, err = in_process(capsys, "run", compiled, "--input", INPUT, "--steps", "10000000")
    assert status == 2 and "--max-steps" in err
    status, _, err = in_process(capsys, "run", compiled, "--input", INPUT, "--max-len", "4")
    assert status == 2 and "the limit is 4" in err
    long = tmp_path / "long.txt"
    long.write_text(" ".join(["1"] * 3000) + " > # #\n")
    status, _, err = in_process(capsys, "run", compiled, "--inputs", long)
    assert status == 2 and "multiply-adds" in err
    # a config asking for 10^12 fixed steps (an older dir, so the edit is not a checksum error)
    _without_manifest(compiled)
    _edit_config(compiled, lambda c: c["extra"]["compiler"].update(steps=10 ** 12))
    status, _, err = in_process(capsys, "run", compiled, "--input", INPUT)
    assert status == 2 and "config.json: error: extra.compiler.steps" in err, err


def test_program_copy_without_its_requires_is_refused(compiled, capsys):
    """Issue 26: program.rasp's `require` lines removed and the manifest
    recomputed -- the model would answer inputs the program rejects."""
    from compiler.validate import COMPILED_FILES
    from model.files import write_manifest
    prog = compiled / "program.rasp"
    prog.write_text("".join(l for l in prog.read_text().splitlines(True) if not l.startswith("require")))
    write_manifest(compiled, COMPILED_FILES, "rasp-compiled/1")
    status, _, err = in_process(capsys, "run", compiled, "--input", "1 0 > > #")
    assert status == 2 and err.startswith(f"{compiled}/program.rasp: error: its `require` lines do not match"), err


def test_compiled_work_is_bounded_per_input(compiled, tmp_path, capsys):
    """Issue 26: the multiply-add bound is per input (many inputs that each
    pass it run; the old total bound refused them), and a long one is located."""
    from compiler.compiled import load_compiled
    from compiler.limits import flops
    cm = load_compiled(compiled)
    one = flops(cm.model.cfg, len(INPUT.split()), 1, 4)
    many = tmp_path / "many.txt"
    many.write_text((INPUT + "\n") * 60 + "1 0 1 1 0 1 1 > # #\n")
    status, out, err = in_process(capsys, "run", compiled, "--inputs", many, "--max-work", int(one * 1.5))
    assert status == 2 and err.startswith(f"{many}:61: error: this input would take about"), err
    many.write_text((INPUT + "\n") * 60 + "1 0 > #\n")
    status, out, err = in_process(capsys, "run", compiled, "--inputs", many, "--max-work", int(one * 1.5))
    prog = rasp.load(str(PARITY))
    assert status == 0 and out.splitlines() == [expected_output()] * 60 + [
        prog.format_output(prog.run(prog.parse_input("1 0 > #")))], err


def _damage(root: Path, data, files):
    """Apply one random damage to one of `files` under root; returns a label."""
    name = data.draw(st.sampled_from(files))
    path = root / name
    if not path.exists():
        return f"{name}: absent"
    op = data.draw(st.sampled_from(["truncate", "flip", "delete", "append", "edit"] if path.is_file()
                                   else ["delete"]))
    if op == "delete":
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    elif op == "truncate":
        raw = path.read_bytes()
        path.write_bytes(raw[:data.draw(st.integers(0, max(len(raw) - 1, 0)))])
    elif op == "flip":
        raw = bytearray(path.read_bytes())
        if raw:
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] ^= 1 << data.draw(st.integers(0, 7))
            path.write_bytes(bytes(raw))
    elif op == "append":
        with open(path, "ab") as f:
            f.write(data.draw(st.binary(min_size=1, max_size=20)))
    else:
        try:
            obj = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError):
            return f"{name}: not JSON"
        if isinstance(obj, dict) and obj:
            key = data.draw(st.sampled_from(sorted(obj)))
            value = data.draw(st.one_of(st.none(), st.integers(-10 ** 15, 10 ** 15), st.text(max_size=5),
                                        st.booleans(), st.just([]), st.just({})))
            obj[key] = value
            path.write_text(json.dumps(obj))
    return f"{name}: {op}"


COMPILED_FILES = ["config.json", "model.safetensors", "program.rasp", "manifest.json"]


def _compiled_damage_case(dirs, capsys, data, drop_manifest):
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "m"
        shutil.copytree(dirs / "compiled", d)
        if drop_manifest:
            _without_manifest(d)
        for _ in range(data.draw(st.integers(1, 2))):
            _damage(d, data, COMPILED_FILES)
        status, out, err = in_process(capsys, "run", d, "--input", INPUT)
        assert status in (0, 2), err
        if status == 0:
            assert out.strip() == expected_output()
        else:
            assert "error:" in err


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), drop_manifest=st.booleans())
def test_random_damage_to_a_compiled_dir(dirs, capsys, data, drop_manifest):
    _compiled_damage_case(dirs, capsys, data, drop_manifest)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), drop_manifest=st.booleans())
def test_random_damage_to_a_compiled_dir_thorough(dirs, capsys, data, drop_manifest):
    _compiled_damage_case(dirs, capsys, data, drop_manifest)


# ---- run directories --------------------------------------------------------------

def _step(out) -> int:
    return checkpoint.load_state(checkpoint.latest(out))["step"]


def _snapshot(out: Path) -> dict:
    """sha256 of every file under checkpoints/ (what must never be lost)."""
    root = out / "checkpoints"
    if not root.is_dir():
        return {}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")}


def test_truncated_latest_checkpoint_falls_back(run, capsys):
    (run / "checkpoints" / "step_0000020" / "model.safetensors").write_bytes(b"\0" * 10)
    status, out, err = in_process(capsys, "eval", run, *EVAL)
    assert status == 0 and "step 10" in out and "step_0000020 is damaged" in err, err
    status, _, err = in_process(capsys, *TRAIN, "--steps", "30", "--out", run, "--resume")
    assert status == 0 and "using step_0000010" in err, err
    assert _step(run) == 30 and (run / "checkpoints" / "damaged-step_0000020").is_dir()


def test_deleted_latest_json_is_rebuilt_not_restarted(run, capsys):
    (run / "latest.json").unlink()
    status, _, err = in_process(capsys, *TRAIN, "--steps", "25", "--ckpt-every", "5", "--out", run, "--resume")
    assert status == 0 and "latest.json is missing; using step_0000020" in err, err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [10, 20, 25]      # continued, not restarted


def test_deleted_checkpoints_folder_is_refused_and_nothing_is_overwritten(run, capsys):
    shutil.rmtree(run / "checkpoints")
    before = (run / "metrics.jsonl").read_text()
    status, _, err = in_process(capsys, *TRAIN, "--steps", "30", "--out", run, "--resume")
    assert status == 2 and "no intact checkpoint" in err
    assert (run / "metrics.jsonl").read_text() == before and not (run / "checkpoints").exists()
    status, _, err = in_process(capsys, "eval", run, *EVAL)
    assert status == 2 and "no intact checkpoint" in err


def test_edited_run_json_is_refused_by_eval_and_resume(run, capsys):
    spec = json.loads((run / "run.json").read_text())
    spec["hparams"]["d_model"] = 32
    (run / "run.json").write_text(json.dumps(spec))
    status, _, err = in_process(capsys, "eval", run, *EVAL)
    assert status == 2 and "run.json: error: does not describe the model" in err, err
    status, _, err = in_process(capsys, *TRAIN, "--steps", "30", "--out", run, "--resume")
    assert status == 2 and "differs in hparams.d_model" in err and _step(run) == 20


def test_truncated_run_json_and_torn_metrics_line_resume(run, capsys):
    (run / "run.json").write_text((run / "run.json").read_text()[:50])
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 30, "lo')
    status, _, err = in_process(capsys, *TRAIN, "--steps", "30", "--out", run, "--resume")
    assert status == 0, err
    assert "copy kept in step_0000020" in err and "dropped a damaged line" in err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [10, 20, 30]


def test_second_writer_is_locked_out_and_leftovers_are_cleaned(run, capsys):
    (run / "checkpoints" / ".tmp-step_0000030-999").mkdir()
    with open(run / ".lock", "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)      # "another rasp train"
        status, _, err = in_process(capsys, *TRAIN, "--steps", "30", "--out", run, "--resume")
        assert status == 2 and "another `rasp train`" in err, err
    assert (run / "checkpoints" / ".tmp-step_0000030-999").exists()   # untouched while locked
    status, _, err = in_process(capsys, *TRAIN, "--steps", "30", "--out", run, "--resume")
    assert status == 0 and not list((run / "checkpoints").glob(".tmp-*")), err


def test_a_lock_file_planted_as_a_link_is_refused_and_its_target_kept(run, tmp_path, capsys):
    """Issue 26: OUT/.lock as a symbolic or hard link to another file is never
    truncated or written through; a finished run keeps no lock file (issue 25)."""
    assert not (run / ".lock").exists()                     # removed when the run that made it stopped
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    for plant in (lambda: (run / ".lock").symlink_to(victim), lambda: os.link(victim, run / ".lock"),
                  lambda: os.mkfifo(run / ".lock")):
        plant()
        status, _, err = in_process(capsys, *TRAIN, "--steps", "30", "--out", run, "--resume")
        assert status == 2 and f"{run}/.lock: error:" in err and "plain file" in err, err
        assert victim.read_text() == "precious" and _step(run) == 20
        (run / ".lock").unlink()
    status, _, err = in_process(capsys, *TRAIN, "--steps", "30", "--out", run, "--resume")
    assert status == 0 and _step(run) == 30 and not (run / ".lock").exists(), err


def _small_files():
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))     # optimizer.safetensors is ~38 kB
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)                    # -> EFBIG, as a full disk gives ENOSPC


def test_full_disk_during_a_checkpoint_is_a_clean_error(run, capsys):
    before = _snapshot(run)
    r = cli(*TRAIN, "--steps", "30", "--out", run, "--resume", preexec_fn=_small_files)
    assert r.returncode == 2 and "cannot write checkpoint step_0000030" in r.stderr, r.stderr
    assert "step_0000020) is intact" in r.stderr and "Traceback" not in r.stderr
    assert _snapshot(run) == before and _step(run) == 20
    status, _, err = in_process(capsys, *TRAIN, "--steps", "30", "--out", run, "--resume")
    assert status == 0 and _step(run) == 30, err


RUN_FILES = ["latest.json", "run.json", "metrics.jsonl", "checkpoints",
             *[f"checkpoints/step_00000{s}/{f}" for s in (10, 20)
               for f in ("model.safetensors", "optimizer.safetensors", "state.json", "manifest.json")]]


def _run_damage_case(dirs, capsys, data):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r"
        shutil.copytree(dirs / "run", out)
        for _ in range(data.draw(st.integers(1, 2))):
            _damage(out, data, RUN_FILES)
        status, _, err = in_process(capsys, "eval", out, *EVAL)
        assert status in (0, 2), err
        before = _snapshot(out)
        status, _, err = in_process(capsys, *TRAIN, "--steps", "30", "--out", out, "--resume")
        assert status in (0, 2), err
        if status == 0:
            assert _step(out) == 30
        else:
            assert _snapshot(out) == before, "a refused resume changed the checkpoints"


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_damage_to_a_run_dir(dirs, capsys, data):
    _run_damage_case(dirs, capsys, data)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_damage_to_a_run_dir_thorough(dirs, capsys, data):
    _run_damage_case(dirs, capsys, data)


# ---- rasp eval keeps its results ----------------------------------------------------

def test_eval_merges_rows_by_length(run, capsys):
    status, _, err = in_process(capsys, "eval", run, "--stop", "oracle", "--lengths", "1:2", "--samples", "8")
    assert status == 0 and "eval oracle" not in err      # no bar when stderr is no terminal (test_cli_usability)
    status, out, _ = in_process(capsys, "eval", run, "--stop", "oracle", "--lengths", "4", "--samples", "8")
    assert status == 0 and "merged with 2 earlier rows" in out
    res = json.loads((run / "eval_oracle.json").read_text())
    assert [r["length"] for r in rows(res)] == [1, 2, 4] and list(res["splits"]["test"]["by_length"]) == ["1", "2", "4"]
    assert (run / "eval_oracle_accuracy.png").stat().st_size > 1000
    # a later checkpoint: the earlier step's results are kept under their own name
    assert main([*TRAIN, "--steps", "30", "--out", str(run), "--resume"]) == 0
    status, _, err = in_process(capsys, "eval", run, "--stop", "oracle", "--lengths", "3", "--samples", "8", "--no-plots")
    assert status == 0 and "moved to eval_oracle_step20.json" in err
    assert [r["length"] for r in rows(json.loads((run / "eval_oracle_step20.json").read_text()))] == [1, 2, 4]
    assert [r["length"] for r in rows(json.loads((run / "eval_oracle.json").read_text()))] == [3]


def test_eval_length_limit(run, capsys):
    status, _, err = in_process(capsys, "eval", run, "--lengths", "1:3000", "--no-progress")
    assert status == 2 and "above the limit of 50" in err and "--max-len" in err
    status, _, err = in_process(capsys, "eval", run, "--lengths", "1:1000000000000")
    assert status == 2 and "above the limit" in err
    status, out, _ = in_process(capsys, "eval", run, "--lengths", "60", "--max-len", "60", *EVAL[2:])
    assert status == 0 and "   60 " in out


def test_full_disk_while_compiling_is_a_clean_error(tmp_path):
    """`rasp compile -o` onto a full disk: a clean error, and no half-written file
    under its final name (each file is written atomically)."""
    out = tmp_path / "model"
    r = cli("compile", ROOT / "programs" / "addition.rasp", "--max-len", "16", "-o", out, preexec_fn=_small_files)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"{out}: error: could not write the compiled model"), r.stderr
    assert not (out / "model.safetensors").exists() and not (out / "manifest.json").exists()
