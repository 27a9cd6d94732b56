"""PNG plots of an evaluation: accuracy against length with the training
range marked (Fan et al. Fig. 4) and the per-step loss/accuracy curve with
the chosen step (Fig. 6)."""
from __future__ import annotations

import io
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from rasp.atomic import write_bytes_atomic  # noqa: E402


def save_figure(fig, path, **savefig_args):
    """Write `fig` as a PNG to PATH whole or not at all, and close it: a link
    planted at PATH is replaced, never written through (savefig would)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", **savefig_args)
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())


def accuracy_vs_length(series: list, labels: list, train_max_n: int, path: Path, title: str = ""):
    """Exact match +- its standard error against n, one series of per-length
    rows (trainer/evaluate.rows) per label."""
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.axvspan(0.5, train_max_n + 0.5, color="0.9", label="training lengths")
    ax.axvline(train_max_n + 0.5, color="0.4", ls="--")
    for rows, lab in zip(series, labels):
        xs = [r["length"] for r in rows]
        ys = [r["exact_match"] for r in rows]
        es = [r.get("se") or 0.0 for r in rows]       # None: every input scored once, no sampling error
        ax.errorbar(xs, ys, yerr=es, marker="o", ms=3, capsize=2, label=lab)
    ax.set_xlabel("length n")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))     # lengths are integers
    ax.set_ylabel("exact match")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    return str(path)


def step_curve(row: dict, path: Path, title: str = ""):
    cv = row["curve"]
    ts = list(range(1, len(cv["acc"]) + 1))
    fig, ax = plt.subplots(figsize=(6, 4.8))
    ax.plot(ts, cv["acc"], color="C0", label="exact match")
    ax.set_xlabel("loop step t")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("exact match", color="C0")
    ax.set_ylim(-0.03, 1.03)
    ax2 = ax.twinx()
    ax2.plot(ts, cv["loss"], color="C1", label="loss vs target")
    ax2.plot(ts, cv["confidence_ce"], color="C2", ls=":", label="CE vs own argmax (Eq. 2)")
    ax2.set_yscale("log")
    ax2.set_ylabel("cross-entropy")
    ax.axvline(row["chosen_step"], color="k", ls="--", label=f"chosen step {row['chosen_step']:.1f}")
    ax.axvline(row["oracle_step"], color="C3", ls=":", label=f"T(n) = {row['oracle_step']:.0f}")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    # legend below the axes, so it never covers the curves
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3,
              frameon=False)
    ax.set_title(title)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    return str(path)


def train_curves(rows: list, path: Path, title: str = "", acc_label: str = "training batch exact match",
                 eval_label: str = "in-distribution exact match (oracle stop)") -> str:
    """Training loss (log scale) and accuracy against the optimizer step:
    the logged batch means and the periodic in-distribution evaluations."""
    train = [r for r in rows if "loss" in r]
    evals = [r for r in rows if "eval_acc" in r]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(6, 5.5), sharex=True)
    if train:
        ax1.plot([r["step"] for r in train], [r["loss"] for r in train], color="C1", label="training loss")
        ax2.plot([r["step"] for r in train], [r["acc"] for r in train], color="C0", alpha=0.7,
                 label=acc_label)
        if all(r["loss"] > 0 for r in train):
            ax1.set_yscale("log")
    if evals:
        ax2.plot([r["step"] for r in evals], [r["eval_acc"] for r in evals], "o-", ms=3, color="C2",
                 label=eval_label)
    ax1.set_ylabel("cross-entropy")
    if train:           # (a run of 0 steps, e.g. a compiled start, has no training curve)
        ax1.legend(fontsize=8)
    ax1.set_title(title)
    ax2.set_ylabel("exact match" if "exact match" in acc_label else "accuracy")
    ax2.set_ylim(-0.03, 1.03)
    ax2.set_xlabel("optimizer step")
    ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax2.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    return str(path)


def eval_plots(result: dict, rows: list, stem: Path) -> list:
    stem = Path(stem)
    name = f"{result['task']} / {result['model']} ({result['init']}), stop={result['stop']}"
    out = [accuracy_vs_length([rows], [result["stop"]], result["train_range"][1],
                              stem.with_name(stem.name + "_accuracy.png"), name)]
    with_curve = [r for r in rows if "curve" in r]
    if with_curve:
        row = with_curve[-1]     # the longest length, as in Fan et al. Fig. 6
        out.append(step_curve(row, stem.with_name(stem.name + f"_steps_n{row['length']}.png"),
                              f"{name}, n = {row['length']}"))
    return out


def seq_eval_plot(res: dict, path: Path) -> str:
    """A comparison run's headline metric against length, one series per
    split, the training lengths shaded; below it the encoder's depth and
    solver iterations against length when it reports them."""
    metric = res["headline"]
    splits = res["splits"]
    def varies(k):          # a fixed-depth model's constant depth is not worth a panel
        vals = {round(v, 6) for e in splits.values() if k in e["stats"]
                for v in [e["stats"][k]["max"], *e["stats"][k]["by_length"].values()]}
        return len(vals) > 1
    depth_like = [k for k in ("depth", "iterations") if varies(k)]
    fig, axes = plt.subplots(1 + bool(depth_like), 1, figsize=(6.5, 4 + 2.5 * bool(depth_like)), sharex=True,
                             squeeze=False)
    ax = axes[0, 0]
    if res.get("train_range"):
        lo, hi = res["train_range"]
        ax.axvspan(lo - 0.5, hi + 0.5, color="0.9", label="training lengths")
    for i, (name, e) in enumerate(splits.items()):
        xs = sorted(int(L) for L in e["by_length"])
        ys = [e["by_length"][str(L)][metric] for L in xs]
        keep = [(x, y) for x, y in zip(xs, ys) if y is not None]
        if keep:
            ax.plot(*zip(*keep), marker="o", ms=3, color=f"C{i % 10}", label=name)
    ax.set_ylabel(metric)
    ax.set_ylim(-0.03, 1.03)
    ax.set_title(f"{res['task']} / {res['model']} (step {res['step']})")
    ax.legend(fontsize=7, ncol=2)
    if depth_like:
        ax2 = axes[1, 0]
        for i, (name, e) in enumerate(splits.items()):
            for k, ls in zip(depth_like, ("-", ":")):
                if k in e["stats"]:
                    bl = e["stats"][k]["by_length"]
                    xs = sorted(int(L) for L in bl)
                    ax2.plot(xs, [bl[str(L)] for L in xs], ls, marker=".", color=f"C{i % 10}",
                             label=f"{name} {k}")
        ax2.set_ylabel(" / ".join(depth_like))
        ax2.legend(fontsize=6, ncol=2)
    axes[-1, 0].set_xlabel("length")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    return str(path)
