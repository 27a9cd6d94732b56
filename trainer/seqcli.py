"""The comparison-task side of `rasp train` / `rasp eval` (trainer/cli.py
dispatches here when the task is a `SeqTask`) and `rasp data`.

    rasp train --task T --model M [--init compiled] [--preset cpu|paper] [--seed S] [--steps N]
               [--lr X --batch-size B --d-model D --n-layer L --n-head H ...]
               [--set KEY=VALUE ...] [--data FILE.jsonl] --out DIR [--resume]
    rasp eval DIR [--splits a,b] [--set KEY=VALUE ...] [-n N] [--seed S]
    rasp data TASK --split NAME -n N -o FILE.jsonl [--seed S]
    rasp data TASK --stats [--split NAME] [-n N]

`--init compiled` (`--model looped` on a task that names its label program):
the program compiled, not trained (trainer/seqcompiled.py).
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from rasp.errors import RaspError
from trainer.seqpresets import parse_set

# Fan-trainer flags that mean the same for a comparison run (others are refused)
SHARED_FLAGS = ("steps", "batch_size", "lr", "weight_decay", "warmup", "d_model", "n_layer", "n_head", "grad_clip",
                "ckpt_every", "log_every", "eval_every", "eval_samples", "seed")


def _fan_only_given(args, hp_flags) -> list:
    given = [f"--{k.replace('_', '-')}" for k in hp_flags if k not in SHARED_FLAGS and getattr(args, k, None)
             is not None]
    if getattr(args, "compress", None) is not None:
        given.append("--compress")
    if getattr(args, "freeze_fragile", "auto") != "auto":
        given.append("--freeze-fragile")
    return given


def _refuse_fan_only(args, hp_flags):
    fan_only = _fan_only_given(args, hp_flags)
    if fan_only:
        raise RaspError(f"{', '.join(fan_only)}: Fan-task options, not used by comparison tasks "
                        "(set model settings with --set KEY=VALUE)")


def seq_flags(args, sets=None) -> dict:
    """The hyper-parameters given as flags (None: not given), and --set's."""
    from trainer.cli import on_off
    return {k: getattr(args, k, None) for k in SHARED_FLAGS} | {"guard": on_off(getattr(args, "guard", "auto"))} \
        | (sets or {})


def seq_hparams(args, hp_flags):
    """The hyper-parameters a new comparison run of these arguments trains with."""
    from trainer.models import get_encoder_spec
    from trainer.seqpresets import make_seq_hparams
    from trainer.seqtrain import seq_task
    _refuse_fan_only(args, hp_flags)
    task, init = seq_task(args.task), getattr(args, "init", "random")
    if init == "compiled" and args.model != "looped":
        raise RaspError(f"--init compiled builds the looped model; --model {args.model} has no compiled form")
    spec = get_encoder_spec(args.model)
    hp = make_seq_hparams(args.preset, task, spec, seq_flags(args), parse_set(args.set), init)
    if init == "compiled":
        from trainer.seqcompiled import resolve_hparams
        resolve_hparams(task, hp)
    return hp


def seq_run_config(args, hp_flags):
    """The SeqRunConfig of `rasp train ARGS` on a comparison task (a resumed
    run keeps its own settings; --steps may extend it)."""
    from trainer import checkpoint
    from trainer.cli import _device
    from trainer.seqpresets import SeqHParams
    from trainer.seqtrain import SeqRunConfig, seq_task
    out = Path(args.out)
    if args.resume and checkpoint.has_run(out):
        _refuse_fan_only(args, hp_flags)                # (a new run's seq_hparams refuses them too)
        run = checkpoint.read_checked_run(out)         # a resumed run keeps its settings; --steps may extend it
        hp = checkpoint.resumed_hparams(SeqHParams.from_dict(run["hparams"]), seq_flags(args, parse_set(args.set)))
        return SeqRunConfig(run["task"], run["model"], str(out), run["preset"], hp.validate(), run.get("data"),
                            _device(args.device), True, not args.no_progress, args.max_wall,
                            run.get("init", "random"))
    task = seq_task(args.task)
    hp = seq_hparams(args, hp_flags)
    if args.data and not Path(args.data).is_file():
        raise RaspError(f"--data {args.data}: no such file")
    return SeqRunConfig(task.name, args.model, str(out), args.preset, hp,
                        str(Path(args.data).resolve()) if args.data else None, _device(args.device),
                        args.resume, not args.no_progress, args.max_wall, args.init)


