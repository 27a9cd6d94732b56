"""Reading what a run directory holds: its status and its evaluation
results in one shape, whichever trainer wrote them.

Every run writes one evaluation schema (splits -> metrics / by_length /
stats: trainer/evaluate.py for Fan-task runs, whose one split "test" is
grouped by length, and trainer/seqeval.py); Fan-task runs of format 1 wrote
a list of rows per length instead.  Both become
`{split: {"metrics": {m: x}, "by_length": {L: {m: x}}, "stats": {s: {"by_length": {L: x}, ...}}}}`
(comparison runs also keep the split's example count "n");
a Fan file is one split named "test" with metric "exact_match".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from trainer.compare.grid import RunSpec
from trainer.compare.runner import read_json, state

FAN_SPLIT = "test"
# Fan stats: the step the stopping rule chose is the depth the model used
FAN_STATS = {"iterations": "chosen_step", "iterations_run": "iterations", "oracle_step": "oracle_step"}


@dataclass
class RunResult:
    spec: RunSpec
    status: str                    # finished | failed | incomplete | stale | missing
    evals: dict = field(default_factory=dict)     # eval name -> normalized splits
    failure: Optional[dict] = None


def normalize(doc: dict) -> dict:
    if isinstance(doc.get("splits"), dict):          # format 2 (every run) and comparison runs of format 1
        out = {}
        for name, s in doc["splits"].items():
            metrics = {m: (v.get("mean") if isinstance(v, dict) else v) for m, v in s.get("metrics", {}).items()}
            by_length, by_group = ({str(k): {m: x for m, x in row.items() if m != "n"} for k, row in s.get(key, {}).items()}
                                   for key in ("by_length", "by_group"))
            out[name] = {"metrics": metrics, "by_length": by_length, "by_group": by_group, "stats": s.get("stats", {}),
                         "n": s.get("n")}
            if doc.get("kind") == "fan":      # lengths n: the training range is shaded in the plots
                out[name]["train_max_n"] = (doc.get("train_range") or [None, None])[-1]
        return out
    if isinstance(doc.get("rows"), list):          # Fan-task runs' format 1 (trainer/evaluate.py before format 2)
        rows = [r for r in doc["rows"] if isinstance(r, dict) and "length" in r]
        by_length = {str(r["length"]): {"exact_match": r.get("exact_match")} for r in rows}
        stats = {name: {"by_length": {str(r["length"]): r[key] for r in rows if key in r}}
                 for name, key in FAN_STATS.items()}
        if doc.get("stop") == "oracle":       # T(n) by construction, not a depth the model chose
            del stats["iterations"]
        em = [r["exact_match"] for r in rows if isinstance(r.get("exact_match"), (int, float))]
        return {FAN_SPLIT: {"metrics": {"exact_match": sum(em) / len(em) if em else None},
                            "by_length": by_length, "stats": stats, "train_max_n": doc.get("train_max_n")}}
    return {}


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
    evals = {e.name: normalize(read_json(run_dir / e.file) or {}) for e in spec.evals}
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
