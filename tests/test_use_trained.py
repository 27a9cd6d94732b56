"""Using what was trained (issue 25): `rasp run RUN`, `rasp.load(PATH)` on the
three kinds of model (a program, a compiled model, a training run of either
kind, an export) and `rasp export RUN -o DIR`.  Runs are trained for a few
steps in tmp_path: what is tested is the plumbing (vocabulary, stopping rules,
limits, errors, files), not what the model learned."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from rasp.stop import DEFAULT_RULE

import rasp
from rasp.cli import main

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.heavy          # tests/conftest.py: run these first

PARITY = str(ROOT / "programs" / "parity.rasp")
PARITY_INPUTS = ["1 0 1 1 > # #", "1 > # #", "0 0 1 1 0 1 > # #", "1 1 1 1 1 1 1 1 1 1 1 1 > # #"]
FLIPFLOP_INPUTS = ["w 1 i 0 r 1", "w 0 r 0 i 1 w 1 r 1", "r 0"]
COPY_INPUTS = ["1 0 1 > # # #", "0 > # #", "1 1 0 0 > # # # #"]
LOGIC_INPUTS = ["( a and b ) | not a", "c | ( c or d )"]


def cli(capsys, *argv):
    """(exit status, stdout, stderr) of `rasp ARGV`, in this process."""
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return status, out, err


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A parity run (evaluated), a flip-flop LSTM run, a compiled parity model, and exports
    (`--threads 1`: torch runs one thread from here on, as `rasp run` sets on small machines)."""
    base = tmp_path_factory.mktemp("use")
    fast = ["--steps", "20", "--preset", "cpu", "--no-progress", "--threads", "1", "--eval-samples", "16"]
    assert main(["train", "--task", "parity", "--out", str(base / "parity"), *fast]) == 0   # answers 0/1, then #
    # width 16: the plumbing is the same at any width (parity's run keeps its preset's, which
    # learns in 20 steps to answer in the task's shape: test_every_kind_of_model_answers_in_one_shape)
    fast += ["--d-model", "16", "--n-head", "2"]
    assert main(["train", "--task", "flipflop", "--model", "lstm", "--out", str(base / "ff"), *fast]) == 0
    short = ["--steps", "3", *fast[2:]]
    assert main(["train", "--task", "copy", "--model", "ntp_pause", "--out", str(base / "ntp"), *short]) == 0
    assert main(["train", "--task", "logic", "--model", "lstm", "--out", str(base / "logic"), *short]) == 0
    assert main(["eval", str(base / "parity"), "--lengths", "1:4", "--samples", "16", "--no-progress",
                 "--no-plots"]) == 0
    assert main(["eval", str(base / "ff"), "-n", "20", "--no-progress", "--no-plots"]) == 0
    assert main(["compile", PARITY, "--max-len", "16", "-o", str(base / "compiled")]) == 0
    assert main(["export", str(base / "parity"), "-o", str(base / "parity_export")]) == 0
    assert main(["export", str(base / "ff"), "-o", str(base / "ff_export")]) == 0
    return base


def _inputs_file(tmp_path, lines):
    f = tmp_path / "inputs.txt"
    f.write_text("".join(line + "\n" for line in lines))
    return f


@pytest.mark.parametrize("kind, inputs", [
    ("program", PARITY_INPUTS), ("compiled", PARITY_INPUTS), ("parity", PARITY_INPUTS),
    ("parity_export", PARITY_INPUTS), ("ff", FLIPFLOP_INPUTS), ("ff_export", FLIPFLOP_INPUTS),
    ("ntp", COPY_INPUTS), ("logic", LOGIC_INPUTS)])
def test_rasp_run_and_the_python_api_give_the_same_answers(runs, tmp_path, capsys, kind, inputs):
    path = PARITY if kind == "program" else runs / kind
    status, out, err = cli(capsys, "run", path, "--inputs", _inputs_file(tmp_path, inputs))
    assert status == 0, err
    model = rasp.load(path)
    answers = model(inputs)
    assert len(answers) == len(inputs) and all(isinstance(t, str) for a in answers for t in a)
    # `rasp run` prints a program's (and a compiled model's) whole output: `.outputs()`; a call answers from `>` on
    printed = model.outputs(inputs) if kind in ("program", "compiled") else answers
    assert out.splitlines() == [" ".join(a) for a in printed]
    status, out, _ = cli(capsys, "run", path, "--input", inputs[0])
    assert status == 0 and out == " ".join(printed[0]) + "\n"      # a batch answers each input as alone


