"""What a suite holds (trainer/compare/suite.py reads and checks the file):
its source, task, model and eval entries, the tables to build with their
published numbers, and how one table cell's attributes resolve.

Any value in a table cell may be a table keyed by preset
(`lengths = { cpu = "1:20", paper = "1:50" }`): the run or report of that
preset uses its entry.  String cell attributes may name other attributes
(`task = "z60_k{k}"`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

PRESETS = ("cpu", "paper")
RUN_ID_SEP = "__"          # joins task, model, preset and seed into a run id: no name may contain it, so
                           # (names starting with a letter or digit) one id never names two grid cells
MAX_SEEDS = 100            # [suite] seeds and rasp compare --seeds
MAX_FIRST_SEED = 2 ** 32 - 1 - MAX_SEEDS    # rasp compare --first-seed: the last seed is still a trainer seed


@dataclass
class Source:
    key: str
    cite: str
    file: str = ""


@dataclass
class TaskEntry:
    name: str
    task: str                           # a registered task, or the `program` path as the suite wrote it
    models: Optional[list] = None       # restrict the grid to these model entries
    train: dict = field(default_factory=dict)
    eval: dict = field(default_factory=dict)
    presets: Optional[list] = None      # run only under these presets (None: all the suite's)
    seeds: Optional[dict] = None        # preset -> at most this many seeds on this task (None: no limit of its own)
    # model entry -> {preset: seeds}: that cell's own count, in place of the task's and the model's (a
    # single-seed cell whose result contradicts its paper gets the seeds that can test it)
    cell_seeds: dict = field(default_factory=dict)
    program: str = ""                   # a program file (resolved path) trained with `--program`, in place of a task

    def runs_at(self, preset: str) -> bool:
        return self.presets is None or preset in self.presets


@dataclass
class ModelEntry:
    name: str
    model: str
    label: str
    evals: Optional[list] = None        # eval entries this model runs (None: all)
    train: dict = field(default_factory=dict)
    eval: dict = field(default_factory=dict)
    tasks: Optional[list] = None        # restrict the grid to these task entries
    ranked: bool = True                 # False: not a learning result (a compiled program), kept out of the summary
    seeds: Optional[dict] = None        # preset -> default number of seeds of this model (None: the suite's)


@dataclass
class EvalEntry:
    name: str
    file: str = "eval.json"
    options: dict = field(default_factory=dict)


@dataclass
class Row:
    label: str
    attrs: dict                         # cell attributes this row sets (model, eval, task, ...)
    published: list                     # one per column; None = not reported
    published_sd: Optional[list]
    paper_row: str
    line: int = 0
    ours: Any = None                    # what our runs measure here (e.g. "length 40"), preset-keyed or not


@dataclass
class Column:
    label: str
    attrs: dict
    paper_column: str
    ours: Any = None                    # what our runs measure here (e.g. "T 128"), preset-keyed or not


@dataclass
class Table:
    id: str
    title: str
    source: str
    paper_table: str
    attrs: dict
    columns: list
    rows: list
    statistic: str = ""
    scale: float = 1.0                  # ours x scale is comparable with the published figure
    digits: int = 1
    criterion: Optional[float] = None   # published marks are pass/fail at this (unscaled) threshold
    criterion_rule: str = "mean"        # "mean" of the seeds, or "majority" of seeds passing
    note: str = ""
    # preset -> why this table's runs cannot rank its models (the suite's no_summary, for one table)
    no_summary: Any = None
    # chains of column labels, easier first: a row scoring clearly higher on a later one is flagged (audit.py)
    harder: tuple = ()


@dataclass
class Suite:
    name: str
    title: str
    path: str
    seeds: dict                 # preset -> default number of seeds
    presets: tuple
    sources: dict
    tasks: list
    models: list
    evals: list
    tables: list
    train: dict = field(default_factory=dict)
    eval: dict = field(default_factory=dict)
    note: str = ""
    # preset -> why this preset's runs cannot rank the models (every model at chance): the report
    # shows the sentence in place of the summary, and the tables still show every figure
    no_summary: Any = None

    def seed_count(self, preset: str, model: Optional[str] = None, task: Optional[str] = None) -> int:
        """Default number of seeds (0..k-1) of a run of this suite at `preset`:
        the suite's, or where the model entry and/or the task entry give their
        own, the fewer of theirs (the cells that carry a paper's claim get more
        seeds than the rest)."""
        t = self.task(task) if task is not None else None
        if model is not None and t is not None and model in t.cell_seeds:
            return t.cell_seeds[model][preset]
        own = [e.seeds[preset] for e in (self.model(model) if model is not None else None, t)
               if e is not None and e.seeds]
        return min(own) if own else self.seeds[preset]

    def task(self, name: str) -> TaskEntry:
        return next(t for t in self.tasks if t.name == name)

    def model(self, name: str) -> ModelEntry:
        return next(m for m in self.models if m.name == name)

    def eval_entry(self, name: str) -> EvalEntry:
        return next(e for e in self.evals if e.name == name)

    def evals_for(self, model: ModelEntry) -> list:
        if model.evals is None:
            return list(self.evals)
        return [self.eval_entry(n) for n in model.evals]


def resolve(value: Any, preset: str):
    """A preset-keyed table picks the preset's entry (None if it has none)."""
    if isinstance(value, dict) and value and set(value) <= set(PRESETS):
        return value.get(preset)
    return value


