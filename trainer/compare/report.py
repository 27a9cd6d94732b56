"""The report: per suite, each paper table in its own layout with our mean
± standard error over seeds next to the published figure and its citation.
Runs that are absent are "missing", runs that failed are "failed" (never a
number), runs still under way or interrupted are "incomplete", runs trained with
settings the suite's command no longer gives (a preset edited since) are "stale".
Writes DIR/report.md, DIR/report.json and DIR/plots/*.png."""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from rasp.errors import RaspError, RaspFileError
from rasp import atomic
from rasp.readfile import read_json
from trainer.compare import grid as G
from trainer.compare import audit as A
from trainer.compare.markdown import (LEGEND, SUMMARY_TITLE, _md_escape, render_markdown, seed_groups,  # noqa: F401
                                      seeds_note, summary_markdown, summary_row_cells)
from trainer.compare.ranking import ALPHA, CORRECTION, MIN_MARGIN, adjust_family, method_name, rank_table
from trainer.compare.results import RunResult, cell_value, load_run
from trainer.compare.schema import (MAX_FIRST_SEED, MAX_SEEDS, PRESETS, Suite, Table, absent_at_preset, cell_attrs,
                                    resolve, row_runs)
from trainer.compare.suite import load_suite
from trainer.tasks.scoring import summary

MANIFEST = "compare.json"


# ---- the manifest: which suite selections live in DIR ---------------------------

def record_selection(out: Path, suite: Suite, preset: str, seeds: int, models, tasks, first_seed: int = 0):
    """DIR/compare.json remembers each suite's selection, so that
    `rasp compare --report DIR` rebuilds the same report."""
    path = out / MANIFEST
    doc = read_manifest(out) if path.exists() else {"suites": {}}
    key = f"{suite.name}/{preset}"
    old = doc["suites"].get(key)
    # one folder holds one seed range per suite and preset: a rerun with other seeds is reported on its own
    if old and old.get("first_seed", 0) != first_seed:
        raise RaspError(f"{out} holds suite {suite.name} at preset {preset} from seed {old.get('first_seed', 0)}; "
                        f"a run from seed {first_seed} (--first-seed) needs its own --out")
    if old:            # later invocations add to the selection (--models a, then --models b: both reported)
        union = lambda a, b: None if a is None or b is None else sorted(set(a) | set(b))   # noqa: E731
        models, tasks = union(old.get("models"), models), union(old.get("tasks"), tasks)
        k_suite = suite.seed_count(preset)
        k_old = old.get("seeds") or k_suite
        seeds = None if seeds is None and k_old == k_suite else max(seeds or k_suite, k_old)
    doc["suites"][key] = {"suite": suite.name, "file": str(Path(suite.path).resolve()), "preset": preset,
                          "seeds": seeds, "first_seed": first_seed, "models": models, "tasks": tasks}
    _write_atomic(path, json.dumps(doc, indent=1))


def read_manifest(out: Path) -> dict:
    path = Path(out) / MANIFEST
    if not os.path.lexists(path):
        raise RaspError(f"{out}: no {MANIFEST} here (not a `rasp compare` output directory)")
    try:
        doc = read_json(path)
    except RaspFileError as e:
        raise RaspFileError(path, f"damaged (expected a JSON object with 'suites'): {e.message}") from None
    if not (isinstance(doc, dict) and isinstance(doc.get("suites"), dict)):
        raise RaspError(f"{path}: damaged (expected a JSON object with 'suites')")
    for key, sel in doc["suites"].items():
        why = _selection_problem(sel)
        if why:
            raise RaspFileError(path, f"suites.{key}: {why} (the file was damaged or edited; "
                                      "rerun `rasp compare SUITE --out DIR` to record the selection)")
    return doc


