"""Aggregates and sel_width over a selector: the dense reduction over the
[B, N, N] matrix (`dense_reduce`), and the fast rules (`RULES`) that
recognise the common selector shapes and give the same result in O(N) or
O(N log N) per sequence without building the matrix."""
from __future__ import annotations

import numpy as np

from .elementwise import PREDICATES
from .hosts import i64
from .ranges import I64_MAX, I64_MIN


def _trunc_div(s, c):
    """s / c truncated toward zero, exactly (c > 0)."""
    q = np.abs(s) // c
    return np.where(s < 0, -q, q)


def _finish(cnt, stat, red, default):
    """From the number of selected keys and their sum/max/min to the result."""
    if red == "width":
        return cnt
    has = cnt > 0
    val = stat
    if red == "mean":
        c = np.maximum(cnt, 1)
        if c.max() > 1:       # (at most one selected key: the mean is the sum)
            val = stat // c if stat.min() >= 0 else _trunc_div(stat, c)
    return np.where(has, val, default)


def _exact_sum(a, x):
    """sum over k of a[b, q, k] * x[b, k], exactly, via BLAS when floats are exact."""
    n = a.shape[-1]
    bound = max(abs(int(x.min())), abs(int(x.max()))) * n if x.size else 0
    for dtype, limit in ((np.float32, 2**24), (np.float64, 2**53)):
        if bound < limit:
            s = np.matmul(a.astype(dtype), x[:, :, None].astype(dtype))[:, :, 0]
            return np.rint(s).astype(np.int64)
    return np.einsum("bqk,bk->bq", a.astype(np.int64), i64(x))


def dense_reduce(a, x, red, default):
    cnt = np.count_nonzero(a, axis=2).astype(np.int64, copy=False)
    if red == "width":
        return cnt
    if red == "mean":
        stat = _exact_sum(a, x)
    else:
        # unselected keys hold the identity of x's own dtype (narrow: fast);
        # rows with nothing selected take the default in _finish
        info = np.iinfo(x.dtype)
        ident = x.dtype.type(info.min if red == "max" else info.max)
        masked = np.where(a, x[:, None, :], ident)
        stat = masked.max(axis=2) if red == "max" else masked.min(axis=2)
    return _finish(cnt, stat, red, default)


# ---- fast selector rules ----------------------------------------------------------------
#
# Each rule looks at a Select node (key, query, pred) and returns the
# aggregate's result, or None if it does not apply.  A rule must give exactly
# what dense_reduce gives at every valid position.  The first that applies wins.
#
# Most rules build on `_prefix`: the selector  A[i, j] = r[i] & m[j] & (j <= i)
# (a row mask times a key mask) reduces with running sums/maxima in O(N).

_IDENTITY = {"mean": 0, "max": I64_MIN, "min": I64_MAX, "width": 0}


def _prefix(run, red, x, m=None, r=None):
    """(count, stat) of A[i, j] = r[i] & m[j] & (j <= i); stat holds the
    reduction's identity where count is 0.  m, r: bool broadcastable to [B, N]
    (None: all true)."""
    shape = (run.B, run.N)
    if m is None:
        cnt = np.broadcast_to(run.pos + 1, shape)
    else:
        cnt = np.cumsum(np.broadcast_to(m, shape), axis=1, dtype=np.int64)
    stat = None
    if red != "width":
        ident = _IDENTITY[red]
        if red == "mean":
            stat = np.cumsum(x if m is None else np.where(m, x, 0), axis=1)
        else:
            acc = np.maximum if red == "max" else np.minimum
            stat = acc.accumulate(x if m is None else np.where(m, x, ident), axis=1)
        if r is not None:
            stat = np.where(r, stat, ident)
    if r is not None:
        cnt = np.where(r, cnt, 0)
    return cnt, stat


def _combine(parts, red):
    """Merge (count, stat) parts of a selector split into disjoint pieces."""
    cnt, stat = parts[0]
    for c, s in parts[1:]:
        cnt = cnt + c
        if red == "mean":
            stat = stat + s
        elif red == "max":
            stat = np.maximum(stat, s)
        elif red == "min":
            stat = np.minimum(stat, s)
    return cnt, stat


