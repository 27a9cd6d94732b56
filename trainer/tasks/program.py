"""A task = a program plus where its inputs come from; `program_task` makes every one.

Targets and T(n) come from the program through `ProgramLabeler`
(trainer/tasks/labels.py).  Inputs are drawn a batch at a time by
`ProgramInputs`, from one of

* the program's own `sample` statement (rasp/sampler.py): fresh inputs of any
  size n, training sizes LO..HI, evaluation beyond;
* a Python sampler beside the program, sample(rng, n, sym, train) -> one input:
  a registered task whose distribution the `sample` statement cannot express
  (trainer/tasks/fan.py says which and why);
* `--inputs FILE` (one input a line) and `--eval-inputs FILE` (held out; without
  it evaluation draws from the training file, so sizes above --max-train-n are
  a split by length); an input's size n is its token count before the marker
  (or its length), and a size the file lacks is drawn from the nearest it has.

Every drawn input is checked against the program's `require` lines (a
sampler gets MAX_TRIES draws per input; then a located error names the
require).

`rasp train --program P.rasp` records what it was trained on
(`program_record`: the program's text and SHA-256, the scored positions, the
inputs), and every later use (eval, run, load, export, resume) rebuilds the
task from that record (`task_of_record`); a registered task is rebuilt by name.
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from rasp.errors import RaspError, RaspFileError, RaspInputError, RaspRequireError, RaspRuntimeError
from rasp.program import parse_score
from rasp.readfile import read_text
from trainer.tasks.base import PaperHParams, Task, get_task
from trainer.tasks.labels import LABEL_LIMITS

MAX_TRIES = 100                 # draws per sampled input before its `require` is reported unsatisfiable
MAX_FILE_BYTES = 8 << 20        # an --inputs file, checked before reading
MAX_FILE_LINES = 100_000
LABEL_CHUNK = 1024              # inputs file lines labelled together when the file is read
PROBE = 16                      # inputs per size labelled to find the output tokens,
PROBE_SIZES = 12                # at this many sizes from the smallest to twice the largest trained
NEEDS_INPUTS = ("no inputs to train on: add a `sample` statement to the program (`rasp help sample`, e.g. "
                "`sample n in 1..10: {0, 1}[n] EOQ EOS[2]`), or give --inputs FILE (one input a line)")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_program_text(path) -> str:
    path = Path(path)
    if not path.exists():
        raise RaspError(f"--program {path}: no such file")
    # a regular file only (a FIFO or device is refused before it is opened), read with a size bound
    return read_text(path, MAX_FILE_BYTES, encoding="utf-8-sig")


def _scoring(program, score) -> tuple:
    """--score (None: from the marker `>` on when the program declares it, else
    every position; rasp/program.py `parse_score`, which `rasp.load(P, score=...)`
    answers by) -> (Task.target, marker symbol)."""
    kind, marker = parse_score(program.ir, score, "--score")
    return {"all": ("per_position", ">"), "last": ("per_sequence", ">")}.get(kind, ("fap", marker))


def _size(tokens: list, target: str, marker_code) -> int:
    """An input's size n: its tokens before the marker (or all of them)."""
    if target == "fap" and marker_code in tokens:
        return tokens.index(marker_code)
    return len(tokens)


