"""bench/check_rerun.py: a rerun with other seeds against the uncertainty a report states."""
import json

from bench import check_rerun as CR


def report(cells: dict) -> dict:
    """A report.json with one table whose row r, column c holds the given seed values."""
    rows = {}
    for (row, column), values in cells.items():
        ours = ({"status": "ok", "values": values} if values else {"status": "missing"})
        rows.setdefault(row, []).append({"column": column, "ours": ours})
    return {"suites": [{"suite": "mini", "preset": "cpu", "tables": [
        {"id": "t1", "rows": [{"label": r, "cells": c} for r, c in rows.items()]}]}]}


def test_cells_inside_outside_and_untestable():
    stated = report({("a", "n10"): [0.90, 0.92, 0.88], ("a", "n20"): [0.5, 0.6, 0.4], ("b", "n10"): [1.0, 1.0, 1.0],
                     ("b", "n20"): [0.3], ("c", "n10"): [1.0, 1.0, 1.0], ("c", "n20"): [0.2, 0.3, 0.1]})
    rerun = report({("a", "n10"): [0.91, 0.89, 0.93], ("a", "n20"): [0.10, 0.12, 0.08], ("b", "n10"): [1.0, 1.0, 1.0],
                    ("b", "n20"): [0.3, 0.4, 0.5], ("c", "n10"): [0.9, 0.9, 0.9], ("c", "n20"): None})
    got = {r["key"][3:]: r["verdict"] for r in CR.check(stated, rerun)["rows"]}
    assert got == {("a", "n10"): "inside", ("a", "n20"): "outside", ("b", "n10"): "inside",
                   ("b", "n20"): "untestable", ("c", "n10"): "outside"}
    result = CR.check(stated, rerun)
    assert (result["tested"], result["outside"], result["only_stated"], result["only_rerun"]) == (4, 2, 1, 0)


def test_the_verdict_and_exit_status_follow_the_count_of_cells_outside(tmp_path, capsys):
    same = {("m%d" % i, "n"): [0.5 + 0.01 * i, 0.6, 0.7] for i in range(20)}
    shifted = {k: [v + 0.3 for v in vals] for k, vals in same.items()}
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir(), (tmp_path / "c").mkdir()
    (tmp_path / "a" / "report.json").write_text(json.dumps(report(same)))
    (tmp_path / "b" / "report.json").write_text(json.dumps(report({k: [v + 0.01 for v in vals] for k, vals in same.items()})))
    (tmp_path / "c" / "report.json").write_text(json.dumps(report(shifted)))
    assert CR.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "20 cells tested" in out and "0 outside" in out and "falls inside the stated uncertainty" in out
    assert CR.main([str(tmp_path / "a"), str(tmp_path / "c")]) == 1
    out = capsys.readouterr().out
    assert "20 outside" in out and "does not hold" in out and "| mini (cpu) | t1 | m0 | n |" in out
    assert CR.main([str(tmp_path / "a"), str(tmp_path / "missing")]) == 2
    assert "not a readable `rasp compare` report" in capsys.readouterr().err


def test_margins_beyond_noise_are_looked_up_in_the_rerun_summary():
    def with_summary(rows):
        doc = report({("a", "n"): [0.9, 0.92, 0.91]})
        doc["suites"][0]["summary"] = {"rows": [{"table": "T", "range": rng, "best": b, "second": s, "beyond_noise": bn}
                                                for rng, b, s, bn in rows]}
        return doc
    stated = with_summary([("r1", "A", "B", True), ("r2", "A", "B", True), ("r3", "C", "D", True), ("r4", "A", "B", False)])
    rerun = with_summary([("r1", "A", "B", True), ("r2", "A", "B", False), ("r3", "D", "C", True)])
    result = CR.check(stated, rerun)
    assert [(r["range"], ok) for r, ok in result["margins"]] == [("r1", True), ("r2", False), ("r3", False)]
    assert ("Margins the stated summary calls beyond noise: 1 of 3 reproduced" in CR.render(result)
            and "not: T, r2: A over B; T, r3: C over D." in CR.render(result))