def row_runs(table: Table, row: Row) -> bool:
    """Whether a row has runs of ours: a model is named by the row, the table
    or the columns (P3 Tables 3-5 put one model per column); otherwise it is
    a published-only row."""
    return "model" in row.attrs or "model" in table.attrs or any("model" in c.attrs for c in table.columns)


class TemplateError(ValueError):
    """A cell template that is not plain `{name}` substitution (`text`)."""

    def __init__(self, message: str, text: str):
        super().__init__(message)
        self.text = text


_TEMPLATE_PART = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|[{}]")
MAX_TEMPLATE_DEPTH = 8       # templates naming templated values


def fill_templates(attrs: dict) -> dict:
    """Fill `{name}` in string values with the value of attribute `name`
    (itself filled first); `{{` and `}}` are literal braces.  Only plain
    names are substituted -- no attribute access, indexing or format specs
    (unlike str.format): anything else raises TemplateError, an unknown
    name KeyError."""
    done: dict = {}

    def value(name: str, stack: tuple):
        if name in done:
            return done[name]
        v = attrs[name]
        if isinstance(v, str) and ("{" in v or "}" in v):
            if name in stack or len(stack) >= MAX_TEMPLATE_DEPTH:
                raise TemplateError(f"the templates of {' -> '.join(stack + (name,))} name each other in a circle", v)

            def part(m):
                if m.group(0) in ("{{", "}}"):
                    return m.group(0)[0]
                if m.group(1) is None:
                    raise TemplateError(f"{name} = {v!r}: a '{{' or '}}' must enclose an attribute name "
                                        "(`{k}`) or be doubled", v)
                return str(value(m.group(1), stack + (name,)))
            v = _TEMPLATE_PART.sub(part, v)
        done[name] = v
        return v

    return {k: value(k, ()) for k in attrs}


def absent_at_preset(table: Table, column: Column, row: Row, preset: str) -> bool:
    """A cell whose task or split is given per preset, without this one (a split
    only the paper preset evaluates, a task only the paper preset runs): no run
    of ours at this preset, and nothing to check."""
    merged = {**table.attrs, **column.attrs, **row.attrs}
    return any(isinstance(merged.get(k), dict) and resolve(merged[k], preset) is None for k in ("task", "split"))


def cell_attrs(table: Table, column: Column, row: Row, preset: str) -> dict:
    """The attributes of one cell (row over column over table), preset
    entries picked and string templates filled in (fill_templates)."""
    merged = {**table.attrs, **column.attrs, **row.attrs}
    return fill_templates({k: resolve(v, preset) for k, v in merged.items()})
