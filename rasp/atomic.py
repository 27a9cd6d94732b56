"""Writing into a directory a user (or a damaged disk) may have changed:
a file is replaced atomically through a fresh temporary file (created with
O_EXCL, so a link planted under any name is never written through), and a
log is appended to only when it is a plain file, never through a link.
Shared by the packages above (model manifests, trainer checkpoints, `rasp
compare` records); no PyTorch here."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def fsync_dir(path: Path):
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def write_bytes_atomic(path, data: bytes):
    """Replace `path` with `data` (a link at `path` is replaced, not followed)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    fsync_dir(path.parent)


def write_text_atomic(path, text: str):
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path, obj, indent: int = 2):
    write_text_atomic(path, json.dumps(obj, indent=indent, sort_keys=True))


def open_append(path):
    """A binary file object appending to `path` (created if absent); OSError
    when it is a link (ELOOP) or not a plain file."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    import stat
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path}: not a plain file")
    return os.fdopen(fd, "ab")
