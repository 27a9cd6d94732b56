"""Text the user gives a run: input lines, integer tokens, `--param` values.

Only `\\n` (and `\\r\\n`) end an input line: `str.splitlines` would also split
on vertical tab, form feed, U+2028 and others, silently turning one input into
several.  Integers are checked for size before `int()` sees them, so a
5,000-digit token is a clear error rather than Python's int-str digit limit.
"""
from __future__ import annotations

import re
from typing import Optional

from .errors import RaspError, RaspInputError, shorten
from .readfile import read_text

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
INT_TEXT = re.compile(r"[+-]?\d+")
_MAX_DIGITS = 19          # every int64 has at most 19 digits
MAX_INPUTS_BYTES = 1 << 30   # an --inputs file: many inputs of up to --max-len tokens each


def split_lines(text: str) -> list:
    """Lines ended by \\n or \\r\\n (a final newline ends the last line)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def int64_of(text: str) -> Optional[int]:
    """The int64 value of an integer literal ('-12', '+7'), None when it does
    not fit in 64 bits.  Never hands a huge digit string to int()."""
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > _MAX_DIGITS:
        return None
    value = int(text)
    return value if INT64_MIN <= value <= INT64_MAX else None


def read_inputs(input_text, inputs_path: Optional[str]) -> tuple:
    """(where, [(line number or None, text)]) for `--input TEXT` or `--inputs FILE|-`."""
    if inputs_path is None:
        if isinstance(input_text, list):      # argparse turns the lone value "--" into []
            input_text = " ".join(input_text) or "--"
        return "input", [(None, input_text)]
    text = read_text(inputs_path, MAX_INPUTS_BYTES, pipe=True)     # a file, "-" or a pipe: <(generate)
    lines = split_lines(text)
    if not lines:
        raise RaspInputError("the inputs file is empty", where=inputs_path)
    return inputs_path, list(enumerate(lines, 1))


def api_inputs(inputs) -> list:
    """[(input number, text)] of the inputs given to a model in Python
    (`model(["1 0 > # #", ...])`): a list of texts, or of token lists."""
    if isinstance(inputs, (str, bytes)):
        raise TypeError("give a list of inputs, e.g. model([\"1 0 1 > # #\"]) (one answer per input)")
    out = []
    for i, item in enumerate(inputs, 1):
        if isinstance(item, (list, tuple)):
            item = " ".join(map(str, item))
        if not isinstance(item, str):
            raise TypeError(f"input {i} is a {type(item).__name__}: each input is a text or a list of tokens")
        out.append((i, item))
    if not out:
        raise RaspError("no inputs")
    return out


def parse_params(pairs) -> dict:
    """['n=4', ...] -> {'n': 4}; each value an int64."""
    params = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not INT_TEXT.fullmatch(value):
            raise RaspError(f"--param expects NAME=INT, got '{shorten(pair)}'")
        number = int64_of(value)
        if number is None:
            raise RaspError(f"--param {name}: the value {shorten(value)} does not fit in a 64-bit int "
                            f"({INT64_MIN} .. {INT64_MAX})")
        params[name] = number
    return params
