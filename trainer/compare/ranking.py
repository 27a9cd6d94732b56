"""The per-suite summary: for every task and length range (one column of a
table, or one row where a table puts its models in columns) the best model
by its mean over seeds, its margin over the second, and whether that margin
is beyond seed noise.

The test compares the two models' per-seed values: a one-sided Mann-Whitney
U test (scipy.stats.mannwhitneyu, exact where there are no ties) when scipy
is installed, otherwise a bootstrap of the difference of means (numpy).  A
margin is "beyond noise" when p <= ALPHA.  With few seeds a rank test cannot
reach ALPHA at all (1 seed each: no test; 3 against 3: p >= 0.05, reached only
when every seed of the best beats every seed of the second), which the
summary says rather than hides."""
from __future__ import annotations

from typing import Optional

import numpy as np

ALPHA = 0.05
BOOTSTRAP_RESAMPLES = 10_000


def _scipy_mwu():
    try:
        from scipy.stats import mannwhitneyu
    except ImportError:           # scipy is optional: the bootstrap stands in
        return None
    return mannwhitneyu


def method_name() -> str:
    return ("one-sided Mann–Whitney U over seeds (scipy)" if _scipy_mwu() is not None
            else f"one-sided bootstrap of the difference of seed means ({BOOTSTRAP_RESAMPLES} resamples, numpy)")


def bootstrap_p(best: list, second: list, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> float:
    """P(mean of a resample of `best` <= mean of a resample of `second`)."""
    rng = np.random.default_rng(seed)
    a = rng.choice(np.asarray(best, float), (resamples, len(best))).mean(axis=1)
    b = rng.choice(np.asarray(second, float), (resamples, len(second))).mean(axis=1)
    return float(np.mean(a <= b))


def margin_test(best: list, second: list) -> dict:
    """{"p": p or None, "beyond_noise": bool, "why": text when untestable}."""
    if len(best) < 2 or len(second) < 2:
        return {"p": None, "beyond_noise": False, "why": "fewer than 2 seeds"}
    if min(best) == max(best) == min(second) == max(second):
        return {"p": 1.0, "beyond_noise": False, "why": "every seed equal"}
    mwu = _scipy_mwu()
    if mwu is not None:
        p = float(mwu(best, second, alternative="greater").pvalue)
    else:
        p = bootstrap_p(best, second)
    return {"p": p, "beyond_noise": p <= ALPHA, "why": ""}


def model_axis(table: dict) -> str:
    """'rows' when each row is a model (most tables), 'columns' when the
    table puts its models in columns (P3 Tables 4-5)."""
    return "columns" if any("model" in (c.get("attrs") or {}) for c in table["columns"]) else "rows"


def contenders(table: dict, ranked: Optional[set] = None) -> dict:
    """{range heading: [(row name, cell's ours, model entry)]} over the shown
    cells with a value; models whose entry is not ranked (compiled, not
    learned) are left out."""
    out: dict = {}
    by_columns = model_axis(table) == "columns"
    for row in table["rows"]:
        if not row.get("shown", True):
            continue
        for col, cell in zip(table["columns"], row["cells"]):
            if not col.get("shown", True):
                continue
            ours, attrs = cell.get("ours") or {}, cell.get("attrs") or {}
            if ranked is not None and attrs.get("model") not in ranked:
                continue
            name, where = (col["label"], row.get("heading", row["label"])) if by_columns \
                else (row["label"], col.get("heading", col["label"]))
            out.setdefault(where, [])
            if ours.get("status") == "ok":
                out[where].append((name, ours, attrs.get("model", name)))
    return out


def rank_table(table: dict, ranked: Optional[set] = None) -> list:
    """One summary row per range of the table that has at least one value.
    Models are ranked, not rows: where a model has several rows (the looped
    model under each stopping rule), its best row stands for it and the
    runner-up is the best row of another model."""
    rows = []
    for where, cells in contenders(table, ranked).items():
        if not cells:
            continue
        by_model: dict = {}
        for c in sorted(cells, key=lambda c: -c[1]["mean"]):
            by_model.setdefault(c[2], c)           # each model's best row, best model first
        (best_name, best, _), *others = by_model.values()
        row = {"table": table["title"], "table_id": table["id"], "scale": table.get("scale", 1),
               "digits": table.get("digits", 1), "range": where, "best": best_name, "best_mean": best["mean"],
               "best_se": best.get("se"), "best_n": len(best["values"]), "models": 1 + len(others)}
        if not others:
            row.update(second=None, margin=None, p=None, beyond_noise=False, why="one model with a value")
        else:
            second_name, second, _ = others[0]
            tied = [n for n, c, _ in others if c["mean"] == best["mean"]]
            test = margin_test(best["values"], second["values"])
            row.update(second=second_name, second_mean=second["mean"], second_n=len(second["values"]),
                       margin=best["mean"] - second["mean"], p=test["p"], beyond_noise=test["beyond_noise"],
                       why=test["why"] or (f"tied with {', '.join(tied)}" if tied else ""))
        rows.append(row)
    return rows
