"""The house stays walkable: what docs/architecture.md promises of the layout.

  * trainer/'s top level holds at most 12 modules; every sub-package says its
    one idea in its docstring;
  * no source file of rasp/, model/, compiler/ or trainer/ is over 700 lines
    (a table of data may be, when listed in DATA_TABLES with its reason);
  * benchmark scripts have one home, bench/, and no file anywhere edits
    `sys.path` (the tests' path is pytest's `pythonpath` setting);
  * no module imports a command-line module as a library: those are reached
    only through rasp/cli.py's command table (by name) and the `__main__`s.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rasp", "model", "compiler", "trainer")
MAX_LINES = 700
DATA_TABLES: dict[str, str] = {}          # path -> why it may be longer
# the commands' modules (rasp.cli.main(argv) itself runs a command as the shell would, so a
# script may call it: that is using the command, not its module as a library)
CLI_MODULES = {"rasp.commands", "compiler.cli", "trainer.cli", "trainer.datacli", "trainer.compare.cli"}
CLI_CALLERS = {"rasp.cli", "rasp.__main__", "trainer.__main__"}


def _python_files():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0].startswith(".") or "data" in rel.parts[:2]:
            continue
        yield rel


def _module(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_trainer_top_level_is_small_and_each_sub_package_names_its_idea():
    top = sorted(p.name for p in (ROOT / "trainer").glob("*.py"))
    assert len(top) <= 12, top
    for init in sorted((ROOT / "trainer").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc.split()) >= 5, f"{init.relative_to(ROOT)} says nothing of its idea"


def test_no_source_file_is_over_the_size_a_reader_takes_in_at_one_sitting():
    long = {str(rel): n for rel in _python_files() if rel.parts[0] in PACKAGES
            and (n := len((ROOT / rel).read_text().splitlines())) > MAX_LINES and str(rel) not in DATA_TABLES}
    assert long == {}


def test_benchmarks_have_one_home():
    homes = sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("bench") if p.is_dir() and ".git" not in p.parts)
    assert homes == ["bench"]


def _edits_sys_path(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        target = node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        if (isinstance(target, ast.Attribute) and target.attr == "path"
                and isinstance(target.value, ast.Name) and target.value.id == "sys"):
            return True
    return False


def test_no_file_edits_sys_path():
    edits = [str(rel) for rel in _python_files() if _edits_sys_path(ast.parse((ROOT / rel).read_text()))]
    assert edits == []


def _imported(tree: ast.AST, module: str) -> set:
    names = set()
    package = module if module in PACKAGES else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            names |= {base} | {f"{base}.{a.name}" for a in node.names}
    return names


def test_no_module_imports_a_command_line_module_as_a_library():
    found = {}
    for rel in _python_files():
        module = _module(rel)
        if module in CLI_CALLERS or rel.parts[0] == "tests":
            continue
        used = _imported(ast.parse((ROOT / rel).read_text()), module) & (CLI_MODULES - {module})
        if used:
            found[module] = sorted(used)
    assert found == {}
