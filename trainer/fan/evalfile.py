"""The evaluation file of a Fan-task run, `eval_<rule>.json` (written by
`rasp eval`, trainer/fan/evaluate.py; read by `rasp compare` without torch).

It has every run's evaluation schema (trainer/benchmark/evaluate.py writes the
same for comparison runs; trainer/README.md shows it): a Fan run's test
inputs are one split, "test", whose grouping is the length n:

    {"format": 2, "kind": "fan", "task", "model", "init", "run", "step", "seed",
     "headline": "exact_match", "train_range": [min n, max n], "stop", "threshold",
     "inputs": where the inputs came from ({"source": "file", "file": path as given} | {"source":
     "sample", "statement", "line"} | {"source": "generator", "name"}), "trained_sizes": [n the training drew],
     "splits": {"test": {"n", "params": {"lengths", "samples"},
                         "metrics": {"exact_match": {"mean", "se"}},
                         "by_length": {"n": {"exact_match", "se", "n", "chosen_step", "oracle_step",
                                             "iterations", "seconds", "seed", "curve"?, "distinct"?}},
                         "bands": {"trained"|"untrained": {"lengths", "n", "exact_match", "se",
                                                           "oracle_exact_match"?}},
                         "by_group": {},
                         "stats": {"iterations" (the chosen step; not for the oracle),
                                   "iterations_run", "oracle_step": {"mean", "max", "by_length"}}}}}

Inputs from a file are each scored once: a row that scored all of its length's
distinct inputs ("distinct") has se None (nothing was sampled; the mean's se is
then None too).

One file per stopping rule (eval_<rule>.json): the rules are alternative
readings of one model, each evaluated on the same inputs.  Files of format 1
(a list of "rows" per length) are still read (`rows`)."""
from __future__ import annotations

import math

FAN_SPLIT = "test"
ROW_KEYS = ("exact_match", "se", "n", "chosen_step", "oracle_step", "iterations", "seconds", "seed", "curve",
            "oracle_exact_match", "step_error", "distinct")
# the depth statistics of a row: the step the stopping rule chose is the depth the model used
ROW_STATS = {"iterations": "chosen_step", "iterations_run": "iterations", "oracle_step": "oracle_step"}


def document(head: dict, rows: list, trained_sizes=None) -> dict:
    """The evaluation file of a Fan run from its per-length rows; `trained_sizes`:
    the sizes the training drew, which split the rows into two bands."""
    total = sum(r["n"] for r in rows)
    mean = sum(r["exact_match"] * r["n"] for r in rows) / total if total else None
    se = pooled_se(rows)
    stats = {name: {"mean": sum(r[key] * r["n"] for r in rows) / total if total else None,
                    "max": max((r[key] for r in rows), default=None),
                    "by_length": {str(r["length"]): r[key] for r in rows}}
             for name, key in ROW_STATS.items() if not (name == "iterations" and head["stop"] == "oracle")}
    split = {"n": total, "params": {"lengths": [r["length"] for r in rows],
                                    "samples": sorted({r["n"] for r in rows})},
             "metrics": {"exact_match": {"mean": mean, "se": se}},
             "by_length": {str(r["length"]): {k: r[k] for k in ROW_KEYS if k in r} for r in rows},
             "by_group": {}, "stats": stats}
    if trained_sizes is not None:
        split["bands"] = {key: {k: v for k, v in band.items() if k != "title"}
                          for key, band in bands(rows, set(trained_sizes), True).items()}
    return {**head, "splits": {FAN_SPLIT: split}}


def pooled_se(rows: list):
    """The standard error of the input-weighted mean of rows; None when a row has
    none (its length's inputs were each scored once: there is no sampling error
    to pool, and a number would pretend there was)."""
    total = sum(r["n"] for r in rows)
    if not total or any(r.get("se") is None for r in rows):
        return None
    return math.sqrt(sum((r["se"] * r["n"]) ** 2 for r in rows)) / total


BAND_TITLES = {"trained": "sizes the training drew", "untrained": "sizes it never drew"}


def bands(rows: list, trained: set, oracle: bool) -> dict:
    """The rows of sizes the training drew inputs of and of every other size
    (beyond the training sizes, or a size a training file lacks), each pooled:
    {"trained"|"untrained": {"title", "lengths", "n", "exact_match", "se",
    "oracle_exact_match"?}}; a band with no row is left out."""
    out = {}
    for key, keep in (("trained", True), ("untrained", False)):
        part = [r for r in rows if (r["length"] in trained) == keep]
        if not part:
            continue
        n = sum(r["n"] for r in part)
        band = {"title": BAND_TITLES[key], "lengths": [r["length"] for r in part], "n": n,
                "exact_match": sum(r["exact_match"] * r["n"] for r in part) / n, "se": pooled_se(part)}
        if oracle and all("oracle_exact_match" in r for r in part):
            band["oracle_exact_match"] = sum(r["oracle_exact_match"] * r["n"] for r in part) / n
        out[key] = band
    return out


def describe_origin(origin: dict) -> str:
    """Where inputs came from (trainer/tasks/program.py `inputs_origin`), in words."""
    if origin.get("source") == "file":
        return f"the file {origin['file']}" if origin.get("file") else "an inputs file (its path was not recorded)"
    if origin.get("source") == "sample":
        return f"the `sample` statement (line {origin['line']})"
    if origin.get("source") == "generator":
        return f"the generator {origin.get('name')}"
    return "unknown"


def describe_inputs(origin: dict, rows: list) -> str:
    """The table's line on what was scored: a file's distinct inputs, each once,
    or inputs drawn fresh."""
    if origin.get("source") == "file":
        whole = all(r.get("se") is None for r in rows)
        return (f"{describe_origin(origin)}: " + ("each distinct input of a length once" if whole else
                "each distinct input of a length once, or --samples of them without replacement where it "
                "holds more"))
    extra = f": {origin['statement']}" if origin.get("statement") else ""
    return f"drawn fresh by {describe_origin(origin)}{extra}"


def rows(doc: dict) -> list:
    """The per-length rows of a Fan evaluation file, by length (a format-1
    file's "rows" as they were, with its stderr / samples as se / n)."""
    if isinstance(doc.get("rows"), list):
        return [{**{"se": r.get("stderr"), "n": r.get("samples")}, **r} for r in doc["rows"]]
    by_length = doc["splits"][FAN_SPLIT]["by_length"]
    return [{"length": int(L), **row} for L, row in sorted(by_length.items(), key=lambda kv: int(kv[0]))]
