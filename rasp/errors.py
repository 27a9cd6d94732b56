"""Errors users see.  Every one is printed without a traceback, exit status 2.

A `RaspError` located in a program prints as
`PATH:LINE:COL: error: MESSAGE`, the source line, and a caret under the column.
"""
from __future__ import annotations

from typing import Optional

from .ir import Loc

SHOWN_CHARS = 60           # longer user text (a token, a --param value) is shortened in messages
SHOWN_SOURCE = 200         # a source line is shown whole up to this many characters each side of the caret


def printable(text: str) -> str:
    """`text` with control, format and separator characters (all but the
    plain space) escaped (`\\x1b`, `\\u2028`): user text echoed in a message can neither
    move the cursor nor forge lines.  Tabs stay (the caret line expands them)."""
    if text.isprintable():
        return text
    return "".join(ch if ch == "\t" or ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
                   for ch in text)


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    """User text for a message: escaped, and cut in the middle when long."""
    text = printable(text)
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}…{text[-half:]} ({len(text)} characters)"


def _source_line(source: Optional[str], line: int) -> Optional[str]:
    if source is None:
        return None
    lines = source.split("\n")        # the parser's own notion of a line
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
        message = printable(self.message)
        if self.loc is None:
            return f"{self.severity}: {message}"
        head = f"{printable(self.loc.path)}:{self.loc.line}:{self.loc.column}: {self.severity}: {message}"
        text = _source_line(self.source, self.loc.line)
        if text is None:
            return head
        text = text.rstrip("\r").expandtabs(1)
        start = max(self.loc.column, 1) - 1
        before, after = text[:start], text[start:]
        if len(before) > SHOWN_SOURCE:      # a long line: show a window around the column
            before = "…" + before[-SHOWN_SOURCE:]
        if len(after) > SHOWN_SOURCE:
            after = after[:SHOWN_SOURCE] + "…"
        # escapes widen the line: the caret goes under the escaped column
        before, after = printable(before), printable(after)
        return f"{head}\n    {before}{after}\n    {' ' * len(before)}^"

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
        return f"{printable(place)}: error: {printable(self.message)}"


class RaspRuntimeError(RaspError):
    """A program fault found while running it on a particular input
    (division by zero, a loop variable read after a loop that ran 0 times,
    a limit exceeded).  `input_index` is the 0-based index in the batch."""

    def __init__(self, message: str, loc: Optional[Loc] = None, source: Optional[str] = None,
                 input_index: Optional[int] = None):
        self.input_index = input_index
        self.reason = message           # without the input's number: a caller that knows the input names it
        if input_index is not None:
            message = f"{message} (input {input_index + 1})"
        super().__init__(message, loc, source)


def _which_inputs(indices) -> str:
    numbers = [str(i + 1) for i in indices]
    return f"input {numbers[0]}" if len(numbers) == 1 else f"inputs {', '.join(numbers)}"


class RaspRequireError(RaspRuntimeError):
    """Inputs that break the program's input contract (`require` statements).
    `failures` is [(message, loc, [0-based input indices])], one entry per
    failed requirement, each listing every input that fails it."""

    def __init__(self, failures: list, source: Optional[str] = None):
        self.failures = failures
        message, loc, indices = failures[0]
        super().__init__(message, loc, source, indices[0])
        self.input_indices = sorted({i for _, _, idx in failures for i in idx})

    def format(self) -> str:
        return "\n".join(RaspError(f"input rejected: {message} ({_which_inputs(indices)})", loc,
                                   self.source).format()
                         for message, loc, indices in self.failures)


class RaspFileError(RaspError):
    """A missing, damaged or inconsistent file (a compiled-model or run
    directory): prints as `PATH: error: MESSAGE`."""

    def __init__(self, path, message: str):
        self.path = str(path)
        super().__init__(message)

    def format(self) -> str:
        return f"{printable(self.path)}: {self.severity}: {printable(self.message)}"
