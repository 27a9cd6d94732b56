"""`rasp eval RUN` for a comparison run: every split of its task (or
`--splits`), metrics with standard errors, by length and by group, the
encoder's depth / iterations / residual, `eval.json` and a plot.

eval.json:

    {"task", "model", "run", "step", "seed",
     "splits": {SPLIT: {"n": int, "params": {...},
                        "metrics": {M: {"mean": x, "se": s}},
                        "by_length": {"L": {M: x, ..., "n": k}},
                        "by_group": {"g": {M: x, ..., "n": k}},
                        "stats": {"depth"|"iterations"|"residual": {"mean": x, "max": y,
                                                                   "by_length": {"L": x}}}}}}

A split evaluated again replaces its entry; other splits already in
eval.json are kept.  Each split's examples come from its own generator,
seeded by (--seed, split name), so they never depend on which splits run.
"""
from __future__ import annotations

from pathlib import Path

import torch

from rasp.errors import RaspError, RaspFileError
from rasp.readfile import read_json
from trainer.run import checkpoint
from trainer.benchmark import scoring
from trainer.benchmark.data import generate_split
from trainer.settings import evaluation
from trainer.settings.hparams import HParams
from trainer.run.progress import bar as progress_bar
from trainer.benchmark.presets import apply
from trainer.benchmark.kind import checkpoint_model, score_examples, seq_task

DEFAULT_N = 1000        # examples per split unless -n says otherwise (at most the split's paper size)
STATS = ("depth", "iterations", "residual")


def load_run_model(run_dir: Path, sets: dict, device):
    """(run, task, hp, model, checkpoint state) for the latest checkpoint, with --set
    overrides (test-time caps, tolerances) applied to its hyper-parameters."""
    ckpt = checkpoint.latest(run_dir)
    if ckpt is None:
        raise RaspError(f"{run_dir} has no checkpoint yet")
    run = checkpoint.read_run(run_dir, ckpt)
    checkpoint.check_run_matches(run, ckpt, run_dir / "run.json")
    task = seq_task(run["task"])
    hp = apply(HParams.from_dict(run["hparams"], "seq"), sets).validate()
    state = checkpoint.load_state(ckpt)
    model = checkpoint.load_model(ckpt, device, checkpoint_model(task, run["model"], run.get("init", "random"), hp,
                                                                 state))
    return run, task, hp, model, state


def predict_examples(model, task, examples: list, batch_size: int = 100, device="cpu"):
    """(example, the model's predicted label per position or its class) for each
    example in order, without scoring: for analyses that group an example's
    positions themselves (bench/counting_phase.py, bench/flipflop_positions.py)."""
    from trainer.benchmark.data import collate
    model.eval()
    for s in range(0, len(examples), batch_size):
        chunk = examples[s:s + batch_size]
        batch = collate(task, chunk).to(device)
        with torch.no_grad():
            logits, _ = model(batch.tokens, batch.mask, batch.tokens2, batch.mask2)
        yield from zip(chunk, scoring.predictions(logits).cpu().tolist())


def analysis_parser(description: str, split: str, n: int):
    """The command line of a per-example analysis script over trained runs:
    RUN ... --splits S,... -n N --seed S (rasp eval's examples)."""
    import argparse
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--splits", default=split)
    p.add_argument("-n", type=int, default=n)
    p.add_argument("--seed", type=int, default=evaluation.SEED, help="rasp eval's default")
    return p


def each_split(args):
    """For every run and split of `analysis_parser`'s arguments: (a heading
    naming the run, its seed and step, and the split; the run's task; its
    model, on the CPU, in eval mode; the split's examples as `rasp eval` draws them)."""
    for run in args.runs:
        info, task, hp, model, state = load_run_model(run, {}, torch.device("cpu"))
        model.eval()
        for split in args.splits.split(","):
            head = f"{run} ({info['model']}, seed {hp.seed}, step {state['step']}) on {split}, n {args.n}"
            yield head, task, model, generate_split(task, split, args.n, args.seed)


def check_lengths(model, task, split_examples: dict):
    """Refuse, before scoring anything, a split whose inputs are longer than the
    model was built for (a compiled model's design length, `max_length`)."""
    from trainer.benchmark.data import example_length
    limit = getattr(model.encoder, "max_length", None)
    if limit is None:
        return
    for name, examples in split_examples.items():
        longest = max((example_length(e) for e in examples), default=0)
        if longest > limit:
            raise RaspError(f"split {name}: inputs up to {longest} tokens, longer than the {limit} tokens this "
                            f"compiled model was built for (its design length); evaluate splits up to {limit} "
                            "tokens, or train a run compiled for longer inputs (--set compile_max_len=M covers "
                            "4 x M tokens)")


