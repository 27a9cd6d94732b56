"""The command line as a user meets it (docs/language.md §11)."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rasp.cli import main

ROOT = Path(__file__).resolve().parents[1]
PARITY = str(ROOT / "programs" / "parity.rasp")


def cli(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return status, out, err


def test_readme_first_command_through_the_console_script():
    rasp_bin = shutil.which("rasp")
    cmd = [rasp_bin] if rasp_bin else [sys.executable, "-m", "rasp.cli"]
    done = subprocess.run(cmd + ["run", PARITY, "--input", "1 0 1 1 > # #"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[4:] == ["1", "#", "#"]


def test_inputs_file_one_output_per_line(tmp_path, capsys):
    inputs = tmp_path / "in.txt"
    rows = ["1 > # #", "1 1 > # #", "0 1 1 1 0 > # #"]
    inputs.write_text("\n".join(rows) + "\n")
    status, out, err = cli(capsys, "run", PARITY, "--inputs", str(inputs))
    assert status == 0, err
    lines = out.splitlines()
    assert len(lines) == 3
    for row, line in zip(rows, lines):
        bits = [int(t) for t in row.split()[:row.split().index(">")]]
        n = len(bits)
        assert len(line.split()) == len(row.split())
        assert line.split()[n:] == [str(sum(bits) % 2), "#", "#"]


def test_trace_shows_each_statement_and_loop_step(capsys):
    status, out, err = cli(capsys, "run", PARITY, "--input", "1 0 1 > # #", "--trace")
    assert status == 0, err
    steps = {int(m.group(1)) for m in re.finditer(r"^\s*\d+\s+(\d+)\s+partial", out, re.M)}
    assert steps == {1, 2, 3}
    assert out.rstrip().splitlines()[-1] == "0 1 1 0 # #"


def test_param_override_changes_the_loop_count(capsys):
    _, normal, _ = cli(capsys, "run", PARITY, "--input", "1 1 1 > # #")
    status, out, err = cli(capsys, "run", PARITY, "--input", "1 1 1 > # #", "--param", "n=2")
    assert status == 0, err
    assert normal.split()[3] == "1" and out.split()[3] == "0"   # parity of the last two bits only


def test_negative_input_tokens(tmp_path, capsys):
    prog = tmp_path / "neg.rasp"
    prog.write_text("input x: {-5..5}\noutput x * 2 - 1\n")
    status, out, err = cli(capsys, "run", str(prog), "--input", "-3 0 5")
    assert status == 0, err
    assert out.split() == ["-7", "-1", "9"]


def test_symbols_print_as_text(tmp_path, capsys):
    prog = tmp_path / "sym.rasp"
    prog.write_text('const A = "a"\nconst B = "b"\ninput x: {A, B, 0}\noutput where(x == A, B, x)\n')
    status, out, err = cli(capsys, "run", str(prog), "--input", "a 0 b")
    assert status == 0, err
    assert out.split() == ["b", "0", "b"]


def test_check_reports_ok(capsys):
    status, out, err = cli(capsys, "check", PARITY, "--strict")
    assert status == 0 and "ok" in out and err == ""


def test_graph_writes_dot_or_svg(tmp_path, capsys):
    target = tmp_path / "g.svg"
    status, out, err = cli(capsys, "graph", PARITY, "-o", str(target))
    assert status == 0, err
    written = target if target.exists() else target.with_suffix(".dot")
    assert written.exists()
    if written.suffix == ".dot":
        text = written.read_text()
        assert "cluster_loop0" in text and "dot -Tsvg" in out
    else:
        assert b"<svg" in written.read_bytes()
    status, out, err = cli(capsys, "graph", PARITY, "-o", str(tmp_path / "g.dot"))
    assert "subgraph cluster_loop0" in (tmp_path / "g.dot").read_text()


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", PARITY])
    assert e.value.code == 2


def test_compiled_model_warns_beyond_its_design_length(tmp_path, capsys):
    prog = tmp_path / "hist.rasp"
    prog.write_text("input x: {0..3}\noutput sel_width(select(x, x, eq))\n")
    model_dir = tmp_path / "model"
    status, out, err = cli(capsys, "compile", str(prog), "--max-len", "2", "-o", str(model_dir))
    assert status == 0, err
    status, out, err = cli(capsys, "run", str(model_dir), "--input", "1 1 2")
    assert status == 0 and out.split() == ["1", "2", "1"] and "warning" not in err
    status, out, err = cli(capsys, "run", str(model_dir), "--input", " ".join(["1"] * 12))
    assert status == 0 and err.startswith("warning: 1 input(s)") and "--max-len" in err


# ---- start-up: the layering that keeps interpreter commands fast (issue 9) ---------------

_LOADED = ("import sys\nfrom rasp.cli import main\n"
           "try:\n    status = main(sys.argv[1:])\nexcept SystemExit as e:\n    status = e.code\n"
           "print('STATUS', status, file=sys.stderr)\n"
           "print('MODULES', ' '.join(sorted(sys.modules)), file=sys.stderr)")


def _modules_after(tmp_path, *argv):
    """(status, stdout, set of top-level packages imported) of one `rasp` process."""
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", _LOADED, *argv], capture_output=True, text=True, env=env)
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr, done.stderr
    status = int(next(l for l in lines if l.startswith("STATUS")).split()[1])
    modules = next(l for l in lines if l.startswith("MODULES")).split()[1:]
    return status, done.stdout, {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("argv", [
    ["run", PARITY, "--input", "1 0 1 1 > # #"],
    ["check", PARITY],
    ["graph", PARITY, "-o", "{tmp}/g.dot"],
    ["--help"],
    ["run", "--help"],
])
def test_interpreter_commands_load_no_torch_model_compiler_or_trainer(tmp_path, argv):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    status, out, top = _modules_after(tmp_path, *argv)
    assert status == 0 and out
    assert not top & {"torch", "model", "compiler", "trainer"}, top & {"torch", "model", "compiler", "trainer"}
    if argv[0] == "run" and "--help" not in argv:
        assert out.split() == ["0", "1", "1", "0", "1", "#", "#"]
    if argv[0] in ("check", "--help"):
        assert "numpy" not in top          # only running a program needs the interpreter's arrays


def test_running_a_saved_model_imports_no_torch_compiler(tmp_path):
    """A model is built on the meta device to receive its file's tensors; initialising meta
    tensors imports torch's compiler (torch._dynamo, 2 s of a CPU start), so it is not done."""
    assert _modules_after(tmp_path, "compile", PARITY, "-o", str(tmp_path / "m"))[0] == 0
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", _LOADED, "run", str(tmp_path / "m"), "--input", "1 0 1 1 > # #"],
                          capture_output=True, text=True, env=env)
    modules = next(l for l in done.stderr.splitlines() if l.startswith("MODULES")).split()[1:]
    assert done.stdout.split() == ["0", "1", "1", "0", "1", "#", "#"], done.stderr
    assert "torch" in modules and "torch._dynamo" not in modules