def test_program_and_compiled_model_agree_exactly(runs):
    assert rasp.load(PARITY)(PARITY_INPUTS) == rasp.load(runs / "compiled")(PARITY_INPUTS)


@pytest.mark.parametrize("run, program, inputs", [("parity", "parity", PARITY_INPUTS),
                                                  ("ntp", "copy", COPY_INPUTS)])
def test_a_trained_fan_model_answers_in_the_programs_tokens(runs, run, program, inputs):
    """The answer is the model's output from `>` on (an NTP model's greedy decoding), in the
    program's own tokens: it equals the program's answer exactly on the inputs that
    `rasp eval`'s decoding scores as correct."""
    from trainer.fan import objectives
    model = rasp.load(runs / run)
    program = rasp.load(ROOT / "programs" / f"{program}.rasp")
    assert model.vocabulary()["input"][:len(program.ir.vocab)] == [program.token_text(v)
                                                                   for v in sorted(program.ir.vocab)]
    answers = model(inputs)
    wanted = program(inputs)        # a program answers from `>` on too
    assert [len(a) for a in answers] == [len(w) for w in wanted]
    assert {t for a in answers for t in a} <= {"0", "1", "#", "?"}
    for text, answer, want in zip(inputs, answers, wanted):
        tokens = program.parse_input(text)
        batch = model.data.make_batch([tokens], [len(tokens)])
        correct = bool(objectives.evaluate_batch(model.spec, model.hp, model.module, batch, "oracle", 0)["correct"][0])
        assert (answer == want) == correct, (text, answer, want)


def test_stopping_rules(runs, capsys):
    for rule in ("oracle", "confidence", "confidence_sample", "threshold"):
        answers = rasp.load(runs / "parity", stop=rule)(PARITY_INPUTS)
        assert [len(a) for a in answers] == [3] * len(PARITY_INPUTS)
    status, out, _ = cli(capsys, "run", runs / "parity", "--input", "1 0 > # #", "--stop", "threshold",
                         "--threshold", "0.5")
    assert status == 0 and len(out.split()) == 3
    for argv, says in [(["--stop", "sometimes"], "unknown --stop"),
                       (["--threshold", "0.5"], "only with --stop threshold"),
                       (["--stop", "threshold", "--threshold", "-1"], "positive")]:
        status, _, err = cli(capsys, "run", runs / "parity", "--input", "1 0 > # #", *argv)
        assert status == 2 and says in err, err
    for path in (PARITY, runs / "compiled", runs / "ff", runs / "ntp"):
        status, _, err = cli(capsys, "run", path, "--input", "1 0 > # #", "--stop", "oracle")
        assert status == 2 and "--stop" in err, err


def test_every_command_takes_every_rule_and_lists_the_same(runs, capsys):
    """issue 39: the fitted rules (depth_law, head) are fitted once per checkpoint, saved in
    the run (by `rasp eval` here) and the export, and usable by `rasp run` and `rasp.load`;
    `rasp run --help` and the errors list the one list of rules."""
    from rasp.stop import RULES, rules_text
    for rule in RULES:
        for where in ("parity", "parity_export"):
            answers = rasp.load(runs / where, stop=rule)(PARITY_INPUTS)
            assert [len(a) for a in answers] == [3] * len(PARITY_INPUTS), (rule, where)
    saved = json.loads((runs / "parity" / "halting.json").read_text())
    assert json.loads((runs / "parity_export" / "config.json").read_text())["halting"] == saved
    status, out, _ = cli(capsys, "run", runs / "parity", "--input", "1 0 > # #", "--stop", "depth_law")
    assert status == 0 and len(out.split()) == 3
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert rules_text() in " ".join(capsys.readouterr().out.split())
    status, _, err = cli(capsys, "run", runs / "parity", "--input", "1 0 > # #", "--stop", "stabel")
    assert status == 2 and rules_text() in err


def test_trained_runs_have_the_limits_and_errors_of_rasp_run(runs, capsys):
    run = runs / "parity"
    cases = [("1 0 1 > # #", ["--max-len", "3"], "the limit is 3 (raise it with --max-len)"),
             ("1 0 1 > # #", ["--max-steps", "2"], "--max-steps"),
             ("1 0 1 > # #", ["--max-work", "1000"], "multiply-adds"),
             ("1 0 1 > # 1", [], "input rejected: only bits before '>'"),          # the program's `require`
             ("1 0 x > # #", [], "unknown token 'x' at position 3"),
             ("1 0 > # #", ["--param", "n=2"], "--param"),
             ("1 0 > # #", ["--trace"], "--trace")]
    for text, flags, says in cases:
        status, out, err = cli(capsys, "run", run, "--input", text, *flags)
        assert status == 2 and says in err and not out, (flags, err)
    status, _, err = cli(capsys, "run", runs / "ff", "--input", "w 1 q 0")
    assert status == 2 and "unknown token 'q' at position 3" in err
    status, _, err = cli(capsys, "run", runs / "ff", "--input", "w 1 r 0", "--max-len", "3")
    assert status == 2 and "--max-len" in err
    status, _, err = cli(capsys, "run", runs / "ff", "--input", "w 1 r 0", "--max-work", "10")
    assert status == 2 and "multiply-adds" in err
    for text, says in [("( a and b )", "two sentences separated by '|'"), ("a | ", "empty sentence")]:
        status, _, err = cli(capsys, "run", runs / "logic", "--input", text)
        assert status == 2 and says in err, err


