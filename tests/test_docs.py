"""The documentation is true: every command of docs/tutorial.md (and the
README's quick ones) is run and its output compared with the output shown;
docs/language.md's tables are the ones rasp/help.py generates; every builtin
and library function has a reference entry, and every entry's example gives
the result shown.

A `console` block holds `$ COMMAND` lines, each followed by its output
(stdout, then stderr).  Before comparing, temporary paths and the numbers
that vary from machine to machine are normalised (MACHINE_DEPENDENT: timings,
and a trained model's loss and accuracies, which float summation order on
another CPU may change); every other number is compared exactly.  A `<!-- file: NAME -->`
line before a code block writes that block to NAME first; the commands of a
block after `<!-- slow -->` (training runs of minutes) run only in the slow test.  `python tests/test_docs.py --update`
rewrites the outputs in docs/tutorial.md from a fresh run.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import rasp
from rasp import help as H
from rasp.builtins import BUILTINS
from rasp.lower import _library_module

ROOT = Path(__file__).resolve().parents[1]

TUTORIAL = ROOT / "docs" / "tutorial.md"
LANGUAGE = ROOT / "docs" / "language.md"


# ---- reading and running the tutorial ---------------------------------------------------

BLOCK = re.compile(r"(?:<!-- file: (\S+) -->\n)?```(\w*)\n(.*?)```", re.S)
# a console block after `<!-- slow -->` trains for minutes: only the slow test runs it
SLOW = re.compile(r"<!-- slow -->\n```\w*\n(.*?)```", re.S)


def blocks(text: str):
    """[(kind, file name or None, body, span of the body)]"""
    return [(m.group(2), m.group(1), m.group(3), m.span(3)) for m in BLOCK.finditer(text)]


def commands(body: str):
    """A console block -> [(command, shown output)]."""
    out, current = [], None
    for line in body.splitlines(keepends=True):
        if line.startswith("$ "):
            current = [line[2:].rstrip("\n"), ""]
            out.append(current)
        elif current is not None:
            current[1] += line
    return [tuple(c) for c in out]


PROGRESS_BAR = re.compile(r"\|[^|]*\| *\d+/\d+ \[")


# (pattern, replacement): the only numbers not compared exactly
MACHINE_DEPENDENT = [
    (re.compile(r"\b\d+(?:\.\d+)? ?(s|steps/s|it/s)\b"), r"<time> \1"),   # `in 0.4s`, `compile 0.025 s`
    (re.compile(r"\b(training loss|exact match) \d+\.\d+"), r"\1 <trained>"),   # rasp train's summary
    (re.compile(r"^( +\d+\*?) +\d\.\d+ +\d\.\d+(?= )", re.M), r"\1 <exact> <stderr>"),  # rasp eval's rows
    (re.compile(r"(drew: exact|\(oracle) \d\.\d+"), r"\1 <trained>"),       # ... and its two bands
]


def normalise(text: str, workdir: Path) -> str:
    text = text.replace(str(workdir) + os.sep, "").replace(str(workdir), ".")
    for pattern, replacement in MACHINE_DEPENDENT:
        text = pattern.sub(replacement, text)
    lines = (line.rsplit("\r", 1)[-1].rstrip() for line in text.strip("\n").split("\n"))
    # a progress bar (tqdm, on stderr) redraws itself: the tutorial does not show it
    return "\n".join(line for line in lines if line and not PROGRESS_BAR.search(line))


def run_command(command: str, workdir: Path) -> str:
    """stdout + stderr of a `rasp` command (run in this process: fast) or a shell command."""
    argv = shlex.split(command)
    if argv[0] == "rasp":
        from rasp.cli import main
        out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
        try:
            os.chdir(workdir)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                main(argv[1:])
        finally:
            os.chdir(here)
        return out.getvalue() + err.getvalue()
    proc = subprocess.run(command, shell=True, cwd=workdir, capture_output=True, text=True, timeout=60)
    return proc.stdout + proc.stderr


def prepare(workdir: Path):
    """The tutorial runs in a fresh directory next to the project's programs/."""
    (workdir / "programs").symlink_to(ROOT / "programs")


def tutorial_steps(slow: bool = False):
    """Yield (kind, payload) in order: ('file', (name, body)) or ('cmd', (command, shown));
    the commands of `<!-- slow -->` blocks only when `slow`."""
    text = TUTORIAL.read_text(encoding="utf-8")
    slow_spans = {m.span(1) for m in SLOW.finditer(text)}
    for kind, name, body, span in blocks(text):
        if name:
            yield "file", (name, body)
        elif kind == "console" and (slow or span not in slow_spans):
            for command, shown in commands(body):
                yield "cmd", (command, shown)


