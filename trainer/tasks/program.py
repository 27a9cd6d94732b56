"""A Fan-style task made from a program file: `rasp train --program P.rasp`.

The task is what a registered one is (trainer/tasks/fan.py `Task`): a sampler
and how outputs are scored; targets and T(n) come from the program through
`ProgramLabeler`, as for every Fan task.  Its inputs come from

* the program's own `sample` statement (rasp/sampler.py): fresh inputs of any
  size n, training sizes LO..HI, evaluation beyond; or
* `--inputs FILE` (one input a line) and `--eval-inputs FILE` (held out; without
  it evaluation draws from the training file, so sizes above --max-train-n are
  a split by length); an input's size n is its token count before the marker
  (or its length), and a size the file lacks is drawn from the nearest it has.

Every drawn input is checked against the program's `require` lines (a
sampler gets MAX_TRIES draws per input; then a located error names the
require).  The run records what it was trained on (`program_record`: the
program's text and SHA-256, the scored positions, the inputs), and every later
use (eval, run, load, export, resume) rebuilds the task from that record.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from rasp.errors import RaspError, RaspFileError, RaspRequireError
from trainer.tasks.fan import PaperHParams, Task

MAX_TRIES = 100                 # draws per sampled input before its `require` is reported unsatisfiable
MAX_FILE_BYTES = 8 << 20        # an --inputs file, checked before reading
MAX_FILE_LINES = 100_000
PROBE = 16                      # inputs per size labelled to find the output tokens,
PROBE_SIZES = 12                # at this many sizes from the smallest to twice the largest trained
SCORES = ("all", "last", "after:TOKEN")
NEEDS_INPUTS = ("no inputs to train on: add a `sample` statement to the program (`rasp help sample`, e.g. "
                "`sample n in 1..10: {0, 1}[n] EOQ EOS[2]`), or give --inputs FILE (one input a line)")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_program_text(path) -> str:
    path = Path(path)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise RaspFileError(path, f"is larger than {MAX_FILE_BYTES >> 20} MiB: not a program")
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise RaspError(f"--program {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise RaspFileError(path, f"cannot read the program ({e})") from None


def _scoring(program, score) -> tuple:
    """--score (None: from the marker `>` on when the program declares it, else
    every position) -> (Task.target, marker symbol)."""
    if score is None:
        score = "after:>" if ">" in program.ir.symbols else "all"
    if score == "all":
        return "per_position", ">"
    if score == "last":
        return "per_sequence", ">"
    if score.startswith("after:") and score[6:]:
        marker = score[6:]
        if marker not in program.ir.symbols:
            raise RaspError(f"--score {score}: {marker!r} is not a symbol of {program.path} (its symbols: "
                            f"{' '.join(program.ir.symbols) or 'none'})")
        return "fap", marker
    raise RaspError(f"--score {score}: one of {', '.join(SCORES)}")


def _size(tokens: list, target: str, marker_code) -> int:
    """An input's size n: its tokens before the marker (or all of them)."""
    if target == "fap" and marker_code in tokens:
        return tokens.index(marker_code)
    return len(tokens)


