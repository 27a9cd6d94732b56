"""bench/official_speed.py's arithmetic: the three timings of a round and the report's
ratios and medians (the trainings themselves need Fan et al.'s code: bench/BENCH.md)."""
from __future__ import annotations

from bench.official_speed import report, speeds


def summary(step, seconds, evaluating, saving, cpu):
    return {"step": step, "seconds": seconds, "seconds_evaluating": evaluating, "seconds_saving": saving,
            "cpu_seconds": cpu}


def a_round(default_s, fan_s, official_s, official_cpu_s):
    ours = {"default": summary(2000, default_s, 4.0, 1.0, default_s * 0.7),
            "fan": summary(2000, fan_s, 4.0, 1.0, fan_s * 0.65)}
    theirs = {"steps": 2000, "steps_per_s": 2000 / official_s, "train_cpu_seconds": official_cpu_s}
    return speeds(ours, theirs) | {"load": {"min": 0.5, "mean": 2.0, "max": 3.0}}


def test_the_three_timings_of_a_round():
    r = a_round(200.0, 160.0, 300.0, 240.0)
    assert r["steps_per_s"] == {"default": 10.0, "fan": 12.5, "official": 2000 / 300}
    assert r["training_steps_per_s"]["default"] == 2000 / 195 and r["training_steps_per_s"]["official"] == 2000 / 300
    assert r["steps_per_cpu_s"] == {"default": 2000 / 140, "fan": 2000 / 104, "official": 2000 / 240}


def test_the_report_gives_each_rounds_ratios_and_their_medians():
    rounds = [a_round(200.0, 160.0, 300.0, 240.0), a_round(180.0, 150.0, 300.0, 240.0),
              a_round(250.0, 170.0, 300.0, 240.0)]
    clock = {"seconds_per_step": {"with_clock": 0.056, "answering_only": 0.046}, "share": 0.18, "batches": 120,
             "load": 1.0}
    text = report(rounds, clock, {"steps": 2000, "interval": 100})
    assert "| 1 | 1.50 | 1.54 | 1.71 | 1.88 | 1.94 | 2.31 |" in text     # 300/200, 300/195, 240/140, ...
    assert "median over rounds, wall, whole loop: default / official 1.50 (target >= 1.5)" in text
    assert "median over rounds, CPU, whole loop: default / official 1.71" in text
    assert "started together" in text and "run one after the other" in report(rounds, clock, {"steps": 2000,
                                                                                               "interval": 100}, True)
    assert "the clock's share of a default step: 0.18" in text