def _selection_problem(sel) -> Optional[str]:
    """What is wrong with one recorded selection, or None."""
    names = lambda v: v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v))   # noqa: E731
    if not isinstance(sel, dict):
        return "expected an object with suite, file, preset, seeds, models and tasks"
    if not (isinstance(sel.get("suite"), str) and sel["suite"] and isinstance(sel.get("file"), str)):
        return "suite and file must be strings"
    if sel.get("preset") not in PRESETS:
        return f"preset must be one of {', '.join(PRESETS)}"
    int_in = lambda v, lo, hi: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi   # noqa: E731
    if sel.get("seeds") is not None and not int_in(sel["seeds"], 1, MAX_SEEDS):
        return f"seeds must be null or an integer from 1 to {MAX_SEEDS}"
    if not int_in(sel.get("first_seed", 0), 0, MAX_FIRST_SEED):
        return f"first_seed must be an integer from 0 to {MAX_FIRST_SEED}"
    if not (names(sel.get("models")) and names(sel.get("tasks"))):
        return "models and tasks must be null or lists of names"
    return None


def _write_atomic(path: Path, text: str):
    try:
        atomic.write_text_atomic(path, text)
    except OSError as e:                # e.g. report.md is a directory
        raise RaspFileError(path, f"cannot write: {e.strerror or e}") from None


# ---- cells -----------------------------------------------------------------------

def evaluated_split(spec, eval_name: str, split: str) -> bool:
    """Whether the run's evaluation `eval_name` covers `split` (True where it
    names no splits: the evaluation's own default)."""
    opts = next((e.options for e in spec.evals if e.name == eval_name), {})
    named = opts.get("splits")
    return not isinstance(named, str) or split in named.split(",")


def our_cell(table: Table, attrs: dict, results: list, seeds: int, suite: Suite) -> dict:
    """Aggregate one table cell over the seeds' runs."""
    if not results:
        return {"status": "not run", "text": "not run"}
    eval_name = cell_eval(suite, attrs)
    values, why_none = [], set()
    counts = {"failed": 0, "missing": 0, "incomplete": 0, "stale": 0}
    by_run = {}             # run id -> its value, or why it has none: the cell can be checked run by run
    for r in results:
        if r.status != "finished":
            counts[r.status] += 1
            by_run[r.spec.run_id] = r.status
            continue
        split = r.evals.get(eval_name, {}).get(attrs.get("split", "test"))
        if split is None:
            why_none.add(by_run.setdefault(r.spec.run_id, f"no split {attrs.get('split', 'test')!r}"))
            continue
        v = cell_value(split, attrs["metric"], attrs.get("length"), attrs.get("group"))
        if v is None:
            where = (f" at length {attrs['length']}" if attrs.get("length") is not None
                     else f" in group {attrs['group']}" if attrs.get("group") is not None else "")
            why_none.add(by_run.setdefault(r.spec.run_id, f"no {attrs['metric']}{where}"))
            continue
        values.append(v)
        by_run[r.spec.run_id] = v
    cell = {"runs": [r.spec.run_id for r in results], "seeds": len(results), "n": len(values),
            "file": next((e.file for e in results[0].spec.evals if e.name == eval_name), None),
            "by_run": by_run, **{k: v for k, v in counts.items() if v}}
    if not values:
        # every seed's reason, most serious first; a single kind reads as one word ("failed")
        if not evaluated_split(results[0].spec, eval_name, attrs.get("split", "test")):
            # the suite's evaluation at this preset leaves this split out: no seed will
            # have it, finished or still running (the column is not ours)
            status = f"no split {attrs.get('split', 'test')!r}"
            cell.update(status=status, text=status)
            return cell
        kinds = [k for k in ("failed", "stale", "incomplete", "missing") if counts[k]]
        status = kinds[0] if kinds else ("; ".join(sorted(why_none)) or "missing")
        if kinds == [status] and not why_none:
            text = status                             # every seed alike: one word
        else:
            text = ", ".join([f"{counts[k]} {k}" for k in kinds] + sorted(why_none))
        cell.update(status=status, text=text)
        return cell
    stats = summary(values)                      # mean and standard error over the seeds
    mean, se = stats["mean"], stats["se"]
    d = table.digits
    text = f"{mean * table.scale:.{d}f}" + (f" ± {se * table.scale:.{d}f}" if se is not None else "")
    if table.criterion is not None:
        if table.criterion_rule == "majority":
            passed = sum(v >= table.criterion for v in values) * 2 > len(values)
        else:
            passed = mean >= table.criterion
        cell["passed"] = passed
        text += " ✓" if passed else " ✗"
    # every cell says how many seeds it stands on; one seed is marked as such (no standard error)
    notes = [seeds_note(len(values), len(results))] + [f"{v} {k}" for k, v in counts.items() if v]
    text += f" ({', '.join(notes)})"
    cell.update(status="ok", mean=mean, se=se, values=values, text=text)
    return cell


