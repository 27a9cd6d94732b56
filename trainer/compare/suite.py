"""Suite files: one declarative TOML file per comparison (tasks x models x
presets x seeds, the trainer options of each run, the tables to build and the
published numbers with their sources).  Read with the standard library's
tomllib and validated here into the data classes of trainer/compare/schema.py;
every problem is a RaspError located at FILE:LINE (exit status 2).

Any value in an option table or a table cell may be a table keyed by preset
(`lengths = { cpu = "1:20", paper = "1:50" }`): the run or report of that
preset uses its entry, and an option with no entry for the preset is left out.
String cell attributes may name other attributes (`task = "z60_k{k}"`).
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

from rasp.errors import RaspError
from rasp.ir import Loc
from trainer.compare.schema import (MAX_SEEDS, PRESETS, RUN_ID_SEP, Column, EvalEntry, ModelEntry, Row, Source,
                                    Suite, Table, TaskEntry, TemplateError, absent_at_preset, cell_attrs, row_runs)

SUITES_DIR = Path(__file__).with_name("suites")
PROJECT_ROOT = Path(__file__).resolve().parents[2]     # a suite's `program` may be relative to it (programs/...)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")    # ids become directory names
OPTION_SCALARS = (str, int, float, bool)
# sizes checked before any entry is validated: the largest shipped suite has 9 tables and
# 12 models; these leave room and keep a suite's checks to a second or so
MAX_SUITE_BYTES = 1 << 20
MAX_ENTRIES = {"sources": 100, "evals": 100, "tasks": 1000, "models": 1000, "tables": 1000}
MAX_TABLE_CELLS = 100_000       # rows x columns over all [[tables]]
OPTION_KEY_RE = re.compile(r"^[a-z][a-z0-9_]*$")
RUNNER_OPTIONS = {           # trainer flags rasp compare gives itself, never a suite's option
    "out": "rasp compare writes each run into its own directory under --out",
    "json": "an eval writes its file inside the run directory; name it with [[evals]] file",
    "resume": "rasp compare resumes interrupted runs itself",
}
MAX_DIGITS = 10              # a table's `digits`
PUBLISHED_SCALARS = (str, int, float)
CELL_KEYS = {"task", "model", "eval", "split", "metric", "length", "group"}


def suite_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix != ".toml" and name_or_path in available_suites():
        return SUITES_DIR / f"{name_or_path}.toml"     # a name, even beside an output folder of that name
    if p.suffix == ".toml" or p.exists():
        return p
    return SUITES_DIR / f"{name_or_path}.toml"


def available_suites() -> list:
    return sorted(p.stem for p in SUITES_DIR.glob("*.toml"))


def load_suite(name_or_path: str) -> Suite:
    path = suite_path(name_or_path)
    if not path.is_file():
        raise RaspError(f"no suite {name_or_path!r} (known: {', '.join(available_suites())}; "
                        f"or give the path of a .toml file)")
    try:
        if path.stat().st_size > MAX_SUITE_BYTES:
            raise RaspError(f"{path}: the suite file has {path.stat().st_size:,} bytes; the limit is "
                            f"{MAX_SUITE_BYTES:,}")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RaspError(f"{path}: cannot read the suite file: {e}") from None
    return parse_suite(text, str(path))


class _Locator:
    """Finds the line of a key or value in the source so that errors say
    FILE:LINE (tomllib keeps no positions for values)."""

    def __init__(self, text: str, path: str):
        self.lines, self.path, self.text = text.split("\n"), path, text
        self.headers: dict = {}         # "[x]" / "[[x]]" -> its lines, found in one pass (no rescans)
        for i, line in enumerate(self.lines):
            head = line.strip()
            if head.startswith("["):
                self.headers.setdefault(head, []).append(i + 1)

    def header_line(self, header: str) -> int:
        """The line of table header `[header]` (1 when absent)."""
        return self.headers.get(f"[{header}]", [1])[0]

    def line_of(self, *needles, after: int = 0) -> int:
        for needle in needles:
            if needle is None:
                continue
            pat = re.compile(rf"(^|[\s{{,\[]){re.escape(str(needle))}(\s*=|\"|\s*\]|\s*$)")
            for i in range(max(after - 1, 0), len(self.lines)):
                if pat.search(self.lines[i]) or (isinstance(needle, str) and f'"{needle}"' in self.lines[i]):
                    return i + 1
        return after or 1

    def header_lines(self, header: str) -> list:
        """Lines of each `[[header]]` occurrence, in order."""
        return self.headers.get(f"[[{header}]]", [])

    def error(self, message: str, line: int = 1) -> RaspError:
        return RaspError(message, Loc(self.path, line, 1), self.text)


def parse_suite(text: str, path: str = "<suite>") -> Suite:
    loc = _Locator(text, path)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"at line (\d+), column (\d+)", str(e))
        line, col = (int(m.group(1)), int(m.group(2))) if m else (1, 1)
        raise RaspError(f"not valid TOML: {re.sub(r' [(]at line.*', '', str(e))}", Loc(path, line, col), text) from None
    except RecursionError:          # tomllib recurses per level of nested arrays / inline tables
        line, col = _deep_place(text)
        raise RaspError(f"not valid TOML: arrays or tables nested more than {TOML_DEPTH} deep",
                        Loc(path, line, col), text) from None
    _check_sizes(doc, loc)
    return _Parser(doc, loc).suite()


TOML_DEPTH = 100        # nesting tomllib is sure to handle; the place named when it is not


def _deep_place(text: str) -> tuple:
    """(line, column) of the first bracket nested past TOML_DEPTH (strings and
    comments skipped roughly: this only locates an error tomllib found)."""
    depth, quote, line, start = 0, None, 1, 0
    for i, ch in enumerate(text):
        if ch == "\n":
            line, start = line + 1, i + 1
            if quote in ("#", '"', "'"):
                quote = None
        elif quote:
            if ch == quote:
                quote = None
        elif ch in "\"'#":
            quote = ch
        elif ch in "[{":
            depth += 1
            if depth > TOML_DEPTH:
                return line, i - start + 1
        elif ch in "]}":
            depth = max(depth - 1, 0)
    return 1, 1


def _check_sizes(doc: dict, loc: _Locator):
    """Each section's number of entries, and the table cells, bounded before
    any entry is looked at (the checks per entry are not all linear)."""
    for key, limit in MAX_ENTRIES.items():
        v = doc.get(key)
        if isinstance(v, (list, dict)) and len(v) > limit:
            lines = loc.headers.get(f"[[{key}]]") or [loc.header_line(f"{key}.{list(v)[limit]}")
                                                     if isinstance(v, dict) else 1]
            line = lines[limit] if len(lines) > limit else lines[0]
            raise loc.error(f"{len(v)} {key} entries; a suite may have at most {limit}", line)
    cells = 0
    for t in doc.get("tables", []) if isinstance(doc.get("tables"), list) else []:
        if isinstance(t, dict):
            rows, cols = t.get("rows"), t.get("columns")
            cells += (len(rows) if isinstance(rows, list) else 1) * (len(cols) if isinstance(cols, list) else 1)
    if cells > MAX_TABLE_CELLS:
        raise loc.error(f"the [[tables]] have {cells:,} cells (rows x columns); a suite may have at most "
                        f"{MAX_TABLE_CELLS:,}", loc.headers.get("[[tables]]", [1])[0])


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):       # a name too long, a NUL in it: no such file
        return False


class _Parser:
    def __init__(self, doc: dict, loc: _Locator):
        self.doc, self.loc = doc, loc

    # -- helpers -------------------------------------------------------------
    def _fail(self, message: str, *needles, after: int = 0):
        raise self.loc.error(message, self.loc.line_of(*needles, after=after))

    def _known(self, table: dict, allowed: set, where: str, after: int = 0):
        for k in table:
            if k not in allowed:
                self._fail(f"{where}: unknown key {k!r} (allowed: {', '.join(sorted(allowed))})", k, after=after)

    def _str(self, table: dict, key: str, where: str, after: int = 0, default=None, required=True) -> str:
        v = table.get(key, default)
        if v is None and not required:
            return None
        if not isinstance(v, str) or not v:
            self._fail(f"{where}: {key!r} must be a non-empty string", key if key in table else None, after=after)
        return v

    def _name(self, table: dict, where: str, after: int) -> str:
        v = self._str(table, "name", where, after)
        if not NAME_RE.match(v):
            self._fail(f"{where}: name {v!r} may only use letters, digits, '_', '.', '-'", "name", after=after)
        if RUN_ID_SEP in v:
            self._fail(f"{where}: name {v!r} may not contain {RUN_ID_SEP!r} (it separates the parts of a run id)",
                       "name", after=after)
        return v

    def _options(self, table: dict, key: str, where: str, after: int) -> dict:
        opts = table.get(key, {})
        if not isinstance(opts, dict):
            self._fail(f"{where}: {key!r} must be a table of options (option = value)", key, after=after)
        for k, v in opts.items():
            self._check_option_name(k, where, after)
            values = v.values() if isinstance(v, dict) else [v]
            if isinstance(v, dict) and not (v and set(v) <= set(PRESETS)):
                self._fail(f"{where}: option {k!r}: a table value must be keyed by preset "
                           f"({', '.join(PRESETS)})", k, after=after)
            for x in values:
                ok = isinstance(x, OPTION_SCALARS) or (isinstance(x, list) and all(isinstance(y, OPTION_SCALARS) for y in x))
                if not ok:
                    self._fail(f"{where}: option {k!r} must be a string, number, boolean or list of them", k, after=after)
        return opts

    def _check_option_name(self, key: str, where: str, after: int):
        """An option becomes a trainer flag (`key` -> `--key`, argparse also
        taking any unambiguous prefix): only plain names, and none of the
        flags rasp compare sets itself -- the output paths among them, so a
        suite never writes outside the run directory (`json = "/x.json"`)."""
        if not OPTION_KEY_RE.match(key):
            self._fail(f"{where}: option name {key!r} may only use lower-case letters, digits and '_'", key,
                       after=after)
        flag = key.replace("_", "-")
        for name, why in RUNNER_OPTIONS.items():
            if flag == name or (len(flag) > 1 and name.startswith(flag)):
                self._fail(f"{where}: option {key!r} (--{name}) cannot be set in a suite: {why}", key, after=after)

    def _name_list(self, table: dict, key: str, known: set, what: str, where: str, after: int):
        v = table.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            self._fail(f"{where}: {key!r} must be a list of {what} names", key, after=after)
        for x in v:
            if x not in known:
                self._fail(f"{where}: unknown {what} {x!r} in {key!r} (known: {', '.join(sorted(known))})", x, after=after)
        return v

    def _entries(self, key: str) -> list:
        v = self.doc.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
            self._fail(f"{key!r} must be an array of tables ([[{key}]])", key)
        lines = self.loc.header_lines(key)
        return [(x, lines[i] if i < len(lines) else self.loc.line_of(key)) for i, x in enumerate(v)]

    def _unique(self, items: list, what: str):
        seen = set()
        for name, line in items:
            if name in seen:
                raise self.loc.error(f"duplicate {what} name {name!r}", self.loc.line_of("name", after=line))
            seen.add(name)

    # -- sections ------------------------------------------------------------
    def suite(self) -> Suite:
        self._known(self.doc, {"suite", "sources", "train", "eval", "tasks", "models", "evals", "tables"}, "suite file")
        head = self.doc.get("suite")
        if not isinstance(head, dict):
            self._fail("the file needs a [suite] table with name, title and seeds")
        hl = self.loc.line_of("[suite]")
        self._known(head, {"name", "title", "seeds", "presets", "note", "no_summary"}, "[suite]", hl)
        name = self._name(head, "[suite]", hl)
        presets = head.get("presets", list(PRESETS))
        if not isinstance(presets, list) or not presets or any(p not in PRESETS for p in presets):
            self._fail(f"[suite]: presets must be a list drawn from {', '.join(PRESETS)}", "presets", after=hl)
        counts = self._seed_counts(head.get("seeds", 1), presets, "[suite]", hl)
        self.presets = presets
        sources = self.sources()
        evals = self.evals()
        eval_names = {e.name for e in evals}
        tasks = self.tasks()
        models = self.models(eval_names, {t.name for t in tasks})
        model_names = {m.name for m in models}
        for t, (_, line) in zip(tasks, self._entries("tasks")):
            for key, names in (("models", t.models or []), ("cell_seeds", t.cell_seeds)):
                for m in names:
                    if m not in model_names:
                        self._fail(f"[[tasks]] {t.name}: unknown model entry {m!r} in '{key}' "
                                   f"(known: {', '.join(sorted(model_names))})", m, after=line)
        suite = Suite(name=name, title=self._str(head, "title", "[suite]", hl), path=self.loc.path, seeds=counts,
                      presets=tuple(presets), sources=sources, tasks=tasks, models=models, evals=evals, tables=[],
                      train=self._options(self.doc, "train", "suite", 1), eval=self._options(self.doc, "eval", "suite", 1),
                      note=head.get("note", ""), no_summary=self._no_summary(head.get("no_summary"), presets, hl, "[suite]"))
        suite.tables = self.tables(suite)
        return suite

    def _no_summary(self, value, presets: list, line: int, where: str):
        """A sentence, or a table of one sentence per preset it applies to."""
        sentences = value if isinstance(value, dict) else {p: value for p in presets} if value is not None else {}
        if set(sentences) - set(presets) or not all(isinstance(x, str) and x.strip() for x in sentences.values()):
            self._fail(f"{where}: no_summary must be a sentence, or a table of sentences keyed by preset "
                       f"({', '.join(presets)})", "no_summary", after=line)
        return value

    def _seed_counts(self, seeds, presets: list, where: str, line: int) -> dict:
        """One count, or one per preset (a cpu budget affords fewer seeds than the paper's)."""
        counts = seeds if isinstance(seeds, dict) else {p: seeds for p in presets}
        if set(counts) != set(presets) or any(not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SEEDS
                                              for k in counts.values()):
            self._fail(f"{where}: seeds must be an integer from 1 to {MAX_SEEDS}, or a table with one such "
                       f"integer per preset ({', '.join(presets)})", "seeds", after=line)
        return counts

    def sources(self) -> dict:
        raw = self.doc.get("sources", {})
        if not isinstance(raw, dict) or not raw:
            self._fail("the file needs [sources.KEY] tables (cite = ...) for the published numbers", "sources")
        out = {}
        for key, v in raw.items():
            where = f"[sources.{key}]"
            line = self.loc.header_line(f"sources.{key}")
            if not isinstance(v, dict):
                self._fail(f"{where} must be a table with 'cite'", where)
            self._known(v, {"cite", "file"}, where, line)
            out[key] = Source(key, self._str(v, "cite", where, line), v.get("file", ""))
        return out

    def evals(self) -> list:
        out = []
        for e, line in self._entries("evals") or [({"name": "default"}, 1)]:
            self._known(e, {"name", "file", "options"}, "[[evals]]", line)
            name = self._name(e, "[[evals]]", line)
            file = self._str(e, "file", f"[[evals]] {name}", line, default="eval.json")
            if "/" in file or not file.endswith(".json"):
                self._fail(f"[[evals]] {name}: file must be a .json name inside the run directory", "file", after=line)
            out.append((EvalEntry(name, file, self._options(e, "options", f"[[evals]] {name}", line)), line))
        self._unique([(e.name, l) for e, l in out], "eval")
        return [e for e, _ in out]

    def tasks(self) -> list:
        out = []
        entries = self._entries("tasks")
        if not entries:
            self._fail("the suite needs at least one [[tasks]] entry")
        for t, line in entries:
            self._known(t, {"name", "task", "program", "models", "train", "eval", "presets", "seeds", "cell_seeds"},
                        "[[tasks]]", line)
            name = self._name(t, "[[tasks]]", line)
            where = f"[[tasks]] {name}"
            program = self._program(t, where, line) if "program" in t else ""
            seeds = self._seed_counts(t["seeds"], self.presets, where, line) if "seeds" in t else None
            cells = t.get("cell_seeds", {})
            if not isinstance(cells, dict):
                self._fail(f"{where}: cell_seeds must be a table of seed counts keyed by model entry",
                           "cell_seeds", after=line)
            cells = {m: self._seed_counts(k, self.presets, f"{where} cell_seeds.{m}", line) for m, k in cells.items()}
            presets = t.get("presets")
            if presets is not None and (not isinstance(presets, list) or any(p not in PRESETS for p in presets)):
                self._fail(f"{where}: presets must be a list drawn from {', '.join(PRESETS)}", "presets", after=line)
            task = t["program"] if program else self._str(t, "task", where, line, default=name)
            out.append((TaskEntry(name, task, t.get("models"),
                                  self._options(t, "train", where, line), self._options(t, "eval", where, line),
                                  presets, seeds, cells, program), line))
            if t.get("models") is not None and (not isinstance(t["models"], list)
                                                or not all(isinstance(x, str) for x in t["models"])):
                self._fail(f"{where}: 'models' must be a list of model entry names", "models", after=line)
        self._unique([(t.name, l) for t, l in out], "task")
        return [t for t, _ in out]

    def _program(self, t: dict, where: str, line: int) -> str:
        """`program = "P.rasp"`: a program file trained with `rasp train --program`, found beside the
        suite or under the project's root; checked now (exists, a regular file, `rasp check` passes, has
        inputs to train on), so a bad one stops the suite before any run starts, not run by run."""
        from rasp.program import loads
        from trainer.tasks.program import read_program_text      # bounded in size, as `rasp train` reads it
        if "task" in t:
            self._fail(f"{where}: give 'task' (a registered task) or 'program' (a .rasp file), not both",
                       "program", after=line)
        text = self._str(t, "program", where, line)
        at = self.loc.line_of("program", after=line)
        bases = [Path(self.loc.path).resolve().parent, PROJECT_ROOT]
        found = next((b / text for b in bases if _exists(b / text)), None)
        if found is None:
            raise self.loc.error(f"{where}: program {text!r}: no such file (looked beside the suite, in {bases[0]}, "
                                 f"and in the project's root, {PROJECT_ROOT})", at)
        if not found.is_file():
            raise self.loc.error(f"{where}: program {text!r}: {found} is not a regular file", at)
        try:
            program = loads(read_program_text(found), str(found))
        except RaspError as e:          # the program's own located error, on one line
            raise self.loc.error(f"{where}: program {text!r} does not pass `rasp check`: "
                                 f"{e.format().splitlines()[0]}", at) from None
        # `rasp train --program` needs inputs: the program's `sample`, or an --inputs file option
        trains = [x.get("train") for x in (t, self.doc)]
        if program.ir.sampler is None and not any(isinstance(x, dict) and "inputs" in x for x in trains):
            raise self.loc.error(f"{where}: program {text!r} has no `sample` statement to draw inputs from; add "
                                 "one (`rasp help sample`) or give the task train = { inputs = \"FILE\" }", at)
        return str(found.resolve())

    def models(self, eval_names: set, task_names: set) -> list:
        out = []
        entries = self._entries("models")
        if not entries:
            self._fail("the suite needs at least one [[models]] entry")
        for m, line in entries:
            self._known(m, {"name", "model", "label", "evals", "tasks", "train", "eval", "ranked", "seeds"},
                        "[[models]]", line)
            name = self._name(m, "[[models]]", line)
            where = f"[[models]] {name}"
            if not isinstance(m.get("ranked", True), bool):
                self._fail(f"{where}: 'ranked' must be true or false", "ranked", after=line)
            # a model's own seed count: the rows that carry a paper's claim get more seeds than the rest
            seeds = self._seed_counts(m["seeds"], self.presets, where, line) if "seeds" in m else None
            out.append((ModelEntry(name, self._str(m, "model", where, line, default=name),
                                   self._str(m, "label", where, line, default=name),
                                   self._name_list(m, "evals", eval_names, "eval", where, line),
                                   self._options(m, "train", where, line), self._options(m, "eval", where, line),
                                   self._name_list(m, "tasks", task_names, "task", where, line),
                                   m.get("ranked", True), seeds), line))
        self._unique([(m.name, l) for m, l in out], "model")
        return [m for m, _ in out]

    def tables(self, suite: Suite) -> list:
        out = []
        entries = self._entries("tables")
        if not entries:
            self._fail("the suite needs at least one [[tables]] entry (the paper's table layout)")
        row_lines = self.loc.header_lines("tables.rows")
        col_keys = {"label", "paper_column", "ours"} | CELL_KEYS
        extra_attrs = set()            # template names used by rows/columns (e.g. k)
        for t, line in entries:
            allowed = {"id", "title", "source", "paper_table", "statistic", "scale", "digits", "criterion",
                       "criterion_rule", "note", "columns", "rows", "attrs", "no_summary", "harder"} | CELL_KEYS
            self._known(t, allowed, "[[tables]]", line)
            tid = self._str(t, "id", "[[tables]]", line)
            where = f"[[tables]] {tid}"
            source = self._str(t, "source", where, line)
            if source not in suite.sources:
                self._fail(f"{where}: source {source!r} is not one of the [sources] "
                           f"({', '.join(suite.sources)})", source, after=line)
            for key in ("scale", "criterion"):
                if key in t and (not isinstance(t[key], (int, float)) or isinstance(t[key], bool)):
                    self._fail(f"{where}: {key!r} must be a number", key, after=line)
            if t.get("criterion_rule", "mean") not in ("mean", "majority"):
                self._fail(f"{where}: criterion_rule must be 'mean' or 'majority'", "criterion_rule", after=line)
            if "digits" in t and (not isinstance(t["digits"], int) or isinstance(t["digits"], bool)
                                  or not 0 <= t["digits"] <= MAX_DIGITS):
                self._fail(f"{where}: 'digits' must be an integer from 0 to {MAX_DIGITS}", "digits", after=line)
            for key in ("title", "paper_table", "statistic", "note"):
                if key in t and not isinstance(t[key], str):
                    self._fail(f"{where}: {key!r} must be a string", key, after=line)
            if not isinstance(t.get("attrs", {}), dict):
                self._fail(f"{where}: 'attrs' must be a table of cell attributes (name = value)", "attrs", after=line)
            if not isinstance(t.get("rows", []), list) or not all(isinstance(r, dict) for r in t.get("rows", [])):
                self._fail(f"{where}: 'rows' must be [[tables.rows]] tables", "rows", after=line)
            base = {k: t[k] for k in CELL_KEYS if k in t}
            base.update(t.get("attrs", {}))
            self._cell_values(base, where, line)
            cols = t.get("columns")
            if not isinstance(cols, list) or not cols or not all(isinstance(c, dict) for c in cols):
                self._fail(f"{where}: 'columns' must be a non-empty list of tables", "columns", after=line)
            columns = []
            for c in cols:
                label = c.get("label")
                if not isinstance(label, str):
                    self._fail(f"{where}: every column needs a string 'label'", "columns", after=line)
                attrs = {k: v for k, v in c.items() if k not in ("label", "paper_column", "ours")}
                self._cell_values(attrs, f"{where}, column {label!r}", line)
                self._cell_values({"ours": c.get("ours", "")}, f"{where}, column {label!r}", line)
                extra_attrs |= set(attrs) - col_keys
                columns.append(Column(label, attrs, c.get("paper_column", label), c.get("ours")))
            rows = []
            for r in t.get("rows", []):
                rl = next((x for x in row_lines if x > line), line)
                row_lines = [x for x in row_lines if x != rl]
                label = r.get("label")
                if not isinstance(label, str):
                    raise self.loc.error(f"{where}: every row needs a string 'label'", rl)
                pub = r.get("published")
                if not isinstance(pub, list) or len(pub) != len(columns):
                    raise self.loc.error(f"{where}, row {label!r}: 'published' must list one value per column "
                                         f"({len(columns)}), got {len(pub) if isinstance(pub, list) else pub!r}",
                                         self.loc.line_of("published", after=rl))
                for v in pub:
                    if not isinstance(v, PUBLISHED_SCALARS) or isinstance(v, bool):
                        raise self.loc.error(f"{where}, row {label!r}: published values are numbers or strings "
                                             f"(\"—\" = not reported), got {v!r}", self.loc.line_of("published", after=rl))
                sd = r.get("published_sd")
                if sd is not None and (not isinstance(sd, list) or len(sd) != len(columns)):
                    raise self.loc.error(f"{where}, row {label!r}: 'published_sd' must list one value per column",
                                         self.loc.line_of("published_sd", after=rl))
                attrs = {k: v for k, v in r.items() if k not in ("label", "published", "published_sd", "paper_row", "ours")}
                self._cell_values(attrs, f"{where}, row {label!r}", rl)
                self._cell_values({"ours": r.get("ours", "")}, f"{where}, row {label!r}", rl)
                rows.append(Row(label, attrs, [None if v == "—" else v for v in pub], sd,
                                r.get("paper_row", label), rl, r.get("ours")))
            table = Table(tid, self._str(t, "title", where, line), source,
                          self._str(t, "paper_table", where, line), base, columns, rows,
                          t.get("statistic", ""), float(t.get("scale", 1.0)), int(t.get("digits", 1)),
                          t.get("criterion"), t.get("criterion_rule", "mean"), t.get("note", ""),
                          self._no_summary(t.get("no_summary"), list(suite.presets), line, where),
                          self._harder(t.get("harder", []), columns, where, line))
            self._check_cells(suite, table)
            out.append(table)
        return out

    def _harder(self, chains, columns: list, where: str, after: int) -> tuple:
        """`harder`: lists of the table's column labels, easier first."""
        labels = {c.label for c in columns}
        if not (isinstance(chains, list) and all(isinstance(c, list) and all(isinstance(x, str) for x in c)
                                                 for c in chains)):
            self._fail(f"{where}: 'harder' must be lists of column labels, easier first", "harder", after=after)
        for x in (x for c in chains for x in c):
            if x not in labels:
                self._fail(f"{where}: 'harder' names {x!r}, not a column label", "harder", after=after)
        return tuple(tuple(c) for c in chains)

    def _cell_values(self, attrs: dict, where: str, after: int):
        """A cell attribute is a string or number, or a table of them keyed by preset."""
        for k, v in attrs.items():
            ok = all(isinstance(x, PUBLISHED_SCALARS) and not isinstance(x, bool)
                     for x in (v.values() if isinstance(v, dict) and v and set(v) <= set(PRESETS) else [v]))
            if not ok:
                self._fail(f"{where}: attribute {k!r} must be a string or number (or a table of them keyed by "
                           f"preset: {', '.join(PRESETS)})", k, after=after)

    def _check_cells(self, suite: Suite, table: Table):
        """Every row that names a model must resolve, for every column and
        preset, to a task entry, model entry and eval entry of the suite."""
        for row in table.rows:
            for col in table.columns:
                for preset in suite.presets:
                    try:
                        cell = cell_attrs(table, col, row, preset)
                    except KeyError as e:
                        raise self.loc.error(f"[[tables]] {table.id}, row {row.label!r}, column {col.label!r}: "
                                             f"the template names an unknown attribute {e}", row.line) from None
                    except TemplateError as e:     # located at the template's text (first place it occurs)
                        raise self.loc.error(f"[[tables]] {table.id}, row {row.label!r}, column {col.label!r}: "
                                             f"{e}", self.loc.line_of(e.text) if e.text in self.loc.text
                                             else row.line) from None
                    if not row_runs(table, row) or absent_at_preset(table, col, row, preset):
                        continue         # a published-only row (a paper's row we do not run), or no cell here
                    for key, names, what in (("task", [t.name for t in suite.tasks], "task"),
                                             ("model", [m.name for m in suite.models], "model"),
                                             ("eval", [e.name for e in suite.evals], "eval")):
                        v = cell.get(key)
                        if key == "eval" and v is None:
                            continue
                        if v not in names:
                            raise self.loc.error(
                                f"[[tables]] {table.id}, row {row.label!r}, column {col.label!r}: {key} {v!r} is not "
                                f"a [[{what}s]] entry (known: {', '.join(names)})", self.loc.line_of(str(v), after=row.line)
                                if v else row.line)
                    presets = suite.task(cell["task"]).presets
                    if presets is not None and preset not in presets:
                        raise self.loc.error(f"[[tables]] {table.id}, row {row.label!r}, column {col.label!r}: task "
                                             f"{cell['task']!r} has no {preset} runs (its presets: "
                                             f"{', '.join(presets)}); give the cell a {{ {preset} = ... }} task",
                                             row.line)
                    if cell.get("eval") is None and len(suite.evals_for(suite.model(cell["model"]))) != 1:
                        raise self.loc.error(f"[[tables]] {table.id}, row {row.label!r}: model "
                                             f"{cell['model']!r} has several evals; say which (eval = ...)", row.line)
                    if not isinstance(cell.get("metric"), str):
                        raise self.loc.error(f"[[tables]] {table.id}: column {col.label!r} has no metric", row.line)
