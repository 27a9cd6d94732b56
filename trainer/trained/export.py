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
    README.md           the model card (trainer/trained/card.py): YAML front matter (license,
                        library_name, pipeline_tag, tags, model-index), use, training data,
                        recipe, evaluation, intended use and limitations, citation
    *.png               the training curves and the evaluation plots
    tasks.md, LICENSE, CITATION.cff   the documents the card links to, so that every link
                        resolves inside the folder

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
    from trainer.trained.card import LIBRARY
    config = {"format": EXPORT_FORMAT, "library_name": LIBRARY, "model_type": f"rasp-{kind}", "kind": kind,
              "run": run, "model_config": state["config"], "step": state["step"]}
    if kind == "fan" and model.spec.adaptive:
        config["stop"] = model.stop
        # the fitted rules' fit (made once, saved in the run), so the export stops by them too
        from trainer.fan.halting import saved_or_fit
        from trainer.settings import evaluation
        config["halting"] = saved_or_fit(run_dir, state["step"], model.module, model.data, model.hp,
                                         evaluation.SEED, model.device).to_json(state["step"])
    files = {"config.json": _json(config), "model.safetensors": read_bytes(ckpt / "model.safetensors", MAX_WEIGHTS),
             "vocab.json": _json(model.vocabulary())}
    if kind == "fan":
        files["program.rasp"] = model.program.ir.source.encode("utf-8")
    summary = _optional_json(run_dir / "summary.json")
    from trainer.trained.card import summary_lines
    if summary is not None and not _renders(run_dir / "summary.json", lambda: summary_lines(summary, run)):
        summary = None
    evals = _evaluations(run_dir, kind, state["step"])
    plots = {}
    if (run_dir / "train_curves.png").is_file():
        plots["train_curves.png"] = read_bytes(run_dir / "train_curves.png")
    for name, _doc in evals:
        png = run_dir / (Path(name).stem + "_accuracy.png")
        if png.is_file():
            plots[png.name] = read_bytes(png)
    from trainer.trained.card import model_card, shipped_documents
    shipped = shipped_documents(kind)           # the docs and license the card links to, inside the export
    card = model_card(run, kind, model, config, summary, evals, plots, Path(out).name, shipped)
    documents = {CARD: card.encode("utf-8"), **plots, **shipped}
    write_export(Path(out), files, documents, model_files(kind))
    if not evals:
        print(f"note: {run_dir} has no evaluation of step {state['step']}, so the model card has no evaluation "
              f"table: run `rasp eval {run_dir}`, then export again", file=sys.stderr)
    return [*files, MANIFEST, *documents]


def _json(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _optional_json(path):
    if not path.is_file():
        return None
    try:
        return read_json(path, finite=True)         # a figure of the card is never NaN
    except RaspError as e:
        print(f"warning: {e.format()} (left out of the model card)", file=sys.stderr)
        return None


def _evaluations(run_dir: Path, kind: str, step: int) -> list:
    """[(file name, document)] of the run's evaluations of checkpoint `step`."""
    names = ["eval.json"] if kind == "seq" else sorted(p.name for p in run_dir.glob("eval_*.json")
                                                        if not re.search(r"_step\d+$", p.stem))
    from trainer.trained.card import evaluation_lines
    out = []
    for name in names:
        doc = _optional_json(run_dir / name)
        if isinstance(doc, dict) and doc.get("step") == step and isinstance(doc.get("splits") or doc.get("rows"),
                                                                           (dict, list)) \
                and _renders(run_dir / name, lambda d=doc, n=name: evaluation_lines(n, d, kind)):
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
        recorded = _check_replaceable(out, everything)
        for name, data in everything.items():
            _write_file(out, name, data)
        for name in recorded:                        # files of the previous export this one does not have
            if name not in everything and os.path.lexists(out / name):
                (out / name).unlink()
        _write_file(out, MANIFEST, manifest)
    except OSError as e:
        raise RaspFileError(out, f"cannot write the export: {e.strerror or e}") from None


def _check_replaceable(out: Path, everything: dict) -> dict:
    """Refuse (changing nothing) unless OUT is empty, or a previous export
    whose files that would be replaced or removed are unchanged; returns
    what that export recorded ({name: sha256}, {} for an empty OUT)."""
    if not any(out.iterdir()):
        return {}
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
    return recorded