def cell_eval(suite: Suite, attrs: dict) -> str:
    """The evaluation (by name) a cell reads: its own, else its model's first."""
    return attrs.get("eval") or suite.evals_for(suite.model(attrs["model"]))[0].name


def published_cell(table: Table, row, col_index: int, suite: Suite) -> dict:
    v = row.published[col_index]
    sd = row.published_sd[col_index] if row.published_sd else None
    src = suite.sources[table.source]
    cite = {"source": src.key, "cite": src.cite, "table": table.paper_table, "row": row.paper_row,
            "column": table.columns[col_index].paper_column}
    if v is None:
        return {"value": None, "text": "—", "citation": cite}
    text = f"{v}" + (f" (sd {sd})" if sd not in (None, "—") else "")
    return {"value": v, "sd": sd, "text": text, "citation": cite}


RUN_STATUSES = ("ok", "failed", "incomplete", "stale")      # a cell some run of ours stands behind


def what_ours_measure(attrs: dict, given) -> str:
    """A column's (or row's) "ours" description: the suite's own words when
    it gives them, else the split, length and group the cell reads."""
    if given:
        return str(given)
    parts = [str(attrs.get("split", "test"))]
    if attrs.get("length") is not None:
        parts.append(f"length {attrs['length']}")
    if attrs.get("group") is not None:
        parts.append(f"group {attrs['group']}")
    return ", ".join(parts)


def axis_heading(label: str, ours: Optional[str], paper: str) -> str:
    """The heading of a column (or range row) that states our setting and
    the paper's separately: "0.1 (ours: T 128, p_i 0.1; paper: Length 512, p_i 0.1)"."""
    if ours is None:
        return label if paper in (label, "—", "") else f"{label} (paper: {paper})"
    return f"{label} (ours: {ours}; paper: {paper})" if paper not in ("—", "") else f"{label} (ours: {ours})"


def build_table(suite: Suite, table: Table, preset: str, by_cell: dict, seeds: int) -> dict:
    rows = []
    for row in table.rows:
        runs_row = row_runs(table, row)
        cells = []
        for i, col in enumerate(table.columns):
            cell = {"column": col.label, "published": published_cell(table, row, i, suite)}
            if runs_row and absent_at_preset(table, col, row, preset):   # e.g. a task only the paper preset runs
                cell["attrs"] = cell_attrs(table, col, row, preset)
                cell["ours"] = {"status": "not run", "text": f"not at preset {preset}"}
            elif runs_row:
                attrs = cell_attrs(table, col, row, preset)
                key = (attrs["task"], attrs["model"])
                cell["attrs"] = attrs
                cell["ours"] = our_cell(table, attrs, by_cell.get(key, []), seeds, suite)
            else:
                cell["ours"] = {"status": "paper only", "text": ""}
            cells.append(cell)
        rows.append({"label": row.label, "paper_row": row.paper_row, "ours_run": runs_row, "cells": cells})
    src = suite.sources[table.source]
    selected = any(c["ours"]["status"] not in ("not run", "paper only") for r in rows for c in r["cells"])
    # a table none of whose rows can run (e.g. P3 Table 1: its training lengths are not a split
    # of our tasks) is still shown: its published figures are the point
    published_only = not any(r["ours_run"] for r in rows)
    columns = [{"label": c.label, "paper_column": c.paper_column, "attrs": c.attrs} for c in table.columns]
    models_in_columns = any("model" in c.attrs for c in table.columns)
    for j, (col, c) in enumerate(zip(table.columns, columns)):
        ran = [r["cells"][j] for r in rows if r["ours_run"]]
        ours = what_ours_measure(ran[0]["attrs"], resolve(col.ours, preset)) if ran and not models_in_columns else None
        # a model column is named by its model; a range column states our setting and the paper's
        c["heading"] = col.label if models_in_columns else axis_heading(col.label, ours, col.paper_column)
        statuses = {x["ours"]["status"] for x in ran}
        # only what was run: a range column needs a run behind one of its cells; a model column
        # (P3 Tables 4-5) shows while the model is in the selection, missing or not
        c["shown"] = published_only or bool(statuses & set(RUN_STATUSES) if not models_in_columns
                                            else statuses - {"not run"})
    for row, r in zip(table.rows, rows):
        ours = (what_ours_measure(r["cells"][0]["attrs"], resolve(row.ours, preset))
                if r["ours_run"] and models_in_columns else None)
        r["heading"] = axis_heading(row.label, ours, row.paper_row) if models_in_columns else row.label
        statuses = {x["ours"]["status"] for x, c in zip(r["cells"], columns) if c["shown"]}
        r["shown"] = published_only or not r["ours_run"] or bool(
            statuses & set(RUN_STATUSES) if models_in_columns else statuses - {"not run"})
    return {"id": table.id, "selected": selected, "published_only": published_only, "title": table.title, "paper_table": table.paper_table, "source": src.key,
            "cite": src.cite, "statistic": table.statistic, "scale": table.scale, "digits": table.digits,
            "criterion": table.criterion, "criterion_rule": table.criterion_rule, "note": table.note,
            "withheld": resolve(table.no_summary, preset), "harder": [list(c) for c in table.harder],
            "columns": columns, "rows": rows}


