"""Does a rerun with other seeds fall inside the uncertainty a report states?

    rasp compare flipflop --first-seed 100 --out runs/flipflop_rerun
    python -m bench.check_rerun docs/results/flipflop runs/flipflop_rerun

Every table cell that both reports measured (same suite, preset, table, row
and column) is tested: a two-sided Welch t-test of the stated seeds' values
against the rerun's (scipy.stats.ttest_ind, unequal variances), "outside"
where p <= 0.05.  Welch rather than a rank test because a rank test cannot
fail with 3 seeds against 3 (its smallest two-sided p is 0.1); it assumes
roughly normal seed values, which a cell where some seeds learn the task and
others do not is not, so read a flagged cell's values, not only its p.  A
cell with one seed on either side states no uncertainty and is listed as
untestable; where every seed on both sides has the same value the cell is
inside when the values are equal and outside when they differ.

By chance alone about 5 % of the tested cells fall outside; the last line
says how many did and, by a one-sided binomial test, whether that is more
than chance gives (cells of one run share its seeds, so the count is an
approximation).  Exit status 1 when it is, 2 on unreadable input (a report of another shape,
or one holding NaN or infinity: named by file and key, never counted as inside).  Each
margin the stated summary calls beyond noise is also looked up in the
rerun's summary: reproduced where the rerun ranks the same best and second
model in that range and its margin is beyond noise too.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from scipy.stats import binomtest, ttest_ind

from rasp.errors import RaspFileError
from rasp.readfile import read_json
from trainer.tasks.scoring import summary

ALPHA = 0.05


class ReportError(ValueError):
    """A report of the wrong shape, or with NaN or infinity (the message names the key)."""


def cells(report: dict) -> tuple:
    """({(suite, preset, table id, row label, column label): per-seed values} of the measured cells,
    {(suite, preset, table id): (scale, digits)} to print them as the tables do).
    ReportError naming the first key of the wrong shape (a damaged or edited report)."""
    out, units = {}, {}
    for i, s in enumerate(_list(report, "suites", "")):
        where = f"suites[{i}]"
        for j, t in enumerate(_list(s, "tables", where)):
            tw = f"{where}.tables[{j}]"
            key = (_name(s, "suite", where), _name(s, "preset", where), _name(t, "id", tw))
            units[key] = (_number(t.get("scale", 1), f"{tw}.scale"), t.get("digits", 3))
            if not (isinstance(units[key][1], int) and 0 <= units[key][1] <= 12):
                raise ReportError(f"{tw}.digits: expected an integer 0..12")
            for k, row in enumerate(_list(t, "rows", tw)):
                rw = f"{tw}.rows[{k}]"
                for m, cell in enumerate(_list(row, "cells", rw)):
                    cw = f"{rw}.cells[{m}]"
                    ours = cell.get("ours") if isinstance(cell, dict) else None
                    ours = {} if ours is None else ours
                    if not isinstance(ours, dict):
                        raise ReportError(f"{cw}.ours: expected an object")
                    values = ours.get("values")
                    if ours.get("status") == "ok" and values:
                        if not isinstance(values, list):
                            raise ReportError(f"{cw}.ours.values: expected a list of numbers")
                        out[(*key, _name(row, "label", rw), _name(cell, "column", cw))] = \
                            [_number(v, f"{cw}.ours.values[{n}]") for n, v in enumerate(values)]
    return out, units


def _list(doc, key: str, where: str) -> list:
    if not isinstance(doc, dict):
        raise ReportError(f"{where or 'the report'}: expected an object")
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise ReportError(f"{where + '.' if where else ''}{key}: expected a list")
    return value


def _name(doc, key: str, where: str) -> str:
    if not isinstance(doc, dict) or not isinstance(doc.get(key), str):
        raise ReportError(f"{where}.{key}: expected a string")
    return doc[key]


def _number(v, where: str) -> float:
    """A finite number: NaN in a rerun would count as inside any uncertainty (no test rejects it)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ReportError(f"{where}: expected a finite number, got {json.dumps(v)[:40]}")
    return float(v)


def compare_cell(stated: list, rerun: list) -> dict:
    """{"verdict": inside / outside / untestable, "p": p or None}."""
    if len(stated) < 2 or len(rerun) < 2:            # one seed states no uncertainty
        return {"verdict": "untestable", "p": None}
    if min(stated) == max(stated) and min(rerun) == max(rerun):     # no spread for a t-test on either side
        same = stated[0] == rerun[0]
        return {"verdict": "inside" if same else "outside", "p": 1.0 if same else 0.0}
    p = float(ttest_ind(stated, rerun, equal_var=False).pvalue)
    return {"verdict": "outside" if p <= ALPHA else "inside", "p": p}


