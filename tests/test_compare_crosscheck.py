"""The report says what the runs say: fixture run directories for a real
suite (finished, failed, interrupted, never run, evaluated without the
table's split), the report built from them, and bench/check_compare_report.py
(which re-reads every eval file without the report code) finding no
mismatch -- then finding the one we plant."""
from __future__ import annotations

import json
from pathlib import Path

from bench.check_compare_report import check
from trainer.compare import report as R
from trainer.compare.suite import load_suite

MODELS = ["rnn_h8", "gru_h64", "mamba_h8"]


def write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))


def finished(run: Path, offset: dict) -> None:
    """A trained, evaluated counting run: offset_acc per split as the
    trainer writes it (mean and se per metric, per length, stats)."""
    write(run / "run.json", {})
    write(run / "summary.json", {"finished": True})
    write(run / "eval.json", {"task": "counting", "model": "x", "splits": {
        split: {"n": 100, "metrics": {"offset_acc": {"mean": v, "se": 0.01}, "acc": {"mean": 0.9, "se": 0.0}},
                "by_length": {"200": {"offset_acc": v, "n": 100}}, "by_group": {}, "stats": {}}
        for split, v in offset.items()}})


def fixture(out: Path) -> None:
    suite = load_suite("counting")
    full = ("valid_cpu", "test_two_isi_cpu", "test_double_isi_cpu")
    finished(out / "short__rnn_h8__cpu__s0", dict(zip(full, (0.95, 0.92, 0.40))))
    finished(out / "short__rnn_h8__cpu__s1", dict(zip(full, (0.97, 0.85, 0.95))))
    finished(out / "short__rnn_h8__cpu__s2", dict(zip(full, (0.91, 0.93, 0.20))))
    finished(out / "short__gru_h64__cpu__s0", {"valid_cpu": 0.5})       # phase-alignment splits not evaluated yet
    write(out / "short__gru_h64__cpu__s1" / "failed.json", {"exit_code": 1, "failed_step": "train"})
    write(out / "short__gru_h64__cpu__s2" / "run.json", {})               # interrupted mid-training
    write(out / "short__gru_h64__cpu__s2" / "checkpoints" / "step_500" / "state.json", {})
    finished(out / "medium__rnn_h8__cpu__s0", {"valid_medium_cpu": 1.0})
    write(out / "medium__rnn_h8__cpu__s1" / "run.json", {})               # trained, never evaluated
    write(out / "medium__rnn_h8__cpu__s1" / "summary.json", {"finished": True})
    # mamba_h8 and long: never run (missing)
    R.record_selection(out, suite, "cpu", 3, MODELS, ["short", "medium", "long"])


def test_report_matches_the_runs_it_cites(tmp_path):
    out = tmp_path / "out"
    fixture(out)
    doc = R.write_report(out, plots=False)
    assert check(out) == []
    # spot checks against the fixture numbers themselves
    rnn = R.find_report_cell(doc, "counting", "p3_table4", "200", "RNN h8")["ours"]
    assert rnn["by_run"] == {"short__rnn_h8__cpu__s0": 0.95, "short__rnn_h8__cpu__s1": 0.97,
                             "short__rnn_h8__cpu__s2": 0.91} and rnn["text"].startswith("0.943 ± 0.018 ✓")
    double = R.find_report_cell(doc, "counting", "p3_table5", "Double ISI", "RNN h8")["ours"]
    assert double["text"].startswith("0.517") and double["passed"] is False      # 1 of 3 seeds >= 0.9
    gru = R.find_report_cell(doc, "counting", "p3_table4", "200", "GRU h64")["ours"]
    assert gru["by_run"] == {"short__gru_h64__cpu__s0": "incomplete", "short__gru_h64__cpu__s1": "failed",
                             "short__gru_h64__cpu__s2": "incomplete"}
    assert gru["status"] == "failed" and gru["text"] == "1 failed, 2 incomplete" and "mean" not in gru  # never a 0
    medium = R.find_report_cell(doc, "counting", "p3_table4", "600", "RNN h8")["ours"]
    assert medium["by_run"]["medium__rnn_h8__cpu__s1"] == "incomplete"
    mamba = R.find_report_cell(doc, "counting", "p3_table4", "1000", "Mamba h8")["ours"]
    assert mamba["text"] == "missing" and mamba["status"] == "missing"


