"""What counting runs predict on the phase-alignment tests, example by example
(issue 28: why different models score exactly the same on test_double_isi).

    python -m bench.counting_phase RUN_DIR [RUN_DIR ...] --splits test_double_isi -n 500

For each run (a `rasp train` directory) and split, every example is one ITI,
an ISI, a gap, a second ISI and a tail of zeros; this prints, per gap length
(and per first ITI with --by-iti), how many examples there are, the fraction
whose first and second offsets are predicted, and the model's most common
prediction around the second ISI (`.` = 0, `#` = 1, the input above it).
The examples are `rasp eval`'s (same seed, same generator), so the mean of
the per-example scores equals eval.json's offset_acc for that split and n.
"""
from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

import torch

from trainer.benchmark.evaluate import analysis_parser, each_split, predict_examples

ROOT = Path(__file__).resolve().parents[1]


def runs_of(x: list) -> list:
    """[(value, run length), ...] of a 0/1 list."""
    out = []
    for v in x:
        if out and out[-1][0] == v:
            out[-1][1] += 1
        else:
            out.append([v, 1])
    return out


def offset_hit(pred, end: int) -> bool:
    """An offset (docs/benchmarks.md §7): the last `on` input (position end)
    predicts 0 next and the one before it 1."""
    return int(pred[end - 1]) == 1 and int(pred[end]) == 0


def per_example(model, task, examples, batch_size: int = 100) -> list:
    """(first ITI, gap, first offset hit, second offset hit, window) per example."""
    rows = []
    for ex, p in predict_examples(model, task, examples, batch_size):
        x = [i - 1 for i in ex.input]
        (_, iti), (_, isi), (_, gap), (_, isi2), _ = runs_of(x)
        first, second = iti + isi - 1, iti + isi + gap + isi2 - 1
        lo, hi = iti + isi - 2, min(second + 3, len(x))
        window = ("".join("#" if v else "." for v in x[lo + 1:hi + 1]),     # the next inputs (targets)
                  "".join("#" if v else "." for v in p[lo:hi]))            # what the model predicts
        rows.append((iti, gap, offset_hit(p, first), offset_hit(p, second), window))
    return rows


def report(rows: list, by_iti: bool) -> list:
    groups = defaultdict(list)
    for iti, gap, a, b, w in rows:
        groups[(gap, iti) if by_iti else (gap,)].append((a, b, w))
    lines = [f"  {'gap' + (' iti' if by_iti else ''):<9} {'n':>4} {'1st':>6} {'2nd':>6}  target / most common prediction"]
    for key in sorted(groups):
        g = groups[key]
        (target, pred), k = Counter(w for _, _, w in g).most_common(1)[0]
        lines.append(f"  {' '.join(map(str, key)):<9} {len(g):>4} {sum(a for a, _, _ in g) / len(g):>6.3f} "
                     f"{sum(b for _, b, _ in g) / len(g):>6.3f}  {target}")
        lines.append(f"  {'':<9} {'':>4} {'':>6} {'':>6}  {pred}  ({k} of {len(g)})")
    n = len(rows)
    hits = sum(a + b for _, _, a, b, _ in rows)
    lines.append(f"  offset_acc = ({sum(a for _, _, a, _, _ in rows)} + {sum(b for _, _, _, b, _ in rows)}) "
                 f"/ {2 * n} = {hits / (2 * n):.3f}; distinct sequences {len({(r[0], r[1]) for r in rows})}")
    return lines


def main(argv=None) -> int:
    p = analysis_parser(__doc__, "test_double_isi", 500)
    p.add_argument("--by-iti", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    for head, task, model, examples in each_split(args):
        print(head + ":")
        print("\n".join(report(per_example(model, task, examples), args.by_iti)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
