"""The evaluation file of a Fan-task run, `eval_<rule>.json` (written by
`rasp eval`, trainer/fan/evaluate.py; read by `rasp compare` without torch).

It has every run's evaluation schema (trainer/benchmark/evaluate.py writes the
same for comparison runs; trainer/README.md shows it): a Fan run's test
inputs are one split, "test", whose grouping is the length n:

    {"format": 2, "kind": "fan", "task", "model", "init", "run", "step", "seed",
     "headline": "exact_match", "train_range": [min n, max n], "stop", "threshold",
     "splits": {"test": {"n", "params": {"lengths", "samples"},
                         "metrics": {"exact_match": {"mean", "se"}},
                         "by_length": {"n": {"exact_match", "se", "n", "chosen_step", "oracle_step",
                                             "iterations", "seconds", "seed", "curve"?}},
                         "by_group": {},
                         "stats": {"iterations" (the chosen step; not for the oracle),
                                   "iterations_run", "oracle_step": {"mean", "max", "by_length"}}}}}

One file per stopping rule (eval_<rule>.json): the rules are alternative
readings of one model, each evaluated on the same inputs.  Files of format 1
(a list of "rows" per length) are still read (`rows`)."""
from __future__ import annotations

import math

FAN_SPLIT = "test"
ROW_KEYS = ("exact_match", "se", "n", "chosen_step", "oracle_step", "iterations", "seconds", "seed", "curve",
            "oracle_exact_match", "step_error")
# the depth statistics of a row: the step the stopping rule chose is the depth the model used
ROW_STATS = {"iterations": "chosen_step", "iterations_run": "iterations", "oracle_step": "oracle_step"}


def document(head: dict, rows: list) -> dict:
    """The evaluation file of a Fan run from its per-length rows."""
    total = sum(r["n"] for r in rows)
    mean = sum(r["exact_match"] * r["n"] for r in rows) / total if total else None
    se = math.sqrt(sum((r["se"] * r["n"]) ** 2 for r in rows)) / total if total else None
    stats = {name: {"mean": sum(r[key] * r["n"] for r in rows) / total if total else None,
                    "max": max((r[key] for r in rows), default=None),
                    "by_length": {str(r["length"]): r[key] for r in rows}}
             for name, key in ROW_STATS.items() if not (name == "iterations" and head["stop"] == "oracle")}
    split = {"n": total, "params": {"lengths": [r["length"] for r in rows],
                                    "samples": sorted({r["n"] for r in rows})},
             "metrics": {"exact_match": {"mean": mean, "se": se}},
             "by_length": {str(r["length"]): {k: r[k] for k in ROW_KEYS if k in r} for r in rows},
             "by_group": {}, "stats": stats}
    return {**head, "splits": {FAN_SPLIT: split}}


def rows(doc: dict) -> list:
    """The per-length rows of a Fan evaluation file, by length (a format-1
    file's "rows" as they were, with its stderr / samples as se / n)."""
    if isinstance(doc.get("rows"), list):
        return [{**{"se": r.get("stderr"), "n": r.get("samples")}, **r} for r in doc["rows"]]
    by_length = doc["splits"][FAN_SPLIT]["by_length"]
    return [{"length": int(L), **row} for L, row in sorted(by_length.items(), key=lambda kv: int(kv[0]))]