def check_tutorial(workdir: Path, slow: bool = False):
    prepare(workdir)
    ran = 0
    for kind, payload in tutorial_steps(slow):
        if kind == "file":
            (workdir / payload[0]).write_text(payload[1], encoding="utf-8")
            continue
        command, shown = payload
        got = run_command(command, workdir)
        assert normalise(got, workdir) == normalise(shown, workdir), f"$ {command}"
        ran += 1
    return ran


@pytest.mark.heavy
def test_tutorial_commands(tmp_path):
    """Every command, the 50-step training run included (a few seconds)."""
    assert check_tutorial(tmp_path) >= 12


@pytest.mark.slow
def test_tutorial_commands_with_the_long_training_runs(tmp_path):
    """Every command, the `<!-- slow -->` blocks too (§8 trains a program for minutes)."""
    assert check_tutorial(tmp_path, slow=True) > len(list(c for k, c in tutorial_steps() if k == "cmd"))


def update_tutorial(workdir: Path):
    """Rewrite every console block's outputs from a fresh run."""
    text = TUTORIAL.read_text(encoding="utf-8")
    prepare(workdir)
    pieces, last = [], 0
    for kind, name, body, (start, end) in blocks(text):
        if name:
            (workdir / name).write_text(body, encoding="utf-8")
            continue
        if kind != "console":
            continue
        new = ""
        for command, _ in commands(body):
            got = run_command(command, workdir).replace(str(workdir) + os.sep, "")
            lines = [l.rsplit("\r", 1)[-1].rstrip() for l in got.rstrip("\n").split("\n")]
            lines = [l for l in lines if l and not PROGRESS_BAR.search(l)]
            new += f"$ {command}\n" + ("\n".join(lines) + "\n" if lines else "")
        pieces += [text[last:start], new]
        last = end
    TUTORIAL.write_text("".join(pieces) + text[last:], encoding="utf-8")


# ---- the README ---------------------------------------------------------------------------

