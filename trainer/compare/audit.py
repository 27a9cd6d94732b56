"""What a report says about its own comparisons, beside the numbers.

Budgets: every run's run.json records the steps it trained and its width
(d_model).  A table row (a model) whose runs trained a different number of
steps, at a different width or with a different number of seeds than most
rows of its table is marked; a summary range whose best and second model
differ in any of the three says so.

Anomalies: a model scoring clearly higher on a harder split than on an easier
one (HARDER_GAP), where the table orders its columns (`harder` in the suite:
chains of column labels, easier first; columns of one task and split at
several lengths are ordered by length), and one seed far above the other
seeds of its cell (SEED_GAP).  Both are flags for a reader, not verdicts:
each wants a follow-up (more seeds) or a stated reason."""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Optional

from trainer.compare.ranking import model_axis
from trainer.compare.runner import read_json

HARDER_GAP = 0.25        # a harder column this far (0-1 unit) above an easier one of the same row is flagged
SEED_GAP = 0.5           # one seed this far above every other seed of its cell is flagged


def run_budget(out: Path, run_id: str) -> dict:
    """{"steps": n, "width": d_model} from a run's run.json (None where not recorded)."""
    doc = read_json(Path(out) / run_id / "run.json")
    hp = doc.get("hparams") if isinstance(doc, dict) else None
    hp = hp if isinstance(hp, dict) else {}
    num = lambda v: v if isinstance(v, int) and not isinstance(v, bool) else None   # noqa: E731
    return {"steps": num(hp.get("steps")), "width": num(hp.get("d_model"))}


def _lines(table: dict) -> list:
    """[(name, model entry, [cells])]: the table's models (its rows, or its
    columns where the table puts models in columns), shown ones only."""
    shown_rows = [r for r in table["rows"] if r.get("shown", True) and r.get("ours_run", True)]
    cols = [j for j, c in enumerate(table["columns"]) if c.get("shown", True)]
    if model_axis(table) == "columns":
        return [(table["columns"][j]["label"], (table["columns"][j].get("attrs") or {}).get("model"),
                 [r["cells"][j] for r in shown_rows]) for j in cols]
    return [(r["label"], next(((c.get("attrs") or {}).get("model") for c in r["cells"] if c.get("attrs")), None),
             [r["cells"][j] for j in cols]) for r in shown_rows]


def line_budget(cells: list, budgets: dict) -> dict:
    """{"steps": {..}, "width": {..}, "seeds": n} over a model's cells with values."""
    ok = [c["ours"] for c in cells if (c.get("ours") or {}).get("status") == "ok"]
    runs = {rid for o in ok for rid in o.get("runs", [])}
    steps = {budgets[r]["steps"] for r in runs if r in budgets} - {None}
    width = {budgets[r]["width"] for r in runs if r in budgets} - {None}
    return {"steps": steps, "width": width, "seeds": max((o.get("n", 0) for o in ok), default=0)}


def _one(values: set):
    return next(iter(values)) if len(values) == 1 else None


def _majority(values: list):
    """The value more than half of `values` share, else None."""
    if not values:
        return None
    v, n = Counter(values).most_common(1)[0]
    return v if n * 2 > len(values) else None


def mark_budgets(tables: list, budgets: dict, unranked: set) -> list:
    """Mark each table's models that differ from most of its (ranked) models
    in steps, width or seeds: table["budget"] = {"usual": {...}, "marks":
    {model name: text}}.  Returns [(table title, model name, text)]."""
    found = []
    for t in tables:
        if not t.get("selected"):
            continue
        lines = [(name, model, line_budget(cells, budgets)) for name, model, cells in _lines(t)]
        lines = [x for x in lines if x[2]["seeds"] and x[1] not in unranked]
        usual = {k: _majority([v for v in (_one(b[k]) if k != "seeds" else b[k] for _, _, b in lines)
                               if v is not None]) for k in ("steps", "width", "seeds")}
        marks = {}
        for name, _, b in lines:
            text = budget_difference(b, usual)
            if text:
                marks[name] = text
                found.append((t["title"], name, text))
        t["budget"] = {"usual": usual, "marks": marks}
    return found


