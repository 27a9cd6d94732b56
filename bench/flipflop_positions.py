"""Where a flip-flop run's reads go wrong (issue 28: the Transformer's last
read at twice the training length).

    python -m bench.flipflop_positions RUN_DIR [RUN_DIR ...] --splits test_256_p0.8 -n 1000

For each run (a `rasp train` directory) and split, every read (`r`) of every
example is scored like `rasp eval` scores it (same examples: seed 1234 and
the split's generator) and grouped by its position in the sequence (a
position at or past the training length was never seen in training) and by
how far back its latest write is.  Prints the accuracy per group, the last
read's accuracy (`last_read_acc`) and the same split's mean over all reads
(`acc`).

`--window W` is a diagnostic: it lets each position attend to the last W
positions only (a band on the causal mask, the weights unchanged), so with
W = the training length no query meets a key farther back than in training.
"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from trainer.models import blocks
from trainer.benchmark.evaluate import analysis_parser, each_split, predict_examples
from trainer.tasks.flipflop import W

ROOT = Path(__file__).resolve().parents[1]


def reads(model, task, examples, batch_size: int = 100) -> list:
    """(position of the `r`, tokens back to its latest `w`, last read?, right?) per read."""
    out = []
    for ex, p in predict_examples(model, task, examples, batch_size):
        seq = np.array(ex.input) - 1
        scored = [t for t, y in enumerate(ex.target) if y >= 0]
        last_w = -1
        writes = {}
        for t in range(0, len(seq), 2):
            if seq[t] == W:
                last_w = t
            writes[t] = last_w
        for t in scored:
            out.append((t, t - writes[t], t == scored[-1], int(p[t]) == ex.target[t]))
    return out


def limit_attention(window: int) -> None:
    """Every causal self-attention of trainer.models.blocks sees the last
    `window` keys only (query i attends to keys i - window < j <= i)."""
    full = blocks.attention_mask

    def banded(q_len, key_mask, causal, device):
        m = full(q_len, key_mask, causal, device)
        if not causal:
            return m
        k_len = key_mask.shape[1] if key_mask is not None else q_len
        i = torch.arange(q_len, device=device)[:, None] + (k_len - q_len)
        band = torch.arange(k_len, device=device)[None, :] > i - window
        return band[None, None] if m is None else m & band
    blocks.attention_mask = banded


def bucket(v: int, edges: list) -> str:
    for lo, hi in zip(edges, edges[1:]):
        if lo <= v < hi:
            return f"{lo}-{hi - 1}"
    return f">={edges[-1]}"


def report(rows: list, train_len: int) -> list:
    lines = []
    for title, key, edges in (("position of the read", 0, [0, train_len // 2, train_len, 3 * train_len // 2]),
                              ("tokens back to its write", 1, [0, 16, 32, 64, train_len])):
        groups = defaultdict(list)
        for r in rows:
            groups[bucket(r[key], edges)].append(r[3])
        lines.append(f"  {title}: " + ", ".join(
            f"{k} {np.mean(v):.3f} (n {len(v)})" for k, v in sorted(groups.items(), key=lambda kv: int(
                kv[0].lstrip('>=').split('-')[0]))))
    last = [r for r in rows if r[2]]
    late = [r[3] for r in last if r[0] >= train_len]
    lines.append(f"  all reads {np.mean([r[3] for r in rows]):.3f}; last read {np.mean([r[3] for r in last]):.3f} "
                 f"(n {len(last)}; its write >= {train_len} tokens back in {sum(r[1] >= train_len for r in last)})"
                 + (f"; last reads past position {train_len}: {np.mean(late):.3f}" if late else ""))
    return lines


def main(argv=None) -> int:
    p = analysis_parser(__doc__, "test_256_p0.8", 1000)
    p.add_argument("--train-length", type=int, default=128, help="T the runs trained at (cpu preset: 128)")
    p.add_argument("--window", type=int, default=None, help="attend to the last W positions only (diagnostic)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.window:
        limit_attention(args.window)
    for head, task, model, examples in each_split(args):
        print(head + (f", attention window {args.window}" if args.window else "") + ":")
        print("\n".join(report(reads(model, task, examples), args.train_length)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
