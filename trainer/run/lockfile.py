"""Lock files of run directories, opened without following links.

`rasp train` holds OUT/.lock and `rasp compare` holds RUN_DIR/.compare.lock
(flock, exclusive, non-blocking) while they write the folder.  A lock file
is created or opened with O_NOFOLLOW, and anything that is not a plain file
of one link (a symbolic link, a hard link to another file, a FIFO, a
directory) is refused with a located error: the holder's note written into
it can never truncate or overwrite a file elsewhere.

A holder removes its lock file when it lets go (`release`); a process that
opened the old file just before and locks it afterwards notices that the
path no longer names what it locked (`acquire` compares device and inode)
and opens the new file instead, so two holders never both believe they hold
the lock.
"""
from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path
from typing import Optional

from rasp.errors import RaspFileError

NOTE_BYTES = 4096           # a holder's note read back for a "busy" message


class LockBusy(Exception):
    """Another process holds the lock; `holder` is the note it wrote."""

    def __init__(self, holder: str):
        super().__init__(holder)
        self.holder = holder


def _open(path: Path) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if os.path.islink(path):
            raise RaspFileError(path, "is a symbolic link; a lock file must be a plain file "
                                      "(remove the link and run again)") from None
        raise RaspFileError(path, f"cannot open the lock file: {e.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        what = "not a plain file" if not stat.S_ISREG(st.st_mode) else f"a file with {st.st_nlink} hard links"
        raise RaspFileError(path, f"is {what}; a lock file must be a plain file of its own "
                                  "(remove it and run again)")
    return fd


def _same_file(path: Path, fd: int) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def acquire(path, note: Optional[str] = None) -> int:
    """Open PATH (creating it, never through a link) and take its exclusive
    lock; returns the descriptor (inheritable by children only where the
    caller passes it on).  Raises LockBusy with the holder's note when
    another process holds it, RaspFileError when PATH is not a plain file."""
    path = Path(path)
    for _ in range(100):
        fd = _open(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, NOTE_BYTES, 0).decode(errors="replace").strip()
            os.close(fd)
            raise LockBusy(holder) from None
        if _same_file(path, fd):
            if note is not None:
                write_note(fd, note)
            return fd
        os.close(fd)                      # its holder removed it as we locked it: take the new one
    raise RaspFileError(path, "keeps being replaced while this process tries to lock it")


def write_note(fd: int, text: str):
    """Say who holds the lock (read back by a refused second process)."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode(), 0)


def release(path, fd: int, remove: bool = True):
    """Let go of the lock taken by `acquire`; with `remove`, the lock file
    goes too (while still locked, so no one holds the file being removed)."""
    try:
        if remove and _same_file(Path(path), fd):
            try:
                os.unlink(path)
            except OSError:
                pass
    finally:
        os.close(fd)
