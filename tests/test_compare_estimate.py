"""`rasp compare --dry-run` estimates each run's wall time from measured
speeds (a finished run's compare_run.json, DIR/speeds.json) or a probe, and
says which; the fake trainer of test_compare stands in for training."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from rasp import cli as rasp_cli
from rasp.errors import RaspError
from test_compare import FAKE_TRAINER, SUITE, write
from trainer.compare import cli as C
from trainer.compare import estimate as E
from trainer.compare import grid as G
from trainer.compare import runner
from trainer.compare.suite import load_suite


@pytest.fixture
def suite(tmp_path):
    return load_suite(str(write(tmp_path / "mini.toml", SUITE)))


def measured_run(out: Path, spec, steps=1000, train_s=100.0, eval_s=20.0, state="new", load=3.0):
    """A run the runner trained: its record (whole processes' seconds) and summary."""
    d = out / spec.run_id
    write(d / "run.json", "{}")
    write(d / "summary.json", json.dumps({"finished": True, "step": steps, "seconds": train_s - 5}))
    write(d / "eval.json", json.dumps({"splits": {"dense": {}, "sparse": {}}}))
    write(d / "compare_run.json", json.dumps({
        "run_id": spec.run_id, "state": state, "status": "finished", "load": load, "load_end": load + 1,
        "steps": [{"step": "train", "exit_code": 0, "seconds": train_s},
                  {"step": "eval_default", "exit_code": 0, "seconds": eval_s}]}))


def test_an_estimate_scales_the_measured_speed_to_the_planned_steps(suite, tmp_path):
    out = tmp_path / "out"
    s0, s1 = G.expand(suite, "cpu", tasks=["flip"], models=["gru"])           # the suite trains 5 steps
    measured_run(out, s0)
    speeds = E.known_speeds(out, [s0, s1])
    # 100 s of the train process: 95 s in the loop (summary.json), 5 s starting up
    assert speeds[E.cell_key(s1)][0] == {"run_id": s0.run_id, "steps": 1000, "train_s": 95.0, "startup_s": 5.0,
                                         "eval_s": 20.0, "load": 4.0, "source": "measured"}
    est = E.estimate_run(s1, "new", speeds)
    assert est.seconds == pytest.approx(5.0 + 5 * 0.095 + 20.0) and est.source == "measured"
    assert "5 steps (1 measured run, 10.5 steps/s at load 4)" in est.note
    assert E.estimate_run(s1, "evaluate", speeds).seconds == pytest.approx(20.0)
    assert E.estimate_run(s0, "done", speeds).seconds == 0.0
    tf = G.expand(suite, "cpu", tasks=["flip"], models=["tf"])[0]
    none = E.estimate_run(tf, "new", speeds)                  # another model: no speed of its own
    assert none.seconds is None and none.source == "none" and "--probe" in none.note


def test_a_resumed_runs_record_is_not_a_speed(suite, tmp_path):
    """A resumed run's record times only its tail: it would make the run look fast."""
    out = tmp_path / "out"
    spec = G.expand(suite, "cpu", seeds=1, tasks=["flip"], models=["gru"])[0]
    measured_run(out, spec, state="resume")
    assert E.known_speeds(out, [spec]) == {}


def test_the_runner_records_speeds_that_outlive_the_run_directories(suite, tmp_path):
    out = tmp_path / "out"
    spec = G.expand(suite, "cpu", seeds=1, tasks=["flip"], models=["gru"])[0]
    measured_run(out, spec)
    rec = json.loads((out / spec.run_id / "compare_run.json").read_text())
    E.record_speed(out, spec, rec)
    E.record_speed(out, spec, rec)                            # the same run twice: kept once
    for f in (out / spec.run_id).iterdir():
        f.unlink()
    assert [m["run_id"] for m in E.known_speeds(out, [spec])[E.cell_key(spec)]] == [spec.run_id]


def test_a_real_runner_record_carries_the_load(suite, tmp_path):
    fake = runner.TrainerCommands((sys.executable, str(write(tmp_path / "fake.py", FAKE_TRAINER))))
    spec = G.expand(suite, "cpu", seeds=1, tasks=["flip"], models=["gru"])[0]
    rec = runner.execute(spec, tmp_path / "out" / spec.run_id, fake)
    assert rec["status"] == "finished" and isinstance(rec["load"], float) and isinstance(rec["load_end"], float)
    assert [s["step"] for s in rec["steps"]] == ["train", "eval_default"] and rec["steps"][0]["seconds"] > 0


def test_dry_run_prints_each_estimate_its_source_and_the_total(suite, tmp_path, capsys):
    out = tmp_path / "out"
    s0 = G.expand(suite, "cpu", tasks=["flip"], models=["gru"])[0]
    measured_run(out, s0)
    assert rasp_cli.main(["compare", suite.path, "--dry-run", "--tasks", "flip", "--out", str(out),
                          "--jobs", "2"]) == 0
    text = capsys.readouterr().out
    assert "flip__gru__cpu__s0: done; estimated 0 s [done: finished]" in text
    assert "flip__gru__cpu__s1: new; estimated 25 s [measured: 5 steps (1 measured run, 10.5 steps/s" in text
    assert "flip__tf__cpu__s0: new; estimated ? [none: no measured speed" in text
    last = text.strip().splitlines()[-1]
    assert last.startswith(f"4 runs in {out}: estimated 25 s of runs, about 13 s wall with --jobs 2")
    assert "(1 finished, 1 from measured runs, 2 without an estimate (not in the total))" in last


def test_a_probe_times_a_few_steps_of_the_runs_own_command(suite, tmp_path, capsys):
    out = tmp_path / "out"
    fake = runner.TrainerCommands((sys.executable, str(write(tmp_path / "fake.py", FAKE_TRAINER))))
    runs = G.expand(suite, "cpu", seeds=2, tasks=["flip"], models=["tf"])
    assert C.dry_run(runs, out, fake, 1, 3) == 0
    text = capsys.readouterr().out
    assert text.count("probing mini/flip/tf/cpu: 3 steps") == 1            # one probe per task x model
    assert "flip__tf__cpu__s1: new; estimated" in text and "[probe: 7 steps (1 probe" in text
    assert "evaluation not measured" in text
    assert not any((out / E.PROBES).iterdir())                              # the probe's run is removed
    speeds = json.loads((out / E.SPEEDS).read_text())["mini/flip/tf/cpu"]
    assert speeds[0]["source"] == "probe" and speeds[0]["steps"] == 3
    with pytest.raises(RaspError, match="--probe must be from 1"):
        E.probe(runs[0], out, 0, fake)


def test_probe_without_dry_run_is_refused(suite, tmp_path, capsys):
    assert rasp_cli.main(["compare", suite.path, "--probe", "5", "--out", str(tmp_path / "o")]) == 2
    assert "--probe goes with --dry-run" in capsys.readouterr().err


def reference_cell(spec, **kw) -> dict:
    m = {"steps": 20, "per_step_s": 0.1, "valid_s": 2.0, "startup_s": 4.0, "eval_s": 30.0, "load": 1.5,
         "machine": "2-core Test CPU, CPU seconds of one thread", "settings": E.settings_key(spec),
         "source": "reference"}
    return {**m, **kw}


def test_a_cell_measured_nowhere_falls_back_to_the_reference_speed_and_says_so(suite, tmp_path):
    spec = G.expand(suite, "cpu", seeds=1, tasks=["flip"], models=["tf"])[0]     # 7 steps
    hp = E.planned(spec)
    ref = {E.cell_key(spec): reference_cell(spec)}
    est = E.estimate_run(spec, "new", {}, ref)
    validations = 7 // hp["eval_every"]
    assert est.source == "reference"
    assert est.seconds == pytest.approx(4.0 + 7 * 0.1 + 2.0 * validations + 30.0)
    assert "reference speed, 2-core Test CPU, CPU seconds of one thread, measured at load 1.5" in est.note
    assert "other settings" not in est.note
    assert E.estimate_run(spec, "evaluate", {}, ref).seconds == 30.0
    # a measurement in the output folder wins over the reference
    measured_run(tmp_path / "out", spec)
    assert E.estimate_run(spec, "new", E.known_speeds(tmp_path / "out", [spec]), ref).source == "measured"
    # measured under other settings (the suite or preset edited since): flagged
    stale = E.estimate_run(spec, "new", {}, {E.cell_key(spec): reference_cell(spec, settings="0" * 12)})
    assert "measured with other settings (rerun python -m bench.compare_speeds)" in stale.note


def test_the_dry_run_labels_reference_estimates(suite, tmp_path, monkeypatch, capsys):
    spec = G.expand(suite, "cpu", seeds=1, tasks=["flip"], models=["tf"])[0]
    monkeypatch.setattr(E, "REFERENCE", write(tmp_path / "ref.json",
                                              json.dumps({"cells": {E.cell_key(spec): reference_cell(spec)}})))
    assert rasp_cli.main(["compare", suite.path, "--dry-run", "--tasks", "flip", "--seeds", "1",
                          "--out", str(tmp_path / "fresh")]) == 0
    text = capsys.readouterr().out
    assert "flip__tf__cpu__s0: new; estimated 3" in text and "[reference: 7 steps at 10 steps/s" in text
    assert "flip__gru__cpu__s0: new; estimated ? [none" in text
    assert "(1 from the shipped reference speeds, 1 without an estimate (not in the total))" in text


def test_a_reference_measurement_times_steps_validation_and_extrapolates_evaluation(suite, tmp_path):
    """A fake `python -m trainer` and fake clocks: the CPU share of the train
    call splits its seconds; each evaluation is timed at size 1 and size/8."""
    spec = G.expand(suite, "cpu", seeds=1, tasks=["flip"], models=["gru"])[0]      # eval n = 16
    calls, now = [], {"wall": 0.0, "cpu": 0.0}

    def call(argv):
        calls.append(argv)
        if argv[0] == "train":
            out = Path(argv[argv.index("--out") + 1])
            out.mkdir(parents=True)
            assert argv[argv.index("--steps") + 1] == "10" and argv[argv.index("--eval-every") + 1] == "10"
            write(out / "summary.json", json.dumps({"seconds": 12.0, "step": 10}))
            write(out / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in (
                {"step": 0, "eval_acc": 0.1}, {"step": 5, "steps_per_s": 1.0}, {"step": 10, "steps_per_s": 1.0})))
            now["wall"] += 20.0
            now["cpu"] += 10.0                  # half a core while it trained
        else:
            n = int(argv[argv.index("-n") + 1])
            now["cpu"] += 1.0 + 0.5 * n         # 1 s fixed, 0.5 s an example
        return 0

    m = E.reference_measurement(spec, tmp_path, 10, call, 3.0, "test machine", fraction=8,
                                wall_clock=lambda: now["wall"], cpu_clock=lambda: now["cpu"])
    assert [a[0] for a in calls] == ["train", "eval", "eval"]
    assert [a[a.index("-n") + 1] for a in calls[1:]] == ["1", "2"]
    assert m["steps"] == 10 and m["per_step_s"] == pytest.approx(0.5)           # 10 s of windows at half a core
    assert m["valid_s"] == pytest.approx(1.0)                                     # (12 - 10) s loop after the last log
    assert m["startup_s"] == pytest.approx(3.0 + 4.0)                             # (20 - 12) s outside the loop
    assert m["eval_s"] == pytest.approx(3.0 + 1.5 + 0.5 * 15)                     # start-up + n=1 + 15 more examples
    assert m["settings"] == E.settings_key(spec) and m["source"] == "reference"
    assert not (tmp_path / spec.run_id).exists()