def read_inputs(path, program, flag: str) -> list:
    """The lines of an inputs file, each parsed and checked against the program
    (vocabulary, length, `require`) before training starts."""
    if str(path) != "-" and not Path(path).exists():
        raise RaspError(f"{flag} {path}: no such file")
    text = read_text(path, MAX_FILE_BYTES, pipe=True)     # a file or a pipe with a writer: <(generate)
    from rasp.inputs import split_lines
    lines = split_lines(text)
    if not lines:
        raise RaspFileError(path, f"{flag}: the file holds no input")
    if len(lines) > MAX_FILE_LINES:
        raise RaspFileError(path, f"{flag}: more than {MAX_FILE_LINES:,} inputs")
    batch = [program.parse_input(line, i, str(path)) for i, line in enumerate(lines, 1)]
    program.check_batch(batch, LABEL_LIMITS, str(path))
    try:
        program.check_requires(batch)
    except RaspRequireError as e:
        message, loc, bad = e.failures[0]
        shown = ", ".join(str(i + 1) for i in bad[:10]) + (" …" if len(bad) > 10 else "")
        raise RaspError(f"{path}: line{'s' if len(bad) > 1 else ''} {shown} break{'' if len(bad) > 1 else 's'} "
                        f"this require: {message}", loc, e.source) from None
    _label_every_line(program, batch, path)
    return [" ".join(line.split()) for line in lines]


def _label_every_line(program, batch: list, path):
    """Run the program on every line before training starts, so that a line it cannot
    label (a loop past the interpreter's limits, a runtime fault) is named by its line
    here, not met as one of a drawn batch later.  By length, LABEL_CHUNK lines at a time."""
    order = sorted(range(len(batch)), key=lambda i: len(batch[i]))
    for start in range(0, len(order), LABEL_CHUNK):
        chunk = order[start:start + LABEL_CHUNK]
        try:
            program.run_batch([batch[i] for i in chunk], limits=LABEL_LIMITS)
        except RaspRuntimeError as e:
            line = chunk[e.input_index or 0] + 1
            at = f" ({e.loc.path}:{e.loc.line})" if e.loc is not None else ""
            raise RaspInputError(f"the program{at} cannot label this input: {e.reason}", line,
                                 where=str(path)) from None


def program_record(path, score=None, inputs=None, eval_inputs=None) -> dict:
    """What a run trained from a program records in run.json, checked: the
    program (text, SHA-256), the scored positions and the inputs it draws from."""
    import rasp
    text = read_program_text(path)
    program = rasp.loads(text, str(path))
    if not program.ir.loops:
        raise RaspError(f"{path}: the program has no loop, so it gives no step count T(n) for a looped model "
                        "(wrap its work in `loop COUNT:`)")
    target, marker = _scoring(program, score)
    if eval_inputs is not None and inputs is None and program.ir.sampler is None:
        raise RaspError("--eval-inputs: the training inputs come from --inputs FILE or the program's `sample`")
    if inputs is None and program.ir.sampler is None:
        from rasp.ir import Loc
        raise RaspError(NEEDS_INPUTS, Loc(str(path), 1, 1), text)
    record = {"path": str(Path(path).resolve()), "sha256": sha256(text), "text": text,
              "score": score or ("after:>" if target == "fap" else "all"),
              "inputs": read_inputs(inputs, program, "--inputs") if inputs is not None else None,
              "eval_inputs": read_inputs(eval_inputs, program, "--eval-inputs") if eval_inputs is not None else None,
              # the files as the user named them, for what `rasp eval` and the summary say they measured
              "inputs_file": str(inputs) if inputs is not None else None,
              "eval_inputs_file": str(eval_inputs) if eval_inputs is not None else None}
    if target == "fap":
        code = program.ir.symbols[marker]
        for key, file in (("inputs", inputs), ("eval_inputs", eval_inputs)):
            for i, line in enumerate(record[key] or [], 1):
                if code not in program.parse_input(line):
                    raise RaspInputError(f"--{key.replace('_', '-')}: the input has no {marker!r}, where the scored "
                                         f"positions start (--score {record['score']})", i, where=str(file))
    inputs, outputs = _probe(record)
    _check_targets_vary(record, inputs, outputs, program, given=score is not None)
    values = set(int(v) for v in program.ir.vocab)
    for out in outputs:
        values.update(int(v) for v in out)
    # the values the program may output at a scored position: its input vocabulary and every value
    # it gives on the probe (recorded, so the model's read-out never changes after the run starts)
    record["output_tokens"] = sorted(values)
    return record