def _shift(run, x, s: int, red, default):
    """Row i selects exactly key i - s when 0 <= i - s: x shifted right by s."""
    B, N = run.B, run.N
    if red == "width":       # s < 0 selects nothing: key i - s lies after i
        return np.broadcast_to(((run.pos >= s) & (s >= 0)).astype(np.int64), (B, N))
    if s == 0:
        return run.sop(x)
    d = run.sop(default)
    if s < 0 or s >= N:
        return d
    x = run.sop(x)
    out = np.empty((B, N), dtype=np.result_type(x, d))
    out[:, s:] = x[:, :N - s]
    out[:, :s] = d[:, :s]
    return out


def _rule_index_eq(run, sel, x, red, default):
    """select(indices + c, q, eq): row i selects the single key j = q[i] - c
    when 0 <= j <= i -- a gather (a shift when q is indices + const)."""
    if sel.pred != "eq":
        return None
    c = run.index_offset(sel.key)
    if c is None:
        return None
    cq = run.index_offset(sel.query)
    if isinstance(c, int) and isinstance(cq, int):
        return _shift(run, x, c - cq, red, default)
    j = run.sop(np.subtract(i64(run.value(sel.query)), c))
    ok = (j >= 0) & (j <= run.pos)
    if red == "width":
        return ok.astype(np.int64)
    x = np.take_along_axis(x, np.clip(j, 0, run.N - 1), axis=1)
    return np.where(ok, x, default)


def _rule_always(run, sel, x, red, default):
    """select(_, _, always): every j <= i -- running sum / max / min."""
    if sel.pred != "always":
        return None
    return _finish(*_prefix(run, red, x), red, default)


def _rule_scalar_side(run, sel, x, red, default):
    """A scalar query makes the predicate a key mask m[j] = pred(k[j], c); a
    scalar key makes it a row mask r[i] = pred(c, q[i])."""
    qs, ks = run.scalar_of(sel.query), run.scalar_of(sel.key)
    if qs is None and ks is None:
        return None
    pred = PREDICATES[sel.pred]
    if ks is None:
        part = _prefix(run, red, x, m=pred(run.value(sel.key), qs))
    elif qs is None:
        part = _prefix(run, red, x, r=pred(ks, run.value(sel.query)))
    else:
        part = _prefix(run, red, x, r=np.asarray(pred(ks, qs)))
    return _finish(*part, red, default)


def _rule_index_window(run, sel, x, red, default):
    """select(indices + a, indices + b, lt/le): j <= i + e, a shifted prefix."""
    if sel.pred not in ("lt", "le"):
        return None
    ck, cq = run.index_offset(sel.key), run.index_offset(sel.query)
    if ck is None or cq is None or not (isinstance(ck, int) and isinstance(cq, int)):
        return None
    e = cq - ck - (1 if sel.pred == "lt" else 0)
    s = max(0, -e)        # row i selects keys 0 .. i - s
    cnt, stat = _prefix(run, red, x)
    cnt = _shift(run, cnt, s, "mean", 0)
    if stat is not None:
        stat = _shift(run, stat, s, "mean", _IDENTITY[red])
    return _finish(cnt, stat, red, default)


FEW_VALUES = 4          # distinct values below which per-value masks beat sorting


