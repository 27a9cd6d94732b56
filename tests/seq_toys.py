"""Tiny comparison tasks (SeqTask) for the trainer's tests: fast to learn,
with labels computed here independently of the trainer."""
from __future__ import annotations

from trainer.tasks.base import Example, SeqTask, Split


def _lengths(rng, params, n):
    return rng.integers(params["lo"], params["hi"] + 1, size=n)


def _parity(rng, params, n):
    out = []
    for L in _lengths(rng, params, n):
        bits = rng.integers(0, 2, size=int(L)).tolist()
        acc, tgt = 0, []
        for i, b in enumerate(bits):
            acc ^= b
            # score only every `every`-th position (a mask the metrics must respect)
            tgt.append(acc if i % params.get("every", 1) == 0 or i == len(bits) - 1 else -1)
        out.append(Example([b + 1 for b in bits], tgt))
    return out


def _sum3(rng, params, n):
    out = []
    for L in _lengths(rng, params, n):
        xs = rng.integers(0, 3, size=int(L)).tolist()
        out.append(Example([x + 1 for x in xs], sum(xs) % 3, group=int(L) % 2))
    return out


def _pair(rng, params, n):
    out = []
    for L in _lengths(rng, params, n):
        a = rng.integers(0, 2, size=int(L)).tolist()
        b = rng.integers(0, 2, size=int(rng.integers(params["lo"], params["hi"] + 1))).tolist()
        out.append(Example([x + 1 for x in a], int(sum(a) % 2 == sum(b) % 2), input2=[x + 1 for x in b]))
    return out


def _splits(lo, hi, long_lo, long_hi, **extra):
    return {"train": Split("train", {"lo": lo, "hi": hi, **extra}, 1000),
            "valid": Split("valid", {"lo": lo, "hi": hi, **extra}, 200),
            "long": Split("long", {"lo": long_lo, "hi": long_hi, **extra}, 200)}


TOY_PARITY = SeqTask("toy_parity", "per_position", ("0", "1"), ("0", "1"), _splits(2, 6, 10, 12, every=2), _parity,
                     metrics=("token_acc", "seq_acc", "last_read_acc"), family="toy", train_range=(2, 6))
TOY_SUM = SeqTask("toy_sum", "classify", ("0", "1", "2"), ("0", "1", "2"), _splits(2, 6, 10, 12), _sum3,
                  metrics=("acc",), family="toy", train_range=(2, 6))
TOY_PAIR = SeqTask("toy_pair", "pair", ("0", "1"), ("differ", "same"), _splits(2, 5, 8, 9), _pair,
                   metrics=("acc",), family="toy", train_range=(2, 5))
TOYS = (TOY_PARITY, TOY_SUM, TOY_PAIR)


def register_toys():
    from trainer.tasks import TASKS
    for t in TOYS:
        TASKS[t.name] = t
