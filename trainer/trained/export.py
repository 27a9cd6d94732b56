"""`rasp export RUN -o DIR`: a training run's newest checkpoint as a
self-contained model directory, laid out as a Hugging Face hub model
repository (it can be uploaded as it is) and loadable without the run:

    config.json         format rasp-export/1, kind, the run's run.json (task, model,
                        init, every hyper-parameter), the model's config, step, stop
    model.safetensors   the weights (the checkpoint's file, byte for byte)
    vocab.json          model ids -> tokens: {"input": [...], "output": [...]}
    program.rasp        Fan et al.'s tasks: the task program (input contract, T(n))
    manifest.json       SHA-256 of the files above (checked by `rasp.load`), and of
                        the model card and plots (to tell an edited card from ours)
    README.md           the model card: YAML front matter (library_name, tags,
                        model-index), task, model, recipe, training, evaluation
    *.png               the training curves and the evaluation plots

`rasp.load(DIR)` / `rasp run DIR` read it (trainer/trained/inference.py).

Writing never loses a user's file: a new directory is built under a
temporary name and renamed into place; an existing directory is written only
if it is empty or a previous export, and then only files of that export that
are unchanged since (or equal to what is written now) are replaced or
removed, each atomically, the manifest last.  Links are never followed: a
link where a file is to be written is refused.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from rasp.atomic import write_bytes_atomic
from rasp.errors import RaspError, RaspFileError
from rasp.readfile import read_bytes, read_json
from trainer.trained.layout import EXPORT_FORMAT, model_files

MANIFEST = "manifest.json"
CARD = "README.md"
MAX_WEIGHTS = 1 << 36       # model.safetensors (its checksum was verified before)
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")     # a file an export may hold (no paths, no dot files)


def add_export_args(p):
    p.add_argument("run", help="a run directory written by `rasp train`")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="the directory to write (new, empty, or a previous export of a run; other files are "
                        "never overwritten)")


def run_export(args) -> int:
    written = export_run(args.run, args.output)
    print(f"wrote {args.output}: {', '.join(written)}")
    print(f"use it: rasp run {args.output} --input \"...\", or in Python: rasp.load({str(args.output)!r})")
    return 0


# ---- what is exported ---------------------------------------------------------------

def export_run(run_dir, out) -> list:
    """Write the export of `run_dir` into `out`; returns the file names written."""
    from trainer.run import checkpoint
    from trainer.trained.inference import load_run
    run_dir = Path(run_dir)
    if not checkpoint.has_run(run_dir):
        raise RaspError(f"{run_dir} does not exist" if not run_dir.exists() else
                        f"{run_dir} is not a training run (no run.json)")
    model = load_run(run_dir)                        # every file checked, as `rasp run RUN`
    ckpt = checkpoint.latest(run_dir)
    state = checkpoint.load_state(ckpt)
    run = checkpoint.read_run(run_dir, ckpt)
    kind = "seq" if checkpoint.is_seq_run(run) else "fan"
    config = {"format": EXPORT_FORMAT, "library_name": "rasp", "model_type": f"rasp-{kind}", "kind": kind,
              "run": run, "model_config": state["config"], "step": state["step"]}
    if kind == "fan" and model.spec.adaptive:
        config["stop"] = model.stop
    files = {"config.json": _json(config), "model.safetensors": read_bytes(ckpt / "model.safetensors", MAX_WEIGHTS),
             "vocab.json": _json(model.vocabulary())}
    if kind == "fan":
        files["program.rasp"] = model.program.ir.source.encode("utf-8")
    summary = _optional_json(run_dir / "summary.json")
    if summary is not None and not _renders(run_dir / "summary.json", lambda: _summary_lines(summary, run)):
        summary = None
    evals = _evaluations(run_dir, kind, state["step"])
    plots = {}
    if (run_dir / "train_curves.png").is_file():
        plots["train_curves.png"] = read_bytes(run_dir / "train_curves.png")
    for name, _doc in evals:
        png = run_dir / (Path(name).stem + "_accuracy.png")
        if png.is_file():
            plots[png.name] = read_bytes(png)
    card = model_card(run, kind, model, config, summary, evals, plots, Path(out).name)
    documents = {CARD: card.encode("utf-8"), **plots}
    write_export(Path(out), files, documents, model_files(kind))
    if not evals:
        print(f"note: {run_dir} has no evaluation of step {state['step']}, so the model card has no evaluation "
              f"table: run `rasp eval {run_dir}`, then export again", file=sys.stderr)
    return [*files, MANIFEST, *documents]


def _json(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _optional_json(path):
    from model.files import read_json
    if not path.is_file():
        return None
    try:
        return read_json(path)
    except RaspError as e:
        print(f"warning: {e.format()} (left out of the model card)", file=sys.stderr)
        return None


def _evaluations(run_dir: Path, kind: str, step: int) -> list:
    """[(file name, document)] of the run's evaluations of checkpoint `step`."""
    names = ["eval.json"] if kind == "seq" else sorted(p.name for p in run_dir.glob("eval_*.json")
                                                        if not re.search(r"_step\d+$", p.stem))
    out = []
    tables = _fan_tables if kind == "fan" else _seq_tables
    for name in names:
        doc = _optional_json(run_dir / name)
        if isinstance(doc, dict) and doc.get("step") == step and isinstance(doc.get("splits") or doc.get("rows"),
                                                                           (dict, list)) \
                and _renders(run_dir / name, lambda d=doc, n=name: (tables([(n, d)]), _model_index("", "", [(n, d)], kind))):
            out.append((name, doc))
    return out


