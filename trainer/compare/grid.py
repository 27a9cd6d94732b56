"""Grid expansion: a suite (tasks x models x preset x seeds, narrowed by the
command line) becomes a list of independent runs, each with the exact
trainer options it trains and evaluates with and a stable RUN_ID."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from rasp.errors import RaspError, RaspFileError
from trainer.compare.schema import RUN_ID_SEP, Suite, resolve

MAX_RUNS = 10_000          # runs of one rasp compare (the largest shipped suite has 220)


@dataclass
class EvalStep:
    name: str
    file: str                      # written into the run directory by the eval command
    options: dict


@dataclass
class RunSpec:
    run_id: str
    suite: str
    task_entry: str
    model_entry: str
    task: str                      # trainer --task (a program entry: its path as the suite gives it)
    model: str                     # trainer --model
    preset: str
    seed: int
    train: dict = field(default_factory=dict)   # resolved options (no preset tables left)
    evals: list = field(default_factory=list)   # [EvalStep]
    program: str = ""              # trainer --program (a resolved .rasp path) in place of --task

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RunSpec":
        d = dict(d)
        d["evals"] = [EvalStep(**e) for e in d.get("evals", [])]
        return cls(**d)


def run_id(task_entry: str, model_entry: str, preset: str, seed: int) -> str:
    """Stable across invocations: the same cell of the grid always lands in
    the same directory, which is what makes skip and resume work."""
    return RUN_ID_SEP.join((task_entry, model_entry, preset, f"s{seed}"))


def merge_options(preset: str, *tables: dict) -> dict:
    """Later tables win; preset-keyed values are resolved and options whose
    preset has no entry are dropped."""
    out = {}
    for t in tables:
        for k, v in t.items():
            out[k] = resolve(v, preset)
    return {k: v for k, v in out.items() if v is not None}


def _pick(names: Optional[list], known: list, what: str, suite: Suite) -> list:
    if not names:
        return known
    for n in names:
        if n not in known:
            raise RaspError(f"--{what}s: {n!r} is not a {what} of suite {suite.name} (known: {', '.join(known)})")
    return [k for k in known if k in names]


def _model_entries(suite: Suite, names: Optional[list]) -> Optional[list]:
    """--models takes entry names, or a trainer model name that stands for all
    its entries (`--models gru` = gru_h8, gru_h64 in the counting suite)."""
    if not names:
        return names
    entries = {m.name for m in suite.models}
    out = []
    for n in names:
        family = [m.name for m in suite.models if m.model == n]
        out += [n] if n in entries or not family else family
    return out


def seeds_for(suite: Suite, preset: str, seeds: Optional[int], model: Optional[str] = None,
              task: Optional[str] = None, first_seed: int = 0) -> list:
    """Seeds first_seed..first_seed+k-1 (a rerun with other seeds starts
    past the first run's): k is `seeds` when given (--seeds, every cell
    alike), else the suite's count for `preset` (Suite.seed_count: the model
    and task entries' own where they give one)."""
    k = suite.seed_count(preset, model, task) if seeds is None else seeds
    if k < 1:
        raise RaspError(f"--seeds must be at least 1, got {k}")
    return list(range(first_seed, first_seed + k))


def _pairs(t, m) -> bool:
    """Whether task entry `t` is trained with model entry `m`."""
    return (t.models is None or m.name in t.models) and (m.tasks is None or t.name in m.tasks)


def expand(suite: Suite, preset: str, seeds: Optional[int] = None, models: Optional[list] = None,
           tasks: Optional[list] = None, first_seed: int = 0) -> list:
    """All runs of the suite for `preset`, in task-major order."""
    if preset not in suite.presets:
        raise RaspError(f"suite {suite.name} has no preset {preset!r} (it has: {', '.join(suite.presets)})")
    task_names = _pick(tasks, [t.name for t in suite.tasks], "task", suite)
    # a task entry limited to other presets has no runs here (e.g. a paper-only training mixture)
    by_task, by_model = {t.name: t for t in suite.tasks}, {m.name: m for m in suite.models}
    task_names = [n for n in task_names if by_task[n].runs_at(preset)]
    model_names = _pick(_model_entries(suite, models), [m.name for m in suite.models], "model", suite)
    cells = [(t, m) for t in task_names for m in model_names if _pairs(by_task[t], by_model[m])]
    seed_lists = {(t, m): seeds_for(suite, preset, seeds, m, t, first_seed) for t, m in cells}
    total = sum(len(v) for v in seed_lists.values())
    if total > MAX_RUNS:
        raise RaspError(f"suite {suite.name}: {len(cells)} task x model cells x their seeds = "
                        f"{total:,} runs; the limit is {MAX_RUNS:,} (narrow it with --tasks/--models/--seeds)")
    runs = []
    for tname in task_names:
        t = by_task[tname]
        for mname in model_names:
            m = by_model[mname]
            if not _pairs(t, m):
                continue
            train = merge_options(preset, suite.train, t.train, m.train)
            base_eval = merge_options(preset, suite.eval, t.eval, m.eval)
            evals = [EvalStep(e.name, e.file, {**base_eval, **merge_options(preset, e.options)})
                     for e in suite.evals_for(m)]
            for seed in seed_lists[(tname, mname)]:
                runs.append(RunSpec(run_id(tname, mname, preset, seed), suite.name, tname, mname, t.task, m.model,
                                    preset, seed, train, evals, t.program))
    if not runs:
        raise RaspError(f"suite {suite.name}: the selection (--models/--tasks) leaves no runs")
    _check_distinct(suite, runs)
    return runs


def _check_distinct(suite: Suite, runs: list):
    """Two grid cells must never share a run directory (the second would
    "finish" with the first one's result); ids differing only in case are
    one directory on a case-insensitive file system, so they count too."""
    seen = {}
    for r in runs:
        other = seen.setdefault(r.run_id.casefold(), r)
        if other is not r:
            raise RaspFileError(suite.path, f"tasks {other.task_entry!r} / {r.task_entry!r} with models "
                            f"{other.model_entry!r} / {r.model_entry!r} give the same run directory "
                            f"{r.run_id!r} (up to case); rename one of the entries")