# ---- the whole report ------------------------------------------------------------

def suite_report(out: Path, sel: dict) -> dict:
    suite = load_suite(sel["file"] if Path(sel["file"]).exists() else sel["suite"])
    preset = sel["preset"]
    first_seed = sel.get("first_seed", 0)
    runs = G.expand(suite, preset, sel.get("seeds"), sel.get("models"), sel.get("tasks"), first_seed)
    results = [load_run(r, out) for r in runs]
    by_cell: dict = {}
    for res in results:
        by_cell.setdefault((res.spec.task_entry, res.spec.model_entry), []).append(res)
    seeds = len(G.seeds_for(suite, preset, sel.get("seeds")))
    # model and task entries with their own seed count (fewer for the cells that carry no claim)
    count = lambda model=None, task=None: len(G.seeds_for(suite, preset, sel.get("seeds"), model, task))  # noqa: E731
    tasks_here = [t for t in suite.tasks if t.runs_at(preset)]
    fewer = {**{m.label: count(model=m.name) for m in suite.models},
             **{f"task {t.name}": count(task=t.name) for t in tasks_here}}
    fewer = {k: v for k, v in fewer.items() if v != seeds}
    # cells with their own count are named whatever it is: the model's and the task's counts do not hold there
    fewer.update({f"{suite.model(m).label} on {t.name}": count(m, t.name) for t in tasks_here for m in t.cell_seeds})
    tables = [build_table(suite, t, preset, by_cell, seeds) for t in suite.tables]
    status = {}
    for res in results:
        status[res.status] = status.get(res.status, 0) + 1
    ranked = {m.name for m in suite.models if m.ranked}
    # a preset whose runs cannot rank the models (every model at chance) says why instead of ranking noise
    withheld = resolve(suite.no_summary, preset)
    run_tables = [] if withheld else [t for t in tables if t["selected"]]
    summary_rows = [x for t in run_tables if not t["withheld"] for x in rank_table(t, ranked)]
    family = adjust_family(summary_rows)          # one family per suite: Holm over its distinct margins
    # budgets (steps, width, seeds from each run's run.json) and anomalies, marked where the tables show them
    budgets = {r.spec.run_id: A.run_budget(out, r.spec.run_id) for r in results if r.status == "finished"}
    unranked = {m.name for m in suite.models if not m.ranked}
    A.mark_budgets(tables, budgets, unranked)
    by_title = {t["title"]: t for t in tables}
    for row in summary_rows:
        row["budget"] = A.summary_budget(row, by_title[row["table"]], budgets)
    for t in tables:
        t["anomalies"] = A.anomalies(t, unranked)
    budget_by_model: dict = {}             # model label -> the steps and widths its runs trained
    for r in results:
        b = budgets.get(r.spec.run_id)
        if b:
            got = budget_by_model.setdefault(suite.model(r.spec.model_entry).label, {"steps": set(), "width": set()})
            got["steps"].add(b["steps"])
            got["width"].add(b["width"])
    budget_by_model = {k: {x: sorted(v - {None}) for x, v in b.items()} for k, b in budget_by_model.items()}
    # a table whose runs cannot rank its models (every model at chance) is shown, not ranked
    withheld_tables = [{"table": t["title"], "why": t["withheld"]} for t in run_tables if t["withheld"]]
    return {"suite": suite.name, "title": suite.title, "file": suite.path, "preset": preset, "seeds": seeds,
            "first_seed": first_seed, "seeds_by_model": fewer, "budget_by_model": budget_by_model,
            "note": suite.note, "runs": {"total": len(results), **status},
            "summary": {"test": method_name(), "alpha": ALPHA, "correction": CORRECTION, "family": family["size"],
                        "claims": family["claims"], "min_margin": MIN_MARGIN, "rows": summary_rows, "withheld": withheld,
                        "withheld_tables": withheld_tables,
                        "unranked": [m.label for m in suite.models if not m.ranked],
                        "unranked_models": [m.name for m in suite.models if not m.ranked]},
            "run_status": [_run_row(r) for r in results], "tables": tables, "_results": results, "_suite": suite}