def read_inputs(path, program, flag: str) -> list:
    """The lines of an inputs file, each parsed and checked against the program
    (vocabulary, length, `require`) before training starts."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise RaspFileError(path, f"{flag}: larger than {MAX_FILE_BYTES >> 20} MiB")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RaspError(f"{flag} {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise RaspFileError(path, f"{flag}: cannot read it ({e})") from None
    from rasp.inputs import split_lines
    from rasp.limits import RunLimits
    lines = split_lines(text)
    if not lines:
        raise RaspFileError(path, f"{flag}: the file holds no input")
    if len(lines) > MAX_FILE_LINES:
        raise RaspFileError(path, f"{flag}: more than {MAX_FILE_LINES:,} inputs")
    batch = [program.parse_input(line, i, str(path)) for i, line in enumerate(lines, 1)]
    program.check_batch(batch, RunLimits(), str(path))
    try:
        program.check_requires(batch)
    except RaspRequireError as e:
        message, loc, bad = e.failures[0]
        shown = ", ".join(str(i + 1) for i in bad[:10]) + (" …" if len(bad) > 10 else "")
        raise RaspError(f"{path}: line{'s' if len(bad) > 1 else ''} {shown} break{'' if len(bad) > 1 else 's'} "
                        f"this require: {message}", loc, e.source) from None
    return [" ".join(line.split()) for line in lines]


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
              "eval_inputs": read_inputs(eval_inputs, program, "--eval-inputs") if eval_inputs is not None else None}
    if target == "fap":
        code = program.ir.symbols[marker]
        for key in ("inputs", "eval_inputs"):
            for i, line in enumerate(record[key] or [], 1):
                if code not in program.parse_input(line):
                    raise RaspError(f"--{key.replace('_', '-')}: line {i} has no {marker!r}, where the scored "
                                    f"positions start (--score {record['score']})")
    record["output_tokens"] = _output_tokens(record)
    return record


def _output_tokens(record: dict) -> list:
    """The values the program may output at a scored position: its input
    vocabulary and every value it gives on a probe of inputs of each size
    (recorded, so the model's read-out never changes after the run starts)."""
    task = program_task(record, probe=True)
    from trainer.tasks.labels import ProgramLabeler
    labeler = ProgramLabeler(record["path"], source=record["text"])
    rng = np.random.default_rng(0)
    sizes = sorted({int(n) for n in np.linspace(task.min_n, task.paper.test_n, PROBE_SIZES)})
    inputs = [x for n in sizes for train in (True, False) for x in task.draw(rng, [n] * PROBE, {}, train)]
    outputs, _ = labeler(inputs)
    values = set(labeler.vocab)
    for out in outputs:
        values.update(int(v) for v in out)
    return sorted(values)


_CACHE: dict = {}


def program_task(record: dict, probe: bool = False) -> Task:
    """The Task of a run's program record (cached: eval and training call it often)."""
    key = (sha256(repr(sorted(record.items()))), probe)
    if key not in _CACHE:
        while len(_CACHE) >= 8:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = _task(record, probe)
    return _CACHE[key]


def _task(record: dict, probe: bool) -> Task:
    import rasp
    program = rasp.loads(record["text"], record["path"])
    target, marker = _scoring(program, record["score"])
    code = program.ir.symbols.get(marker)
    if record.get("inputs"):
        train_pool = _pool(program, record["inputs"], target, code)
        pools = {True: train_pool, False: _pool(program, record["eval_inputs"], target, code)
                 if record.get("eval_inputs") else train_pool}
        lo, hi = min(pools[True]), max(pools[True])
        draw_one = _from_pools(pools)
        eval_sizes = tuple(sorted(pools[False]))
    else:
        sampler = program.ir.sampler
        lo, hi, eval_sizes = sampler.lo, sampler.hi, ()
        draw_one = _from_sampler(program, sampler)
    outputs = [] if probe else list(record["output_tokens"])
    return Task(Path(record["path"]).name, sample=lambda rng, n, sym, train: draw_one(rng, [n], train)[0],
                output_values=lambda sym: outputs, paper=PaperHParams(2, 8, 1000, hi, max(2 * hi, hi + 1)),
                program=record["path"], target=target, min_n=lo, symbols=(marker,) if target == "fap" else (),
                description=f"the program {record['path']}", marker=marker, source=record["text"],
                draw=lambda rng, lengths, sym, train: draw_one(rng, lengths, train), eval_sizes=eval_sizes)


def _pool(program, lines: list, target: str, code) -> dict:
    pool: dict = {}
    for line in lines:
        tokens = program.parse_input(line)
        pool.setdefault(_size(tokens, target, code), []).append(tokens)
    return pool


def _from_pools(pools: dict):
    """Inputs drawn uniformly among the file's inputs of size n (the nearest size
    below n the file has, else the nearest above); eval draws from the held-out pool."""
    sizes_of = {train: sorted(pool) for train, pool in pools.items()}

    def draw(rng, lengths, train: bool) -> list:
        pool, sizes = pools[train], sizes_of[train]
        out = []
        for n in lengths:
            below = [s for s in sizes if s <= int(n)]
            group = pool[below[-1] if below else sizes[0]]
            out.append(list(group[int(rng.integers(0, len(group)))]))
        return out
    return draw


def _from_sampler(program, sampler):
    """Fresh inputs from the program's `sample`, redrawn while they break a `require`."""
    def draw(rng, lengths, train: bool) -> list:
        for n in sorted(set(int(n) for n in lengths)):
            sampler.check_size(n)           # bounded before anything is drawn
        out = [sampler.draw(rng, int(n)) for n in lengths]
        todo = list(range(len(out)))
        for _ in range(MAX_TRIES):
            try:
                program.check_requires([out[i] for i in todo])
                return out
            except RaspRequireError as e:
                bad = sorted({i for _, _, idx in e.failures for i in idx})
                failure = e.failures[0]
                todo = [todo[i] for i in bad]
            for i in todo:
                out[i] = sampler.draw(rng, int(lengths[i]))
        message, loc, _ = failure
        raise RaspError(f"the `sample` statement (line {sampler.loc.line}) drew inputs of size n = "
                        f"{int(lengths[todo[0]])} that broke this require {MAX_TRIES} times in a row: {message} "
                        "(make the sampler draw only inputs the program accepts)", loc, program.ir.source)
    return draw


def task_of(run: dict) -> Task:
    """The task a run trains on (run.json, or RunConfig.to_dict()): its program's, or a registered one."""
    if run.get("program"):
        return program_task(run["program"])
    from trainer.tasks import get_task
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
