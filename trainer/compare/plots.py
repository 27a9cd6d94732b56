"""Report plots: accuracy against length per model (mean over the finished
seeds, ± standard error band), and depth / iterations against length for the
models whose eval results carry those stats (halting, implicit and
confidence-stopped looped models).  Legends use the report tables' names, the
Okabe-Ito colour-blind-safe palette, at most eight lines per panel (more
series: small multiples on shared axes), and sit outside the data."""
from __future__ import annotations

import math
import statistics
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from rasp.errors import RaspFileError  # noqa: E402
from trainer.run.plots import save_figure  # noqa: E402

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


def legend_names(suite, tables: list) -> dict:
    """{(model entry, eval): the name the report's tables give it}, so that a
    plot's legend reads as the table does ("No input injection, oracle", not
    the model entry's label); the entry's label (and eval) where no table
    names it."""
    names: dict = {}
    for t in tables:
        by_columns = any("model" in (c.get("attrs") or {}) for c in t["columns"])
        for row in t["rows"]:
            for col, cell in zip(t["columns"], row["cells"]):
                a = cell.get("attrs") or {}
                if not a.get("model"):
                    continue
                ev = a.get("eval") or suite.evals_for(suite.model(a["model"]))[0].name
                names.setdefault((a["model"], ev), col["label"] if by_columns else row["label"])
    return names


def table_series(series: dict, names: dict) -> dict:
    """The series of `series` ({(split, model entry, eval): ...}) that a table
    names, so that every legend entry is a row of the report; all of them
    where no table names any."""
    return {k: v for k, v in series.items() if not names or k[1:] in names}


def _label(suite, key, names: dict) -> str:
    if (key[1], key[2]) in names:
        return names[(key[1], key[2])]
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


# Okabe & Ito (2008), "Color universal design": eight colours told apart with every common colour-vision deficiency
OKABE_ITO = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
MAX_SERIES = 8           # lines per panel: more go to further panels (small multiples)


def panels(keys: list, per_panel: int = MAX_SERIES) -> list:
    """Split the series into the fewest panels of at most `per_panel` lines,
    as evenly as possible (11 lines: 6 + 5, not 8 + 3)."""
    n = max(1, math.ceil(len(keys) / per_panel))
    size = math.ceil(len(keys) / n)
    return [keys[i:i + size] for i in range(0, len(keys), size)]


def _plot(series: dict, labels: dict, path: Path, title: str, ylabel: str, train_max=None, unit_range=True):
    """Mean over seeds per length with a ± standard error band, at most
    MAX_SERIES lines per panel, each panel's legend to its right (outside the data)."""
    order = list(dict.fromkeys(labels.values()))          # the tables' row order
    groups = panels(sorted(series, key=lambda k: order.index(labels[k])))
    fig, axes = plt.subplots(len(groups), 1, figsize=(7.5, 2.9 * len(groups)), sharex=True, sharey=True,
                             squeeze=False)
    for ax, keys in zip(axes[:, 0], groups):
        if train_max:
            ax.axvline(train_max + 0.5, color="0.5", ls="--", lw=1, label="longest training length")
        for i, key in enumerate(keys):
            pts = series[key]
            xs = sorted(pts)
            means = [sum(pts[x]) / len(pts[x]) for x in xs]
            ses = [statistics.stdev(pts[x]) / math.sqrt(len(pts[x])) if len(pts[x]) > 1 else 0.0 for x in xs]
            seeds = min(len(pts[x]) for x in xs)
            color = OKABE_ITO[i % len(OKABE_ITO)]
            ax.plot(xs, means, marker=MARKERS[i % len(MARKERS)], ms=3.5, lw=1.4, color=color,
                    label=labels[key] + (" (1 seed)" if seeds == 1 else ""))
            if any(ses):
                ax.fill_between(xs, [m - e for m, e in zip(means, ses)], [m + e for m, e in zip(means, ses)],
                                color=color, alpha=0.18, lw=0)
        ax.set_ylabel(ylabel)
        if unit_range:
            ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)
    axes[-1, 0].set_xlabel("length")
    axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))     # lengths are integers
    axes[0, 0].set_title(title + ("" if len(groups) == 1 else f" ({len(groups)} panels, shared axes)")
                         + "\nmean over seeds, band = ± standard error", fontsize=9)
    save_figure(fig, path, dpi=110, bbox_inches="tight")


def suite_plots(out: Path, suite, preset: str, results: list, tables: list) -> list:
    pdir = Path(out) / "plots"
    made = []
    names = legend_names(suite, tables)

    def per_split(series: dict, task: str, quantity: str, train_max, unit_range: bool):
        """One plot per split of `series` ({(split, run key): {length: value}})."""
        series = table_series(series, names)
        for split in sorted({k[0] for k in series}):
            ser = {k: v for k, v in series.items() if k[0] == split and len(v) > 1}
            if not ser:
                continue
            if pdir.is_symlink() or (pdir.exists() and not pdir.is_dir()):
                raise RaspFileError(pdir, "is not a directory (a link or a file); remove it to draw the plots")
            pdir.mkdir(exist_ok=True)
            name = f"{suite.name}_{preset}_{task}_{split}_{quantity}.png"
            ranks = {key: i for i, key in enumerate(names)}           # the tables' row order
            labels = {k: _label(suite, k, names) for k in sorted(ser, key=lambda k: ranks.get(k[1:], len(ranks)))}
            title = f"{suite.name} / {task} / {split}: {quantity} vs length ({preset})"
            _plot(ser, labels, pdir / name, title, quantity, train_max, unit_range=unit_range)
            made.append({"title": title, "path": f"plots/{name}", "task": task, "split": split})

    for t in suite.tasks:
        res = [r for r in results if r.spec.task_entry == t.name]
        if not res:
            continue
        metric = _metric_for(t.name, tables, res)
        acc = _series(res, lambda d, metric=metric: {L: row.get(metric) for L, row in d.get("by_length", {}).items()})
        train_max = next((d.get("train_max_n") for r in res if r.status == "finished"
                          for s in r.evals.values() for d in s.values() if d.get("train_max_n")), None)
        per_split(acc, t.name, metric, train_max, unit_range=True)
        for stat in DEPTH_STATS:
            dep = _series(res, lambda d, stat=stat: d.get("stats", {}).get(stat, {}).get("by_length", {}))
            per_split(dep, t.name, stat, train_max, unit_range=False)
    return made