def budget_difference(b: dict, usual: dict) -> str:
    """"6000 steps (most rows 800)" and the like; "" where the budget is the usual one."""
    words = {"steps": lambda v: f"{v} steps", "width": lambda v: f"width {v}",
             "seeds": lambda v: f"{v} seed{'s' if v != 1 else ''}"}
    parts = []
    for k, say in words.items():
        mine = b[k] if k == "seeds" else _one(b[k])
        if usual.get(k) is not None and mine is not None and mine != usual[k]:
            parts.append(f"{say(mine)} (most rows {usual[k]})")
        elif k != "seeds" and len(b[k]) > 1:
            parts.append(f"{'/'.join(map(str, sorted(b[k])))} {'steps' if k == 'steps' else 'widths'} across its cells")
    return "; ".join(parts)


def summary_budget(row: dict, table: dict, budgets: dict) -> str:
    """Where a summary range's best and second model differ in steps, width or seeds: the difference."""
    if row.get("second") is None:
        return ""
    by_model = {model: line_budget(cells, budgets) for _, model, cells in _lines(table)}
    a, b = by_model.get(row.get("best_model")), by_model.get(row.get("second_model"))
    if not a or not b:
        return ""
    parts = []
    for k, word in (("steps", "steps"), ("width", "width")):
        x, y = _one(a[k]), _one(b[k])
        if x is not None and y is not None and x != y:
            parts.append(f"{word} {x} against {y}")
    if row["best_n"] != row.get("second_n"):
        parts.append(f"seeds {row['best_n']} against {row['second_n']}")
    return "; ".join(parts)


def _length(col: dict) -> Optional[float]:
    v = (col.get("attrs") or {}).get("length")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def harder_pairs(table: dict) -> list:
    """[(easier column index, harder column index)] the table orders."""
    labels = {c["label"]: j for j, c in enumerate(table["columns"])}
    pairs = []
    for chain in table.get("harder") or []:
        idx = [labels[x] for x in chain if x in labels]
        pairs += [(a, b) for i, a in enumerate(idx) for b in idx[i + 1:]]
    if model_axis(table) == "rows":       # one task and split at several lengths: longer is harder
        by_split: dict = {}
        for j, c in enumerate(table["columns"]):
            a = c.get("attrs") or {}
            if _length(c) is not None:
                by_split.setdefault((a.get("task"), a.get("split")), []).append(j)
        for js in by_split.values():
            js.sort(key=lambda j: _length(table["columns"][j]))
            pairs += [(a, b) for i, a in enumerate(js) for b in js[i + 1:]
                      if _length(table["columns"][a]) < _length(table["columns"][b])]
    return sorted(set(pairs))


def anomalies(table: dict, unranked: set = frozenset()) -> list:
    """[{"kind", "model", "column", "text"}] for one table (see the module's docstring)."""
    if not table.get("selected") or model_axis(table) == "columns":
        return []
    out = []
    cols = table["columns"]
    shown = {j for j, c in enumerate(cols) if c.get("shown", True)}
    pairs = [(a, b) for a, b in harder_pairs(table) if a in shown and b in shown]
    d, sc = table.get("digits", 1), table.get("scale", 1)
    fmt = lambda x: f"{x * sc:.{d}f}"            # noqa: E731
    for row in table["rows"]:
        if not row.get("shown", True) or not row.get("ours_run", True):
            continue
        if any((c.get("attrs") or {}).get("model") in unranked for c in row["cells"]):
            continue
        ours = [c.get("ours") or {} for c in row["cells"]]
        worst: dict = {}
        for a, b in pairs:
            x, y = ours[a], ours[b]
            if x.get("status") == "ok" and y.get("status") == "ok" and y["mean"] - x["mean"] >= HARDER_GAP:
                if b not in worst or x["mean"] < ours[worst[b]]["mean"]:
                    worst[b] = a
        for b, a in sorted(worst.items()):
            out.append({"kind": "harder split higher", "model": row["label"], "column": cols[b]["label"],
                        "text": f"{row['label']}: {fmt(ours[b]['mean'])} on {cols[b]['label']} "
                                f"({ours[b].get('n')} seed{'s' if ours[b].get('n') != 1 else ''}) against "
                                f"{fmt(ours[a]['mean'])} on the easier {cols[a]['label']}"})
        for j in sorted(shown):
            vals = sorted(ours[j].get("values") or [], reverse=True) if ours[j].get("status") == "ok" else []
            if len(vals) >= 3 and vals[0] - vals[1] >= SEED_GAP:
                out.append({"kind": "one seed far above", "model": row["label"], "column": cols[j]["label"],
                            "text": f"{row['label']} on {cols[j]['label']}: one seed {fmt(vals[0])}, the others "
                                    f"at most {fmt(vals[1])}"})
    return out
