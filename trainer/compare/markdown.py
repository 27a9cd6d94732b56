"""The report in markdown: DIR/report.md (every table in its paper's layout,
one markdown table each, which bench/check_compare_report.py reads back) and
the pieces docs/results.md is built from (bench/results_page.py), where a
table wider than MAX_COLUMNS is transposed or split by task, prose is
wrapped at WIDTH, and each table carries its budget marks and anomaly flags
(trainer/compare/audit.py) beside it."""
from __future__ import annotations

import textwrap

from trainer.compare.ranking import MIN_MARGIN, model_axis

MAX_COLUMNS = 12        # a page table wider than this is transposed or split
WIDTH = 100             # prose lines on the page
BUDGET_MARK = "‡"
SUMMARY_TITLE = "Summary: the best model per task and range"

LEGEND = ("Ours: mean ± standard error over the seeds that finished, and how many seeds that is (\"1 seed\": one "
          "run, no standard error: an anecdote; \"2/3 seeds\": one run gave no value); \"missing\" = never run, "
          "\"failed\" = the run failed (see failed.json), \"incomplete\" = interrupted or still running, \"stale\" = "
          "trained with settings the suite's command no longer gives (`rasp compare` re-trains it).  Paper: the "
          "published figure (sd = the paper's standard deviation).  Column headings give our setting and the "
          "paper's separately; columns and rows with no run of ours are left out (report.json has them).  "
          f"{BUDGET_MARK} = a model trained with other steps, width or seeds than most rows of its table.")


def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def md_row(cells: list) -> str:
    return "| " + " | ".join(_md_escape(x) for x in cells) + " |"


def wrap(text: str, first: str = "", rest: str = "") -> list:
    """`text` as lines of at most WIDTH characters (a paragraph, or a list item with `first`/`rest`)."""
    return textwrap.wrap(" ".join(str(text).split()), WIDTH, initial_indent=first, subsequent_indent=rest,
                         break_long_words=False, break_on_hyphens=False) or [first.rstrip()]


def bullets(items: list) -> list:
    return [x for item in items for x in wrap(item, "- ", "  ")]


def seeds_note(with_value: int, runs: int) -> str:
    """"3 seeds", "1 seed", or "2/3 seeds" when some runs have no value."""
    if with_value < runs:
        return f"{with_value}/{runs} seeds"
    return "1 seed" if with_value == 1 else f"{with_value} seeds"


def seed_groups(by_model: dict) -> list:
    """[(count text, "for A, B")] from {model label: seeds}, one item per count."""
    counts = sorted(set(by_model.values()))
    return [(f"{k} seed{'s' if k > 1 else ''}", "for " + ", ".join(m for m, v in by_model.items() if v == k))
            for k in counts]


# ---- the summary -----------------------------------------------------------------

def _num(x: float, row: dict) -> str:
    return f"{x * row['scale']:.{row['digits']}f}"


def _p(x) -> str:
    return "—" if x is None else f"{x:.3g}"


def verdict(row: dict) -> str:
    text = "yes" if row["beyond_noise"] else "no" + (f" ({row['why']})" if row.get("why") else "")
    return text + (f"; {BUDGET_MARK} {row['budget']}" if row.get("budget") else "")


def summary_row_cells(row: dict) -> list:
    """The markdown cells of one summary row: table, range, best, second, margin, p, Holm p, claim."""
    best = _num(row["best_mean"], row) + (f" ± {_num(row['best_se'], row)}" if row.get("best_se") is not None else "")
    best += f" ({seeds_note(row['best_n'], row['best_n'])})"
    if row["second"] is None:
        second, margin = "—", "—"
    else:
        second = f"{row['second']}: {_num(row['second_mean'], row)} ({seeds_note(row['second_n'], row['second_n'])})"
        margin = _num(row["margin"], row)
    return [row["table"], row["range"], f"{row['best']}: {best}", second, margin, _p(row.get("p")),
            _p(row.get("p_adj")), verdict(row)]