def _probe(record: dict) -> tuple:
    """(inputs, the program's outputs) of a probe of inputs of each size, from the
    smallest to twice the largest trained, drawn as training and evaluation draw."""
    task = task_of_record(record, probe=True)
    from trainer.tasks.labels import ProgramLabeler
    labeler = ProgramLabeler(record["path"], source=record["text"])
    rng = np.random.default_rng(0)
    sizes = sorted({int(n) for n in np.linspace(task.min_n, task.paper.test_n, PROBE_SIZES)})
    inputs = [x for n in sizes for train in (True, False) for x in task.draw(rng, [n] * PROBE, {}, train)]
    outputs, _ = labeler(inputs)
    return inputs, outputs


def _check_targets_vary(record: dict, inputs: list, outputs: list, program, given: bool):
    """Refuse a scoring whose targets never vary over the probe inputs (one value at
    every scored position, or one answer to every input): the run would learn a
    constant and report success.  Located at the program's `output` line."""
    import rasp
    scored = rasp.loads(record["text"], record["path"], score=record["score"])
    try:
        answers = {tuple(out[scored.scored_start(list(x)):]) for x, out in zip(inputs, outputs)}
    except RaspInputError:
        marker = record["score"][6:]
        bad = next(x for x in inputs if program.ir.symbols[marker] not in x)
        raise RaspError(f"--score {record['score']}: an input drawn for training has no {marker!r}, where the "
                        f"scored positions start: {program.format_output(bad)}") from None
    values = {v for answer in answers for v in answer}
    distinct = len({tuple(x) for x in inputs})
    if len(values) > 1 and (len(answers) > 1 or distinct < 2):
        return
    shown = " ".join(program.token_text(v) for v in next(iter(answers)))
    where = {"all": "at every position", "last": "at the last position"}.get(record["score"], f"from "
                                                                          f"{record['score'][6:]!r} on")
    raise RaspError(f"--score {record['score']}{'' if given else ' (the default)'}: the program's answer {where} "
                    f"is {shown!r} on each of the "
                    f"{distinct} probe inputs, so the run would learn a constant; score the positions where "
                    "the answer varies with --score all (every position), --score last or --score after:TOKEN "
                    "(from a symbol on)", program.ir.output_loc, program.ir.source)


def program_task(path, *, name: str = "", source: str = "", sampler: Optional[Callable] = None,
                 **fields) -> Task:
    """The task of the program at `path` (`source`: its text, when a run keeps it),
    its inputs drawn by `sampler`, or by the program's `sample` statement when it is
    None.  `fields`: the rest of `Task` (scoring, curriculum, output values)."""
    return Task(name or Path(path).name, draw=ProgramInputs(path, source, sampler), program=str(path),
                source=source, **fields)


