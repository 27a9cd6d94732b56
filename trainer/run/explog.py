"""Experiment logging beside metrics.jsonl: `rasp train --log tensorboard`.

Every row the training loop appends to OUT/metrics.jsonl is also written to
TensorBoard's event files in OUT/tensorboard/ (`tensorboard --logdir runs`
shows every run below runs/ side by side): each number of the row as a
scalar at the row's step, tagged `eval/NAME` for the evaluation's `eval_NAME`
and `train/NAME` for the rest (loss, acc, lr, grad_norm, ...); why a
fine-tune stopped as text.  A new log also gets the run's settings (run.json)
as text.

A run keeps the same scalars in both places across `--resume`: metrics.jsonl
is cut back to the checkpoint's step, and the event files are marked to drop
every scalar after that step (TensorBoard's purge_step), each row being
flushed to disk as it is written.  A resumed run that logged before goes on
logging without --log; one that gets --log only on a resume starts its log
with the rows metrics.jsonl already holds.

TensorBoard is an optional dependency: `pip install -e '.[log]'`.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from rasp.errors import RaspError

EXTRA = "pip install -e '.[log]'"
LOGGERS = {"tensorboard": "tensorboard"}        # --log NAME -> the directory in OUT it writes


def check_available(names) -> None:
    """A clear error, before any work, when a logger's package is missing."""
    for name in names:
        if name == "tensorboard":
            try:
                from torch.utils.tensorboard import SummaryWriter  # noqa: F401  (needs the tensorboard package)
            except ImportError as e:
                raise RaspError(f"--log tensorboard needs the optional `tensorboard` package ({e}); "
                                f"install the `log` extra: {EXTRA}") from None
        elif name not in LOGGERS:
            raise RaspError(f"--log {name}: one of {', '.join(LOGGERS)}")


def tag(key: str) -> str:
    """The scalar tag of a metrics.jsonl key."""
    return "eval/" + key[len("eval_"):] if key.startswith("eval_") else "train/" + key


def scalars(row: dict) -> dict:
    """tag -> value of a metrics.jsonl row's numbers (not its step)."""
    return {tag(k): float(v) for k, v in row.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


class TensorBoard:
    def __init__(self, log_dir: Path, step: int, kept_rows: list, run_record: dict):
        from torch.utils.tensorboard import SummaryWriter
        continued = log_dir.is_dir() and any(log_dir.glob("events.out.tfevents.*"))
        # drop what the old files hold after the checkpoint (metrics.jsonl keeps rows <= step;
        # a run resumed at step 0 starts metrics.jsonl afresh)
        self.writer = SummaryWriter(str(log_dir), purge_step=(step + 1 if step else 0) if continued else None)
        if not continued:
            self.writer.add_text("run", "```\n" + json.dumps(run_record, indent=1) + "\n```", 0)
            for row in kept_rows:
                self.write(row)

    def write(self, row: dict):
        step = row["step"]
        for name, value in scalars(row).items():
            self.writer.add_scalar(name, value, step)
        if isinstance(row.get("stopped"), str):
            self.writer.add_text("stopped", row["stopped"], step)
        self.writer.flush()         # on disk with its metrics.jsonl row: a kill loses neither alone

    def close(self):
        self.writer.close()


class Loggers:
    """The loggers of one run (main rank only): `open` once the run's step
    and kept rows are known, `write` each metrics.jsonl row, closed on exit."""

    def __init__(self, names):
        self.names = list(dict.fromkeys(names))
        check_available(self.names)
        self.open_ones = []

    def open(self, out: Path, step: int, kept_rows: list, run_record: dict, resume: bool):
        names = list(self.names)
        if resume:                  # a run that logged goes on logging
            for name, folder in LOGGERS.items():
                if name not in names and (out / folder).is_dir():
                    try:
                        check_available([name])
                        names.append(name)
                    except RaspError as e:
                        print(f"warning: {out / folder} is not continued: {e}", file=sys.stderr)
        for name in names:
            self.open_ones.append(TensorBoard(out / LOGGERS[name], step, kept_rows, run_record))
        return self

    def write(self, row: dict):
        for logger in self.open_ones:
            logger.write(row)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for logger in self.open_ones:
            logger.close()
        self.open_ones = []