def test_the_check_finds_a_planted_mismatch(tmp_path):
    out = tmp_path / "out"
    fixture(out)
    R.write_report(out, plots=False)
    # an eval file changed after the report was written
    ev = out / "short__rnn_h8__cpu__s1" / "eval.json"
    doc = json.loads(ev.read_text())
    doc["splits"]["valid_cpu"]["metrics"]["offset_acc"]["mean"] = 0.5
    write(ev, doc)
    problems = check(out)
    assert any("short__rnn_h8__cpu__s1 reported 0.97" in p for p in problems)
    # a report.md edited by hand
    doc = R.write_report(out, plots=False)
    md = (out / "report.md").read_text()
    text = R.find_report_cell(doc, "counting", "p3_table4", "200", "RNN h8")["ours"]["text"]
    row = "200 (ours: length 40, ISI 2 (valid_cpu); paper: Length 200)"         # our split and the paper's length, apart
    assert text == "0.787 ± 0.144 ✓ (3 seeds)" and f"| {row} | {text} |" in md   # s1 now 0.5: 2 of 3 still pass
    write(out / "report.md", md.replace(f"| {row} | {text} |", f"| {row} | 0.987 ± 0.144 ✓ (3 seeds) |", 1))
    assert any("report.md shows" in p for p in check(out))
    write(out / "report.md", md.replace(f"| {row} | {text} |", f"| {row} | 0.787 ± 0.144 ✓ (1 seed) |", 1))
    assert any("report.md shows" in p for p in check(out))
    # a report.json whose cell claims fewer seeds than its runs give
    rep = json.loads((out / "report.json").read_text())
    cell = next(c for t in rep["suites"][0]["tables"] if t["id"] == "p3_table4" for r in t["rows"]
                if r["label"] == "200" for c in r["cells"] if c["column"] == "RNN h8")
    cell["ours"]["text"] = text.replace("(3 seeds)", "(1 seed)")
    write(out / "report.json", rep)
    assert any("but 3 of 3 seeds gave a value" in p for p in check(out))
    # a run removed: the report still calls it finished
    R.write_report(out, plots=False)
    for f in sorted((out / "medium__rnn_h8__cpu__s0").iterdir()):
        f.unlink()
    (out / "medium__rnn_h8__cpu__s0").rmdir()
    assert any("medium__rnn_h8__cpu__s0" in p for p in check(out))


def test_published_only_table_is_in_report_md(tmp_path):
    """P3 Table 1 has no row we can run (its training lengths are not splits
    of the words tasks): report.md still shows the paper's marks."""
    out = tmp_path / "out"
    R.record_selection(out.mkdir() or out, load_suite("words"), "cpu", 1, ["gru"], ["z60_k8"])
    R.write_report(out, plots=False)
    md = (out / "report.md").read_text()
    assert "(published only)" in md
    assert "| 512 | ✗ | ✓ | ✓ | ✓ | ✗ | ✓ | ✗ | ✗ | ✗ | ✗ | ✗ | ✗ |" in md
    assert check(out) == []


def test_cpu_preset_runs_each_memory_mixture_once():
    """The cpu preset has one copying / denoising mixture: the pattern rows
    read the blank-mixture runs (no duplicate runs); paper runs both."""
    from trainer.compare import grid as G
    s = load_suite("memory")
    cpu, paper = G.expand(s, "cpu", seeds=1), G.expand(s, "paper", seeds=1)
    assert len(cpu) == 28 and len(paper) == 56
    assert {r.task_entry for r in cpu} == {"copy_blanks", "denoise_blanks"}
    t = next(t for t in s.tables if t.id == "p3_table3")
    from trainer.compare.schema import cell_attrs
    row = next(r for r in t.rows if r.label.startswith("Copying S≤10"))
    assert cell_attrs(t, t.columns[0], row, "cpu")["task"] == "copy_blanks"
    assert cell_attrs(t, t.columns[0], row, "paper")["task"] == "copy_pattern"


def test_models_by_trainer_model_name():
    from trainer.compare import grid as G
    runs = G.expand(load_suite("counting"), "cpu", seeds=1, models=["gru", "rnn_h8"])
    assert sorted({r.model_entry for r in runs}) == ["gru_h64", "gru_h8", "rnn_h8"]


def test_reference_probes_go_through_the_compare_runner(tmp_path):
    """bench/reference_models.py is the suite bench/reference.toml run by the
    compare runner: a finished probe run is read, not retrained."""
    from bench import reference_models as RM
    out = tmp_path / "ref"
    d = out / "counting__rnn__cpu__s0"
    splits = ["valid", "test_long_iti", "test_two_isi", "test_double_isi"]
    write(d / "run.json", {})
    write(d / "summary.json", {"finished": True, "n_params": 97, "step": 3000, "seconds": 12.0})
    write(d / "eval.json", {"splits": {s: {"n": 500, "metrics": {m: {"mean": 0.96, "se": 0.01} for m in
                                                                  ("offset_acc", "offset_seq", "acc")}}
                                       for s in splits}})
    table = tmp_path / "t.md"
    assert RM.main(["--out", str(out), "--only", "rnn8_counting", "--table", str(table)]) == 0
    md = table.read_text()
    assert "| rnn8_counting | hidden-8 RNN predicts the ISI offsets | yes |" in md
    assert "| test_double_isi | 500 | 0.960 ± 0.010 |" in md
    assert check(out) == []                        # its report.md / report.json agree with the run too


def test_python_m_trainer_compare_is_rasp_compare(tmp_path, capsys):
    from trainer.__main__ import main
    assert main(["compare", "counting", "--models", "gru", "--seeds", "1", "--out", str(tmp_path), "--dry-run"]) == 0
    assert "6 runs in" in capsys.readouterr().out
    assert main(["compare", "no_such_suite"]) == 2