SUMMARY_HEAD = ["table", "range", "best (mean ± se)", "second", "margin", "p", "p (Holm)", "claim"]


def statistics_text(summ: dict) -> str:
    """How the summary decides a claim, in words."""
    unit = f"{summ.get('min_margin', 0.01):g}"
    return (f"Per range (a column of the tables below, or a row where the table puts its models in columns): the "
            f"model with the highest mean over its seeds, the runner-up (another model: a model with several rows "
            f"is ranked by its best row), and the margin between their means.  Test: {summ['test']}, best > "
            f"second; p is the raw p, p (Holm) the p adjusted by {summ.get('correction', 'Holm–Bonferroni')} over "
            f"the {summ.get('family', 0)} margins tested in this suite (every range with at least 2 seeds on both "
            f"sides, p = 1 where every seed is equal; a range that reads the same runs as another is "
            f"counted once).  A claim needs p (Holm) ≤ {summ['alpha']:g} and a margin "
            f"of at least {unit} in the metric's 0-1 unit (1 point on a percent table): below that a margin is "
            f"not a claim.  With one seed on a side no test is possible.  Claims here: {summ.get('claims', 0)}.")


def summary_markdown(s: dict, h: str, title: str = SUMMARY_TITLE, width: bool = False) -> list:
    """The suite's summary; `width`: prose wrapped (the page) or one line (report.md)."""
    summ = s.get("summary") or {}
    para = (lambda t: wrap(t)) if width else (lambda t: [t])     # noqa: E731
    if summ.get("withheld"):
        return [f"{h} {title}", "", *para(f"Not ranked at preset `{s['preset']}`: {summ['withheld']}"), ""]
    kept_out = [x for w in summ.get("withheld_tables", [])
                for x in (*para(f"Not ranked at preset `{s['preset']}`: {w['table']}: {w['why']}"), "")]
    if not summ.get("rows"):
        return [f"{h} {title}", "", *kept_out] if kept_out else []
    lines = [f"{h} {title}", "", *para(statistics_text(summ)
                                       + (f"  Not ranked (exact by construction, not learned): "
                                          f"{', '.join(summ['unranked'])}." if summ.get("unranked") else "")), "",
             md_row(SUMMARY_HEAD), "|" + "---|" * len(SUMMARY_HEAD)]
    shown_title = None
    for row in summ["rows"]:
        cells = summary_row_cells(row)
        if cells[0] == shown_title:      # a table's title once, on its first range
            cells[0] = ""
        shown_title = row["table"]
        lines.append(md_row(cells))
    flags = [a for t in s.get("tables", []) for a in t.get("anomalies", [])]
    if flags and width:
        lines += ["", *para(f"Flagged by the page's rules ({len(flags)}; each table lists its own, the notes give "
                            "the follow-up or the reason):"), "", *bullets([a["text"] + "." for a in flags])]
    return lines + [""] + kept_out


# ---- the tables ------------------------------------------------------------------

def _caption(t: dict) -> str:
    only = t.get("published_only")
    scale = f"; ours ×{t['scale']:g}" if t["scale"] != 1 else ""
    crit = ""
    if t.get("criterion") is not None:
        crit = (f"; ✓/✗ = ours {'mean' if t['criterion_rule'] == 'mean' else 'majority of seeds'} "
                f"≥ {t['criterion']:g}")
    return (f"Published: {t['cite']} [{t['source']}], {t['paper_table']}"
            + (f" ({t['statistic']})" if t["statistic"] else "") + ("" if only else f"{scale}{crit}") + ".")


def _after(t: dict, para) -> list:
    """What follows a table: the left-out columns, its note, why it is not ranked."""
    lines = []
    hidden = [c["label"] for c in t["columns"] if not c.get("shown", True)] + \
        [r["label"] for r in t["rows"] if not r.get("shown", True)]
    if hidden:
        lines += [*para("Not run here, so left out (their published figures are in report.json): "
                        + ", ".join(hidden) + "."), ""]
    if t.get("note"):
        lines += [*para(t["note"]), ""]
    if t.get("withheld"):
        lines += [*para(f"Not ranked in the summary: {t['withheld']}"), ""]
    return lines