def _rule_few_values(run, sel, x, red, default):
    """Few distinct query (or key) values: split the selector by value; each
    piece is a row mask times a key mask (exact for any predicate)."""
    pred = PREDICATES[sel.pred]
    k, q = run.value(sel.key), run.value(sel.query)
    limit = FEW_VALUES if sel.pred == "eq" else max(FEW_VALUES, run.N // 8)
    qv = np.unique(q[run.valid])
    if len(qv) <= limit:
        parts = [_prefix(run, red, x, m=pred(k, v), r=(q == v)) for v in qv.tolist()]
        return _finish(*_combine(parts, red), red, default)
    kv = np.unique(k[run.valid])
    if len(kv) <= limit:
        parts = [_prefix(run, red, x, m=(k == u), r=pred(u, q)) for u in kv.tolist()]
        return _finish(*_combine(parts, red), red, default)
    return None


def _rule_eq_sorted(run, sel, x, red, default):
    """eq between two s-ops: order each input's keys by (value, position); the
    keys row i selects are then a contiguous run [lo, hi) of that order,
    starting at its value's bucket and ending at the last position <= i."""
    if sel.pred != "eq":
        return None
    B, N = run.B, run.N
    k, q = i64(run.value(sel.key)), i64(run.value(sel.query))
    rk, rq, U = _value_ranks(k, q, None if run.all_valid else run.valid)
    stride = N + 1
    if B * U * stride >= 2**62:
        return None
    it = np.int32 if B * U * stride < 2**31 else np.int64     # narrower: less memory traffic
    rk, rq = rk.astype(it), rq.astype(it)
    # a stable sort of each row by value keeps equal values in position order
    # (radix sort when the ranks fit in int16)
    order = np.argsort(rk.astype(np.int16) if U < 2**15 else rk, axis=1, kind="stable").astype(it)
    rows = np.arange(B, dtype=it)[:, None]
    bucket = rows * U + np.take_along_axis(rk, order, axis=1)      # (input, value)
    keys = (bucket * stride + order).ravel()                       # ascending
    qbucket = rows * U + rq
    hi = np.searchsorted(keys, qbucket * stride + run.pos.astype(it), side="right")
    if B * U <= 8 * B * N + 2**20:
        sizes = np.bincount(bucket.ravel(), minlength=B * U)
        lo = (np.cumsum(sizes) - sizes)[qbucket]
    else:
        lo = np.searchsorted(keys, qbucket * stride, side="left")
    cnt = hi - lo
    if red == "width":
        return cnt
    xs = np.take_along_axis(i64(x), order, axis=1).ravel()
    if red == "mean":
        csum = np.concatenate([[0], np.cumsum(xs)])
        stat = csum[hi] - csum[lo]
    else:
        running = _segment_running(xs, bucket.ravel(), red)
        if running is None:
            return None
        stat = running[np.maximum(hi - 1, 0)]
    return _finish(cnt, stat, red, default)


def _value_ranks(k, q, valid):
    """Ranks [B, N] for keys and queries such that equal values get equal
    ranks.  A query equal to no key gets rank U - 2, a padded key U - 1 (so
    it matches nothing).  valid: [B, N] bool, None if all are.
    Returns (key ranks, query ranks, U)."""
    kv = k if valid is None else k[valid]
    lo, hi = int(kv.min()), int(kv.max())
    span = hi - lo + 1
    if span <= 4 * k.shape[1] + 64:                  # compact values: offsets are ranks
        nk = span
        rk, rq = k - lo, np.where((q >= lo) & (q <= hi), q - lo, nk)
    else:
        uniq = np.unique(kv)
        nk = len(uniq)
        rk = np.minimum(np.searchsorted(uniq, k), nk - 1)
        rq = np.minimum(np.searchsorted(uniq, q), nk - 1)
        rq = np.where(uniq[rq] == q, rq, nk)
    return (rk if valid is None else np.where(valid, rk, nk + 1)), rq, nk + 2


def _segment_running(vals, seg, red):
    """Running max/min of `vals` restarting wherever `seg` (sorted) changes,
    as one accumulate over seg_number * span + value.  None if that overflows."""
    lo, hi = int(vals.min()), int(vals.max())
    span = hi - lo + 1
    sid = np.cumsum(np.concatenate([[False], seg[1:] != seg[:-1]]), dtype=np.int64)
    if (int(sid[-1]) + 1) * span >= 2**62:
        return None
    offset = (vals - lo) if red == "max" else (hi - vals)
    run = np.maximum.accumulate(sid * span + offset) - sid * span
    return run + lo if red == "max" else hi - run


RULES = (
    _rule_index_eq,         # shift_right, index_select
    _rule_always,           # maximum, minimum, running mean
    _rule_scalar_side,      # cumsum, has_seen(x, TOKEN), first_true
    _rule_index_window,     # strict / shifted prefixes over positions
    _rule_few_values,       # num_prev / has_seen on small alphabets, any predicate
    _rule_eq_sorted,        # firsts / lasts / num_prev on large alphabets
)