class ProgramInputs:
    """`Task.draw`: one input per size n, each redrawn while it breaks a `require`.
    The program is read at the first draw, so registering a task reads no file."""

    def __init__(self, path, source: str = "", sampler: Optional[Callable] = None):
        self.path, self.source, self.sampler = str(path), source, sampler

    @functools.cached_property
    def program(self):
        import rasp
        return rasp.loads(self.source, self.path) if self.source else rasp.load(self.path)

    def __call__(self, rng: np.random.Generator, lengths, sym: dict, train: bool) -> list:
        draw_one, drawer = self._sampler(lengths, sym, train)
        out = [draw_one(rng, int(n)) for n in lengths]
        todo = list(range(len(out)))
        for _ in range(MAX_TRIES):
            try:
                self.program.check_requires([out[i] for i in todo])
                return out
            except RaspRequireError as e:
                bad = sorted({i for _, _, idx in e.failures for i in idx})
                failure = e.failures[0]
                todo = [todo[i] for i in bad]
            for i in todo:
                out[i] = draw_one(rng, int(lengths[i]))
        message, loc, _ = failure
        raise RaspError(f"{drawer} drew inputs of size n = {int(lengths[todo[0]])} that broke this require "
                        f"{MAX_TRIES} times in a row: {message} (make the sampler draw only inputs the program "
                        "accepts)", loc, self.program.ir.source)

    def origin(self) -> dict:
        """Where these inputs come from (`inputs_origin`)."""
        if self.sampler is not None:
            return {"source": "generator", "name": getattr(self.sampler, "__name__", "sampler"),
                    "program": self.path}
        statement = self.program.ir.sampler
        if statement is None:
            return {"source": "none"}
        line = statement.loc.line
        return {"source": "sample", "line": line,
                "statement": self.program.ir.source.splitlines()[line - 1].strip()}

    def _sampler(self, lengths, sym: dict, train: bool) -> tuple:
        """(draw_one(rng, n) -> one input, what drew it, for errors)."""
        if self.sampler is not None:
            name = getattr(self.sampler, "__name__", "")
            return (lambda rng, n: self.sampler(rng, n, sym, train)), f"the sampler {name} of {self.path}"
        statement = self.program.ir.sampler
        if statement is None:
            from rasp.ir import Loc
            raise RaspError(NEEDS_INPUTS, Loc(self.path, 1, 1), self.program.ir.source)
        for n in sorted(set(int(n) for n in lengths)):
            statement.check_size(n)           # bounded before anything is drawn
        return statement.draw, f"the `sample` statement (line {statement.loc.line})"


_CACHE: dict = {}


def task_of_record(record: dict, probe: bool = False) -> Task:
    """The Task of a run's program record (cached: eval and training call it often)."""
    key = (sha256(repr(sorted(record.items()))), probe)
    if key not in _CACHE:
        while len(_CACHE) >= 8:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = _recorded_task(record, probe)
    return _CACHE[key]


def _recorded_task(record: dict, probe: bool) -> Task:
    import rasp
    program = rasp.loads(record["text"], record["path"])
    target, marker = _scoring(program, record["score"])
    code = program.ir.symbols.get(marker)
    sampler: Optional[Callable] = None            # the program's `sample`
    pools = origins = None
    if record.get("inputs"):
        held = bool(record.get("eval_inputs"))
        # training draws from the lines as given (a repeated line weighs more); evaluations score
        # each distinct input once
        train_pool = _pool(program, record["inputs"], target, code)
        drawn = {True: train_pool, False: _pool(program, record["eval_inputs"], target, code) if held else train_pool}
        pools = {train: _distinct(drawn[train]) for train in (True, False)}
        origins = {True: _file_origin(record, "inputs_file"),
                   False: _file_origin(record, "eval_inputs_file" if held else "inputs_file")}
        lo, hi = min(drawn[True]), max(drawn[True])
        sampler, eval_sizes = _from_pools(drawn), tuple(sorted(drawn[False]))
        statement = ProgramInputs(record["path"], record["text"]) if program.ir.sampler is not None else None
        draw_exact = _exact_from_files(pools, statement)
    else:
        lo, hi, eval_sizes, draw_exact = program.ir.sampler.lo, program.ir.sampler.hi, (), None
    outputs = [] if probe else list(record["output_tokens"])
    return program_task(record["path"], source=record["text"], sampler=sampler, output_values=lambda sym: outputs,
                        paper=PaperHParams(2, 8, 1000, hi, max(2 * hi, hi + 1)), target=target, min_n=lo,
                        symbols=(marker,) if target == "fap" else (), description=f"the program {record['path']}",
                        marker=marker, eval_sizes=eval_sizes, pools=pools, origins=origins, draw_exact=draw_exact)


def _file_origin(record: dict, key: str) -> dict:
    """Where a run's file inputs came from: the path as the user gave it (None: a run
    recorded before the path was kept)."""
    return {"source": "file", "file": record.get(key)}


