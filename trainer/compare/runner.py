"""Running the grid: each run is an independent chain of processes
(`python -m trainer train ...`, then one `python -m trainer eval ...` per
eval entry) writing into DIR/RUN_ID/.  Re-invoking skips finished runs,
resumes interrupted ones (`--resume`) and only evaluates trained ones.  A
failed run leaves DIR/RUN_ID/failed.json (exit code, command, stderr tail)
and is retried on the next invocation.

The command builder is injectable (tests substitute a tiny fake trainer
through `TrainerCommands(prefix=...)`); production uses the real trainer.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from rasp.errors import RaspError, RaspFileError
from rasp import atomic
from rasp import readfile
from trainer.run import lockfile
from trainer.compare.grid import EvalStep, RunSpec

TAIL_LINES = 40                 # stderr lines kept in failed.json
TAIL_BYTES = 1 << 16           # read from the end of a log for them
LOCK = ".compare.lock"          # held while a run's commands work (see execute)
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# a child stopped by SIGINT/SIGTERM (negative: killed by the signal; 128+n: exited on it)
INTERRUPTED = {-signal.SIGINT, -signal.SIGTERM, 128 + signal.SIGINT, 128 + signal.SIGTERM}


def render_options(options: dict) -> list:
    """{"steps": 10, "no_progress": True, "set": ["a=1", "b=2"]} ->
    ["--steps", "10", "--no-progress", "--set", "a=1", "--set", "b=2"];
    one-letter keys become short options (`n = 64` -> `-n 64`)."""
    out = []
    for key, value in options.items():
        flag = ("-" if len(key) == 1 else "--") + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            for v in value:
                out += [flag, str(v)]
        else:
            out += [flag, str(value)]
    return out


@dataclass(frozen=True)
class TrainerCommands:
    """Builds the command lines of a run.  `prefix` replaces
    `python -m trainer` (tests point it at a fake trainer script);
    `train_launcher` replaces it for training only (e.g. `torchrun
    --standalone --nproc_per_node 4 -m trainer`: one large run on several
    processes)."""
    prefix: tuple = ()
    train_launcher: tuple = ()

    def _prefix(self) -> list:
        return list(self.prefix) if self.prefix else [sys.executable, "-m", "trainer"]

    def train(self, spec: RunSpec, run_dir: Path, resume: bool = False) -> list:
        start = list(self.train_launcher) if self.train_launcher else self._prefix()
        return start + ["train"] + train_args(spec, run_dir) + (["--resume"] if resume else [])

    def eval(self, spec: RunSpec, step: EvalStep, run_dir: Path) -> list:
        return self._prefix() + ["eval", str(run_dir)] + render_options(step.options)


def train_args(spec: RunSpec, run_dir: Path) -> list:
    """The arguments of `python -m trainer train` for a new run of `spec`."""
    task = ["--program", spec.program] if spec.program else ["--task", spec.task]
    return (task + ["--model", spec.model, "--preset", spec.preset, "--seed", str(spec.seed)]
            + render_options(spec.train) + ["--out", str(run_dir)])


# ---- the state of a run directory --------------------------------------------

def read_json(path: Path):
    """The JSON in `path`, or None when it is absent, unreadable or damaged."""
    try:
        return readfile.read_json(path)
    except RaspFileError:
        return None


def trained(run_dir: Path) -> bool:
    """summary.json is written last.  Comparison runs mark it `"finished":
    true`; a Fan-task summary has no such key and is only written at the end."""
    s = read_json(run_dir / "summary.json")
    return isinstance(s, dict) and s.get("finished", True) is True


def started(run_dir: Path) -> bool:
    return any((run_dir / n).exists() for n in ("run.json", "latest.json", "checkpoints"))


def eval_done(step: EvalStep, run_dir: Path) -> bool:
    """The eval's file exists and holds every split the eval asks for (a
    suite edited to name another split re-evaluates)."""
    doc = read_json(run_dir / step.file)
    if not isinstance(doc, dict):
        return False
    wanted = step.options.get("splits")
    if isinstance(wanted, str) and isinstance(doc.get("splits"), dict):
        return all(s.strip() in doc["splits"] for s in wanted.split(",") if s.strip())
    return True


def missing_evals(spec: RunSpec, run_dir: Path) -> list:
    return [e for e in spec.evals if not eval_done(e, run_dir)]


def stale_settings(spec: RunSpec, run_dir: Path) -> list:
    """The hyper-parameters in which the run's run.json differs from what its
    train command gives a new run now (a preset or default edited since the
    run started), as "key: old -> new"; a setting the run did not record is
    compared at the value it had before it was added.  [] when they agree or
    cannot be told (no run.json hyper-parameters, e.g. a test's fake trainer)."""
    doc = read_json(run_dir / "run.json")
    recorded = doc.get("hparams") if isinstance(doc, dict) else None
    if not isinstance(recorded, dict):
        return []
    from trainer.settings.resolve import planned_hparams        # here: planning loads the model registry (torch)
    from trainer.settings import hparams
    try:
        now = planned_hparams(train_args(spec, run_dir))
    except RaspError:
        return []
    had = {**hparams.ADDED, **recorded}      # a setting added since the run started: it trained with the old value
    return [f"{k}: {had[k]!r} -> {now[k]!r}" for k in sorted(had.keys() & now.keys()) if had[k] != now[k]]


def state(spec: RunSpec, run_dir: Path) -> str:
    """'done' | 'evaluate' (trained, an eval file is missing) | 'resume'
    (interrupted) | 'new' | 'stale' (started with settings the suite's
    command no longer gives: `rasp compare` sets it aside and trains anew)."""
    if started(run_dir) and stale_settings(spec, run_dir):
        return "stale"
    if trained(run_dir):
        return "evaluate" if missing_evals(spec, run_dir) else "done"
    return "resume" if started(run_dir) else "new"


def set_aside(run_dir: Path) -> Path:
    """Move a stale run's files into RUN_DIR.staleK (the first free K), so
    nothing a user trained is lost; the lock file stays."""
    k = 1
    while run_dir.with_name(f"{run_dir.name}.stale{k}").exists():
        k += 1
    kept = run_dir.with_name(f"{run_dir.name}.stale{k}")
    kept.mkdir()
    for entry in run_dir.iterdir():
        if entry.name != LOCK:
            os.replace(entry, kept / entry.name)
    return kept


def planned_commands(spec: RunSpec, run_dir: Path, commands=TrainerCommands()) -> list:
    """The command lines this invocation would run for the run (empty if done)."""
    st = state(spec, run_dir)
    cmds = []
    if st in ("new", "resume", "stale"):
        cmds.append(("train", commands.train(spec, run_dir, resume=(st == "resume"))))
        evals = spec.evals
    else:
        evals = missing_evals(spec, run_dir)
    cmds += [(f"eval_{e.name}", commands.eval(spec, e, run_dir)) for e in evals]
    return cmds


# ---- executing one run ---------------------------------------------------------

def load_average():
    """The 1-minute load average (None where the platform has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _env(threads_one: bool) -> dict:
    env = dict(os.environ)
    if threads_one:
        env.update({k: "1" for k in THREAD_ENV})
    return env


def _tail(path: Path, n: int = TAIL_LINES) -> str:
    try:
        with readfile.open_regular(path) as f:            # the end of a log of any size
            f.seek(max(0, os.fstat(f.fileno()).st_size - TAIL_BYTES))
            return "\n".join(f.read(TAIL_BYTES).decode("utf-8", errors="replace").splitlines()[-n:])
    except (RaspFileError, OSError):
        return ""


def check_run_dir(run_dir: Path):
    """A run directory is a plain folder of its own under --out (or absent):
    never a link, through which the run would be written somewhere else."""
    if run_dir.is_symlink() or (run_dir.exists() and not run_dir.is_dir()):
        raise RaspFileError(run_dir, "is a link or a file, not a run directory; move it away and run again")


def execute(spec: RunSpec, run_dir: Path, commands=TrainerCommands(), threads_one: bool = True) -> dict:
    """Run what is left of one run; returns its record (also in
    RUN_DIR/compare_run.json; on failure RUN_DIR/failed.json; a child
    stopped by Ctrl-C or SIGTERM leaves no failure: the run resumes next time).

    RUN_DIR/.compare.lock is held (flock) while the run's commands work, by
    this process and by the trainer it starts: a runner killed with SIGKILL
    leaves its trainer running and still holding the lock, and a second
    invocation then reports the run "busy" instead of starting a second
    trainer on the same directory."""
    run_dir = Path(run_dir)
    check_run_dir(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = lockfile.acquire(run_dir / LOCK, f"rasp compare pid {os.getpid()}")
    except lockfile.LockBusy as busy:
        return {"run_id": spec.run_id, "status": "busy", "seconds": 0.0,
                "note": f"{busy.holder or 'another process'} is working on it; wait for it or stop it, then run again"}
    done = False
    try:
        record = _execute(spec, run_dir, commands, threads_one, fd)
        done = True                     # every child it started has exited: no one else holds the lock
        return record
    finally:
        lockfile.release(run_dir / LOCK, fd, remove=done)


def _execute(spec: RunSpec, run_dir: Path, commands, threads_one: bool, lock_fd: int) -> dict:
    failed = run_dir / "failed.json"
    if failed.is_symlink() or failed.is_file():
        failed.unlink()                      # a retry: the old failure no longer describes the run
    elif failed.exists():
        raise RaspFileError(failed, "is not a file; remove it")
    record = {"run_id": spec.run_id, "spec": spec.to_dict(), "state": state(spec, run_dir), "steps": [],
              "load": load_average()}          # the machine's load: the speed a dry run estimates from depends on it
    if record["state"] == "done":          # another invocation finished it since this one listed it:
        return {**record, "status": "finished", "seconds": 0.0}      # its compare_run.json stays
    if record["state"] == "stale":
        record["stale_settings"] = stale_settings(spec, run_dir)
        record["set_aside"] = str(set_aside(run_dir))
    t0 = time.time()
    for name, cmd in planned_commands(spec, run_dir, commands):
        log = run_dir / f"{name}.log"
        t = time.time()
        try:
            fh = atomic.open_append(log)
        except OSError as e:                # a link or a folder where the log goes: never written through
            record.update(status="failed", exit_code=None, failed_step=name, log=log.name,
                          stderr_tail=f"cannot write {log}: {e.strerror or e}", seconds=round(time.time() - t0, 2))
            _write_json(failed, record)
            return record
        with fh:
            fh.write(f"$ {' '.join(cmd)}\n".encode())
            fh.flush()
            try:
                proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=_env(threads_one),
                                        cwd=os.getcwd(), pass_fds=(lock_fd,))      # the child holds the lock too
            except OSError as e:
                fh.write(f"cannot start: {e}\n".encode())
                rc = 127
            else:
                lockfile.write_note(lock_fd, f"{name} pid {proc.pid} (started by rasp compare pid {os.getpid()})")
                _LIVE.add(proc)
                try:
                    rc = proc.wait()
                finally:
                    _LIVE.discard(proc)
        record["steps"].append({"step": name, "command": cmd, "exit_code": rc, "seconds": round(time.time() - t, 2)})
        if rc in INTERRUPTED:               # Ctrl-C / termination: resumable, not a failure
            record.update(status="interrupted", exit_code=rc, seconds=round(time.time() - t0, 2))
            return record
        if rc != 0:
            record.update(status="failed", exit_code=rc, failed_step=name, stderr_tail=_tail(log), log=log.name,
                          seconds=round(time.time() - t0, 2))
            _write_json(failed, record)
            return record
    record.update(status="finished" if state(spec, run_dir) == "done" else "incomplete",
                  seconds=round(time.time() - t0, 2), load_end=load_average())
    if record["status"] == "incomplete":        # exit 0 but a promised file is absent: a failure too
        record.update(status="failed", exit_code=0, failed_step="outputs",
                      stderr_tail="the commands exited 0 but left no finished summary.json or a missing eval file: "
                                  + ", ".join(e.file for e in missing_evals(spec, run_dir)))
        _write_json(failed, record)
    else:
        _write_json(run_dir / "compare_run.json", record)
    return record


_LIVE: set = set()          # trainer processes running now (stopped together on Ctrl-C / SIGTERM)


def live_children() -> int:
    return len(_LIVE)


def stop_children():
    """SIGTERM every trainer process this runner started and is waiting
    on; their runs are recorded as interrupted and resume next time."""
    for proc in list(_LIVE):
        try:
            proc.terminate()
        except OSError:
            pass


def _write_json(path: Path, obj):
    atomic.write_text_atomic(path, json.dumps(obj, indent=1))


def execute_payload(spec_dict: dict, run_dir: str, prefix: tuple = (), train_launcher: tuple = ()) -> dict:
    """The picklable entry point a cluster job runs (submitit)."""
    return execute(RunSpec.from_dict(spec_dict), Path(run_dir), TrainerCommands(tuple(prefix), tuple(train_launcher)))


# ---- executors -------------------------------------------------------------------

Progress = Callable[[str], None]


def run_local(runs: list, out: Path, jobs: int = 1, commands=TrainerCommands(),
              progress: Optional[Progress] = None) -> list:
    """Runs N at a time (threads waiting on child processes, one torch
    thread per child).  Returns the records of the runs that did work."""
    if jobs < 1:
        raise RaspError(f"--jobs must be at least 1, got {jobs}")
    say = progress or (lambda s: None)
    todo = [r for r in runs if state(r, out / r.run_id) != "done"]
    say(f"{len(runs) - len(todo)} of {len(runs)} runs already finished; {len(todo)} to run, {jobs} at a time")
    records = []

    def work(r: RunSpec) -> dict:
        say(f"start {r.run_id} ({state(r, out / r.run_id)})")
        return execute(r, out / r.run_id, commands, True)

    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = {pool.submit(work, r): r for r in todo}
        for i, fut in enumerate(as_completed(futures), 1):
            rec = fut.result()
            records.append(rec)
            extra = (f": exit {rec['exit_code']} in {rec['failed_step']}" if rec["status"] == "failed"
                     else f": {rec['note']}" if rec["status"] == "busy" else "")
            say(f"[{i}/{len(todo)}] {rec['status']} {rec['run_id']} ({rec['seconds']:.0f} s){extra}")
    except KeyboardInterrupt:
        stop_children()                 # a terminal's Ctrl-C reached them already; a SIGTERM did not
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)       # queued runs must not start
    return records


def _slurm_executor(folder: Path, slurm: Optional[dict], cluster: Optional[str]):
    """A submitit executor with the run's parameters; a parameter submitit
    does not know or of the wrong type is a RaspError naming it."""
    try:
        import submitit
    except ImportError:
        raise RaspError("--executor slurm needs submitit (pip install submitit)") from None
    executor = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
    params = {"timeout_min": 24 * 60, "cpus_per_task": 1}
    params.update(slurm or {})
    try:
        executor.update_parameters(**params)
    except (NameError, AssertionError, ValueError, TypeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RaspError(f"--slurm: {first}") from None
    return executor


def check_slurm_params(slurm: dict, cluster: Optional[str] = None):
    """Refuse bad --slurm parameters before anything is written (the check
    builds a throw-away executor in a temporary folder)."""
    with tempfile.TemporaryDirectory() as tmp:
        _slurm_executor(Path(tmp) / "_submitit", slurm, cluster)


def run_slurm(runs: list, out: Path, slurm: Optional[dict] = None, cluster: Optional[str] = None,
              commands=TrainerCommands(), wait: bool = True, progress: Optional[Progress] = None) -> list:
    """Submits every unfinished run as one job through submitit (`cluster`
    None = auto-detect Slurm; "local" runs the jobs as local processes, for
    tests).  With `wait` the records are collected; otherwise the job ids."""
    say = progress or (lambda s: None)
    todo = [r for r in runs if state(r, out / r.run_id) != "done"]
    executor = _slurm_executor(out / "_submitit", slurm, cluster)
    jobs = [executor.submit(execute_payload, r.to_dict(), str(out / r.run_id), tuple(commands.prefix),
                            tuple(commands.train_launcher)) for r in todo]
    for r, j in zip(todo, jobs):
        say(f"submitted {r.run_id} as job {j.job_id}")
    if not wait:
        return [{"run_id": r.run_id, "job_id": j.job_id} for r, j in zip(todo, jobs)]
    return [j.result() for j in jobs]
