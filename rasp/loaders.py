"""`rasp.load(PATH)` and `rasp run DIR`: whatever PATH holds, a model that
answers input text with output tokens.

    model = rasp.load("runs/parity")          # a training run, an exported model,
    model(["1 0 1 1 > # #"])                  # a compiled model or a .rasp program
    -> [['1', '#', '#']]

A `.rasp` file is a `rasp.Program`.  A directory is recognised by the files
it holds (LOADERS, first match) and read by a module above this package,
found by *name* through importlib, as rasp/cli.py finds its subcommands: this
package imports nothing above it.  Every loader's model is called the same
way: `model(inputs)` with a list of input texts (or token lists) returns, per
input, its answer as a list of tokens, in one shape for every kind: the tokens
from `>` on for a task with an end-of-query `>` (what a trained model answers),
every position otherwise (comparison tasks, programs without `>`); a run
trained with `--score` answers the positions it was scored on, as its program
does loaded with `rasp.load(P, score=...)`.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import NamedTuple

from .errors import RaspError


class Loader(NamedTuple):
    """A kind of model directory: any of `markers` in it says it is this kind;
    `load` = (module, function) of `rasp.load`, `run` = (module, function) of
    `rasp run DIR` (options: rasp.commands.add_run_arguments)."""
    kind: str
    markers: tuple
    load: tuple
    run: tuple


LOADERS = (
    Loader("training run", ("run.json", "latest.json", "checkpoints"),
           ("trainer.trained.inference", "load_run"), ("trainer.trained.inference", "run_trained")),
    Loader("exported model", ("vocab.json",),
           ("trainer.trained.inference", "load_export"), ("trainer.trained.inference", "run_trained")),
    Loader("compiled model", ("program.rasp", "config.json", "model.safetensors", "manifest.json"),
           ("compiler.compiled", "load_compiled"), ("compiler.cli", "run_compiled")),
)


def loader_of(directory) -> Loader:
    d = Path(directory)
    for loader in LOADERS:
        if any((d / name).exists() for name in loader.markers):
            return loader
    raise RaspError(f"{d}: not a model directory (a training run holds run.json, an exported model "
                    "vocab.json, a compiled model config.json and program.rasp)")


def _function(where: tuple, kind: str):
    module, name = where
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as e:
        raise RaspError(f"cannot read a {kind}: {e}") from None


def load(path, **options):
    """A `.rasp` program (`rasp.Program`), or the model in a directory: a
    training run (its newest checkpoint), an exported model (`rasp export`)
    or a compiled model (`rasp compile -o DIR`).  Options go to the
    directory's loader (training runs: `stop=`, `threshold=`, `device=`); a
    program takes `score=` (all, last or after:TOKEN: the positions its answers
    cover, as a run trained with `rasp train --program P --score` answers)."""
    p = Path(path)
    if p.is_dir():
        if "score" in options:
            raise RaspError(f"{path}: score= is for a .rasp program; a model answers the positions it was "
                            "trained on (its repr says which)")
        loader = loader_of(p)
        return _function(loader.load, loader.kind)(p, **options)
    from .program import load as load_program
    score = options.pop("score", None)
    if options:
        raise RaspError(f"{path}: a program takes only score= ({', '.join(sorted(options))})")
    return load_program(path, score)


def run_directory(args) -> int:
    """`rasp run DIR`: the loader of DIR's kind runs it."""
    loader = loader_of(args.program)
    return _function(loader.run, loader.kind)(args)
