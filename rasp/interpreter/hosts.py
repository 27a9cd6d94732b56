"""Host values of a padded batch: params and loop counts as [B] int64 arrays,
and the int64 arithmetic the whole interpreter shares (`int64_overflow`,
`i64`).  Division by zero and int64 overflow in a host expression are
errors, raised only for the inputs that need the value."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import RaspError, RaspRuntimeError
from ..ir import HostExpr, ProgramIR
from .elementwise import HOST_BINARY


def pad_batch(batch: list):
    """Right-pad token lists into ([B, N] int64 tokens, [B] lengths)."""
    lengths = np.array([len(x) for x in batch], dtype=np.int64)
    if (lengths == lengths[0]).all():
        return np.array(batch, dtype=np.int64).reshape(len(batch), -1), lengths
    tokens = np.zeros((len(batch), int(lengths.max())), dtype=np.int64)
    for b, x in enumerate(batch):
        tokens[b, :len(x)] = x
    return tokens, lengths


def i64(x):
    """`x` as an int64 array (no copy when it is one)."""
    return np.asarray(x).astype(np.int64, copy=False)


def check_param_names(ir: ProgramIR, overrides) -> None:
    unknown = set(overrides or ()) - set(ir.params)
    if unknown:
        declared = ", ".join(ir.params) or "none"
        raise RaspError(f"unknown param '{sorted(unknown)[0]}' (the program declares: {declared})")


DIVISION_BY_ZERO, OVERFLOW = 1, 2       # host error codes, per input
HOST_ERRORS = {DIVISION_BY_ZERO: "division by zero",
               OVERFLOW: "integer overflow: the result does not fit in a 64-bit int"}
OVERFLOW_MESSAGE = HOST_ERRORS[OVERFLOW]


def _first_error(a, b):
    """Merge [B] error codes (None: no error anywhere); the first one wins."""
    if a is None:
        return b
    if b is None:
        return a
    return np.where(a != 0, a, b)


class HostValues:
    """Host expressions (params, loop counts) of a padded batch as [B] int64
    arrays, cached.  The interpreter and compiled models both use it.
    Division by zero and int64 overflow are errors, reported only for the
    inputs that need the value (`checked(..., rows)`)."""

    def __init__(self, ir: ProgramIR, tokens: np.ndarray, lengths: np.ndarray, overrides: dict,
                 strict: bool = True):
        """strict=False: a value in error is 0 instead of raised (`prefix_values`)."""
        check_param_names(ir, overrides)
        self.ir, self.tokens, self.lengths = ir, tokens, lengths
        self.valid = np.arange(tokens.shape[1])[None, :] < lengths[:, None]
        self.cache: dict = {}
        self.params: dict = {}      # filled in declaration order: a param reads only earlier ones
        everyone = np.ones(len(lengths), dtype=bool)
        for name, p in ir.params.items():
            if name in overrides:
                self.params[name] = np.full(len(lengths), int(overrides[name]), dtype=np.int64)
            else:
                self.params[name] = self.checked(p.expr, p.loc, everyone) if strict else self.or_zero(p.expr)

    def or_zero(self, e: HostExpr) -> np.ndarray:
        """Values of `e`, 0 where it is in error."""
        v, err = self.value(e)
        return v if err is None else np.where(err != 0, 0, v)

    def checked(self, e: HostExpr, loc, rows: np.ndarray) -> np.ndarray:
        """Values of `e`; an error in it is raised for the first input in `rows`."""
        v, err = self.value(e)
        if err is not None:
            bad = (err != 0) & rows
            if bad.any():
                b = int(np.argmax(bad))
                raise RaspRuntimeError(HOST_ERRORS[int(err[b])], loc=loc, source=self.ir.source,
                                       input_index=b)
        return v

    def value(self, e: HostExpr):
        """(values, [B] error codes of `e` or None when none), cached."""
        try:
            return self.cache[e]
        except KeyError:
            pass
        op, a = e.op, e.args
        zero = None
        if op == "lit":
            v = np.full(len(self.lengths), a[0], dtype=np.int64)
        elif op == "param":
            if a[0] not in self.params:      # the lowering lets a param read only earlier ones
                raise RaspError(f"param '{a[0]}' is read before it is computed")
            v = self.params[a[0]]
        elif op == "len":
            v = self.lengths
        elif op in ("count", "count_before"):
            hit = (self.tokens == a[0]) & self.valid
            if op == "count":
                v = hit.sum(axis=1)
            else:
                v = np.where(hit.any(axis=1), hit.argmax(axis=1), self.lengths)
        elif op == "neg":
            x, zero = self.value(a[0])
            with np.errstate(all="ignore"):
                v = -x
            zero = _first_error(zero, _codes(int64_overflow("neg", [x], v)))
        else:
            (x, zx), (y, zy) = self.value(a[0]), self.value(a[1])
            zero = _first_error(zx, zy)
            with np.errstate(all="ignore"):
                if op in ("floordiv", "mod"):
                    z = y == 0
                    if z.any():
                        zero = _first_error(zero, z.astype(np.int8) * DIVISION_BY_ZERO)
                        y = np.where(z, 1, y)
                    v = np.floor_divide(x, y) if op == "floordiv" else np.mod(x, y)
                else:
                    v = HOST_BINARY[op](x, y)
            zero = _first_error(zero, _codes(int64_overflow(op, [x, y], v)))
        self.cache[e] = (v, zero)
        return v, zero


def _codes(overflow):
    return None if overflow is None or not overflow.any() else overflow.astype(np.int8) * OVERFLOW


_MIN = np.iinfo(np.int64).min


def int64_overflow(op: str, args: list, out):
    """Exactly where int64 `op` wrapped: bool array (broadcast shape of
    `args`), or None when `op` cannot overflow.  `out` is the wrapped result."""
    if op == "add":
        x, y = args
        return ((x ^ out) & (y ^ out)) < 0
    if op == "sub":
        x, y = args
        return ((x ^ y) & (x ^ out)) < 0
    if op in ("neg", "abs"):
        return np.equal(args[0], _MIN)
    if op == "floordiv":
        x, y = args
        return np.equal(x, _MIN) & np.equal(y, -1)
    if op == "mul":
        x, y = args
        with np.errstate(all="ignore"):
            back = np.floor_divide(out, np.where(np.equal(x, 0), 1, x))
        return (np.not_equal(x, 0) & np.not_equal(back, y)) | (np.equal(x, -1) & np.equal(y, _MIN))
    return None


def host_values(ir: ProgramIR, batch: list, e: HostExpr, loc=None, params: Optional[dict] = None) -> np.ndarray:
    """[B] values of host expression `e` (e.g. a loop count) on raw inputs."""
    tokens, lengths = pad_batch(batch)
    hosts = HostValues(ir, tokens, lengths, params or {})
    return hosts.checked(e, loc, np.ones(len(batch), dtype=bool))


def prefix_values(ir: ProgramIR, batch: list, e: HostExpr, params: Optional[dict] = None) -> list:
    """Per input x, [len(x)] values of host expression `e` on each prefix x[:i+1]
    (0 where it is in error there: a prefix need not satisfy the program's contract)."""
    if not batch:
        return []
    tokens, lengths = pad_batch(batch)
    rows = np.repeat(np.arange(len(batch)), lengths)                     # one row per prefix
    ends = np.concatenate([np.arange(1, n + 1) for n in lengths.tolist()])
    hosts = HostValues(ir, tokens[rows], ends, params or {}, strict=False)
    return np.split(hosts.or_zero(e), np.cumsum(lengths)[:-1])