def _md_table(t: dict, h: str = "###") -> list:
    """One table in its paper's layout (report.md: a row per row, ours and paper per column)."""
    only = t.get("published_only")
    lines = [f"{h} {t['title']}" + (" (published only)" if only else ""), "", _caption(t), ""]
    cols = [j for j, c in enumerate(t["columns"]) if c.get("shown", True)]
    if only:            # no row of ours can run: the paper's columns alone
        head = [""] + [t["columns"][j]["heading"] for j in cols]
    else:
        head = ["setting" if model_axis(t) == "columns" else "model"] + \
            [x for j in cols for x in (f"{t['columns'][j]['heading']}: ours", "paper")]
    lines += [md_row(head), "|" + "---|" * len(head)]
    for row in t["rows"]:
        if not row.get("shown", True):
            continue
        if only:
            lines.append(md_row([row["heading"]] + [row["cells"][j]["published"]["text"] for j in cols]))
            continue
        label = row["heading"] + ("" if row["ours_run"] else " (paper only)")
        lines.append(md_row([label] + [x for j in cols for x in (row["cells"][j]["ours"]["text"],
                                                                   row["cells"][j]["published"]["text"])]))
    lines.append("")
    marks = (t.get("budget") or {}).get("marks") or {}
    if marks:
        lines += [f"{BUDGET_MARK} Budget: " + "; ".join(f"{k}: {v}" for k, v in marks.items()) + ".", ""]
    if t.get("anomalies"):
        lines += ["Flagged: " + "; ".join(a["text"] for a in t["anomalies"]) + ".", ""]
    return lines + _after(t, lambda x: [x])


def _grid(t: dict) -> tuple:
    """(row labels, column headings, {(i, j): (ours, paper)}, column attrs) of a table's shown cells,
    models always as rows (a table with models in columns is transposed)."""
    rows = [r for r in t["rows"] if r.get("shown", True)]
    cols = [j for j, c in enumerate(t["columns"]) if c.get("shown", True)]
    marks = (t.get("budget") or {}).get("marks") or {}
    mark = lambda name: f"{name} {BUDGET_MARK}" if name in marks else name        # noqa: E731
    if model_axis(t) == "columns":
        labels = [mark(t["columns"][j]["label"]) for j in cols]
        heads = [r["heading"] for r in rows]
        cells = {(a, b): (rows[b]["cells"][j]["ours"]["text"], rows[b]["cells"][j]["published"]["text"])
                 for a, j in enumerate(cols) for b in range(len(rows))}
        return labels, heads, cells, [{} for _ in rows]
    labels = [mark(r["label"]) + ("" if r.get("ours_run", True) else " (paper only)") for r in rows]
    heads = [t["columns"][j]["heading"] for j in cols]
    cells = {(a, b): (r["cells"][j]["ours"]["text"], r["cells"][j]["published"]["text"])
             for a, r in enumerate(rows) for b, j in enumerate(cols)}
    return labels, heads, cells, [t["columns"][j].get("attrs") or {} for j in cols]


def _chunks(attrs: list, per: int) -> list:
    """Column index groups of at most `per`: one task per group where the columns name tasks."""
    groups: list = []
    for j, a in enumerate(attrs):
        if groups and a.get("task") == attrs[groups[-1][-1]].get("task") and len(groups[-1]) < per:
            groups[-1].append(j)
        else:
            groups.append([j])
    return groups


