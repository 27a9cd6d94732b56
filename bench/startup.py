"""Start-up cost of the interpreter commands, timed as whole processes.

    python -m bench.startup [--runs 7] [--target 0.3]

Each row is a fresh process (what a shell loop pays per call), median and
min of --runs wall times after one untimed warm-up run (which also fills the
per-user parser cache, as any earlier `rasp` call would have).  The command
runs as `python -m rasp.cli` with this checkout first on PYTHONPATH; the
`rasp` console script adds only its launcher (a pyenv shim, if any, adds
its own ~0.05-0.1 s).  Rows:

* python -c pass: the interpreter's own floor on this machine;
* import rasp: `python -c "import rasp"`;
* rasp --help, rasp run (parity, one input), rasp check, rasp graph -o x.dot;
* rasp train --help (issue 56: the common flags and the task and model names,
  read without torch) and --help-all (every flag, and a line on each model:
  this one imports torch);
* torch loaded?: whether any of those processes had torch, compiler or
  trainer in sys.modules (the interpreter commands must load none: the
  layering in rasp/cli.py; `rasp train --help` only the trainer).

Bytecode: an installed package has its .pyc files, but this environment may
set PYTHONDONTWRITEBYTECODE (then every start compiles rasp's sources,
~0.05-0.1 s).  By default the processes get a private PYTHONPYCACHEPREFIX
that the warm-up run fills, as an install would; --no-bytecode times the
environment as it is.

The `rasp run` row is issue 9's target (under 0.3 s wall on a 2-core
machine), the `rasp train --help` row issue 56's (under 1 s); a regression
shows as a larger median here.  Also prints the
load average, since the machine may be shared.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARITY = os.path.join(ROOT, "programs", "parity.rasp")

# prints the heavy packages a `rasp` command loaded, after it ran
_PROBE = ("import sys, runpy; sys.argv = ['rasp'] + sys.argv[1:]\n"
          "try:\n    runpy.run_module('rasp.cli', run_name='__main__')\n"
          "except SystemExit:\n    pass\n"
          "print('LOADED', sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'compiler', 'trainer'}),"
          " file=sys.stderr)")


_PYCACHE = None     # set by main: a temporary PYTHONPYCACHEPREFIX, or None for the environment as it is


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    if _PYCACHE:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = _PYCACHE
    return env


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def time_process(argv, runs: int):
    """-> (wall seconds per run, CPU seconds per run)"""
    env = _env()
    # cwd=ROOT: `python -m` puts the working directory first on the path, before PYTHONPATH
    subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, check=True)   # warm-up (disk cache, parser cache)
    walls, cpus = [], []
    for _ in range(runs):
        t, c = time.perf_counter(), _children_cpu()
        subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, check=True)
        walls.append(time.perf_counter() - t)
        cpus.append(_children_cpu() - c)
    return walls, cpus


def heavy_modules(cli_args) -> str:
    done = subprocess.run([sys.executable, "-c", _PROBE, *cli_args], env=_env(), cwd=ROOT, capture_output=True,
                          text=True)
    line = [l for l in done.stderr.splitlines() if l.startswith("LOADED")]
    return line[-1].split(" ", 1)[1] if line else "?"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--target", type=float, default=0.3, help="seconds, for the `rasp run` row")
    ap.add_argument("--help-target", type=float, default=1.0, help="seconds, for the `rasp train --help` row")
    ap.add_argument("--no-bytecode", action="store_true",
                    help="keep the environment's bytecode settings (PYTHONDONTWRITEBYTECODE=%s here)"
                         % os.environ.get("PYTHONDONTWRITEBYTECODE", "unset"))
    args = ap.parse_args(argv)
    py = sys.executable
    global _PYCACHE
    with tempfile.TemporaryDirectory() as tmp:
        _PYCACHE = None if args.no_bytecode else os.path.join(tmp, "pycache")
        dot = os.path.join(tmp, "parity.dot")
        rows = [
            ("python -c pass", [py, "-c", "pass"], None),
            ("import rasp", [py, "-c", "import rasp"], None),
            ("rasp --help", [py, "-m", "rasp.cli", "--help"], ["--help"]),
            ("rasp run parity", [py, "-m", "rasp.cli", "run", PARITY, "--input", "1 0 1 1 > # #"],
             ["run", PARITY, "--input", "1 0 1 1 > # #"]),
            ("rasp check parity", [py, "-m", "rasp.cli", "check", PARITY], ["check", PARITY]),
            ("rasp graph -o x.dot", [py, "-m", "rasp.cli", "graph", PARITY, "-o", dot],
             ["graph", PARITY, "-o", dot]),
            ("rasp train --help", [py, "-m", "rasp.cli", "train", "--help"], ["train", "--help"]),
            ("rasp train --help-all", [py, "-m", "rasp.cli", "train", "--help-all"], ["train", "--help-all"]),
        ]
        print("bytecode: " + ("as the environment has it (PYTHONDONTWRITEBYTECODE="
                              f"{os.environ.get('PYTHONDONTWRITEBYTECODE', 'unset')})" if args.no_bytecode
                              else "cached by the warm-up run, as an installed package has it"))
        print(f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
              f"{args.runs} runs per row after a warm-up; wall seconds per process "
              f"(cpu med: user + system CPU seconds, which the load of other jobs inflates less).\n")
        head = (f"{'command':<22}{'median':>9}{'min':>9}{'max':>9}{'cpu med':>9}  "
                f"{'torch/compiler/trainer loaded'}")
        print(head)
        print("-" * len(head))
        medians = {}
        for name, cmd, cli_args in rows:
            t, cpu = time_process(cmd, args.runs)
            loaded = heavy_modules(cli_args) if cli_args else ""
            med = medians[name] = statistics.median(t)
            print(f"{name:<22}{med:>9.3f}{min(t):>9.3f}{max(t):>9.3f}{statistics.median(cpu):>9.3f}  {loaded}",
                  flush=True)
    print()
    for name, target in (("rasp run parity", args.target), ("rasp train --help", args.help_target)):
        verdict = "meets" if medians[name] < target else "MISSES"
        print(f"`{name}` median {medians[name]:.3f} s {verdict} the {target:g} s target")
    print(f"(load average now {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