def test_a_reference_measurement_compresses_a_curriculum_over_positions(tmp_path):
    """Implicit Llama's words preset scores one more position every 125 of its
    6000 steps: squeezed into 10 steps that curriculum would end with 2 of 8
    positions scored, which the trainer warns of; the measurement compresses
    it as it does a length curriculum."""
    from trainer.settings.resolve import planned_hparams
    from trainer.settings.hparams import HParams
    from trainer.tasks import get_task
    from trainer.benchmark.kind import check_position_curriculum
    words = load_suite("words")
    spec = G.expand(words, "cpu", seeds=1, tasks=["z60_k8"], models=["implicit_llama"])[0]
    assert (E.planned(spec) or {}).get("loss_first", 0) > 0      # the preset this test is about
    trained = []

    def call(argv):
        if argv[0] == "train":
            hp = HParams.from_dict(planned_hparams(argv[1:]), kind="seq")
            assert check_position_curriculum(get_task(spec.task), hp) is None     # says so of the uncompressed run
            trained.append(hp)
            out = Path(argv[argv.index("--out") + 1])
            out.mkdir(parents=True)
            write(out / "summary.json", json.dumps({"seconds": 2.0, "step": 10}))
            write(out / "metrics.jsonl", json.dumps({"step": 10, "steps_per_s": 5.0}) + "\n")
        return 0

    E.reference_measurement(dataclasses.replace(spec, evals=[]), tmp_path, 10, call, 1.0, "test machine")
    assert trained and trained[0].steps == 10 and trained[0].loss_grow_every == 1


def test_a_reference_measurement_of_a_run_without_steps_times_its_start_and_evaluations(tmp_path):
    """The compiled rows train 0 steps: measured with 0 (a 10-step fine-tune of
    a compiled words model took minutes of guard evaluations)."""
    words = load_suite("words")
    spec = G.expand(words, "cpu", seeds=1, tasks=["z60_k8"], models=["compiled"])[0]
    argvs = []

    def call(argv):
        argvs.append(argv)
        if argv[0] == "train":
            out = Path(argv[argv.index("--out") + 1])
            out.mkdir(parents=True)
            write(out / "summary.json", json.dumps({"seconds": 0.5, "step": 0}))
            write(out / "metrics.jsonl", "")
        return 0

    m = E.reference_measurement(dataclasses.replace(spec, evals=[]), tmp_path, 10, call, 1.0, "test machine")
    assert argvs[0][argvs[0].index("--steps") + 1] == "0"
    assert m["steps"] == 0 and m["per_step_s"] == 0.0
    est = E.reference_estimate(spec, "new", m)
    assert est.seconds == pytest.approx(m["startup_s"] + m["eval_s"]) and "(none measured)" in est.note