def _pool(program, lines: list, target: str, code) -> dict:
    """{size n: the file's inputs of that size}, in file order."""
    pool: dict = {}
    for line in lines:
        tokens = program.parse_input(line)
        pool.setdefault(_size(tokens, target, code), []).append(tokens)
    return pool


def _distinct(pool: dict) -> dict:
    """The pool with a line given twice kept once (an evaluation scores each input once)."""
    return {n: [list(x) for x in dict.fromkeys(map(tuple, group))] for n, group in pool.items()}


def inputs_origin(task: Task, train: bool) -> dict:
    """Where `task`'s training (train) or evaluation inputs come from, as the
    evaluation file records it: {"source": "file", "file": path as given},
    {"source": "sample", "statement": its text, "line": its line} (the program's
    `sample`), or {"source": "generator", "name": the sampler's name, "program": path}."""
    if task.origins is not None:
        return dict(task.origins[train])
    draw = task.draw
    if isinstance(draw, ProgramInputs):
        return draw.origin()
    return {"source": "generator", "name": getattr(draw, "__name__", type(draw).__name__)}


def _from_pools(pools: dict):
    """A sampler of the file's inputs: uniform among those of size n (the nearest size
    below n the file has, else the nearest above); eval draws from the held-out pool."""
    sizes_of = {train: sorted(pool) for train, pool in pools.items()}

    def sample_file(rng, n: int, sym: dict, train: bool) -> list:
        pool, sizes = pools[train], sizes_of[train]
        below = [s for s in sizes if s <= int(n)]
        group = pool[below[-1] if below else sizes[0]]
        return list(group[int(rng.integers(0, len(group)))])
    return sample_file


def _exact_from_files(pools: dict, statement: Optional["ProgramInputs"]):
    """Task.draw_exact of a task whose inputs come from files: up to k distinct inputs of size
    exactly n from the held-out and training files together (each file's own order, a random
    choice where there are more), topped up from the program's `sample` statement (`statement`)
    when it has one; [] where neither has an input of that size."""
    by_size: dict = {}
    for pool in (pools[False], pools[True]):
        for size, group in pool.items():
            by_size.setdefault(size, {}).update((tuple(x), None) for x in group)    # distinct, in order
    by_size = {size: list(inputs) for size, inputs in by_size.items()}

    def draw_exact(rng, n: int, k: int, sym: dict) -> list:
        have = by_size.get(int(n), [])
        picked = [list(have[i]) for i in sorted(rng.choice(len(have), size=min(k, len(have)), replace=False))] \
            if have else []
        if statement is not None and len(picked) < k and _statement_draws(statement, int(n)):
            picked += statement(rng, [int(n)] * (k - len(picked)), sym, True)
        return picked
    return draw_exact


def _statement_draws(statement: "ProgramInputs", n: int) -> bool:
    """Whether the program's `sample` statement draws inputs of size n (not below its
    smallest size, none longer than the input length limit)."""
    try:
        statement.program.ir.sampler.check_size(n)
    except RaspError:
        return False
    return True


def task_of(run: dict) -> Task:
    """The task a run trains on (run.json, or RunConfig.to_dict()): its program's, or a registered one."""
    if run.get("program"):
        return task_of_record(run["program"])
    # every task is registered by now: importing this module ran trainer/tasks/__init__.py
    return get_task(run["task"])


def check_unchanged(record: dict, path=None):
    """--resume: refuse (located at the program) when the program file is not the one the run trained on."""
    path = path or record["path"]
    text = read_program_text(path)
    if sha256(text) != record["sha256"]:
        from rasp.ir import Loc
        raise RaspError(f"the program changed since the run started (SHA-256 {sha256(text)[:12]}…, the run "
                        f"records {record['sha256'][:12]}…): a run trains one program; restore it, or start a new "
                        "run with another --out", Loc(str(path), 1, 1), text)
