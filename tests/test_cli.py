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
