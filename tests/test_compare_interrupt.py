"""`rasp compare` interrupted: a runner killed with SIGKILL leaves its
trainer running; the run's lock (held by that trainer) keeps a second
invocation from starting another trainer on the same directory, and once it
is gone the run resumes.  Fake trainers only (no training here)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from trainer.compare import runner
from trainer.compare.grid import EvalStep, RunSpec

SPEC = RunSpec("flip__gru__cpu__s0", "mini", "flip", "gru", "flipflop", "gru", "cpu", 0, {},
               [EvalStep("default", "eval.json", {})])
# a trainer that starts its run (run.json) and then takes its time
SLEEPER = (sys.executable, "-c", "import pathlib, sys, time; a = sys.argv[1:]; "
           "pathlib.Path(a[a.index('--out') + 1], 'run.json').write_text('{}'); time.sleep(60)")


def _wait_for(cond, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_a_run_in_progress_is_busy_for_a_second_runner(tmp_path):
    import threading
    d = tmp_path / SPEC.run_id
    box = {}
    t = threading.Thread(target=lambda: box.update(rec=runner.execute(SPEC, d, runner.TrainerCommands(SLEEPER))))
    t.start()
    assert _wait_for(runner.live_children)
    second = runner.execute(SPEC, d, runner.TrainerCommands(SLEEPER))
    assert second["status"] == "busy" and "train pid" in second["note"]
    runner.stop_children()
    t.join(20)
    assert box["rec"]["status"] == "interrupted"


def test_sigkill_of_the_runner_leaves_the_lock_with_its_trainer(tmp_path):
    d = tmp_path / SPEC.run_id
    script = textwrap.dedent(f"""
        import sys
        from trainer.compare import runner
        from trainer.compare.grid import RunSpec
        spec = RunSpec.from_dict({json.dumps(SPEC.to_dict())})
        runner.execute(spec, __import__("pathlib").Path({str(d)!r}), runner.TrainerCommands({SLEEPER!r}))
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    parent = subprocess.Popen([sys.executable, "-c", script], env=env)
    lock = d / runner.LOCK
    assert _wait_for(lambda: lock.exists() and "train pid" in lock.read_text() and (d / "run.json").exists())
    child = int(lock.read_text().split("train pid ")[1].split()[0])
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    try:
        rec = runner.execute(SPEC, d, runner.TrainerCommands(SLEEPER))
        assert rec["status"] == "busy" and f"train pid {child}" in rec["note"]
    finally:
        os.kill(child, signal.SIGKILL)
    assert _wait_for(lambda: _gone(child))
    done = runner.TrainerCommands((sys.executable, "-c", "import sys, pathlib, json; a = sys.argv[1:]; "
                                   "o = pathlib.Path(a[a.index('--out') + 1] if a[0] == 'train' else a[1]); "
                                   "(o / 'summary.json').write_text(json.dumps({'finished': True})) if a[0] == 'train' "
                                   "else (o / 'eval.json').write_text('{}')"))
    rec = runner.execute(SPEC, d, done)                    # the lock is free again: the run resumes
    assert rec["state"] == "resume" and rec["status"] == "finished"
    assert "--resume" in rec["steps"][0]["command"]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie (our child's child re-parented to init) counts as gone once reaped; poll /proc
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True
