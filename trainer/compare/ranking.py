"""The per-suite summary: for every task and length range (one column of a
table, or one row where a table puts its models in columns) the best model
by its mean over seeds, its margin over the second, and whether that margin
is a claim.

The test compares the two models' per-seed values: a one-sided Welch t-test
(scipy.stats.ttest_ind, equal_var=False), which can separate 3 seeds from 3
where a rank test cannot go below p = 0.05; where neither side varies over
its seeds (no variance to test against) the exact permutation p of the
difference of means, 1 / C(n + m, n).  Without scipy, a bootstrap of the
difference of means (numpy) stands in.  Every margin tested in a suite is one
family: its p values are adjusted by Holm-Bonferroni over the distinct
measurements (two ranges that read the same runs at the same split are one
measurement, counted once).  A margin is a claim ("beyond noise") when its
adjusted p <= ALPHA and it is at least MIN_MARGIN (in the metric's own unit,
0-1: 0.01 is 1 point on a percent table)."""
from __future__ import annotations

import math
import warnings
from typing import Optional

import numpy as np

ALPHA = 0.05
MIN_MARGIN = 0.01           # below this (in the metric's 0-1 unit) a margin is not a claim, whatever its p
BOOTSTRAP_RESAMPLES = 10_000
CORRECTION = "Holm–Bonferroni"


def _scipy_welch():
    try:
        from scipy.stats import ttest_ind
    except ImportError:           # scipy is optional: the bootstrap stands in
        return None
    return ttest_ind


def method_name() -> str:
    return ("one-sided Welch t-test over seeds (scipy; exact permutation p where neither side varies)"
            if _scipy_welch() is not None
            else f"one-sided bootstrap of the difference of seed means ({BOOTSTRAP_RESAMPLES} resamples, numpy)")


def permutation_floor(n: int, m: int) -> float:
    """The exact permutation p of n values all above m others: 1 / C(n + m, n)."""
    return 1.0 / math.comb(n + m, n)


def welch_p(best: list, second: list) -> float:
    """One-sided Welch t p value, best > second (scipy)."""
    a, b = np.asarray(best, float), np.asarray(second, float)
    if a.var() == 0 and b.var() == 0:              # no spread on either side: the t statistic is undefined
        return permutation_floor(len(a), len(b)) if a.mean() > b.mean() else 1.0
    welch = _scipy_welch()
    with warnings.catch_warnings():       # near-identical seeds: scipy warns of precision, the p stands
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(welch(a, b, equal_var=False, alternative="greater").pvalue)


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
    p = welch_p(best, second) if _scipy_welch() is not None else bootstrap_p(best, second)
    return {"p": p, "beyond_noise": p <= ALPHA, "why": ""}


def holm(ps: list) -> list:
    """Holm-Bonferroni adjusted p values, in the order given."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def adjust_family(rows: list) -> dict:
    """Decide the claims of one suite's summary rows (in place): each distinct
    measurement tested once, its p adjusted by Holm over the suite's family,
    a claim where the adjusted p <= ALPHA and the margin >= MIN_MARGIN.  A
    row that reads the same runs as an earlier one is marked `same_as` it and
    takes its verdict, without counting again.  Returns the family's size."""
    first: dict = {}
    family = []
    for r in rows:
        r.setdefault("p_raw", r.get("p"))
        key = r.get("measure")
        if r.get("p") is None:            # one seed on a side, or one model: nothing tested
            r.update(p_adj=None, beyond_noise=False)
            continue
        if key in first:
            r["same_as"] = first[key]["range"]
            continue
        first[key] = r
        family.append(r)
    for r, adj in zip(family, holm([r["p"] for r in family])):
        r["p_adj"] = adj
        small = r["margin"] is not None and r["margin"] < MIN_MARGIN
        r["beyond_noise"] = adj <= ALPHA and not small
        if small and not r.get("why"):
            r["why"] = f"margin below {MIN_MARGIN * r.get('scale', 1):g}"
    for r in rows:
        if r.get("same_as") is not None:
            src = first[r["measure"]]
            r.update(p_adj=src["p_adj"], beyond_noise=src["beyond_noise"],
                     why=f"the same runs as {r['same_as']}: counted once")
    return {"size": len(family), "claims": sum(r["beyond_noise"] for r in family)}


def measure_key(ours: dict, attrs: dict) -> str:
    """What a cell measures: its runs, the evaluation file and where in it."""
    return "|".join([",".join(ours.get("runs") or []), str(ours.get("file")),
                     *(str(attrs.get(k)) for k in ("split", "metric", "length", "group"))])


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
                out[where].append((name, {**ours, "measure": measure_key(ours, attrs)}, attrs.get("model", name)))
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
               "best_se": best.get("se"), "best_n": len(best["values"]), "models": 1 + len(others),
               "best_model": next(iter(by_model))}
        if not others:
            row.update(second=None, margin=None, p=None, beyond_noise=False, why="one model with a value")
        else:
            second_name, second, _ = others[0]
            tied = [n for n, c, _ in others if c["mean"] == best["mean"]]
            test = margin_test(best["values"], second["values"])
            row.update(second=second_name, second_mean=second["mean"], second_n=len(second["values"]),
                       margin=best["mean"] - second["mean"], p=test["p"], beyond_noise=test["beyond_noise"],
                       why=test["why"] or (f"tied with {', '.join(tied)}" if tied else ""),
                       measure=best["measure"] + ">" + second["measure"],
                       second_model=others[0][2])
        rows.append(row)
    return rows