def test_readme_quick_commands(tmp_path):
    """The README's first command, its example program, and its table's quick commands."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    prepare(tmp_path)
    first = blocks(readme)[0][2].splitlines()[0]
    assert first.startswith("pip install -e . && rasp run programs/parity.rasp")
    command = first.split("&& ", 1)[1]
    assert run_command(command, tmp_path).split() == "0 1 1 0 1 # #".split()
    # the language example is a working parity program, same answers as programs/parity.rasp
    example = next(body for kind, _, body, _ in blocks(readme) if kind == "python" and "input seq" in body)
    (tmp_path / "example.rasp").write_text(example)
    for text in ("1 0 1 1 > # #", "1 > #", "0 0 1 > # # #"):
        want = run_command(f'rasp run programs/parity.rasp --input "{text}"', tmp_path)
        assert run_command(f'rasp run example.rasp --input "{text}"', tmp_path) == want
    # the command table: every quick command runs (exit 0) with files it needs made here
    (tmp_path / "FILE").write_text("1 0 > # #\n1 > #\n")
    rows = re.findall(r"^\| `(rasp [^`]*)` \|", readme, re.M)
    quick = [r for r in rows if r.split()[1] in ("run", "check", "help", "graph") and "DIR" not in r]
    assert len(quick) >= 6
    for row in quick:
        command = (row.replace("P.rasp", "programs/parity.rasp").replace('"…"', '"1 0 > # #"')
                   .replace(" [--strict]", "").replace("[NAME]", "where"))
        from rasp.cli import main
        here = os.getcwd()
        try:
            os.chdir(tmp_path)
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
                status = main(shlex.split(command)[1:])
        finally:
            os.chdir(here)
        assert status == 0, (command, err.getvalue())


# ---- the language reference ---------------------------------------------------------------

def test_language_tables_are_generated():
    """docs/language.md's tables and grammar are what rasp/help.py makes
    (regenerate with `python -m rasp.help --write-docs docs/language.md`)."""
    text = LANGUAGE.read_text(encoding="utf-8")
    assert H.fill_docs(text) == text
    for group in H.GROUPS:
        assert f"<!-- table:{group} -->" in text


def test_every_builtin_and_library_function_has_an_entry():
    library = {d.name for d in _library_module().body}
    documented = {e.name for e in H.ENTRIES if e.group not in ("predicate", "reduction", "statement")}
    assert set(BUILTINS) | library == documented
    predicates = {e.name for e in H.ENTRIES if e.group == "predicate"}
    assert predicates == set(rasp.ir.PREDICATES)
    assert {e.name for e in H.ENTRIES if e.group == "reduction"} == set(rasp.ir.REDUCTIONS)


@pytest.mark.parametrize("entry", [e for e in H.ENTRIES if e.example], ids=lambda e: e.name)
def test_entry_example_gives_what_it_shows(entry):
    prog = rasp.loads(H.example_program(entry), f"<{entry.name} example>")
    out = prog.format_output(prog.run(prog.parse_input(entry.given)))
    if entry.group == "host":
        assert set(out.split()) == {entry.gives}
    else:
        assert out == entry.gives


def test_help_command(capsys):
    from rasp.cli import main
    assert main(["help", "shift_right"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("shift_right(x, s, default=0)") and "kqv(indices(x) + s" in out
    assert main(["help"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in BUILTINS)
    assert main(["help", "shift_rigth"]) == 2
    assert "did you mean 'shift_right'" in capsys.readouterr().err


def test_markdown_links_resolve():
    for path in ROOT.glob("**/*.md"):
        if ".git" in path.parts:
            continue
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
            assert (path.parent / target).exists(), (path, target)


# ---- citations of files ---------------------------------------------------------------------

SHIPPED_SUFFIXES = {".py", ".md", ".toml", ".lark", ".rasp", ".txt"}
NOT_SHIPPED = {"runs", "build", "dist", "node_modules", "__pycache__"}
# a file named in text: optional directories, a name, an extension the project ships, an optional :LINE
FILE_REF = re.compile(r"(?<![\w./*-])((?:\.\.?/)*(?:[\w*.-]+/)*[\w*-][\w*.-]*\.(?:md|py|toml|rasp|lark|txt))"
                      r"(?::(\d+))?(?![\w/-])")
URL = re.compile(r"\b(?:https?://|(?:[\w-]+\.)+(?:com|org|net|io)/)\S*")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")              # DIR/report.md, tests/data/NAME.rasp
# the reference data and specification beside a development checkout, never shipped
OUTSIDE = re.compile(r"(?:\.\./)+" + "shared" + r"\b|\b" + "shared" + r"/(?:spec|papers|data|design)\b")


def shipped_files(root: Path):
    """The text files of the project: every .py .md .toml .lark .rasp .txt outside
    hidden folders, run outputs and the tests' fixtures."""
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if (path.suffix in SHIPPED_SUFFIXES and path.is_file() and rel.parts[:2] != ("tests", "data")
                and not any(p.startswith(".") or p in NOT_SHIPPED or p.endswith(".egg-info") for p in rel.parts)):
            yield path


def cited_files_missing(path: Path, text: str, root: Path, names: set) -> list:
    """(line, reference, why) for each file `text` cites that the project does not have.

    * an upper-case `.md` name (a project document, like README.md) must be
      a file of that name somewhere in the project;
    * a path with folders (`docs/models.md`, `trainer/benchmark/presets.py:30`, a glob)
      is the project's when its folder exists relative to the citing file, one of
      its parents or the root; it must then exist, and a :LINE be within it.
      A `.md` path whose folder is nowhere in the project is a document the user
      lacks; other such paths name files of other repositories (JRC's
      `models/modules/*.py`) and are not checked;
    * lower-case bare names (`report.md`, `train.py:52`) are outputs or files of
      other repositories, except in suite files (TOML), where a bare name is a
      source document and must be the project's; markdown links are checked by
      test_markdown_links_resolve.
    """
    bases = [path.parent, *[p for p in path.parent.parents if p == root or root in p.parents]]
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if OUTSIDE.search(line):
            out.append((lineno, OUTSIDE.search(line).group(0), "outside the project"))
        line = re.sub(r"\*\*(?!/)", " ", URL.sub(" ", line))          # URLs; markdown bold
        for m in FILE_REF.finditer(line):
            ref, at = m.group(1), m.group(2)
            *dirs, name = ref.split("/")
            stem = name.rsplit(".", 1)[0]
            if any(PLACEHOLDER.match(d) for d in dirs) or (PLACEHOLDER.match(stem) and not name.endswith(".md")):
                continue
            if not [d for d in dirs if d not in (".", "..")]:
                document = name.endswith(".md") and stem.upper() == stem
                if "*" not in name and not dirs and (document or path.suffix == ".toml"):
                    if name not in names:
                        out.append((lineno, ref, "no such document in the project"))
                    continue
                if not dirs:
                    continue
            found = [c for b in bases for c in sorted(b.glob(ref))] if "*" in ref else \
                [b / ref for b in bases if (b / ref).exists()]
            ours = any((b / ref).parent.is_dir() for b in bases if "*" not in ref.rsplit("/", 1)[0]) or \
                any(b.glob(ref.rsplit("/", 1)[0]) for b in bases if "*" in ref.rsplit("/", 1)[0])
            if not found:
                if ours or name.endswith(".md"):
                    out.append((lineno, ref, "missing"))
            elif at and found[0].is_file() and int(at) > len(found[0].read_text(encoding="utf-8",
                                                                               errors="replace").splitlines()):
                out.append((lineno, f"{ref}:{at}", "past the end of the file"))
    return out


