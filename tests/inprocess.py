"""`rasp ARGV` run inside the test's process, answered as `subprocess.run` would
answer it (returncode, stdout, stderr): what a `python -m rasp` child runs,
without the second or more a child pays to import torch and the trainer.

A test keeps a child where the child itself is what it checks (a kill, DDP,
a memory cap on a hostile read, the modules a fresh process loads)."""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
from pathlib import Path
from typing import Optional

from rasp.cli import main


def rasp(*argv, cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    """`rasp ARGV` in this process (in `cwd`, as a child run there would be); argparse's
    exits are its exit status, and no traceback or internal error may reach stderr."""
    argv = [str(a) for a in argv]
    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(argv)
            except SystemExit as e:
                status = 0 if e.code is None else e.code if isinstance(e.code, int) else 2
    finally:
        os.chdir(here)
    assert "Traceback" not in err.getvalue() and "internal error" not in err.getvalue(), err.getvalue()
    return subprocess.CompletedProcess(["rasp", *argv], status, out.getvalue(), err.getvalue())