def page_table(t: dict, h: str, plots: list = ()) -> list:
    """One table for the page: at most MAX_COLUMNS columns (models as rows, split by task where wider; the
    paper's column dropped where it reports nothing for any row), its marks, flags and plots beside it."""
    only = t.get("published_only")
    para = wrap
    unit = "" if only else (f"  A margin below {MIN_MARGIN * t['scale']:g} in this table's unit is not a claim"
                            f" in the summary.")
    lines = [f"{h} {t['title']}" + (" (published only)" if only else ""), "", *para(_caption(t) + unit), ""]
    labels, heads, cells, attrs = _grid(t)
    paper = only or any(p not in ("—", "") for _, p in cells.values())
    per = (MAX_COLUMNS - 1) // (1 if only or not paper else 2)
    for group in _chunks(attrs, per) if len(heads) > per else [list(range(len(heads)))]:
        if only:
            head = [""] + [heads[b] for b in group]
        else:
            head = ["model"] + [x for b in group for x in ((f"{heads[b]}: ours", "paper") if paper else (heads[b],))]
        lines += [md_row(head), "|" + "---|" * len(head)]
        for a, label in enumerate(labels):
            if not only and all(cells[(a, b)][0] == "not run" for b in group):
                continue                  # a model this part of the table never runs (a task it is not given)
            row = [label]
            for b in group:
                ours, pub = cells[(a, b)]
                row += [pub] if only else ([ours, pub] if paper else [ours])
            lines.append(md_row(row))
        lines.append("")
    if not paper and not only:
        lines += ["The paper reports no figure for these rows.", ""]
    marks = (t.get("budget") or {}).get("marks") or {}
    if marks:
        lines += bullets([f"{BUDGET_MARK} {k}: {v}." for k, v in marks.items()]) + [""]
    if t.get("anomalies"):
        lines += bullets([f"Flagged ({a['kind']}): {a['text']}." for a in t["anomalies"]]) + [""]
    lines += _after(t, para)
    for p in plots:
        lines += [f"![{p['title']}]({p['path']})", ""]
    return lines


# ---- report.md -------------------------------------------------------------------

def render_markdown(doc: dict, level: int = 1, legend: bool = True) -> str:
    """DIR/report.md; `level` is the markdown level of its title."""
    h = "#" * level
    lines = [f"{h} `rasp compare` report", "", f"Generated {doc['generated']} from `{doc['dir']}`."
             + (f"  {LEGEND}" if legend else ""), ""]
    for s in doc["suites"]:
        r = s["runs"]
        own = "".join(f"; {k} {label}" for k, label in seed_groups(s.get("seeds_by_model") or {}))
        first = f" from seed {s['first_seed']}" if s.get("first_seed") else ""
        lines += [f"{h}# {s['title']} (suite `{s['suite']}`, preset `{s['preset']}`, {s['seeds']} seed(s){first}{own})",
                  "", "Runs: " + ", ".join(f"{v} {k}" for k, v in r.items()) + ".", ""]
        lines += summary_markdown(s, h + "##")
        if s.get("note"):
            lines += [s["note"], ""]
        for t in s["tables"]:
            if t["selected"] or t["published_only"]:
                lines += _md_table(t, h + "##")
        lines += unrun_and_failed(s, lambda x: [x])
        for p in s.get("plots", []):
            lines += [f"![{p['title']}]({p['path']})", ""]
    return "\n".join(lines) + "\n"


def unrun_and_failed(s: dict, para) -> list:
    lines = []
    left = [t["title"] for t in s["tables"] if not (t["selected"] or t["published_only"])]
    if left:
        lines += [*para(f"Tables with no run in this selection (in report.json): {'; '.join(left)}."), ""]
    failed = [x for x in s["run_status"] if x["status"] == "failed"]
    if failed:
        lines += ["Failed runs:", ""]
        for x in failed:
            tail = (x.get("stderr_tail") or "").strip().splitlines()
            lines.append(f"* `{x['run_id']}`: exit {x.get('exit_code')} in {x.get('failed_step')}"
                         + (f" — `{_md_escape(tail[-1][:200])}`" if tail else ""))
        lines.append("")
    return lines