def test_the_python_api_takes_a_list_of_inputs(runs):
    model = rasp.load(runs / "parity")
    with pytest.raises(TypeError, match="list of inputs"):
        model("1 0 > # #")
    assert model([["1", "0", ">", "#", "#"]]) == model(["1 0 > # #"])
    with pytest.raises(rasp.RaspError, match="no inputs"):
        model([])


def test_a_directory_that_holds_no_model_is_named(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    status, _, err = cli(capsys, "run", tmp_path, "--input", "1 > # #")
    assert status == 2 and "not a model directory" in err
    with pytest.raises(rasp.RaspError, match="not a model directory"):
        rasp.load(tmp_path)


# ---- rasp export ----------------------------------------------------------------------

def test_an_export_is_a_hub_style_model_folder(runs):
    d = runs / "parity_export"
    names = {p.name for p in d.iterdir()}
    assert {"config.json", "model.safetensors", "vocab.json", "program.rasp", "manifest.json", "README.md",
            "train_curves.png"} <= names
    card = (d / "README.md").read_text()
    run = json.loads((runs / "parity" / "run.json").read_text())
    for key, value in run["hparams"].items():                     # every hyper-parameter
        assert f"| `{key}` | `{json.dumps(value, sort_keys=True)}` |" in card
    assert "| 4* |" in card                                       # the evaluation table (length 4)
    config = json.loads((d / "config.json").read_text())
    assert config["run"]["hparams"] == run["hparams"] and config["stop"] == DEFAULT_RULE
    vocab = json.loads((d / "vocab.json").read_text())
    assert vocab == {"input": ["#", ">", "0", "1"], "output": ["0", "1", "#"]}
    ff_card = (runs / "ff_export" / "README.md").read_text()
    splits = json.loads((runs / "ff" / "eval.json").read_text())["splits"]
    assert all(f"| {name} | 20 |" in ff_card for name in splits)


def test_an_export_loads_without_its_run(runs, tmp_path):
    inputs = PARITY_INPUTS
    want = rasp.load(runs / "parity")(inputs)
    moved = tmp_path / "colleague" / "parity-looped"
    shutil.copytree(runs / "parity_export", moved)
    hidden = runs / "parity_away"
    os.rename(runs / "parity", hidden)                 # the run is gone
    try:
        assert rasp.load(moved)(inputs) == want
    finally:
        os.rename(hidden, runs / "parity")
    assert rasp.load(runs / "ff_export")(FLIPFLOP_INPUTS) == rasp.load(runs / "ff")(FLIPFLOP_INPUTS)


def test_an_edited_export_is_refused(runs, tmp_path):
    d = tmp_path / "e"
    shutil.copytree(runs / "parity_export", d)
    data = bytearray((d / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (d / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(rasp.RaspError, match="checksum mismatch"):
        rasp.load(d)


def test_export_never_loses_a_users_file(runs, tmp_path, capsys):
    run = runs / "parity"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    status, _, err = cli(capsys, "export", run, "-o", mine)
    assert status == 2 and "not empty" in err and (mine / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]

    out = tmp_path / "out"
    assert cli(capsys, "export", run, "-o", out)[0] == 0
    assert cli(capsys, "export", run, "-o", out)[0] == 0          # a previous export, unchanged: replaced
    (out / "README.md").write_text("my own notes on this model")
    status, _, err = cli(capsys, "export", run, "-o", out)
    assert status == 2 and "README.md" in err and "changed" in err
    assert (out / "README.md").read_text() == "my own notes on this model"

    again = tmp_path / "again"
    assert cli(capsys, "export", run, "-o", again)[0] == 0
    target = tmp_path / "target.txt"
    target.write_text("not yours")
    (again / "train_curves.png").unlink()
    (again / "train_curves.png").symlink_to(target)               # a planted link where a file goes
    status, _, err = cli(capsys, "export", run, "-o", again)
    assert status == 2 and "link" in err and target.read_text() == "not yours"

    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    status, _, err = cli(capsys, "export", run, "-o", link)
    assert status == 2 and "link" in err and not (tmp_path / "elsewhere").exists()


def test_export_over_an_export_of_another_kind_removes_what_it_no_longer_has(runs, tmp_path, capsys):
    out = tmp_path / "swap"
    assert cli(capsys, "export", runs / "parity", "-o", out)[0] == 0
    assert (out / "program.rasp").exists()
    assert cli(capsys, "export", runs / "ff", "-o", out)[0] == 0
    assert not (out / "program.rasp").exists()
    assert rasp.load(out)(FLIPFLOP_INPUTS) == rasp.load(runs / "ff")(FLIPFLOP_INPUTS)


def test_export_of_what_is_not_a_run(tmp_path, capsys):
    status, _, err = cli(capsys, "export", tmp_path / "nothing", "-o", tmp_path / "x")
    assert status == 2 and "does not exist" in err and not (tmp_path / "x").exists()


# ---- issue 42: one answer shape, the model card as the hub's --------------------------------

def test_every_kind_of_model_answers_in_one_shape(runs):
    """A program, a compiled folder, a run and an export of parity answer from `>` on;
    a program and its compiled model give the same answers, and the whole output stays
    available as `.outputs()`."""
    kinds = {"program": rasp.load(PARITY), "compiled": rasp.load(runs / "compiled"),
             "run": rasp.load(runs / "parity"), "export": rasp.load(runs / "parity_export")}
    shapes = {}
    for kind, model in kinds.items():
        answers = model(PARITY_INPUTS)
        shapes[kind] = [len(a) for a in answers]
        assert all(a[1:] == ["#", "#"] and a[0] in ("0", "1") for a in answers), (kind, answers)
        text = repr(model)
        assert "parity" in text.lower() and "stop" in text and "object at 0x" not in text, text
    assert len(set(map(tuple, shapes.values()))) == 1, shapes
    assert kinds["program"](PARITY_INPUTS) == kinds["compiled"](PARITY_INPUTS)
    assert kinds["program"].outputs(["1 0 1 1 > # #"]) == [["0", "1", "1", "0", "1", "#", "#"]]
    assert "parameters" in repr(kinds["run"]) and DEFAULT_RULE in repr(kinds["run"])
    assert "lstm" in repr(rasp.load(runs / "ff")) and "flipflop" in repr(rasp.load(runs / "ff"))
    assert isinstance(rasp.__version__, str) and rasp.__version__[0].isdigit()


def _links(markdown: str) -> list:
    import re
    return [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", markdown)
            if ":" not in t and not t.startswith("#")]


@pytest.mark.parametrize("export", ["parity_export", "ff_export"])
def test_the_model_card_is_a_hub_card(runs, export):
    """The front matter parsed as YAML, field by field; every relative link of the card (and of
    the documents it ships) names a file of the exported folder."""
    import yaml
    d = runs / export
    card = (d / "README.md").read_text()
    assert card.startswith("---\n")
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["license"] == "mit" and front["library_name"] == "rasp-looped"
    assert front["pipeline_tag"] == "token-classification"         # a label per (answer) position
    assert {"rasp-looped", "rasp"} <= set(front["tags"])
    assert "datasets" not in front                                # no hub dataset id that does not exist
    (entry,) = front["model-index"]
    assert entry["results"]
    for result in entry["results"]:
        assert result["task"]["type"] == front["pipeline_tag"]
        assert "/" not in result["dataset"]["type"] and "not a hub dataset" in result["dataset"]["name"]
        assert isinstance(result["metrics"][0]["value"], float) and result["dataset"]["split"]
    for section in ("## Use", "pip install", "rasp.load(", "## Training data", "seed", "base recipe",
                    "## Intended use and limitations", "## Citation", "@software{rasp_looped"):
        assert section in card, section
    for doc in ("README.md", "tasks.md"):
        for target in _links((d / doc).read_text()):
            assert (d / target).is_file(), (doc, target)
    assert {"LICENSE", "CITATION.cff", "tasks.md"} <= {p.name for p in d.iterdir()}
    if export == "parity_export":
        model = rasp.load(d)
        assert "Fan, Ying" in card and "trained on lengths 1.." in card and "tested on lengths 1..4" in card
        line = next(ln for ln in card.splitlines() if ln.startswith("model(["))
        text, shown = line.split("model([", 1)[1].split("])", 1)
        assert shown.split("# -> ", 1)[1].strip() == repr(model([json.loads(text)]))    # the example is true