def run_seq_eval(args) -> int:
    from trainer.cli import _device, set_threads
    from trainer.seqeval import evaluate_seq_run, format_table
    from trainer.cli import refuse_given
    refuse_given(args, ("lengths", "stop", "threshold", "samples", "max_len"),
                 "a comparison run is evaluated per split: --splits a,b, -n N")
    splits = [s.strip() for s in args.splits.split(",") if s.strip()] if args.splits else None
    if args.n is not None and args.n < 1:
        raise RaspError(f"-n {args.n}: must be at least 1")
    print(set_threads(args.threads), file=sys.stderr)
    res = evaluate_seq_run(args.run, splits, args.n, parse_set(args.set), args.batch_size, args.seed,
                           _device(args.device), plots=not args.no_plots, progress=not args.no_progress,
                           out_json=args.json)
    print(format_table(res))
    print(f"wrote {res['json']}" + (f" and {', '.join(res['plots'])}" if res.get("plots") else ""))
    return 0


# ---- rasp data -------------------------------------------------------------------------

def add_data_args(p: argparse.ArgumentParser):
    p.add_argument("task", help="a comparison task (flipflop, words_z60, listops, logic, ...)")
    p.add_argument("--split", default=None, help="split name (default with --stats: every split)")
    p.add_argument("-n", type=int, default=None, help="number of examples (--stats default: up to 1000)")
    p.add_argument("-o", "--output", default=None, help="JSON-lines file to write")
    p.add_argument("--stats", action="store_true", help="print length and label distributions instead")
    p.add_argument("--seed", type=int, default=0,
                   help="generator seed (rasp eval's examples of a split are this with --seed 1234)")
    return p


def _data_task(name: str):
    from trainer.tasks import TASKS
    from trainer.tasks.base import SeqTask
    if name not in TASKS:
        seq = [k for k, t in TASKS.items() if isinstance(t, SeqTask)]
        raise RaspError(f"unknown task {name!r} (comparison tasks: {', '.join(seq) or 'none registered'})")
    if not isinstance(TASKS[name], SeqTask):
        raise RaspError(f"task {name!r} is a Fan task: its data is generated by `rasp train` itself")
    return TASKS[name]


def split_stats(task, examples: list) -> dict:
    from trainer.seqdata import example_length
    lengths = np.array([example_length(e) for e in examples])
    if task.kind == "per_position":
        labels = Counter(t for e in examples for t in e.target if t >= 0)
        scored = np.array([sum(t >= 0 for t in e.target) for e in examples])
    else:
        labels, scored = Counter(int(e.target) for e in examples), None
    total = sum(labels.values()) or 1
    out = {"n": len(examples), "length": {"min": int(lengths.min()), "mean": float(lengths.mean()),
                                          "max": int(lengths.max())},
           "labels": {task.labels[k] if 0 <= k < len(task.labels) else str(k): v / total
                      for k, v in sorted(labels.items())}}
    if scored is not None:
        out["scored_per_sequence"] = float(scored.mean())
    groups = Counter(e.group for e in examples if e.group is not None)
    if groups:
        out["groups"] = dict(sorted(groups.items()))
    return out


def run_data(args) -> int:
    from trainer.seqdata import check_example, generate_split, write_jsonl
    task = _data_task(args.task)
    if args.split is not None and args.split not in task.splits:
        raise RaspError(f"task {task.name} has no split {args.split!r} (splits: {', '.join(task.splits)})")
    if args.n is not None and args.n < 1:
        raise RaspError(f"-n {args.n}: the number of examples must be at least 1")
    if args.stats:
        import json
        for name in [args.split] if args.split else list(task.splits):
            n = args.n or min(task.splits[name].size or 1000, 1000)
            st = split_stats(task, generate_split(task, name, n, args.seed))
            print(f"{task.name} {name} ({task.splits[name].description or task.splits[name].params}):")
            for k, v in st.items():
                if k == "labels" and len(v) > 12:         # many classes: the most frequent
                    v = dict(sorted(v.items(), key=lambda kv: -kv[1])[:12]) | {"...": f"{len(st[k])} labels"}
                print(f"  {k}: {json.dumps(v, ensure_ascii=False)}")
        if task.paper_stats:
            print("paper (BENCHMARKS.md):")
            for k, v in task.paper_stats.items():
                print(f"  {k}: {v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}")
        return 0
    if args.split is None or args.n is None or args.output is None:
        raise RaspError("rasp data TASK --split NAME -n N -o FILE.jsonl (or --stats)")
    examples = generate_split(task, args.split, args.n, args.seed)
    for i, ex in enumerate(examples[:50]):            # the generator's output fits the task contract
        check_example(task, ex, f"{task.name}/{args.split} example {i}")
    try:
        write_jsonl(args.output, examples)
    except OSError as e:
        raise RaspError(f"{args.output}: cannot write ({e.strerror})") from None
    print(f"wrote {len(examples)} examples of {task.name}/{args.split} to {args.output}")
    return 0
