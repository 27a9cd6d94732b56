"""The element-wise operators on int64 arrays: the NumPy side of
rasp/operators.py's table, by the same names (floordiv and mod are not here:
a zero divisor is an error the run reports, `Run.divide`)."""
from typing import Any, Callable

import numpy as np


def logical(x):
    return np.not_equal(x, 0)


def where(c, x, y):
    """where(c, x, y).  np.where is branchy and slow on unpredictable
    conditions; for narrow ints a bit mask is much faster."""
    dtype = np.result_type(x, y)
    if dtype.itemsize > 2 or np.ndim(c) == 0:
        return np.where(logical(c), x, y)
    mask = np.negative(logical(c).view(np.int8), dtype=dtype)      # 0 or -1 (all ones)
    return np.bitwise_xor(y, np.bitwise_and(np.bitwise_xor(x, y), mask))


NUMPY: dict[str, Callable[..., Any]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "neg": np.negative,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
    "bitand": np.bitwise_and, "bitor": np.bitwise_or, "bitxor": np.bitwise_xor,
    "invert": np.invert,
    "and": lambda a, b: logical(a) & logical(b),
    "or": lambda a, b: logical(a) | logical(b),
    "not": lambda a: np.equal(a, 0),
    "min": np.minimum, "max": np.maximum, "abs": np.abs,
    "where": where,
}

# select predicates pred(key, query): lt selects the keys with key < query
PREDICATES = {name: NUMPY[name] for name in ("eq", "ne", "lt", "le", "gt", "ge")}
# the host (per-input int) operators that may overflow int64, checked by the interpreter
HOST_BINARY = {name: NUMPY[name] for name in ("add", "sub", "mul", "min", "max")}
