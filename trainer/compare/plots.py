"""Report plots: accuracy against length per model (mean over the finished
seeds), and depth / iterations against length for the models whose eval
results carry those stats (halting, implicit and confidence-stopped looped
models)."""
from __future__ import annotations

import io
import math
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from rasp.errors import RaspFileError  # noqa: E402
from rasp import atomic  # noqa: E402

DEPTH_STATS = ("depth", "iterations")


def _series(results: list, getter) -> dict:
    """{(model entry, eval): {length: [values over seeds]}}"""
    out: dict = {}
    for r in results:
        if r.status != "finished":
            continue
        for ev, splits in r.evals.items():
            for split, data in splits.items():
                for L, v in getter(data).items():
                    try:
                        length = int(float(L))
                    except (ValueError, OverflowError):     # an edited file: not a length
                        continue
                    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                        out.setdefault((split, r.spec.model_entry, ev), {}).setdefault(length, []).append(v)
    return out


def _label(suite, key) -> str:
    """Model label, with the eval's name when the suite has several evals."""
    label = suite.model(key[1]).label
    return f"{label} [{key[2]}]" if len(suite.evals) > 1 else label


def _metric_for(task_entry: str, tables: list, results: list) -> str:
    for t in tables:
        for row in t["rows"]:
            for c in row["cells"]:
                a = c.get("attrs") or {}
                if a.get("task") == task_entry and a.get("metric"):
                    return a["metric"]
    for r in results:
        for splits in r.evals.values():
            for data in splits.values():
                for row in data.get("by_length", {}).values():
                    if row:
                        return next(iter(row))
    return "accuracy"


def _plot(series: dict, labels: dict, path: Path, title: str, ylabel: str, train_max=None, unit_range=True):
    fig, ax = plt.subplots(figsize=(6.5, 4))
    if train_max:
        ax.axvline(train_max + 0.5, color="0.4", ls="--", label="longest training length")
    colors = plt.get_cmap("tab20").colors if len(series) > 10 else [None]   # > 10 lines: 20 colours
    for i, (key, pts) in enumerate(sorted(series.items())):
        color = colors[i % len(colors)]
        xs = sorted(pts)
        ys = [sum(pts[x]) / len(pts[x]) for x in xs]
        ax.plot(xs, ys, marker="o", ms=3, label=labels[key], color=color)
    ax.set_xlabel("length")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))     # lengths are integers
    ax.set_ylabel(ylabel)
    if unit_range:
        ax.set_ylim(-0.03, 1.03)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic.write_bytes_atomic(path, buf.getvalue())       # a link planted at `path` is replaced, not followed


def suite_plots(out: Path, suite, preset: str, results: list, tables: list) -> list:
    pdir = Path(out) / "plots"
    made = []

    def per_split(series: dict, task: str, quantity: str, train_max, unit_range: bool):
        """One plot per split of `series` ({(split, run key): {length: value}})."""
        for split in sorted({k[0] for k in series}):
            ser = {k: v for k, v in series.items() if k[0] == split and len(v) > 1}
            if not ser:
                continue
            if pdir.is_symlink() or (pdir.exists() and not pdir.is_dir()):
                raise RaspFileError(pdir, "is not a directory (a link or a file); remove it to draw the plots")
            pdir.mkdir(exist_ok=True)
            name = f"{suite.name}_{preset}_{task}_{split}_{quantity}.png"
            labels = {k: _label(suite, k) for k in ser}
            title = f"{suite.name} / {task} / {split}: {quantity} vs length ({preset})"
            _plot(ser, labels, pdir / name, title, quantity, train_max, unit_range=unit_range)
            made.append({"title": title, "path": f"plots/{name}"})

    for t in suite.tasks:
        res = [r for r in results if r.spec.task_entry == t.name]
        if not res:
            continue
        metric = _metric_for(t.name, tables, res)
        acc = _series(res, lambda d: {L: row.get(metric) for L, row in d.get("by_length", {}).items()})
        train_max = next((d.get("train_max_n") for r in res if r.status == "finished"
                          for s in r.evals.values() for d in s.values() if d.get("train_max_n")), None)
        per_split(acc, t.name, metric, train_max, unit_range=True)
        for stat in DEPTH_STATS:
            dep = _series(res, lambda d: d.get("stats", {}).get(stat, {}).get("by_length", {}))
            per_split(dep, t.name, stat, train_max, unit_range=False)
    return made
