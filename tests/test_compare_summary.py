"""The report a researcher ranks on: every cell's seed count, the per-suite
summary (best model per range, margin, a test over seeds), only the columns
that were run, headings with our setting and the paper's, and plots whose
legends use the table's names -- on fixture run directories of real suites."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from scipy.stats import ttest_ind

from bench.check_compare_report import check
from trainer.compare import plots as P
from trainer.compare import ranking
from trainer.compare import report as R
from trainer.compare.suite import load_suite

FLIP_SPLITS = ["test_128_p0.1", "test_128_p0.8", "test_128_p0.98", "test_256_p0.1", "test_256_p0.8", "test_256_p0.98"]


def write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))


def flip_run(run: Path, value: float, at_2t=None) -> None:
    write(run / "run.json", {})
    write(run / "summary.json", {"finished": True})
    write(run / "eval.json", {"task": "flipflop", "model": "x", "splits": {
        s: {"n": 400, "metrics": {"last_read_acc": {"mean": value if "_128_" in s or at_2t is None else at_2t,
                                                    "se": 0.01}}, "by_length": {}, "by_group": {},
            "stats": {}} for s in FLIP_SPLITS}})


@pytest.fixture
def flip_report(tmp_path):
    """UT beats the Transformer in every seed (3 against 3); GUT has one seed
    (best at T, worst at 2T); TLB is selected but never ran."""
    out = tmp_path / "out"
    for seed, (ut, tf) in enumerate([(0.9, 0.6), (0.95, 0.7), (0.92, 0.65)]):
        flip_run(out / f"flipflop__ut__cpu__s{seed}", ut)
        flip_run(out / f"flipflop__transformer__cpu__s{seed}", tf)
    flip_run(out / "flipflop__gut__cpu__s0", 0.99, at_2t=0.3)
    R.record_selection(out, load_suite("flipflop"), "cpu", 3, ["ut", "transformer", "gut", "tlb"], None)
    return out, R.write_report(out, plots=False)


def test_margin_test_needs_seeds_and_separation():
    best, second = [0.9, 0.95, 0.92], [0.6, 0.7, 0.65]
    t = ranking.margin_test(best, second)
    # Welch's t separates 3 seeds from 3 below the rank test's floor of 1/20
    assert t["p"] == pytest.approx(ttest_ind(best, second, equal_var=False, alternative="greater").pvalue)
    assert t["p"] < 0.01 and t["beyond_noise"]
    # neither side varies: the exact permutation p, 1 / C(6, 3)
    assert ranking.margin_test([1.0, 1.0, 1.0], [0.0, 0.0, 0.0])["p"] == pytest.approx(0.05)
    overlap = ranking.margin_test([0.9, 0.6, 0.8], [0.7, 0.65, 0.85])
    assert not overlap["beyond_noise"] and overlap["p"] > 0.05
    assert ranking.margin_test([1.0], [0.2]) == {"p": None, "beyond_noise": False, "why": "fewer than 2 seeds"}
    assert not ranking.margin_test([1.0, 1.0], [1.0, 1.0])["beyond_noise"]


def test_bootstrap_stands_in_without_scipy(monkeypatch):
    monkeypatch.setattr(ranking, "_scipy_welch", lambda: None)
    assert "bootstrap" in ranking.method_name()
    sep = ranking.margin_test([0.9, 0.95, 0.92, 0.93], [0.6, 0.7, 0.65, 0.62])
    assert sep["beyond_noise"] and sep["p"] < 0.01
    overlap = ranking.margin_test([0.9, 0.6, 0.8], [0.7, 0.65, 0.85])
    assert not overlap["beyond_noise"] and overlap["p"] > 0.2
    assert ranking.bootstrap_p([0.5, 0.6], [0.5, 0.6]) > 0.4            # no difference: about a coin toss


def test_cells_state_their_seeds_and_the_summary_ranks_over_seeds(flip_report):
    out, doc = flip_report
    ut = R.find_report_cell(doc, "flipflop", "table3", "UT", "p_i 0.1, T")["ours"]
    assert ut["text"] == "92.3 ± 1.5 (3 seeds)"
    gut = R.find_report_cell(doc, "flipflop", "table3", "GUT", "p_i 0.1, T")["ours"]
    assert gut["text"] == "99.0 (1/3 seeds, 2 missing)"                # one seed: said, no ± shown
    rows = {r["range"].split(" (")[0]: r for r in doc["suites"][0]["summary"]["rows"]}
    t = rows["p_i 0.1, T"]          # GUT's single seed has the best mean, but cannot be tested
    assert (t["best"], t["second"], t["p"], t["beyond_noise"]) == ("GUT", "UT", None, False)
    assert t["margin"] == pytest.approx(0.99 - (0.9 + 0.95 + 0.92) / 3)
    t2 = rows["p_i 0.1, 2T"]        # GUT last at 2T: UT against the Transformer, 3 seeds each
    assert (t2["best"], t2["second"], t2["beyond_noise"]) == ("UT", "Transformer", True)
    assert t2["p"] == pytest.approx(ttest_ind([0.9, 0.95, 0.92], [0.6, 0.7, 0.65], equal_var=False,
                                              alternative="greater").pvalue)
    md = (out / "report.md").read_text()
    assert "## Summary: the best model per task and range" in md and "Welch t-test" in md
    assert f"| UT: 92.3 ± 1.5 (3 seeds) | Transformer: 65.0 (3 seeds) | 27.3 | {t2['p']:.3g} | {t2['p_adj']:.3g} | yes |" in md
    assert check(out) == []


def test_headings_state_our_lengths_and_the_papers_and_unrun_columns_are_left_out(tmp_path, flip_report):
    out, doc = flip_report
    md = (out / "report.md").read_text()
    assert "p_i 0.1, 2T (ours: T 256, p_i 0.1; paper: Length 1024, p_i 0.1): ours" in md
    assert "| TLB | missing |" in md                 # selected, never run: shown as missing
    assert "Looped transformer" not in md.split("### Flip-flop")[1].split("Not run here")[0]   # not selected
    # the words table: only the Z60 columns a run evaluated (of 36), the rest named once
    words = tmp_path / "words"
    d = words / "z60_k8__gru__cpu__s0"
    write(d / "run.json", {})
    write(d / "summary.json", {"finished": True})
    write(d / "eval.json", {"splits": {s: {"n": 500, "metrics": {"seq_acc": {"mean": v, "se": 0.01}}}
                                       for s, v in (("valid", 1.0), ("test_16", 0.5), ("test_32", 0.1))}})
    R.record_selection(words, load_suite("words"), "cpu", 1, ["gru"], ["z60_k8"])
    wdoc = R.write_report(words, plots=False)
    t2 = next(t for t in wdoc["suites"][0]["tables"] if t["id"] == "p3_table2")
    assert [c["label"] for c in t2["columns"] if c["shown"]] == ["Z60 1X", "Z60 2X", "Z60 4X"]
    line = next(l for l in (words / "report.md").read_text().splitlines() if l.startswith("| GRU |"))
    assert line.count("|") == 2 + 3 * 2 and "1.000 ✓ (1 seed)" in line
    assert check(words) == []


def test_the_check_finds_a_doctored_summary(flip_report):
    out, doc = flip_report
    rep = json.loads((out / "report.json").read_text())
    row = next(r for r in rep["suites"][0]["summary"]["rows"] if r["range"].startswith("p_i 0.1, 2T"))
    true_p = row["p"]
    row["beyond_noise"], row["p"] = True, 0.01
    write(out / "report.json", rep)
    problems = check(out)
    assert any(f"p 0.01 but Welch gives {true_p}" in p for p in problems), problems
    row["p"], row["margin"] = true_p, 0.5
    write(out / "report.json", rep)
    assert any("margin 0.5 but the cells give" in p for p in check(out))


def test_compiled_rows_are_not_ranked(tmp_path):
    """The compiled program is exact by construction: 1.000 must not win the summary."""
    out = tmp_path / "out"
    for model, v in (("compiled", 1.0), ("gru", 0.8), ("lstm", 0.4)):
        d = out / f"z60_k8__{model}__cpu__s0"
        write(d / "run.json", {})
        write(d / "summary.json", {"finished": True})
        write(d / "eval.json", {"splits": {s: {"n": 500, "metrics": {"seq_acc": {"mean": v, "se": 0.0}}}
                                           for s in ("valid", "test_16", "test_32")}})
    R.record_selection(out, load_suite("words"), "cpu", 1, ["compiled", "gru", "lstm"], ["z60_k8"])
    doc = R.write_report(out, plots=False)
    row = next(r for r in doc["suites"][0]["summary"]["rows"] if r["range"].startswith("Z60 1X"))
    assert (row["best"], row["second"]) == ("GRU", "LSTM")
    assert "Looped, compiled program" in doc["suites"][0]["summary"]["unranked"]
    assert check(out) == []


def test_plots_use_the_table_names_at_most_eight_lines_a_panel():
    assert [len(p) for p in P.panels(list(range(11)))] == [6, 5]
    assert [len(p) for p in P.panels(list(range(8)))] == [8]
    assert [len(p) for p in P.panels(list(range(17)))] == [6, 6, 5]
    assert len(set(P.OKABE_ITO)) == P.MAX_SERIES == 8
    suite = load_suite("fan")
    tables = [R.build_table(suite, t, "cpu", {}, 1) for t in suite.tables]
    names = P.legend_names(suite, tables)
    assert names[("looped_noinj", "oracle")] == "No input injection, oracle"      # the table's row, not the entry's label
    assert names[("looped", "confidence")] == "Looped, max. confidence"
    # an eval no table shows (the compiled start's depth-law stop) is no line of the plot
    series = {("test", m, ev): {1: [1.0]} for m, ev in [("looped_compiled", "depth_law"), ("looped_noinj", "oracle"),
                                                         ("looped_noinj", "confidence")]}
    assert list(P.table_series(series, names)) == [("test", "looped_noinj", "oracle")]
    assert P.table_series(series, {}) == series


def test_a_plot_with_eleven_models_has_two_panels_and_the_legend_outside(tmp_path, monkeypatch):
    made = {}
    real = P.plt.subplots

    def spy(*a, **k):
        fig, axes = real(*a, **k)
        made["fig"], made["axes"] = fig, axes
        return fig, axes
    monkeypatch.setattr(P.plt, "subplots", spy)
    monkeypatch.setattr(P.plt, "close", lambda fig: None)
    series = {("test", f"m{i}", "default"): {L: [0.5 + 0.01 * i, 0.6] for L in range(1, 6)} for i in range(11)}
    labels = {k: f"model {i}" for i, k in enumerate(series)}
    P._plot(series, labels, tmp_path / "p.png", "t", "acc")
    assert (tmp_path / "p.png").exists()
    axes = made["axes"][:, 0]
    assert len(axes) == 2
    for ax in axes:
        lines = [l for l in ax.get_lines() if not l.get_label().startswith("_")]
        assert len(lines) <= 8 and {l.get_color().lower() for l in lines} <= {c.lower() for c in P.OKABE_ITO}
        legend = ax.get_legend()
        made["fig"].canvas.draw()
        box, data = legend.get_window_extent(), ax.get_window_extent()
        assert box.x0 >= data.x1                                     # entirely right of the data


def test_the_runner_up_is_another_model_not_another_row_of_the_best():
    """Fan's looped model has a row per stopping rule: the summary compares
    its best row with the best row of another model."""
    def cell(model, values):
        mean = sum(values) / len(values)
        return {"ours": {"status": "ok", "mean": mean, "se": 0.0, "values": values}, "attrs": {"model": model}}
    table = {"title": "Parity", "id": "parity", "columns": [{"label": "n 15"}], "rows": [
        {"label": "Looped, oracle stop", "cells": [cell("looped", [0.9, 0.95, 0.92])]},
        {"label": "Looped, depth law", "cells": [cell("looped", [0.9, 0.95, 0.91])]},
        {"label": "NTP-Pause", "cells": [cell("ntp_pause", [0.6, 0.7, 0.65])]},
        {"label": "NTP-Loop", "cells": [cell("ntp_loop", [0.5, 0.55, 0.6])]}]}
    (row,) = ranking.rank_table(table)
    assert (row["best"], row["second"], row["models"]) == ("Looped, oracle stop", "NTP-Pause", 3)
    assert row["beyond_noise"] and row["margin"] == pytest.approx(0.9233333 - 0.65, abs=1e-6)
    alone = {**table, "rows": table["rows"][:2]}
    assert ranking.rank_table(alone)[0]["why"] == "one model with a value"


def test_a_split_the_preset_does_not_evaluate_is_no_column_even_while_runs_are_incomplete(tmp_path):
    """words at cpu evaluates valid, test_16 and test_32: P3 Table 2's 3X (test_24)
    column is left out although a run still in progress has no splits yet."""
    out = tmp_path / "out"
    splits = {s: {"n": 500, "metrics": {"seq_acc": {"mean": 0.5, "se": 0.02}}, "by_length": {}, "by_group": {},
                  "stats": {}} for s in ("valid", "test_16", "test_32")}
    for seed in range(3):
        run = out / f"z60_k8__lstm__cpu__s{seed}"
        write(run / "run.json", {})
        write(run / "summary.json", {"finished": True})
        write(run / "eval.json", {"task": "words_z60", "model": "lstm", "splits": splits})
    write(out / "z60_k8__gru__cpu__s0" / "run.json", {})          # started, not finished
    R.record_selection(out, load_suite("words"), "cpu", None, ["lstm", "gru"], ["z60_k8"])
    doc = R.write_report(out, plots=False)
    table = next(t for t in doc["suites"][0]["tables"] if t["id"] == "p3_table2")
    shown = [c["label"] for c in table["columns"] if c.get("shown", True)]
    assert shown == ["Z60 1X", "Z60 2X", "Z60 4X"]
    gru = next(r for r in table["rows"] if r["label"] == "GRU")
    assert gru["cells"][0]["ours"]["status"] == "incomplete"


def test_holm_adjusts_within_the_family_and_counts_a_measurement_once():
    assert ranking.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    row = lambda rng, p, margin, measure: {"range": rng, "p": p, "margin": margin, "measure": measure,  # noqa: E731
                                           "why": ""}
    rows = [row("a", 0.01, 0.2, "x"), row("a again", 0.01, 0.2, "x"), row("b", 0.02, 0.005, "y"),
            row("c", None, 0.3, "z")]
    fam = ranking.adjust_family(rows)
    assert fam == {"size": 2, "claims": 1}                     # "a again" reads the same runs: counted once
    assert rows[0]["p_adj"] == pytest.approx(0.02) and rows[0]["beyond_noise"]
    assert rows[1]["same_as"] == "a" and rows[1]["beyond_noise"] and "counted once" in rows[1]["why"]
    # Holm p 0.02 but a margin of 0.005: below the practical threshold, not a claim
    assert not rows[2]["beyond_noise"] and "below" in rows[2]["why"]
    assert rows[3]["p_adj"] is None and not rows[3]["beyond_noise"]
