"""Check a `rasp compare` report against the runs it summarises, without the
report code: every number in DIR/report.json is read back from the eval file
of each run the cell cites, the mean and standard error are recomputed, the
✓/✗ marks and the seed count each cell states re-derived, every run that has
no number is checked on disk (missing / failed / incomplete), each cell's
text is found in the row of DIR/report.md, and the per-suite summary (best
model per range, its margin over the second, the one-sided Welch p, the
Holm-adjusted p over the suite's distinct margins and the claim) is
recomputed from the cells and found in report.md.

    python -m bench.check_compare_report DIR [DIR ...]   # prints mismatches, exit 1 if any
"""
from __future__ import annotations

import math
import re
import statistics
import sys
import warnings
from pathlib import Path

from rasp.errors import RaspError, RaspFileError
from rasp.readfile import read_json, read_text

NUMBER = re.compile(r"^-?\d+(?:\.(\d+))?")
MEASURED = re.compile(r"^-?\d+(?:\.\d+)?(?: ±| [✓✗]| \(|$)")     # a value, not a count of runs ("1 failed")
SEEDS = re.compile(r"\((\d+)(?:/(\d+))? seeds?\b")


def _json(path: Path):
    try:
        return read_json(path)
    except RaspFileError:
        return None


def raw_value(doc: dict, split: str, metric: str, length=None, group=None):
    """The number as the eval file holds it (eval.json of comparison runs,
    eval_<rule>.json rows of Fan-task runs)."""
    if isinstance(doc.get("splits"), dict):
        s = doc["splits"].get(split)
        if s is None:
            return None
        if length is not None:
            return s.get("by_length", {}).get(str(length), {}).get(metric)
        if group is not None:
            return s.get("by_group", {}).get(str(group), {}).get(metric)
        m = s.get("metrics", {}).get(metric)
        return m.get("mean") if isinstance(m, dict) else m
    rows = [r for r in doc.get("rows", []) if isinstance(r, dict)]
    if length is not None:
        return next((r.get(metric) for r in rows if str(r.get("length")) == str(length)), None)
    vals = [r[metric] for r in rows if isinstance(r.get(metric), (int, float))]
    return sum(vals) / len(vals) if vals else None


def run_state_on_disk(run_dir: Path) -> str:
    if not run_dir.exists():
        return "missing"
    if (run_dir / "failed.json").exists():
        return "failed"
    summary = _json(run_dir / "summary.json")
    if not (isinstance(summary, dict) and summary.get("finished", True) is True):
        return "incomplete"
    return "trained"


