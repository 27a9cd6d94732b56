"""The trainer as `rasp compare` runs it: a comparison run whose periodic
evaluation comes before its first log row (the counting cpu preset: 50
steps, evaluation every 25, a log row every 50) trains to the end."""
from __future__ import annotations

import json

from trainer.__main__ import main


def test_an_evaluation_before_the_first_log_row_does_not_stop_training(tmp_path):
    out = tmp_path / "run"
    # the counting cpu preset's own cadence (eval_every 25 < log_every 50), 30 steps
    assert main(["train", "--task", "counting", "--model", "rnn", "--preset", "cpu", "--d-model", "8",
                 "--steps", "30", "--seed", "0", "--no-progress", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] is True and summary["step"] == 30
    rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "eval_acc" in r][:2] == [0, 25] and any("loss" in r for r in rows)
