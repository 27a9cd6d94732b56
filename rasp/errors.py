"""Errors users see.  Every one is printed without a traceback, exit status 2.

A `RaspError` located in a program prints as
`PATH:LINE:COL: error: MESSAGE`, the source line, and a caret under the column.
"""
from __future__ import annotations

from typing import Optional

from .ir import Loc


def _source_line(source: Optional[str], line: int) -> Optional[str]:
    if source is None:
        return None
    lines = source.splitlines()
    if 1 <= line <= len(lines):
        return lines[line - 1]
    return None


class RaspError(Exception):
    """A problem in a program (syntax, names, types, limits, runtime)."""
    severity = "error"

    def __init__(self, message: str, loc: Optional[Loc] = None, source: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.source = source

    def format(self) -> str:
        if self.loc is None:
            return f"{self.severity}: {self.message}"
        head = f"{self.loc.path}:{self.loc.line}:{self.loc.column}: {self.severity}: {self.message}"
        text = _source_line(self.source, self.loc.line)
        if text is None:
            return head
        caret = " " * (max(self.loc.column, 1) - 1) + "^"
        return f"{head}\n    {text.expandtabs(1)}\n    {caret}"

    def __str__(self):
        return self.format()


class RaspWarning(RaspError):
    severity = "warning"


class RaspInputError(RaspError):
    """A bad input: names the input line (1-based) and the offending token."""

    def __init__(self, message: str, input_line: Optional[int] = None, token: Optional[str] = None,
                 where: str = "input"):
        self.input_line = input_line
        self.token = token
        self.where = where
        super().__init__(message)

    def format(self) -> str:
        place = self.where if self.input_line is None else f"{self.where}:{self.input_line}"
        return f"{place}: error: {self.message}"


class RaspRuntimeError(RaspError):
    """A program fault found while running it on a particular input
    (division by zero, a loop variable read after a loop that ran 0 times,
    a limit exceeded).  `input_index` is the 0-based index in the batch."""

    def __init__(self, message: str, loc: Optional[Loc] = None, source: Optional[str] = None,
                 input_index: Optional[int] = None):
        self.input_index = input_index
        if input_index is not None:
            message = f"{message} (input {input_index + 1})"
        super().__init__(message, loc, source)


class RaspFileError(RaspError):
    """A missing, damaged or inconsistent file (a compiled-model or run
    directory): prints as `PATH: error: MESSAGE`."""

    def __init__(self, path, message: str):
        self.path = str(path)
        super().__init__(message)

    def format(self) -> str:
        return f"{self.path}: {self.severity}: {self.message}"
