"""Reading a file a user (or a damaged disk) may have replaced: a file of a
run, an export, a compiled folder, a results folder or an `--inputs` file.

Only a regular file is read (a link to one is followed); a FIFO, a device
(a link to /dev/zero) or a directory is refused before anything waits on it
or reads it, and a file is read with a size bound, so nothing is read whole
before its size is known.  Every failure is a `RaspFileError` naming the
file (exit status 2).  Shared by the packages above (model files, trainer
runs and exports, the results tools); no PyTorch here.

A file the user names for a command to read once (`--config`, `--inputs`,
`--eval-inputs`) may also be a pipe: process substitution `<(generate)`,
`/dev/stdin`, a FIFO (`read_user_bytes`).  A pipe is read to its end with the
same size bound, and never waited on forever: a FIFO nobody opens for
writing is refused after PIPE_WRITER_WAIT seconds, a writer that goes
PIPE_SILENCE seconds without writing is given up on.
"""
from __future__ import annotations

import json
import math
import os
import select
import stat
import sys
import time
from pathlib import Path
from typing import BinaryIO

from .errors import RaspFileError

MAX_JSON = 64 << 20          # a run's or a report's JSON file; the largest written is a few MB
MAX_LOG = 1 << 30            # a JSON-lines log (metrics.jsonl: a row per logged step of a long run)
PIPE_WRITER_WAIT = 2.0       # seconds a FIFO nobody has opened for writing is given to get a writer
PIPE_SILENCE = 60.0          # seconds a pipe's writer may go without writing (a slow generator)


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def _open_checked(path: Path, pipe: bool, missing: str = "missing") -> int:
    """A non-blocking descriptor of `path`, a regular file (or, with `pipe`, a
    FIFO).  The mode is looked at before the open (a FIFO's blocking open
    would wait for a writer, a device's may act) and again on the open
    descriptor (the file may have been swapped in between)."""
    def allowed(mode: int) -> bool:
        return stat.S_ISREG(mode) or (pipe and stat.S_ISFIFO(mode))
    try:
        mode = os.stat(path).st_mode
        if not allowed(mode):
            raise RaspFileError(path, _not_regular(mode))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise RaspFileError(path, missing) from None
    except OSError as e:
        raise RaspFileError(path, f"cannot read: {e.strerror or e}") from None
    mode = os.fstat(fd).st_mode
    if not allowed(mode):
        os.close(fd)
        raise RaspFileError(path, _not_regular(mode))
    return fd


def open_regular(path) -> BinaryIO:
    """`path` opened for reading in binary, after checking it is a regular
    file (O_NONBLOCK keeps the open itself from waiting on anything else)."""
    fd = _open_checked(Path(path), pipe=False)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _not_regular(mode: int) -> str:
    kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "not a plain file")
    return f"not a regular file ({kind}): refused"


def _too_large(path, size: int, limit: int) -> RaspFileError:
    return RaspFileError(path, f"too large: {_size(size)}, more than the {_size(limit)} "
                               "such a file may hold (not the file the project wrote?)")


