"""Reading what a run directory holds: its status and its evaluation
results in one shape, whichever trainer wrote them.

Every run writes one evaluation schema (splits -> metrics / by_length /
stats: trainer/fan/evaluate.py for Fan-task runs, whose one split "test" is
grouped by length, and trainer/benchmark/evaluate.py); Fan-task runs of format 1 wrote
a list of rows per length instead.  Both become
`{split: {"metrics": {m: x}, "by_length": {L: {m: x}}, "stats": {s: {"by_length": {L: x}, ...}}}}`
(comparison runs also keep the split's example count "n");
a Fan file is one split named "test" with metric "exact_match".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from rasp import readfile
from rasp.errors import RaspFileError
from trainer.compare.grid import RunSpec
from trainer.compare.runner import read_json, state
from trainer.fan.evalfile import FAN_SPLIT, ROW_STATS



@dataclass
class RunResult:
    spec: RunSpec
    status: str                    # finished | failed | incomplete | stale | missing
    evals: dict = field(default_factory=dict)     # eval name -> normalized splits
    failure: Optional[dict] = None


def _obj(x) -> dict:
    """x when it is a JSON object, else {} (an edited or damaged file)."""
    return x if isinstance(x, dict) else {}


def _num(x):
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _stats(raw) -> dict:
    """{name: {"by_length": {L: x}, "mean"/"max": x}} with numbers only."""
    out = {}
    for name, st in _obj(raw).items():
        if isinstance(st, dict):
            out[name] = {**{k: _num(st.get(k)) for k in ("mean", "max") if k in st},
                         "by_length": {str(k): _num(v) for k, v in _obj(st.get("by_length")).items()}}
    return out


def normalize(doc) -> dict:
    """A run's evaluation file in the one shape above; what does not fit it
    (a damaged or edited file) is left out, so the report shows no number."""
    doc = _obj(doc)
    if isinstance(doc.get("splits"), dict):          # format 2 (every run) and comparison runs of format 1
        out = {}
        for name, s in doc["splits"].items():
            if not isinstance(s, dict):
                continue
            metrics = {m: _num(v.get("mean") if isinstance(v, dict) else v) for m, v in _obj(s.get("metrics")).items()}
            by_length, by_group = ({str(k): {m: _num(x) for m, x in row.items() if m != "n"}
                                    for k, row in _obj(s.get(key)).items() if isinstance(row, dict)}
                                   for key in ("by_length", "by_group"))
            out[name] = {"metrics": metrics, "by_length": by_length, "by_group": by_group, "stats": _stats(s.get("stats")),
                         "n": s.get("n") if isinstance(s.get("n"), int) else None}
            if doc.get("kind") == "fan":      # lengths n: the training range is shaded in the plots
                train_range = doc.get("train_range")
                out[name]["train_max_n"] = _num(train_range[-1]) if isinstance(train_range, list) and train_range else None
        return out
    if isinstance(doc.get("rows"), list):          # Fan-task runs' format 1 (trainer/fan/evaluate.py before format 2)
        rows = [r for r in doc["rows"] if isinstance(r, dict) and isinstance(r.get("length"), int)]
        by_length = {str(r["length"]): {"exact_match": _num(r.get("exact_match"))} for r in rows}
        stats = {name: {"by_length": {str(r["length"]): _num(r[key]) for r in rows if key in r}}
                 for name, key in ROW_STATS.items()}
        if doc.get("stop") == "oracle":       # T(n) by construction, not a depth the model chose
            del stats["iterations"]
        em = [r["exact_match"] for r in rows if _num(r.get("exact_match")) is not None]
        return {FAN_SPLIT: {"metrics": {"exact_match": sum(em) / len(em) if em else None},
                            "by_length": by_length, "stats": stats, "train_max_n": _num(doc.get("train_max_n"))}}
    return {}


def _eval_doc(path: Path) -> dict:
    """An evaluation file ({} when absent or damaged: its cells are not
    measured); NaN or infinity in it is a located error, never a figure."""
    doc = read_json(path)
    where = readfile.nonfinite(doc)
    if where is not None:
        raise RaspFileError(path, f"{where}: NaN or infinity, not a number a report can hold (the file was "
                                  "damaged or edited; evaluate the run again)")
    return doc or {}


def load_run(spec: RunSpec, out: Path) -> RunResult:
    run_dir = Path(out) / spec.run_id
    if not run_dir.exists():
        return RunResult(spec, "missing")
    failure = read_json(run_dir / "failed.json")
    if isinstance(failure, dict):
        return RunResult(spec, "failed", failure=failure)
    st = state(spec, run_dir)
    if st != "done":
        return RunResult(spec, "stale" if st == "stale" else "incomplete")
    evals = {e.name: normalize(_eval_doc(run_dir / e.file)) for e in spec.evals}
    return RunResult(spec, "finished", evals)


def cell_value(split_data: dict, metric: str, length=None, group=None) -> Optional[float]:
    """One number from a normalized split: the metric overall, at a length,
    or in a group (e.g. logic's number of operators)."""
    if length is not None:
        v = split_data.get("by_length", {}).get(str(length), {}).get(metric)
    elif group is not None:
        v = split_data.get("by_group", {}).get(str(group), {}).get(metric)
    else:
        v = split_data.get("metrics", {}).get(metric)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