def _renders(path, render) -> bool:
    """Whether a run file renders into the model card; one of another shape
    (edited, or damaged into valid JSON) is left out, saying so."""
    try:
        render()
        return True
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as e:
        print(f"warning: {path}: not of the shape rasp writes ({type(e).__name__}: {str(e)[:60]}); "
              "left out of the model card", file=sys.stderr)
        return False


# ---- the model card ------------------------------------------------------------------

def _yaml(value) -> str:
    """A YAML scalar: JSON's strings and numbers are YAML too."""
    return json.dumps(value)


def _example(model, kind: str):
    """An input from the task's own generator (seed 0) and the model's answer."""
    import numpy as np
    rng = np.random.default_rng(0)
    if kind == "fan":
        data = model.data
        n = max(data.task.min_n, min(3, model.hp.max_train_n))
        text = model.program.format_output(data.sample_inputs(rng, [n], train=False)[0])
    else:
        task = model.task
        examples = task.generate(rng, task.splits[model.hp.valid_split].params, 20)
        ex = min(examples, key=lambda e: len(e.input) + len(e.input2 or []))
        words = [task.vocab[i - 1] for i in ex.input][:16 if task.kind == "per_position" else None]
        text = " ".join(words)
        if ex.input2 is not None:
            text += " | " + " ".join(task.vocab[i - 1] for i in ex.input2)
    return text, " ".join(model([text])[0])


def _fan_tables(evals) -> list:
    from trainer.fan.evaluate import rows
    out = []
    for name, doc in evals:
        lo, hi = doc.get("train_range") or (None, None)
        out += [f"`{name}`: stopping rule **{doc.get('stop')}**"
                + (f" (threshold {doc['threshold']})" if doc.get("threshold") else "")
                + f", seed {doc.get('seed')}; * = inside the training range ({lo}..{hi})", "",
                "| length | exact match | ± s.e. | inputs | chosen step | T(n) |", "|---:|---:|---:|---:|---:|---:|"]
        for r in rows(doc):
            mark = "*" if hi is not None and r["length"] <= hi else ""
            out.append(f"| {r['length']}{mark} | {r['exact_match']:.3f} | {r['se']:.3f} | {r['n']} | "
                       f"{r.get('chosen_step', float('nan')):.1f} | {r.get('oracle_step', float('nan')):.1f} |")
        out.append("")
    return out


def _seq_tables(evals) -> list:
    out = []
    for name, doc in evals:
        splits = doc["splits"]
        metrics = list(next(iter(splits.values()))["metrics"]) if splits else []
        out += [f"`{name}`: seed {doc.get('seed')}, headline metric **{doc.get('headline')}**", "",
                "| split | examples | " + " | ".join(f"{m} ± s.e." for m in metrics) + " |",
                "|---|---:|" + "---:|" * len(metrics)]
        for split, entry in splits.items():
            cells = []
            for m in metrics:
                v = entry["metrics"].get(m, {})
                cells.append("—" if v.get("mean") is None else f"{v['mean']:.3f} ± {v.get('se') or 0:.3f}")
            out.append(f"| {split} | {entry.get('n')} | " + " | ".join(cells) + " |")
        out.append("")
    return out