def read_bytes(path, limit: int = MAX_JSON) -> bytes:
    """The bytes of the regular file `path`, refused when it holds more than
    `limit` (checked before reading and while reading: it may grow)."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        chunks, got = [], 0
        while size <= limit and got <= limit:      # in pieces: read(n) would allocate n bytes up front
            chunk = f.read(min(1 << 24, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        data = b"".join(chunks)
    if size > limit or len(data) > limit:
        raise _too_large(path, max(size, len(data)), limit)
    return data


def read_user_bytes(path, limit: int) -> bytes:
    """The bytes of a file the user named for a command to read once
    (`--config`, `--inputs`): a regular file as `read_bytes` reads it, or a
    pipe with a writer (`<(generate)`, `/dev/stdin`, a FIFO) read to its end,
    both refused past `limit` bytes.  "-" is the standard input."""
    if str(path) == "-":
        return _read_stdin(limit)
    path = Path(path)
    fd = _open_checked(path, pipe=True, missing="no such file")       # (a run's file is "missing")
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        os.close(fd)
        return read_bytes(path, limit)
    try:
        return _read_pipe(fd, path, limit)
    finally:
        os.close(fd)


def _read_stdin(limit: int) -> bytes:
    """The standard input ("-"): a pipe or a file through a descriptor of its
    own (/dev/fd/N: making the shell's shared one non-blocking would affect
    the shell), a terminal (or a stream in Python, sys.stdin replaced) read
    as it comes, to its end (Ctrl-D)."""
    try:
        fd = sys.stdin.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, ValueError, OSError):      # no descriptor: a stream of Python's
        fd, mode = None, 0
    if fd is not None and (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        try:
            return read_user_bytes(f"/dev/fd/{fd}", limit)
        except RaspFileError as e:          # named as the user gave it
            raise RaspFileError("stdin", e.message) from None
    stream = getattr(sys.stdin, "buffer", sys.stdin)
    data = stream.read(limit + 1) if stream is not None else b""
    data = data.encode("utf-8") if isinstance(data, str) else data
    if len(data) > limit:
        raise _too_large("stdin", len(data), limit)
    return data


def _read_pipe(fd: int, path: Path, limit: int) -> bytes:
    """A pipe read to its end without blocking: a read that finds no writer
    (b"", and none has written) waits up to PIPE_WRITER_WAIT for one to come,
    one that finds a silent writer (EAGAIN) up to PIPE_SILENCE for data."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    chunks: list = []
    got, writer = 0, False
    start = last = time.monotonic()
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:         # a writer holds the pipe and has not written (yet)
            writer, chunk = True, None
        if chunk:
            writer, last = True, time.monotonic()
            chunks.append(chunk)
            got += len(chunk)
            if got > limit:
                raise _too_large(path, got, limit)
            continue
        if chunk == b"" and writer:     # its writer wrote and closed it: the end
            return b"".join(chunks)
        now = time.monotonic()
        wait = PIPE_SILENCE - (now - last) if writer else PIPE_WRITER_WAIT - (now - start)
        if wait <= 0:
            raise RaspFileError(path, f"a pipe whose writer wrote nothing for {PIPE_SILENCE:g} s: gave up"
                                if writer else f"a FIFO with no writer (none came in {PIPE_WRITER_WAIT:g} s, "
                                               "or it closed without writing): refused")
        if any(ev & select.POLLHUP for _, ev in poller.poll(wait * 1000)):
            writer = True               # a writer came and went: the next read finds the end


def read_text(path, limit: int = MAX_JSON, encoding: str = "utf-8", pipe: bool = False) -> str:
    """The text of the regular file `path` (with `pipe`, of a file the user
    named, which may be a pipe: `read_user_bytes`)."""
    data = read_user_bytes(path, limit) if pipe else read_bytes(path, limit)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        raise RaspFileError("stdin" if str(path) == "-" else path, "not UTF-8 text (damaged?)") from None


def read_json(path, limit: int = MAX_JSON, finite: bool = False):
    """The JSON in `path`; a RaspFileError for a damaged or deeply nested
    file, and with `finite` for NaN or Infinity (which Python writes, but a
    report's figure must never be)."""
    text = read_text(path, limit)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise RaspFileError(path, f"not valid JSON ({e.__class__.__name__}: {str(e)[:80]}); "
                                  "the file is damaged or was cut short") from None
    where = nonfinite(doc) if finite else None
    if where is not None:
        raise RaspFileError(path, f"{where}: NaN or infinity, not a number a report can hold")
    return doc


def is_finite_number(x) -> bool:
    """A JSON number a figure may be: an int or a finite float, not a bool."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def nonfinite(doc, where: str = ""):
    """The key path ("a.b[2]") of the first NaN or infinity in a JSON document, or None."""
    stack = [(doc, where)]
    while stack:                    # no recursion: json.loads already bounded the depth
        x, at = stack.pop()
        if isinstance(x, float) and not math.isfinite(x):
            return at or "the document"
        if isinstance(x, dict):
            stack += [(v, f"{at}.{k}" if at else str(k)) for k, v in reversed(list(x.items()))]
        elif isinstance(x, list):
            stack += [(v, f"{at}[{i}]") for i, v in reversed(list(enumerate(x)))]
    return None