def summarise(raw: dict) -> dict:
    """One split's entry of eval.json from score_examples' per-example arrays."""
    values = raw["values"]
    entry = {"n": int(len(raw["lengths"])),
             "metrics": {m: {k: v for k, v in scoring.summary(vals).items() if k != "n"}
                         for m, vals in values.items()}}

    def by(keys, skip_negative=False):
        out = {}
        for key in sorted(set(keys.tolist())):
            if skip_negative and key < 0:
                continue
            sel = keys == key
            row = {m: scoring.summary(vals[sel])["mean"] for m, vals in values.items()}
            row["n"] = int(sel.sum())
            out[str(key)] = row
        return out
    entry["by_length"] = by(raw["lengths"])
    entry["by_group"] = by(raw["groups"], skip_negative=True)
    entry["stats"] = {}
    for name, v in raw["stats"].items():
        entry["stats"][name] = {
            "mean": float(v.mean()), "max": float(v.max()),
            "by_length": {str(L): float(v[raw["lengths"] == L].mean()) for L in sorted(set(raw["lengths"].tolist()))}}
    return entry


def _number(x, none_ok=True) -> bool:
    return (x is None and none_ok) or (isinstance(x, (int, float)) and not isinstance(x, bool))


def _split_result_ok(v) -> bool:
    """An earlier split result is kept only if it has the shape this module
    writes (n, metrics -> mean/se, stats -> mean/max): others are replaced."""
    return (isinstance(v, dict) and isinstance(v.get("n"), int)
            and isinstance(v.get("metrics"), dict) and all(
                isinstance(m, dict) and _number(m.get("mean")) and _number(m.get("se")) for m in v["metrics"].values())
            and isinstance(v.get("stats"), dict) and all(
                isinstance(x, dict) and _number(x.get("mean"), False) and _number(x.get("max"), False)
                for x in v["stats"].values()))


def evaluate_seq_run(run_dir, splits=None, n=None, sets=None, batch_size: int = 64, seed: int = evaluation.SEED,
                     device="cpu", plots: bool = True, progress: bool = True, out_json=None) -> dict:
    run_dir = Path(run_dir)
    run, task, hp, model, state = load_run_model(run_dir, sets or {}, torch.device(device))
    step = state["step"]
    # the lengths this run trained on (its own split, e.g. flip-flop's cpu T = 128), else the task's
    train_range = state.get("train_lengths") or (list(task.train_range) if task.train_range else None)
    names = list(task.splits) if not splits else splits
    unknown = [s for s in names if s not in task.splits]
    if unknown:
        raise RaspError(f"task {task.name} has no split {unknown[0]!r} (splits: {', '.join(task.splits)})")
    path = checkpoint.check_json_target(out_json or run_dir / "eval.json")
    old = {}
    if path.is_file():
        try:
            prev = read_json(path)
            if prev.get("step") == step and prev.get("seed") == seed:
                old = prev.get("splits", {})
        except (RaspFileError, AttributeError):
            old = {}
        # an earlier result of another shape is replaced: keep only splits that look like results
        old = {k: v for k, v in old.items() if _split_result_ok(v)} if isinstance(old, dict) else {}
    results = dict(old)
    split_examples = {name: generate_split(task, name, n if n is not None else
                                           min(task.splits[name].size or DEFAULT_N, DEFAULT_N), seed)
                      for name in names}
    check_lengths(model, task, split_examples)
    for name in progress_bar(names, enabled=progress, desc=f"eval {task.name}/{run['model']}"):
        examples = split_examples[name]
        raw = score_examples(task, model, examples, task.metrics, torch.device(device), batch_size)
        results[name] = {**summarise(raw), "params": task.splits[name].params}
    res = {"format": checkpoint.RUN_FORMAT, "kind": "seq", "task": task.name, "model": run["model"],
           "init": run.get("init", "random"), "run": str(run_dir), "step": step, "seed": seed,
           "headline": task.metrics[0], "train_range": train_range, "splits": results}
    checkpoint.write_json_atomic(path, res)
    res["json"] = str(path)
    if plots:
        from trainer.run.plots import seq_eval_plot
        try:
            res["plots"] = [seq_eval_plot(res, path.with_name(path.stem + "_accuracy.png"))]
        except Exception as e:           # a plot must never lose an evaluation
            res["plots"] = [f"not written: {e}"]
    return res


def format_table(res: dict) -> str:
    metrics = list(next(iter(res["splits"].values()))["metrics"]) if res["splits"] else []
    head = f"{'split':<22} {'n':>6}  " + "  ".join(f"{m:>15}" for m in metrics) + "  stats"
    lines = [f"{res['task']} / {res['model']} at step {res['step']}", head]
    for name, e in res["splits"].items():
        cells = []
        for m in metrics:
            v = e["metrics"].get(m, {})
            cells.append(f"{'-':>15}" if v.get("mean") is None else
                         f"{v['mean']:>8.4f} ±{(v['se'] or 0):.4f}")
        st = " ".join(f"{k} {v['mean']:.2f} (max {v['max']:.2f})" for k, v in e["stats"].items())
        lines.append(f"{name:<22} {e['n']:>6}  " + "  ".join(cells) + "  " + st)
    return "\n".join(lines)