def _model_index(name: str, task: str, evals, kind: str) -> list:
    results = []
    for _file, doc in evals:
        if kind == "fan":
            from trainer.fan.evalfile import FAN_SPLIT
            m = doc.get("splits", {}).get(FAN_SPLIT, {}).get("metrics", {}).get("exact_match", {})
            lengths = doc["splits"][FAN_SPLIT]["params"]["lengths"] if m else []
            if m.get("mean") is not None:
                results.append(("exact_match", m["mean"], f"exact match, lengths {min(lengths)}-{max(lengths)}, "
                                                          f"stop {doc.get('stop')}", "test"))
        else:
            head = doc.get("headline")
            for split, entry in doc["splits"].items():
                v = entry["metrics"].get(head, {}).get("mean")
                if v is not None:
                    results.append((head, v, f"{head}, split {split}", split))
    if not results:
        return []
    out = ["model-index:", f"- name: {_yaml(name)}", "  results:"]
    for metric, value, label, split in results:
        out += ["  - task:", f"      type: {_yaml(task)}", f"      name: {_yaml(task)}",
                "    dataset:", f"      type: {_yaml('rasp/' + task)}",
                f"      name: {_yaml(task + ' (generated by rasp)')}", f"      split: {_yaml(split)}",
                "    metrics:", f"    - type: {_yaml(metric)}", f"      value: {round(float(value), 4)}",
                f"      name: {_yaml(label)}"]
    return out


def _summary_lines(summary: dict, run: dict) -> list:
    body = [f"- steps: {summary.get('step')} of {run['hparams'].get('steps')}"
            + (" (finished)" if summary.get("finished") else " (not finished)"),
            f"- time: {summary.get('seconds', float('nan')):.1f} s on {run.get('device', '?')}"
            + (f" x {run['world_size']}" if run.get("world_size", 1) > 1 else "")]
    if summary.get("stopped"):
        body.append(f"- stopped early: {summary['stopped']}")
    if summary.get("final_loss") is not None:
        body.append(f"- final training loss: {summary['final_loss']:.4g}")
    if summary.get("final_eval"):
        body.append(f"- final evaluation during training: {summary['final_eval']}")
    return body


def model_card(run: dict, kind: str, model, config: dict, summary, evals, plots, folder: str) -> str:
    from trainer.tasks import TASKS
    task, name, init = run["task"], run["model"], run["init"]
    from trainer.models import get_encoder_spec, get_model_spec
    what = (get_model_spec(name) if kind == "fan" else get_encoder_spec(name)).description
    n_params = sum(p.numel() for p in model.module.parameters())
    tags = ["rasp", "looped-transformer" if name.startswith("looped") else "sequence-model", task, name,
            "fan-et-al-tasks" if kind == "fan" else "comparison-tasks"]
    front = ["---", "library_name: rasp", "tags:", *[f"- {_yaml(t)}" for t in tags],
             *_model_index(f"{task}-{name}", task, evals, kind), "---", ""]
    example, answer = _example(model, kind)
    body = [f"# {task} / {name}", "",
            f"A model trained with rasp (`rasp train`, {init} initialisation) on the task **{task}**: "
            f"{TASKS[task].description}.", "",
            "## Use", "", "```python", "import rasp", f"model = rasp.load({_yaml(folder)})",
            f"model([{_yaml(example)}])     # -> [{_yaml(answer.split())[1:-1]}]", "```", "",
            f'or `rasp run {folder} --input "{example}"` (one input per line with `--inputs FILE`).', ""]
    if kind == "fan":
        rule = config.get("stop")
        body += ["The input is parsed by the task's program (`program.rasp`), which checks its `require` "
                 "contract and gives the loop count T(n); the answer is the model's output from `>` on."
                 + (f" The loop stops by the rule **{rule}** (`--stop` or `rasp.load(..., stop=...)` chooses "
                    "oracle, confidence, confidence_sample or threshold)." if rule else
                    " This model runs a fixed number of iterations."), ""]
    else:
        body += [("The answer is one label per input position." if model.task.kind == "per_position" else
                  "The answer is one label for the input.")
                 + (" A pair is two sentences separated by `|`." if model.task.kind == "pair" else ""), ""]
    body += ["## Model", "", f"- **{name}**: {what}", f"- parameters: {n_params:,}",
             f"- initialisation: {init}" + (f", compressed to width {run['compress']} ({run.get('compress_method')})"
                                           if run.get("compress") else ""),
             "- files: `config.json` (this run's settings and the model's configuration), `model.safetensors` "
             "(weights), `vocab.json` (model ids -> tokens)"
             + (", `program.rasp` (the task program)" if kind == "fan" else "")
             + ", `manifest.json` (SHA-256 of the model files, checked on loading)", ""]
    body += ["## Training", ""]
    if summary:
        body += _summary_lines(summary, run)
    else:
        body.append(f"- exported at step {config['step']} (the run has no summary.json: it was not finished)")
    body += [f"- preset: `{run.get('preset')}`, seed {run['hparams'].get('seed')}", "",
             "The recipe, every hyper-parameter (`config.json` keeps them under `run.hparams`):", "",
             "| hyper-parameter | value |", "|---|---|"]
    body += [f"| `{k}` | `{json.dumps(v, sort_keys=True)}` |" for k, v in sorted(run["hparams"].items())]
    body.append("")
    if "train_curves.png" in plots:
        body += ["![training curves](train_curves.png)", ""]
    body += ["## Evaluation", ""]
    if evals:
        body += _fan_tables(evals) if kind == "fan" else _seq_tables(evals)
        body += [f"![{p}]({p})" for p in plots if p != "train_curves.png"] + [""]
        body.append("Made by `rasp eval` (inputs from the task's own generator, seeded as shown).")
    else:
        body.append(f"Not evaluated at step {config['step']} (`rasp eval RUN` before exporting adds the table).")
    return "\n".join(front + body) + "\n"