def test_help_lists_every_command_without_importing_them(tmp_path):
    from rasp.cli import COMMANDS
    status, out, top = _modules_after(tmp_path, "--help")
    listed = re.findall(r"^\s{4}(\w+)\s{2,}", out, re.M)
    assert listed == list(COMMANDS) and {"run", "check", "graph", "compile", "train", "eval"} <= set(listed)
    assert "torch" not in top


def test_train_help_imports_the_trainer_only_for_train_and_never_torch(tmp_path):
    """Issue 56: `rasp train --help` lists the models by name without importing them
    (torch took seconds); --help-all, which has a line on each, may."""
    status, out, top = _modules_after(tmp_path, "train", "--help")
    assert status == 0 and "--task" in out and "--threads" in out and "trainer" in top
    assert not top & {"torch", "compiler", "model"}, top & {"torch", "compiler", "model"}


@pytest.mark.parametrize("argv", [
    ["train", "--task", "parity", "--stepz", "3", "--out", "{tmp}/x"],
    ["train", "--task", "parity", "--steps", "-3", "--out", "{tmp}/x"],
    ["eval", "{tmp}/x", "--stepz", "3"],
    ["data", "flipflop", "--stepz", "3"],
    ["export", "{tmp}/x", "--stepz", "3"],
    ["compare", "--stepz", "3"],
])
def test_a_mistyped_flag_is_refused_before_torch_is_imported(tmp_path, argv):
    """Parsing needs only torch-free tables (issue: a typo took 5 s to report)."""
    status, _, top = _modules_after(tmp_path, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert status == 2 and not top & {"torch", "model", "compiler"}, top & {"torch", "model", "compiler"}
    assert not (tmp_path / "x").exists()


def test_every_table_entry_resolves():
    import importlib
    from rasp.cli import COMMANDS
    for name, cmd in COMMANDS.items():
        module = importlib.import_module(cmd.module)
        assert callable(getattr(module, cmd.add)) and callable(getattr(module, cmd.run)), name
        if cmd.on_directory:
            assert callable(getattr(importlib.import_module(cmd.on_directory[0]), cmd.on_directory[1])), name


def test_a_command_whose_module_is_missing_is_a_clean_error(monkeypatch, capsys):
    from rasp import cli as rasp_cli
    monkeypatch.setitem(rasp_cli.COMMANDS, "ghost", rasp_cli.Command("no_such_module_here", "a missing command"))
    status, out, err = cli(capsys, "ghost")
    assert status == 2 and "`rasp ghost` is unavailable" in err and "no_such_module_here" in err


def test_the_parser_tables_are_cached_between_processes(tmp_path):
    from rasp.parser import grammar_cache_file
    from importlib import resources
    grammar = resources.files("rasp").joinpath("grammar.lark").read_text()
    cache = tmp_path / "cache" / "rasp" / grammar_cache_file(grammar).name
    assert _modules_after(tmp_path, "check", PARITY)[0] == 0
    assert cache.exists() and cache.stat().st_size > 1000
    assert not list(cache.parent.glob("*.tmp"))                 # written under a private name, then renamed
    cache.write_bytes(b"not a cache\n")                         # a corrupt cache is rebuilt, not trusted
    status, out, _ = _modules_after(tmp_path, "run", PARITY, "--input", "1 1 > # #")
    assert status == 0 and out.split() == ["0", "1", "0", "#", "#"]
    bad = tmp_path / "bad.rasp"                                 # located syntax errors still work from the cache
    bad.write_text("input x: {0, 1}\noutput x +\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "rasp.cli", "check", str(bad)], capture_output=True, text=True,
                          env=env)
    assert done.returncode == 2 and "bad.rasp:2:" in done.stderr and "Traceback" not in done.stderr


class _Payload:
    """Unpickling it creates the file `path`: the proof a cache file ran code."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("damage", ["dir_0777", "file_0666", "file_other_owner", "file_link", "dir_other_owner"])
def test_a_planted_parser_cache_that_others_could_write_is_never_unpickled(tmp_path, damage):
    """Issue 26: Lark's cache is a pickle.  A cache file another user could
    have written (its directory or the file writable by group/others, owned
    by someone else, or a link) is ignored and the tables are rebuilt; the
    answer stays right and the planted payload never runs."""
    import os
    import pickle
    from importlib import resources
    from rasp.parser import grammar_cache_file
    grammar = resources.files("rasp").joinpath("grammar.lark").read_text()
    cache = tmp_path / "cache" / "rasp" / grammar_cache_file(grammar).name
    assert _modules_after(tmp_path, "check", PARITY)[0] == 0
    assert oct(cache.parent.stat().st_mode & 0o777) == "0o700" and oct(cache.stat().st_mode & 0o777) == "0o600"
    marker = tmp_path / "payload-ran"
    planted = cache.read_bytes().split(b"\n", 1)[0] + b"\n" + pickle.dumps(_Payload(marker))

    def run():
        status, out, _ = _modules_after(tmp_path, "run", PARITY, "--input", "1 1 > # #")
        assert status == 0 and out.split() == ["0", "1", "0", "#", "#"]

    cache.write_bytes(planted)                  # the user's own private file: trusted (the test can fail)
    run()
    assert marker.exists()
    marker.unlink()
    cache.write_bytes(planted)
    if damage == "dir_0777":
        cache.parent.chmod(0o777)
    elif damage == "dir_other_owner":
        os.chown(cache.parent, 12345, -1) if os.getuid() == 0 else pytest.skip("needs root to chown")
    elif damage == "file_0666":
        cache.chmod(0o666)
    elif damage == "file_other_owner":
        os.chown(cache, 12345, -1) if os.getuid() == 0 else pytest.skip("needs root to chown")
    else:
        elsewhere = tmp_path / "elsewhere.lark"
        elsewhere.write_bytes(planted)
        cache.unlink()
        cache.symlink_to(elsewhere)
    run()
    assert not marker.exists()
    if damage.startswith("dir"):                # an untrusted directory: nothing read or written there
        assert cache.read_bytes() == planted
    else:                                       # a private directory: a fresh file replaced the planted one
        assert not cache.is_symlink() and cache.read_bytes() != planted and cache.stat().st_uid == os.getuid()
        assert oct(cache.stat().st_mode & 0o777) == "0o600"


# ---- training from the command line: compiled fine-tune cost, threads (issue 9) ------------

def _rasp(*argv, env_drop=()):
    import os
    env = {k: v for k, v in os.environ.items() if k not in env_drop}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "rasp.cli", *argv], capture_output=True, text=True, env=env)


def _cores():
    import os
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


@pytest.mark.heavy
def test_compiled_finetune_stops_once_exact_and_flat_and_threads_are_reported(tmp_path):
    """`rasp train --init compiled` ends long before its step budget once the
    model is exact and the loss no longer improves (or the guard has stalled
    it), says why, and stays exact;
    train and eval print the thread count they chose (1 on small machines)."""
    out = tmp_path / "pc"
    done = _rasp("train", "--task", "parity", "--init", "compiled", "--preset", "cpu", "--max-train-n", "4",
                 "--freeze-fragile", "off", "--guard-max-n", "8", "--log-every", "10", "--flat-stop", "20",
                 "--eval-every", "0", "--out", str(out), "--no-progress", env_drop=("OMP_NUM_THREADS",))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    if _cores() <= 4:
        assert re.search(r"^threads: 1 \(the default with \d+ cores", done.stderr, re.M), done.stderr
    else:
        assert re.search(r"^threads: \d+ \(torch's default with \d+ cores", done.stderr, re.M), done.stderr
    rows = [__import__("json").loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    assert "stopped early: " + last["stopped"] in done.stdout
    assert "loss gained under 5%" in last["stopped"] or "nothing changes any more" in last["stopped"]
    assert last["step"] < 500 and last["eval_acc"] == 1.0            # budget 500, ended well before it
    assert __import__("json").loads((out / "summary.json").read_text())["stopped"] == last["stopped"]
    # (fragile tensors left free to keep this test cheap, so only the training lengths are
    # promised; tests/test_train.py checks the defaults stay exact far beyond them)
    done = _rasp("eval", str(out), "--lengths", "1:4", "--samples", "32", "--no-plots", "--threads", "2")
    assert done.returncode == 0, done.stderr
    assert re.search(r"^threads: 2 \(--threads\)$", done.stderr, re.M), done.stderr
    exact = [float(l.split()[1]) for l in done.stdout.splitlines() if re.match(r"^\s+\d+\*?\s+\d", l)]
    assert len(exact) == 4 and set(exact) == {1.0}                     # still exact where it trained


def test_threads_must_be_positive(tmp_path):
    done = _rasp("train", "--task", "parity", "--out", str(tmp_path / "r"), "--threads", "0", "--steps", "1")
    assert done.returncode == 2 and "--threads: must be in 1..1024, got 0" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("argv,message", [
    (["data", "flipflop", "--split", "train", "-n", "1000000000000", "-o", "{d}/f.jsonl"], "-n: must be in 1..10000000"),
    (["data", "flipflop", "-n", "3", "--seed", "-1", "-o", "{d}/f.jsonl"], "--seed: must be in 0..4294967295"),
    (["data", "flipflop", "-n", "3", "-o", ""], "-o/--output: expected a file name"),
    (["eval", "{d}", "--splits", "valid_cpu", "-n", "1000000000000"], "-n: must be in 1..1000000"),
    (["eval", "{d}", "--threads", "1000000"], "--threads: must be in 1..1024"),
    (["eval", "{d}", "--json", ""], "--json: expected a file name"),
    (["train", "--task", "flipflop", "--model", "gru", "--out", "{d}/r", "--set", "batch_size=1000000000"],
     "batch_size = 1000000000: an integer from 1 to 1048576"),
    (["train", "--task", "flipflop", "--model", "gru", "--out", "{d}/r", "--set", "seed=100000000000000000000000"],
     "seed = 100000000000000000000000: an integer from 0 to"),
    (["train", "--task", "flipflop", "--model", "gru", "--out", "{d}/r", "--set", "d_model=1000000000"],
     "d_model = 1000000000: an integer from 1 to 65536"),
])
def test_every_count_a_user_types_is_bounded_before_work(tmp_path, capsys, argv, message):
    """Issue 26: sizes typed on the command line are refused at once (exit 2,
    the flag named), before any example is generated or model built."""
    from rasp.cli import main
    argv = [a.format(d=tmp_path) for a in argv]
    try:
        status = main(argv)
    except SystemExit as e:          # argparse's own error
        status = e.code
    err = capsys.readouterr().err
    assert status == 2 and message in err and "Traceback" not in err and "internal error" not in err, err
    assert not (tmp_path / "f.jsonl").exists() and not (tmp_path / "r").exists()


def test_rasp_data_defaults_to_the_train_split(tmp_path, capsys):
    from rasp.cli import main
    out = tmp_path / "f.jsonl"
    assert main(["data", "flipflop", "-n", "3", "-o", str(out)]) == 0
    assert "of flipflop/train to" in capsys.readouterr().out and len(out.read_text().splitlines()) == 3


def test_python_dash_m_rasp_is_the_rasp_command(tmp_path):
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "rasp", "run", PARITY, "--input", "1 0 1 1 > # #"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "1", "1", "0", "1", "#", "#"]


def test_version_and_a_missing_run_directory(capsys):
    from rasp.cli import main
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("rasp ")
    assert main(["eval", "/nonexistent/run"]) == 2
    assert "/nonexistent/run does not exist" in capsys.readouterr().err
