"""The element-wise operators of n-RASP-L on Python ints: constant folding
(rasp/lower.py) and the value tables the compiler writes into weights.  The
interpreter's NumPy versions (rasp/interpreter/elementwise.py) have the same
names and agree on every int64 value (tests/test_interpreter.py checks it).
This module imports only typing names, so `rasp check` loads no NumPy."""
from typing import Any, Callable

PYTHON: dict[str, Callable[..., Any]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "neg": lambda a: -a,
    "eq": lambda a, b: int(a == b), "ne": lambda a, b: int(a != b),
    "lt": lambda a, b: int(a < b), "le": lambda a, b: int(a <= b),
    "gt": lambda a, b: int(a > b), "ge": lambda a, b: int(a >= b),
    "bitand": lambda a, b: a & b, "bitor": lambda a, b: a | b, "bitxor": lambda a, b: a ^ b,
    "invert": lambda a: ~a, "and": lambda a, b: int(bool(a) and bool(b)),
    "or": lambda a, b: int(bool(a) or bool(b)), "not": lambda a: int(not a),
    "min": min, "max": max, "abs": abs, "where": lambda c, x, y: x if c != 0 else y,
}