def check_cell(out: Path, where: str, table: dict, cell: dict) -> list:
    ours, attrs = cell["ours"], cell.get("attrs") or {}
    problems = []
    by_run = ours.get("by_run")
    if by_run is None:
        if ours["status"] not in ("not run", "paper only"):
            problems.append(f"{where}: no by_run record")
        return problems
    values = []
    for run_id, v in by_run.items():
        run_dir = out / run_id
        disk = run_state_on_disk(run_dir)
        if isinstance(v, (int, float)):
            doc = _json(run_dir / ours["file"]) if disk == "trained" else None
            raw = raw_value(doc, attrs.get("split", "test"), attrs["metric"], attrs.get("length"),
                            attrs.get("group")) if isinstance(doc, dict) else None
            if not isinstance(raw, (int, float)) or abs(float(raw) - v) > 1e-12:
                problems.append(f"{where}: {run_id} reported {v}, its {ours['file']} holds {raw} ({disk})")
            values.append(v)
        elif v in ("missing", "failed", "incomplete"):
            # "incomplete" also covers a trained run whose evaluation is unfinished (a split missing)
            if disk != v and not (v == "incomplete" and disk == "trained"):
                problems.append(f"{where}: {run_id} reported {v}, on disk it is {disk}")
        elif disk != "trained":
            problems.append(f"{where}: {run_id} reported {v!r}, on disk it is {disk}")
    if sorted(by_run) != sorted(ours.get("runs", [])):
        problems.append(f"{where}: by_run and runs name different runs")
    if ours["status"] != "ok":
        if values or "mean" in ours or MEASURED.match(ours["text"]):
            problems.append(f"{where}: status {ours['status']} but a number is shown: {ours['text']!r}")
        return problems
    if not values:
        return problems + [f"{where}: ok with no run value"]
    mean = math.fsum(values) / len(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None
    if abs(ours["mean"] - mean) > 1e-9 or (se is None) != (ours["se"] is None) or \
            (se is not None and abs(ours["se"] - se) > 1e-9):
        problems.append(f"{where}: mean/se {ours['mean']}/{ours['se']} but the runs give {mean}/{se}")
    m = NUMBER.match(ours["text"])
    scale = table.get("scale", 1)
    if not m:
        problems.append(f"{where}: text {ours['text']!r} shows no number")
    else:
        digits = len(m.group(1) or "")
        if abs(float(m.group(0)) - mean * scale) > 0.5 * 10 ** -digits + 1e-9:
            problems.append(f"{where}: text {ours['text']!r} but the mean x {scale:g} is {mean * scale}")
    seeds = SEEDS.search(ours["text"])
    stated = (int(seeds.group(1)), int(seeds.group(2) or seeds.group(1))) if seeds else None
    if stated != (len(values), len(by_run)):
        problems.append(f"{where}: text {ours['text']!r} but {len(values)} of {len(by_run)} seeds gave a value")
    crit = table.get("criterion")
    if crit is not None:
        passed = (sum(v >= crit for v in values) * 2 > len(values) if table.get("criterion_rule") == "majority"
                  else mean >= crit)
        if ("✓" in ours["text"]) != passed or ("✗" in ours["text"]) == passed:
            problems.append(f"{where}: text {ours['text']!r} but the runs {'pass' if passed else 'fail'} {crit}")
    return problems


HEADING = re.compile(r"^#{2,6} (.*)$")
SUMMARY_TITLE = "Summary: the best model per task and range"


def _md_rows(md: str) -> dict:
    """{(table title, row heading): [cells]} of report.md; the summary
    tables' rows under (SUMMARY_TITLE, suite index) as lists of cell lists."""
    rows, title, k = {}, None, -1
    for line in md.splitlines():
        m = HEADING.match(line)
        if m:
            title = m.group(1).removesuffix(" (published only)")
            k += title == SUMMARY_TITLE
        elif line.startswith("| ") and title == SUMMARY_TITLE:
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            got = rows.setdefault((SUMMARY_TITLE, k), [])
            if not cells[0] and got:          # a table's title is written on its first range only
                cells[0] = got[-1][0]
            got.append(cells)
        elif line.startswith("| ") and title:
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows[(title, cells[0].removesuffix(" (paper only)"))] = cells[1:]
    return rows


def _welch_greater(a: list, b: list):
    """One-sided Welch p (scipy); the exact permutation p where neither side varies."""
    try:
        from scipy.stats import ttest_ind
    except ImportError:
        return None
    if min(a) == max(a) and min(b) == max(b):
        return 1 / math.comb(len(a) + len(b), len(a)) if a[0] > b[0] else 1.0
    with warnings.catch_warnings():       # near-identical seeds: scipy warns of precision, the p stands
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(ttest_ind(a, b, equal_var=False, alternative="greater").pvalue)


def _holm(ps: list) -> list:
    """Holm-Bonferroni adjusted p from its definition: p_i's adjusted value is the
    largest (m - rank_j) * p_j over every p_j <= p_i (rank 0 = smallest), capped at 1.
    Computed without the report's code on purpose (trainer/compare/ranking.py `holm`
    takes a running maximum): this check recomputes the report's claims."""
    m = len(ps)
    scaled = [(m - rank) * p for rank, p in enumerate(sorted(ps))]
    return [min(1.0, max(x for x, p in zip(scaled, sorted(ps)) if p <= pi)) for pi in ps]


def check_summary(s: dict, index: int, md_rows: dict) -> list:
    """Recompute the suite's summary from its cells: per range of every run
    table, the best and second model by mean, the margin, the p value."""
    summ = s.get("summary")
    if summ is None:
        return [f"{s['suite']}: no summary"]
    if summ.get("withheld"):                       # the suite says why its runs cannot rank models
        return [f"{s['suite']}: summary withheld but it ranks {len(summ['rows'])} ranges"] if summ["rows"] else []
    unranked = set(summ.get("unranked_models", []))
    want = []
    for t in s["tables"]:
        if not t["selected"] or t.get("withheld"):     # shown, but its runs cannot rank models
            continue
        by_columns = any("model" in (c.get("attrs") or {}) for c in t["columns"])
        ranges: dict = {}
        for row in t["rows"]:
            if not row.get("shown", True):
                continue
            for col, cell in zip(t["columns"], row["cells"]):
                attrs = cell.get("attrs") or {}
                if not col.get("shown", True) or attrs.get("model") in unranked:
                    continue
                name, where = (col["label"], row["heading"]) if by_columns else (row["label"], col["heading"])
                ours = cell["ours"]
                vals = [v for v in ours.get("by_run", {}).values() if isinstance(v, (int, float))]
                # what the cell measures: its runs and where in their evaluation (two columns may read the same)
                key = (tuple(sorted(ours.get("by_run", {}))), ours.get("file"),
                       *(attrs.get(k) for k in ("split", "metric", "length", "group")))
                if ours.get("status") == "ok":
                    ranges.setdefault(where, []).append((name, vals, attrs.get("model", name), key))
        for where, cells in ranges.items():
            cells.sort(key=lambda c: -math.fsum(c[1]) / len(c[1]))
            # models, not rows: the runner-up is the best row of another model
            by_model: dict = {}
            for c in cells:
                by_model.setdefault(c[2], c)
            want.append((t["title"], where, list(by_model.values())))
    got = summ["rows"]
    problems = []
    if [(r["table"], r["range"]) for r in got] != [(w[0], w[1]) for w in want]:
        return [f"{s['suite']}: summary ranges {[(r['table'], r['range']) for r in got]} but the tables give "
                f"{[(w[0], w[1]) for w in want]}"]
    welch = "Welch" in summ["test"]
    family: dict = {}           # measurement -> raw p, each once
    for _title, _where, cells in want:
        if len(cells) > 1:
            a, b = cells[0][1], cells[1][1]
            if len(a) > 1 and len(b) > 1 and welch:       # every seed equal: in the family at p = 1
                family.setdefault((cells[0][3], cells[1][3]),
                                  1.0 if min(a) == max(a) == min(b) == max(b) else _welch_greater(a, b))
    keys = [k for k, p in family.items() if p is not None]
    adjusted = dict(zip(keys, _holm([family[k] for k in keys])))
    if welch and summ.get("family") != len(keys):
        problems.append(f"{s['suite']}: summary family {summ.get('family')} but the cells give {len(keys)} "
                        "distinct margins")
    for r, (title, where, cells) in zip(got, want):
        at = f"{s['suite']}/summary/{title}/{where}"
        best_mean = math.fsum(cells[0][1]) / len(cells[0][1])
        if abs(r["best_mean"] - best_mean) > 1e-9:
            problems.append(f"{at}: best mean {r['best_mean']} but the cells' best is {best_mean}")
        if len(cells) > 1:
            second_mean = math.fsum(cells[1][1]) / len(cells[1][1])
            if r["margin"] is None or abs(r["margin"] - (best_mean - second_mean)) > 1e-9:
                problems.append(f"{at}: margin {r['margin']} but the cells give {best_mean - second_mean}")
            a, b = cells[0][1], cells[1][1]
            testable = len(a) > 1 and len(b) > 1 and not (min(a) == max(a) == min(b) == max(b))
            key = (cells[0][3], cells[1][3])
            p = family.get(key) if testable else None
            if testable and p is not None and (r["p"] is None or abs(r["p"] - p) > 1e-9):
                problems.append(f"{at}: p {r['p']} but Welch gives {p}")
            if key in adjusted:
                q = adjusted[key]
                if r.get("p_adj") is None or abs(r["p_adj"] - q) > 1e-9:
                    problems.append(f"{at}: Holm p {r.get('p_adj')} but the family gives {q}")
                claim = q <= summ["alpha"] and best_mean - second_mean >= summ.get("min_margin", 0)
                if bool(r["beyond_noise"]) != claim:
                    problems.append(f"{at}: claim {r['beyond_noise']} but Holm p {q} and margin "
                                    f"{best_mean - second_mean} give {claim}")
            if not testable and r["beyond_noise"]:
                problems.append(f"{at}: beyond noise without a test")
        elif r["second"] is not None:
            problems.append(f"{at}: a second model where the cells give one")
        md = md_rows.get((SUMMARY_TITLE, index), [])
        if not any(c[:2] == [title, where] and c[2].startswith(f"{r['best']}: ") for c in md):
            problems.append(f"{at}: row absent from report.md's summary")
    return problems


def check(out) -> list:
    out = Path(out)
    doc = _json(out / "report.json")
    if not isinstance(doc, dict):
        return [f"{out}: no readable report.json"]
    md_rows = _md_rows(read_text(out / "report.md")) if (out / "report.md").exists() else {}
    problems = []
    for index, s in enumerate(doc["suites"]):
        problems += check_summary(s, index, md_rows) if any(t["selected"] for t in s["tables"]) else []
        counts: dict = {}
        for r in s["run_status"]:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
            disk = run_state_on_disk(out / r["run_id"])
            if r["status"] in ("missing", "failed", "incomplete") and disk != r["status"] and \
                    not (r["status"] == "incomplete" and disk == "trained"):       # trained, not yet evaluated
                problems.append(f"{s['suite']}: {r['run_id']} listed {r['status']}, on disk {disk}")
        if counts != {k: v for k, v in s["runs"].items() if k != "total"} or sum(counts.values()) != s["runs"]["total"]:
            problems.append(f"{s['suite']}: run counts {s['runs']} but the run list gives {counts}")
        for t in s["tables"]:
            shown = t["selected"] or t.get("published_only")
            cols = [c.get("shown", True) for c in t["columns"]]
            for row in t["rows"]:
                md = md_rows.get((t["title"], row.get("heading", row["label"]))) \
                    if shown and row.get("shown", True) else None
                if shown and row.get("shown", True) and md is None:
                    problems.append(f"{s['suite']}/{t['id']}/{row['label']}: row absent from report.md")
                for i, cell in enumerate(row["cells"]):
                    where = f"{s['suite']}/{t['id']}/{row['label']}/{cell['column']}"
                    problems += check_cell(out, where, t, cell)
                    if cell["ours"].get("status") in ("ok", "failed", "incomplete", "stale") and not \
                            (cols[i] and row.get("shown", True)):
                        problems.append(f"{where}: a run of ours ({cell['ours']['status']}) left out of report.md")
                    if md is not None and cols[i]:
                        want = [cell["published"]["text"]] if t.get("published_only") else \
                            [cell["ours"]["text"], cell["published"]["text"]]
                        j = sum(cols[:i])            # the cell's place among the columns shown
                        got = md[j * len(want):(j + 1) * len(want)]
                        if [w.replace("\n", " ") for w in want] != got:
                            problems.append(f"{where}: report.md shows {got}, report.json {want}")
    return problems


def main(argv=None) -> int:
    dirs = (argv if argv is not None else sys.argv[1:]) or []
    if not dirs:
        print(__doc__.strip().splitlines()[-1])
        return 2
    bad = 0
    for d in dirs:
        try:
            problems = check(d)
        except RaspError as e:
            print(e.format(), file=sys.stderr)
            return 2
        except (KeyError, TypeError, AttributeError, ValueError) as e:    # a report.json edited by hand
            print(f"{Path(d) / 'report.json'}: error: not a `rasp compare` report of this version "
                  f"({type(e).__name__}: {str(e)[:60]})", file=sys.stderr)
            return 2
        for p in problems:
            print(p)
        print(f"{d}: {'OK' if not problems else f'{len(problems)} mismatches'}")
        bad += len(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
