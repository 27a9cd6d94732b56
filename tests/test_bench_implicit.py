"""bench/implicit.py reads `rasp compare` run directories and rewrites only the
table block of its markdown file."""
import json
from pathlib import Path

import pytest


def fake_run(root: Path, run_id: str, splits: dict, stats: bool):
    d = root / run_id
    d.mkdir(parents=True)
    out = {}
    for name, (length, seq) in splits.items():
        entry = {"n": 500, "params": {"min_len": length, "max_len": length},
                 "metrics": {"seq_acc": {"mean": seq, "se": 0.01}, "token_acc": {"mean": 0.9, "se": 0.01}}}
        if stats:
            entry["stats"] = {"iterations": {"mean": 2.0 * length, "max": 3.0 * length, "by_length": {}},
                              "residual": {"mean": 0.02, "max": 0.04, "by_length": {}}}
        out[name] = entry
    (d / "eval.json").write_text(json.dumps({"splits": out}))
    (d / "summary.json").write_text(json.dumps({"finished": True, "step": 800, "n_params": 1234, "seconds": 9.0}))
    (d / "run.json").write_text(json.dumps({"hparams": {"train_split": "train_k", "batch_size": 128}}))
    (d / "compare_run.json").write_text(json.dumps({"steps": [{"step": "train", "seconds": 300.0},
                                                              {"step": "eval_default", "seconds": 40.0}]}))


def test_tables_from_compare_runs_keep_the_notes(tmp_path):
    from bench import implicit as bench
    words = tmp_path / "words"
    fake_run(words, "z60_k8__implicit_mamba2__cpu__s0", {"test_32": (32, 0.5), "valid": (8, 0.98)}, stats=True)
    fake_run(words, "z60_k8__gru__cpu__s0", {"valid": (8, 0.9)}, stats=False)
    (words / "z60_k8__lstm__cpu__s0").mkdir()            # unfinished: left out
    md = tmp_path / "implicit.md"
    md.write_text(f"# title\n\nhand-written notes\n\n{bench.BEGIN}\nold table\n{bench.END}\n\ntail notes\n")
    bench.write(md, bench.tables(words, tmp_path / "counting"))
    text = md.read_text()
    assert "hand-written notes" in text and "tail notes" in text and "old table" not in text
    rows = [line for line in text.splitlines() if line.startswith("| z60_k8 |")]
    # implicit first (suite order), lengths ascending, iterations shown; GRU without them
    assert rows[0].startswith("| z60_k8 | implicit_mamba2 | valid (L 8) | 0.980 ± 0.010 | 0.900 | 500 | 16.0 / 24 |")
    assert rows[1].startswith("| z60_k8 | implicit_mamba2 | test_32 (L 32) | 0.500")
    assert rows[2].startswith("| z60_k8 | gru | valid (L 8) | 0.900 ± 0.010 | 0.900 | 500 | — | — |")
    assert "| z60_k8 | implicit_mamba2 | 1234 | train_k | 128 | 800 | 300 | 40 |" in text
    assert not any("lstm" in r for r in rows)


@pytest.mark.slow
def test_implicit_llama_probe_reports_every_position(capsys):
    """bench/implicit_llama_probe.py: checks its labels against the task's, then prints one
    JSON row per evaluation with an accuracy per position of the evaluation length.
    Slow: the label check builds the task's RASP labeler (~3 s at load 15)."""
    from bench import implicit_llama_probe as probe
    probe.main(["implicit_llama", "2", "2", "--every", "2", "--eval-len", "3", "d_model=16", "d_ff=32",
                "n_head=2", "batch_size=4", "f_max_iter=3", "test_max_iter=3"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["step"] for r in rows] == [0, 2]
    assert all(len(r["position"]) == 3 and 0 <= r["token"] <= 1 and r["iterations"] >= 1 for r in rows)


@pytest.mark.slow
def test_implicit_llama_probe_refuses_a_loss_beyond_its_words():
    """Slow: loading the probe imports the trainer (~10 s at load 9)."""
    from bench import implicit_llama_probe as probe
    with pytest.raises(SystemExit):
        probe.main(["implicit_llama", "4", "1", "--loss-first", "5"])