# ---- writing ----------------------------------------------------------------------------

def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sha_file(path: Path) -> str:
    from model.files import sha256_file
    return sha256_file(path)


def _previous(out: Path):
    """{name: sha256} of what a previous export recorded in OUT, or None when
    OUT holds no export manifest (then it is not ours to write into)."""
    path = out / MANIFEST
    if path.is_symlink() or not path.is_file():
        return None
    try:
        man = read_json(path)
    except RaspFileError:
        return None
    if not isinstance(man, dict) or man.get("format") != EXPORT_FORMAT:
        return None
    recorded = {**(man.get("sha256") or {}), **(man.get("documents") or {})}
    if not all(isinstance(k, str) and SAFE_NAME.fullmatch(k) and k != MANIFEST and isinstance(v, str)
               for k, v in recorded.items()):
        return None
    return recorded


def _write_file(directory: Path, name: str, data: bytes):
    write_bytes_atomic(directory / name, data)          # replaces a link itself, never its target


def _manifest(files: dict, documents: dict, names) -> bytes:
    return _json({"format": EXPORT_FORMAT, "sha256": {n: _sha(files[n]) for n in names},
                  "documents": {n: _sha(d) for n, d in documents.items()}})


def write_export(out: Path, files: dict, documents: dict, names):
    """Write `files` (checked by the manifest) and `documents` (card, plots) into OUT."""
    everything = {**files, **documents}
    manifest = _manifest(files, documents, names)
    try:
        if out.is_symlink():
            raise RaspFileError(out, "is a link: give the directory itself")
        if not out.exists():
            parent = out.parent
            parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out.name}.tmp"))
            try:
                for name, data in everything.items():
                    _write_file(tmp, name, data)
                _write_file(tmp, MANIFEST, manifest)
                os.chmod(tmp, 0o755)
                os.rename(tmp, out)                   # fails if OUT appeared meanwhile: nothing is lost
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
            return
        if not out.is_dir():
            raise RaspFileError(out, "exists and is not a directory")
        _check_replaceable(out, everything)
        recorded = _previous(out) or {}
        for name, data in everything.items():
            _write_file(out, name, data)
        for name in recorded:                        # files of the previous export this one does not have
            if name not in everything and os.path.lexists(out / name):
                (out / name).unlink()
        _write_file(out, MANIFEST, manifest)
    except OSError as e:
        raise RaspFileError(out, f"cannot write the export: {e.strerror or e}") from None


def _check_replaceable(out: Path, everything: dict):
    """Refuse (changing nothing) unless OUT is empty, or a previous export
    whose files that would be replaced or removed are unchanged."""
    if not any(out.iterdir()):
        return
    recorded = _previous(out)
    if recorded is None:
        raise RaspFileError(out, "is not empty and holds no earlier export (no manifest.json of format "
                                 f"{EXPORT_FORMAT}): choose a new or empty directory")
    for name in sorted(set(recorded) | set(everything)):
        path = out / name
        if not os.path.lexists(path):
            continue
        if path.is_symlink() or not path.is_file():
            raise RaspFileError(path, "is not a plain file (a link?): move it away, or choose another directory")
        if name not in recorded:
            raise RaspFileError(path, "is not part of the earlier export: move it away, or choose another directory")
        now = _sha_file(path)
        if now != recorded[name] and (name not in everything or now != _sha(everything[name])):
            raise RaspFileError(path, "changed since the earlier export: move it away (or keep it by choosing "
                                      "another directory)")
