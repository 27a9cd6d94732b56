"""Imports flow one way: rasp -> model -> compiler -> trainer.

Every .py file of the four packages is parsed with `ast` (imports inside
functions count: a lazy import is still an import), relative imports are
resolved, and the module-level import graph is checked:

  * no circle among modules (a circle through a lazy import is still one);
  * no module imports from a package above its own (rasp < model < compiler
    < trainer);
  * no module reaches a `_private` name of another top-level package;
  * rasp reaches the packages above it only by module name, in its two name
    tables (rasp/cli.py COMMANDS, rasp/loaders.py LOADERS), whose modules are
    the only ones of rasp that import by name, and every name there exists.

An import of `a.b.c` is an edge to the module `a.b.c` only (not to the
packages `a` and `a.b` whose `__init__` also runs): a package that re-exports
its submodules would otherwise be in a circle with each of them.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
ORDER = ("rasp", "model", "compiler", "trainer")     # lower first: each may import only those before it
LEVEL = {name: i for i, name in enumerate(ORDER)}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    found = {}
    for top in ORDER:
        for path in sorted((ROOT / top).rglob("*.py")):
            found[_module_name(path)] = path
    return found


SOURCES = _sources()
MODULES = set(SOURCES)


def _package_of(module: str) -> str:
    """The package a module's relative imports start from."""
    path = SOURCES[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _resolve(module: str, level: int, target: str | None) -> str:
    base = _package_of(module)
    for _ in range(level - 1):
        base = base.rpartition(".")[0]
    return ".".join(p for p in (base, target) if p)


def _imports(module: str):
    """(imported module, names taken from it, line) for every import statement of
    `module`, at any depth, plus `_private` attributes read off imported modules."""
    tree = ast.parse(SOURCES[module].read_text(), filename=str(SOURCES[module]))
    bound: dict[str, str] = {}               # local name -> internal module it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, node.level, node.module) if node.level else node.module
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                if sub in MODULES:
                    yield sub, [], node.lineno
                    bound[alias.asname or alias.name] = sub
                else:
                    yield source, [alias.name], node.lineno
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            yield bound[node.value.id], [node.attr], node.lineno


def _top(module: str) -> str:
    return module.split(".")[0]


def _internal(name: str) -> str | None:
    """The module of the four packages that `name` names (the longest known prefix)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


@functools.cache       # built when a test asks, not at import (every xdist worker collects this file)
def _graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(MODULES)
    for module in sorted(MODULES):
        for imported, _names, line in _imports(module):
            target = _internal(imported)
            if target is None or target == module:
                continue
            graph.add_edge(module, target)
            lines = graph.edges[module, target].setdefault("lines", [])
            if line not in lines:
                lines.append(line)
    return graph




def _cycles(graph: nx.DiGraph) -> list[str]:
    shown = []
    for cycle in nx.simple_cycles(graph):
        shown.append(" -> ".join(cycle + cycle[:1]))
        if len(shown) == 20:
            shown.append("...")
            break
    return shown


def _outside_trainer_cycles() -> nx.DiGraph:
    """The graph less the edges between two trainer modules: every circle in it runs
    through rasp, model or compiler (trainer's own circles are the next test's)."""
    graph = _graph().copy()
    graph.remove_edges_from([(a, b) for a, b in _graph().edges if _top(a) == _top(b) == "trainer"])
    return graph


def test_the_four_packages_are_all_parsed():
    assert {_top(m) for m in MODULES} == set(ORDER)
    assert {"rasp.program", "model", "compiler.compiled", "trainer.cli"} <= MODULES


def test_no_import_circle_in_rasp_model_or_compiler():
    cycles = _cycles(_outside_trainer_cycles())
    assert not cycles, "import circles:\n  " + "\n  ".join(cycles)


def test_no_import_circle_in_trainer():
    trainer = _graph().subgraph(m for m in MODULES if _top(m) == "trainer")
    cycles = _cycles(trainer)
    assert not cycles, "import circles:\n  " + "\n  ".join(cycles)


def test_imports_flow_from_rasp_to_model_to_compiler_to_trainer():
    upward = [f"{a} imports {b} (line {', '.join(map(str, _graph().edges[a, b]['lines']))})"
              for a, b in sorted(_graph().edges) if LEVEL[_top(a)] < LEVEL[_top(b)]]
    assert not upward, f"imports against the order {' < '.join(ORDER)}:\n  " + "\n  ".join(upward)


def test_no_private_name_is_imported_from_another_package():
    private = []
    for module in sorted(MODULES):
        for imported, names, line in _imports(module):
            target = _internal(imported)
            if target is None or _top(target) == _top(module):
                continue
            hidden = [n for n in names if n.startswith("_") and not n.startswith("__")]
            hidden += [p for p in target.split(".") + imported[len(target):].split(".")
                       if p.startswith("_") and not p.startswith("__")]
            private += [f"{module} line {line}: {target}.{n}" for n in hidden]
    assert not private, "private names used across packages:\n  " + "\n  ".join(private)


# ---- the name tables: rasp's only route to the packages above it -----------------------------

# rasp reaches model, compiler and trainer only by module *name*, resolved with importlib, and
# only through these tables: the subcommands (rasp/cli.py) and the kinds of model directory that
# `rasp.load` and `rasp run DIR` read (rasp/loaders.py)
NAME_TABLES = {"rasp.cli": "COMMANDS", "rasp.loaders": "LOADERS"}
MODULE_NAME = __import__("re").compile(r"(rasp|model|compiler|trainer)(\.[A-Za-z_]\w*)*")


def _table_nodes(tree: ast.Module, name: str) -> set:
    """ids of the AST nodes inside the module-level assignment to `name`."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return {id(n) for n in ast.walk(node.value)}
    return set()


def _names_above(module: str):
    """(text, line, in a name table) of each string in `module` that names a module above rasp."""
    tree = ast.parse(SOURCES[module].read_text())
    table = _table_nodes(tree, NAME_TABLES[module]) if module in NAME_TABLES else set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_NAME.fullmatch(node.value):
            target = _internal(node.value)
            if target is not None and LEVEL[_top(target)] > LEVEL["rasp"]:
                yield node.value, node.lineno, id(node) in table


def _dynamic_imports(module: str):
    tree = ast.parse(SOURCES[module].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name in ("import_module", "__import__"):
                yield node.lineno


def test_rasp_names_higher_modules_only_in_its_name_tables():
    loose = [f"{m} line {line}: {text!r}" for m in sorted(MODULES) if _top(m) == "rasp"
             for text, line, in_table in _names_above(m) if not in_table]
    assert not loose, ("rasp names modules above it outside its name tables "
                       f"({', '.join(f'{m}.{t}' for m, t in NAME_TABLES.items())}):\n  " + "\n  ".join(loose))


def test_only_the_name_tables_modules_import_by_name():
    found = [f"{m} line {line}" for m in sorted(MODULES) if _top(m) == "rasp" and m not in NAME_TABLES
             for line in _dynamic_imports(m)]
    assert not found, "importlib used outside " + ", ".join(NAME_TABLES) + ":\n  " + "\n  ".join(found)


def test_every_name_in_the_tables_is_a_function_of_an_existing_module():
    """Each (module, function) pair in the tables names a module of the four packages and a
    function defined at its top level (checked without importing: no PyTorch needed)."""
    def defined(module: str) -> set:
        tree = ast.parse(SOURCES[module].read_text())
        names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in ast.walk(n) if isinstance(t, ast.Name)}
        return names
    from rasp.cli import COMMANDS
    from rasp.loaders import LOADERS
    pairs = [(c.module, c.add) for c in COMMANDS.values()] + [(c.module, c.run) for c in COMMANDS.values()]
    pairs += [c.on_directory for c in COMMANDS.values() if c.on_directory]
    pairs += [p for loader in LOADERS for p in (loader.load, loader.run)]
    bad = [f"{m}.{f}" for m, f in pairs if m not in MODULES or f not in defined(m)]
    assert not bad, "the name tables name what does not exist:\n  " + "\n  ".join(bad)
