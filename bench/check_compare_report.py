"""Check a `rasp compare` report against the runs it summarises, without the
report code: every number in DIR/report.json is read back from the eval file
of each run the cell cites, the mean and standard error are recomputed, the
✓/✗ marks re-derived, every run that has no number is checked on disk
(missing / failed / incomplete), and each cell's text is found in the row of
DIR/report.md.

    python bench/check_compare_report.py DIR [DIR ...]   # prints mismatches, exit 1 if any
"""
from __future__ import annotations

import json
import math
import re
import statistics
import sys
from pathlib import Path

NUMBER = re.compile(r"^-?\d+(?:\.(\d+))?")
MEASURED = re.compile(r"^-?\d+(?:\.\d+)?(?: ±| [✓✗]|$)")     # a value, not a count of runs ("1 failed")


def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
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
    crit = table.get("criterion")
    if crit is not None:
        passed = (sum(v >= crit for v in values) * 2 > len(values) if table.get("criterion_rule") == "majority"
                  else mean >= crit)
        if ("✓" in ours["text"]) != passed or ("✗" in ours["text"]) == passed:
            problems.append(f"{where}: text {ours['text']!r} but the runs {'pass' if passed else 'fail'} {crit}")
    return problems


def _md_rows(md: str) -> dict:
    """{(table title, row label): [cells]} of report.md."""
    rows, title = {}, None
    for line in md.splitlines():
        if line.startswith("### "):
            title = line[4:].removesuffix(" (published only)")
        elif line.startswith("| ") and title:
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows[(title, cells[0].removesuffix(" (paper only)"))] = cells[1:]
    return rows


def check(out) -> list:
    out = Path(out)
    doc = _json(out / "report.json")
    if not isinstance(doc, dict):
        return [f"{out}: no readable report.json"]
    md_rows = _md_rows((out / "report.md").read_text()) if (out / "report.md").exists() else {}
    problems = []
    for s in doc["suites"]:
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
            for row in t["rows"]:
                md = md_rows.get((t["title"], row["label"])) if shown else None
                if shown and md is None:
                    problems.append(f"{s['suite']}/{t['id']}/{row['label']}: row absent from report.md")
                for i, cell in enumerate(row["cells"]):
                    where = f"{s['suite']}/{t['id']}/{row['label']}/{cell['column']}"
                    problems += check_cell(out, where, t, cell)
                    if md is not None:
                        want = [cell["published"]["text"]] if t.get("published_only") else \
                            [cell["ours"]["text"], cell["published"]["text"]]
                        got = md[i * len(want):(i + 1) * len(want)]
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
        problems = check(d)
        for p in problems:
            print(p)
        print(f"{d}: {'OK' if not problems else f'{len(problems)} mismatches'}")
        bad += len(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
