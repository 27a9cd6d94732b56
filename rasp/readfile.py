"""Reading a file a user (or a damaged disk) may have replaced: a file of a
run, an export, a compiled folder, a results folder or an `--inputs` file.

Only a regular file is read (a link to one is followed); a FIFO, a device
(a link to /dev/zero) or a directory is refused before anything waits on it
or reads it, and a file is read with a size bound, so nothing is read whole
before its size is known.  Every failure is a `RaspFileError` naming the
file (exit status 2).  Shared by the packages above (model files, trainer
runs and exports, the results tools); no PyTorch here.
"""
from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import BinaryIO

from .errors import RaspFileError

MAX_JSON = 64 << 20          # a run's or a report's JSON file; the largest written is a few MB
MAX_LOG = 1 << 30            # a JSON-lines log (metrics.jsonl: a row per logged step of a long run)


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def open_regular(path) -> BinaryIO:
    """`path` opened for reading in binary, after checking it is a regular
    file.  The mode is looked at before the open (a FIFO's open would wait
    for a writer, a device's may act) and again on the open descriptor (the
    file may have been swapped in between); O_NONBLOCK keeps that open from
    waiting either way."""
    path = Path(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise RaspFileError(path, _not_regular(os.stat(path).st_mode))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise RaspFileError(path, "missing") from None
    except OSError as e:
        raise RaspFileError(path, f"cannot read: {e.strerror or e}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise RaspFileError(path, _not_regular(mode))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _not_regular(mode: int) -> str:
    kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "not a plain file")
    return f"not a regular file ({kind}): refused"


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
        raise RaspFileError(path, f"too large: {_size(max(size, len(data)))}, more than the {_size(limit)} "
                                  "such a file may hold (not the file the project wrote?)")
    return data


def read_text(path, limit: int = MAX_JSON, encoding: str = "utf-8") -> str:
    data = read_bytes(path, limit)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        raise RaspFileError(path, "not UTF-8 text (damaged?)") from None


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
