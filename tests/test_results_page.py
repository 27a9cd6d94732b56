"""docs/results.md reads as GitHub renders it: a contents list whose links
all land, unique headings and anchors, no table wider than 12 columns, prose
wrapped, and under each suite's heading what was run, the summary, the
tables (each plot beside one), then the notes.  Also the audit rules that
mark unequal budgets and flag anomalies (trainer/compare/audit.py)."""
from __future__ import annotations

import re
from pathlib import Path

from bench.results_page import anchor
from trainer.compare import audit as A
from trainer.compare.markdown import MAX_COLUMNS, page_table

PAGE = Path(__file__).resolve().parents[1] / "docs" / "results.md"
MAX_PROSE = 120


def _lines() -> list:
    return PAGE.read_text(encoding="utf-8").splitlines()


def _headings(lines: list) -> list:
    return [(len(m.group(1)), m.group(2), i) for i, line in enumerate(lines)
            if (m := re.match(r"^(#{1,6}) (.*)$", line))]


def test_headings_are_unique_and_the_contents_links_land():
    lines = _lines()
    heads = _headings(lines)
    texts = [h for _, h, _ in heads]
    assert len(texts) == len(set(texts)), [t for t in texts if texts.count(t) > 1]
    anchors = [anchor(h) for h in texts]
    assert len(anchors) == len(set(anchors))
    assert "Contents" in texts and texts.index("Contents") == 1          # right after the title
    start = lines.index("## Contents")
    end = next(i for i, line in enumerate(lines[start + 1:], start + 1) if line.startswith("## "))
    links = [m.group(1) for line in lines[start:end] if (m := re.match(r"^\s*- \[.*\]\(#(.*)\)$", line))]
    assert links and set(links) <= set(anchors)
    assert set(a for (lvl, _, _), a in zip(heads, anchors) if lvl == 2 and a != "contents") <= set(links)


def test_tables_are_narrow_and_prose_is_wrapped():
    lines = _lines()
    for i, line in enumerate(lines):
        if line.startswith("|"):
            cells = re.split(r"(?<!\\)\|", line)[1:-1]
            assert len(cells) <= MAX_COLUMNS, f"line {i + 1}: {len(cells)} columns"
        elif not (line.startswith("![") or re.match(r"^\s*- \[.*\]\(#.*\)$", line)):
            assert len(line) <= MAX_PROSE, f"line {i + 1}: {len(line)} characters: {line[:80]}"


def test_each_suite_reads_run_summary_tables_then_notes():
    lines = _lines()
    heads = _headings(lines)
    suites = [(h, i) for lvl, h, i in heads if lvl == 2 and "suite `" in h]
    assert len(suites) >= 5
    for k, (h, i) in enumerate(suites):
        name = re.search(r"suite `(\w+)`", h).group(1)
        end = suites[k + 1][1] if k + 1 < len(suites) else len(lines)
        subs = [x for lvl, x, j in heads if lvl == 3 and i < j < end]
        assert subs[0] == f"{name}: what was run", subs
        if f"{name}: summary" in subs:
            assert subs[1] == f"{name}: summary"
        if f"{name}: notes" in subs:
            assert subs[-1] == f"{name}: notes"         # the notes stand after every table
        body = lines[i:end]
        # every plot stands in a section that has a table
        for j, line in enumerate(body):
            if line.startswith("!["):
                section_start = max(n for n in range(j + 1) if body[n].startswith("#"))
                assert any(x.startswith("|") for x in body[section_start:j]), line


def _table(rows: dict, harder=None, columns=("A 1X", "A 2X", "B 1X")) -> dict:
    """A report table of one model per row; rows: {label: [(values, runs) per column]}."""
    cols = [{"label": c, "heading": c, "shown": True, "attrs": {"task": c.split()[0]}} for c in columns]
    out = []
    for label, cells in rows.items():
        row_cells = []
        for c, (values, runs) in zip(columns, cells):
            mean = sum(values) / len(values)
            row_cells.append({"column": c, "attrs": {"model": label.lower(), "task": c.split()[0]},
                              "published": {"text": "—"},
                              "ours": {"status": "ok", "values": values, "mean": mean, "n": len(values),
                                       "runs": runs, "text": f"{mean:.3f} ({len(values)} seeds)"}})
        out.append({"label": label, "heading": label, "ours_run": True, "shown": True, "cells": row_cells})
    return {"id": "t", "title": "T", "selected": True, "published_only": False, "columns": cols, "rows": out,
            "harder": harder or [], "digits": 3, "scale": 1, "cite": "c", "source": "s", "paper_table": "1",
            "statistic": "", "criterion": None, "note": "", "withheld": None}


def test_a_harder_split_scored_higher_and_a_lone_far_seed_are_flagged():
    t = _table({"IDS4": [([0.0], ["a0"]), ([1.0], ["a0"]), ([0.0], ["b0"])],
                "LSTM": [([0.9, 0.1, 0.05], ["l0", "l1", "l2"]), ([0.1, 0.1, 0.1], ["l0", "l1", "l2"]),
                         ([0.5, 0.5, 0.5], ["m0", "m1", "m2"])]},
               harder=[["A 1X", "A 2X"], ["B 1X", "A 1X"]])
    flags = A.anomalies(t)
    texts = [f["text"] for f in flags]
    assert any(f["kind"] == "harder split higher" and f["model"] == "IDS4" and f["column"] == "A 2X" for f in flags)
    assert any(f["kind"] == "one seed far above" and f["model"] == "LSTM" and f["column"] == "A 1X" for f in flags)
    # the LSTM's A 1X mean (0.35) is below its easier B 1X (0.5): no harder-split flag for it
    assert not any(f["model"] == "LSTM" and f["kind"] == "harder split higher" for f in flags), texts
    t["anomalies"] = flags
    lines = page_table(t, "###")
    assert any("Flagged (harder split higher): IDS4" in x for x in lines)


def test_a_row_trained_with_another_budget_is_marked():
    t = _table({"Mamba": [([0.1], ["m"]), ([0.1], ["m"]), ([0.1], ["m2"])],
                "GRU": [([0.2], ["g"]), ([0.2], ["g"]), ([0.2], ["g2"])],
                "Implicit Llama": [([0.9], ["i"]), ([0.4], ["i"]), ([0.0], ["i2"])]})
    budgets = {r: {"steps": 800, "width": 64} for r in ("m", "m2", "g", "g2", "i2")}
    budgets["i"] = {"steps": 6000, "width": 64}
    found = A.mark_budgets([t], budgets, set())
    assert found and found[0][1] == "Implicit Llama" and "800/6000 steps across its cells" in found[0][2]
    budgets["i2"] = {"steps": 6000, "width": 64}
    A.mark_budgets([t], budgets, set())
    assert t["budget"]["marks"] == {"Implicit Llama": "6000 steps (most rows 800)"}
    row = {"second": "GRU", "best_model": "implicit llama", "second_model": "gru", "best_n": 1, "second_n": 1}
    assert A.summary_budget(row, t, budgets) == "steps 6000 against 800"
    assert any(x.startswith("| Implicit Llama ‡ |") for x in page_table(t, "###"))