def check(stated: dict, rerun: dict) -> dict:
    (a, units), (b, _) = cells(stated), cells(rerun)
    rows = []
    for key in sorted(set(a) & set(b)):
        rows.append({"key": key, "stated": a[key], "rerun": b[key], **compare_cell(a[key], b[key])})
    tested = [r for r in rows if r["verdict"] != "untestable"]
    outside = [r for r in tested if r["verdict"] == "outside"]
    p_count = binomtest(len(outside), len(tested), ALPHA, alternative="greater").pvalue if tested else None
    return {"rows": rows, "units": units, "tested": len(tested), "outside": len(outside), "p_count": p_count,
            "only_stated": len(set(a) - set(b)), "only_rerun": len(set(b) - set(a)),
            "margins": margins(stated, rerun)}


def margins(stated: dict, rerun: dict) -> list:
    """[(stated summary row, reproduced?)] for each margin the stated summary calls beyond noise."""
    again = summary_rows(rerun)
    out = []
    for key, r in summary_rows(stated).items():
        if r.get("beyond_noise"):
            x = again.get(key) or {}
            out.append((r, x.get("best") == r["best"] and x.get("second") == r["second"] and bool(x.get("beyond_noise"))))
    return out


def summary_rows(doc: dict) -> dict:
    """{(suite, preset, table, range): summary row}; ReportError naming a row of the wrong shape."""
    out = {}
    for i, s in enumerate(_list(doc, "suites", "")):
        summ = s.get("summary", {})
        for j, r in enumerate(_list(summ, "rows", f"suites[{i}].summary")):
            w = f"suites[{i}].summary.rows[{j}]"
            key = (_name(s, "suite", f"suites[{i}]"), _name(s, "preset", f"suites[{i}]"),
                   _name(r, "table", w), _name(r, "range", w))
            if r.get("beyond_noise"):
                _name(r, "best", w), _name(r, "second", w)
            out[key] = r
    return out


def _mean_se(values: list, scale: float, digits: int) -> str:
    s = summary(values)
    if s["se"] is None:
        return f"{s['mean'] * scale:.{digits}f} (1 seed)"
    return f"{s['mean'] * scale:.{digits}f} ± {s['se'] * scale:.{digits}f} ({s['n']} seeds)"


def render(result: dict) -> str:
    lines = ["| suite | table | row | column | stated | rerun | p |", "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if r["verdict"] == "outside":
            suite, preset, table, row, column = r["key"]
            unit = result["units"].get((suite, preset, table), (1, 3))
            lines.append(f"| {suite} ({preset}) | {table} | {row} | {column} | {_mean_se(r['stated'], *unit)} | "
                         f"{_mean_se(r['rerun'], *unit)} | {r['p']:.3g} |")
    untestable = sum(r["verdict"] == "untestable" for r in result["rows"])
    head = (f"{result['tested']} cells tested (two-sided Welch t over seeds, p <= {ALPHA}), "
            f"{result['outside']} outside the stated uncertainty (chance alone: about "
            f"{ALPHA * result['tested']:.1f}); {untestable} untestable (1 seed on a side); "
            f"{result['only_stated']} cells only in the stated report, {result['only_rerun']} only in the rerun.")
    if result["p_count"] is None:
        verdict = "Nothing to test: no cell has a value in both reports."
    elif result["p_count"] <= ALPHA:
        verdict = (f"More cells outside than chance gives (one-sided binomial p {result['p_count']:.3g}): "
                   "the stated uncertainty does not hold for this rerun.")
    else:
        verdict = (f"As many cells outside as chance gives (one-sided binomial p {result['p_count']:.3g}): "
                   "the rerun falls inside the stated uncertainty.")
    kept = [r for r, ok in result["margins"] if ok]
    lost = [f"{r['table']}, {r['range']}: {r['best']} over {r['second']}" for r, ok in result["margins"] if not ok]
    ranks = (f"  Margins the stated summary calls beyond noise: {len(kept)} of {len(result['margins'])} reproduced "
             "(the same best and second model, beyond noise again)" + (f"; not: {'; '.join(lost)}." if lost else ".")
             if result["margins"] else "")
    return "\n".join([head, ""] + (lines + [""] if result["outside"] else []) + [verdict + ranks])


def _load(folder: str) -> dict:
    """DIR/report.json, checked; ReportError with the path (and the key) when it
    is missing, not a report, or holds a value of the wrong type, NaN or infinity."""
    path = Path(folder) / "report.json"
    try:
        doc = read_json(path, finite=True)
    except RaspFileError as e:
        raise ReportError(f"{path}: not a readable `rasp compare` report ({e.message})") from None
    if not (isinstance(doc, dict) and isinstance(doc.get("suites"), list)):
        raise ReportError(f"{path}: not a readable `rasp compare` report (no list of suites)")
    try:
        cells(doc)
        summary_rows(doc)
    except ReportError as e:
        raise ReportError(f"{path}: {e}") from None
    return doc


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        stated, rerun = _load(args[0]), _load(args[1])
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = check(stated, rerun)
    print(render(result))
    return 1 if result["p_count"] is not None and result["p_count"] <= ALPHA else 0


if __name__ == "__main__":
    sys.exit(main())
