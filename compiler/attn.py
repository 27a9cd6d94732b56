"""Attention-head constructions for select + aggregate / sel_width.

Scores (attention scale 1, so these are logits):
  selected key      SEL   (+ GAMMA * rank of the value for max/min)
  BOS               SEL - BOS_GAP   (SEL for sel_width: BOS counts as one key)
  unselected key    <= SEL - 2*BOS_GAP
Categorical predicates are a 0/1 table between one-hot key and query; numeric
equality uses -(k - q)^2 = 2kq - k^2 - q^2 built from value and square forms,
which works at any length (no position table).
"""
from __future__ import annotations

import math

from .basis import NOTBOS, ONE, lin_add, lin_scale

SEL = 40.0
BOS_GAP = 20.0
EQ_GAP = 40.0        # score drop for |k - q| = 1 in numeric equality
GAMMA = 20.0         # score per rank step for max/min

PREDS = {
    "eq": lambda k, q: k == q, "ne": lambda k, q: k != q, "lt": lambda k, q: k < q,
    "le": lambda k, q: k <= q, "gt": lambda k, q: k > q, "ge": lambda k, q: k >= q,
    "always": lambda k, q: True,
}


STRICT = {"le": "lt", "ge": "gt"}


def numeric_eq_exact(magnitudes) -> bool:
    """The score SEL - EQ_GAP (k - q)^2 is summed from terms of size EQ_GAP M^2
    (M = largest |k|, |q|); its float32 rounding (with the squares' own, about
    8 eps EQ_GAP M^2 in all) must stay below 5, far inside the 20-logit gaps
    between selected keys, BOS and unselected keys.  M <= 362: every index up
    to --max-len 90; wider numbers are compared through one-hot codes."""
    m = max(magnitudes)
    return 8 * 2.0 ** -23 * EQ_GAP * m * m < 5.0


# float32 roundings in a rotary equality score, in units of 2^-24 R (R = rot_scale):
# the features (4), the query's rotation by a constant offset (4), a head's copy
# of a key's features (8: softmax leakage and the weighted sum), the three products
# and their sum (12), with margin
ROT_ROUNDINGS = 32


def rot_scale(period: int) -> float:
    """R with R (1 - cos(2 pi / P)) = EQ_GAP: the drop for |k - q| = 1."""
    return EQ_GAP / (1.0 - math.cos(2.0 * math.pi / period))


def rot_eq_exact(period: int) -> bool:
    """The rotary equality score SEL - R + R cos(2 pi (k - q) / P) is summed
    from terms of size R; its float32 rounding must stay below 5 logits, as
    numeric_eq_exact's.  Keys with 1 <= |k - q| <= P - 1 score at most
    SEL - EQ_GAP; so a period up to about 1,130: positions to design length
    about 1,070 (numeric_eq_exact's quadratic score stops at 362)."""
    return ROT_ROUNDINGS * 2.0 ** -24 * rot_scale(period) < 5.0


def score_rows(kind, k, q, pred, sel):
    """(q rows, k rows) giving score `sel` to selected real keys and <= sel -
    EQ_GAP (numeric) or 0 (categorical) to the others."""
    if kind == "always":
        return [lin_scale(NOTBOS, sel)], [{ONE: 1.0}]
    if kind == "cat":
        test = PREDS[pred]
        if len(k.vals) <= len(q.vals):          # key side one-hot
            qs = [lin_add(*[(sel, ql) for qv, ql in q.vals.items() if test(kv, qv)]) for kv in k.vals]
            ks = [kl for kl in k.vals.values()]
        else:
            qs = [lin_scale(ql, sel) for ql in q.vals.values()]
            ks = [lin_add(*[kl for kv, kl in k.vals.items() if test(kv, qv)]) for qv in q.vals]
        return qs, ks
    if kind == "digits":
        # k, q: [high, low] one-hot digits (one base on both sides): sel per
        # matching digit, minus sel, so sel when both match, <= 0 otherwise
        qs, ks = [], []
        for kd, qd in zip(k, q):
            dq, dk = score_rows("cat", kd, qd, "eq", sel)
            qs += dq
            ks += dk
        qs.append(lin_scale(NOTBOS, -sel))
        ks.append({ONE: 1.0})
        return qs, ks
    if kind == "digit_same":
        # k, q: [high, low] digits: high digits equal and pred on the low ones
        # (sel per condition, minus sel: sel when both hold, <= 0 otherwise)
        q1, k1 = score_rows("cat", k[0], q[0], "eq", sel)
        q2, k2 = score_rows("cat", k[1], q[1], pred, sel)
        return q1 + q2 + [lin_scale(NOTBOS, -sel)], k1 + k2 + [{ONE: 1.0}]
    if kind == "digit_beyond":
        # pred (made strict) on the high digits alone
        return score_rows("cat", k[0], q[0], STRICT.get(pred, pred), sel)
    if kind == "number digits":
        # k, q: [h, l] numbers with squares: sel - EQ_GAP ((h_k - h_q)^2 + (l_k - l_q)^2)
        qs, ks = [], []
        for i, (kd, qd) in enumerate(zip(k, q)):
            dq, dk = score_rows("num", kd, qd, "eq", sel if i == 0 else 0.0)
            qs += dq
            ks += dk
        return qs, ks
    if kind == "rot":
        # k = (cos, sin), q = (cos, sin, R) forms of the angles 2 pi v / P, |k - q| < P:
        # sel - R + R cos(2 pi (k - q) / P): sel at k = q, <= sel - EQ_GAP elsewhere
        r = q[2]
        qs = [lin_scale(q[0], r), lin_scale(q[1], r), lin_scale(NOTBOS, sel - r)]
        ks = [k[0], k[1], {ONE: 1.0}]
        return qs, ks
    # numeric equality: sel - EQ_GAP * (k - q)^2
    b = EQ_GAP
    qs = [lin_scale(q.numeric(), 2 * b), lin_scale(NOTBOS, -b), lin_add((-b, q.square()), (sel, NOTBOS))]
    ks = [k.numeric(), k.square(), {ONE: 1.0}]
    return qs, ks


def head(kind, k, q, pred, values, v_bos, rank=None, rank_span=0.0, width=False):
    """Fill an attention op's rows.  values: list of value forms, v_bos: their
    values at BOS (= the default); rank: form ranking keys for max/min."""
    if rank is not None:
        sel = GAMMA * rank_span * 2.0 + 2 * BOS_GAP + SEL
    else:
        sel = SEL
    qs, ks = score_rows(kind, k, q, pred, sel)
    if rank is not None:
        qs.append(lin_scale(NOTBOS, GAMMA))
        ks.append(rank)
    bos = sel if width else sel - BOS_GAP
    qs.append(lin_scale(NOTBOS, bos))
    ks.append({})
    k_bos = [0.0] * (len(ks) - 1) + [1.0]
    if rank is not None:
        # BOS's rank row must be 0 (its score is set by the BOS row alone)
        pass
    return dict(q=qs, k=ks, k_bos=k_bos, v=list(values), v_bos=list(v_bos))