def folder_suite_report(out: Path, suite: str, preset: str) -> Optional[dict]:
    """suite_report of one suite's selection at `preset` in a result folder
    (DIR/compare.json), or None where the folder has no such selection."""
    if not (Path(out) / MANIFEST).is_file():
        return None
    sel = read_manifest(out)["suites"].get(f"{suite}/{preset}")
    return None if sel is None else suite_report(Path(out), sel)


def _run_row(r: RunResult) -> dict:
    row = {"run_id": r.spec.run_id, "status": r.status}
    if r.failure:           # failed.json as written by the runner; any other value is shown as text
        tail = r.failure.get("stderr_tail", "")
        row.update(exit_code=r.failure.get("exit_code"), failed_step=r.failure.get("failed_step"),
                   stderr_tail=(tail if isinstance(tail, str) else json.dumps(tail))[-2000:])
    return row


def write_report(out: Path, plots: bool = True, keep: Optional[dict] = None) -> dict:
    """Write DIR's report; `keep`, when given, receives each suite's full
    report (its runs included) by (suite, preset), for pages drawn from the same runs."""
    out = Path(out)
    manifest = read_manifest(out)
    suites = [suite_report(out, sel) for sel in manifest["suites"].values()]
    if keep is not None:
        keep.update({(s["suite"], s["preset"]): s for s in suites})
    if plots:
        from trainer.compare.plots import suite_plots
        for s in suites:
            s["plots"] = suite_plots(out, s["_suite"], s["preset"], s["_results"], s["tables"])
    public = [{k: v for k, v in s.items() if not k.startswith("_")} for s in suites]
    doc = {"generated": datetime.now(timezone.utc).isoformat(timespec="seconds"), "dir": str(out), "suites": public}
    _write_atomic(out / "report.json", json.dumps(doc, indent=1, default=str))
    _write_atomic(out / "report.md", render_markdown(doc))
    return doc


def summary_line(doc: dict) -> str:
    parts = []
    for s in doc["suites"]:
        parts.append(f"{s['suite']}/{s['preset']}: " + ", ".join(f"{v} {k}" for k, v in s["runs"].items()))
    return "; ".join(parts)


def find_report_cell(doc: dict, suite: str, table: str, row: str, column: str) -> Optional[dict]:
    """A cell of report.json by labels (for tests and scripts)."""
    for s in doc["suites"]:
        if s["suite"] != suite:
            continue
        for t in s["tables"]:
            if t["id"] != table:
                continue
            for r in t["rows"]:
                if r["label"] == row:
                    return next((c for c in r["cells"] if c["column"] == column), None)
    return None