def citation_problems(root: Path) -> list:
    files = list(shipped_files(root))
    names = {p.name for p in files}
    return [f"{path.relative_to(root)}:{line}: {ref} ({why})" for path in files
            for line, ref, why in cited_files_missing(path, path.read_text(encoding="utf-8", errors="replace"),
                                                      root, names)]


def test_no_file_cites_a_document_the_project_does_not_ship():
    """Users have only the project: no code, docstring, comment, document or
    command output may send them to a file it lacks (the specifications and
    papers beside a development checkout, a renamed module, a line past a
    file's end)."""
    problems = citation_problems(ROOT)
    assert not problems, "\n".join(problems)


def test_citation_check_catches_what_it_should(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "models.md").write_text("# Models\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n")
    good = ("docs/models.md §3, pkg/mod.py:1, JRC models/modules/FlashMHA.py, https://github.com/a/b/c/X.md, "
            "report.md, DIR/report.md, train.py:52, README-less mention of pkg/*.py, **docs/models.md**")
    (tmp_path / "pkg" / "good.py").write_text(f'"""{good}"""\n')
    assert citation_problems(tmp_path) == []
    spec = "BENCH" + "MARKS" + ".md"
    bad = {f"see {spec} §2": spec, "docs/benchmarks.md": "docs/benchmarks.md", "pkg/gone.py": "pkg/gone.py",
           "pkg/mod.py:7": "pkg/mod.py:7", "../spec/" + spec: "../spec/" + spec,
           "../" + "shar" + "ed/data/logic": "../" + "shar" + "ed"}
    for text, ref in bad.items():
        (tmp_path / "pkg" / "bad.py").write_text(f"# {text}\n")
        problems = citation_problems(tmp_path)
        assert len(problems) >= 1 and ref in problems[0], (text, problems)
    (tmp_path / "pkg" / "bad.py").unlink()
    (tmp_path / "suite.toml").write_text('[sources.P]\ncite = "A paper"\nfile = "a-paper.txt"\n')
    assert [p.split(": ")[1] for p in citation_problems(tmp_path)] == ["a-paper.txt (no such document in the project)"]


def test_generated_doc_tables_are_current():
    """docs/models.md's preset tables and docs/benchmarks.md's published figures
    are what the code and the suite files hold (tests/doc_tables.py)."""
    import doc_tables
    for path in doc_tables.DOCS:
        text = path.read_text(encoding="utf-8")
        assert len(doc_tables.blocks(text)) >= 2, path
        assert doc_tables.fill(text) == text, f"{path} is out of date: run python tests/doc_tables.py --write"


# ---- drawings -------------------------------------------------------------------------------

def test_graph_dot_is_deterministic_and_readable(tmp_path):
    from rasp.draw import draw_program
    a, b = tmp_path / "a.dot", tmp_path / "b.dot"
    draw_program(rasp.load(ROOT / "programs" / "parity.rasp").ir, str(a))
    draw_program(rasp.load(ROOT / "programs" / "parity.rasp").ir, str(b))     # new objects, new ids
    text = a.read_text()
    assert text == b.read_text()
    assert '"\\"#\\""' in text or 'label="\\"#\\""' in text           # symbols as their text
    assert "-2" not in re.findall(r"label=(\S+)", text)
    source = (ROOT / "programs" / "parity.rasp").read_text().splitlines()
    line = next(i for i, row in enumerate(source, 1) if "shift_right(bits, 1)" in row)
    assert "shift_right(bits, 1)" in text and f"line {line}" in text    # library call, source line
    assert re.search(r"\bn\d+ ", text) and not re.search(r"\b\d{9,}\b", text)   # no object ids


if __name__ == "__main__":
    import tempfile
    if sys.argv[1:] == ["--update"]:
        with tempfile.TemporaryDirectory() as d:
            update_tutorial(Path(d))
