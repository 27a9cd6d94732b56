"""Where targets and step counts come from.

`ProgramLabeler` runs the task's program through the interpreter: its output
is the target and the iteration count of its (single) top-level loop is T(n).
Comparison tasks whose program has no loop (flip-flop) pass `need_loop=False`
and get T = 0.
`FunctionLabeler` wraps a plain Python function with the same interface; it
exists for tests and for tasks that have no program yet.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from rasp.errors import RaspError, RaspRequireError, RaspRuntimeError, shorten
from rasp.limits import RunLimits

# the interpreter's limits when it labels a run's inputs (`rasp train`, `rasp eval`): no flag of
# those commands sets them, so an error about one says what to do instead of naming a flag
LABEL_LIMITS = RunLimits(fixed="a limit of labelling a run's inputs, which no flag changes: leave such inputs out")


class ProgramLabeler:
    def __init__(self, path, need_loop: bool = True, source=None):
        """`source`: the program's text (a run trained from a program file
        keeps it in run.json), else read from `path`."""
        import rasp  # the front end; imported late so trainer/ loads without it
        path = Path(path)
        if source is None and not path.exists():
            raise RaspError(f"task program {path} not found")
        self.path = str(path)
        self.program = rasp.load(str(path)) if source is None else rasp.loads(source, str(path))
        ir = self.program.ir
        if need_loop and not ir.loops:
            raise RaspError(f"{path}: the task program has no loop, so it gives no step count T(n)")
        self.symbols = dict(ir.symbols)
        self.vocab = sorted(int(v) for v in ir.vocab)

    def __call__(self, inputs: Sequence[Sequence[int]], limits=None, where: str = "input", needs: bool = False):
        """(outputs, T per input); `limits` (rasp.RunLimits) and `where` as
        `Program.run_batch` takes them (a user's inputs: `rasp run RUN`).
        needs: also, per input, the step from which each position stops the
        first loop from being done (`Program.loop_needs`: a clock's targets)."""
        if not len(inputs):             # a mixed split can give one of its parts no examples
            return ([], np.zeros(0, np.int64)) + (([],) if needs else ())
        batch = [list(map(int, x)) for x in inputs]
        try:
            res = self.program.run_batch(batch, limits=limits or LABEL_LIMITS, where=where)
        except RaspRuntimeError as e:
            if limits is not None or e.input_index is None or isinstance(e, RaspRequireError):
                raise                   # a user's inputs (`rasp run RUN`), numbered as given
            x = inputs[e.input_index]   # one of a batch drawn for training or evaluation: shown, not numbered
            text = " ".join(self.program.token_text(int(v)) for v in x)
            raise RaspError(f"{e.reason}, on a drawn input of {len(x)} tokens: {shorten(text)}", e.loc,
                            e.source) from None
        steps = np.asarray(res.steps).reshape(len(inputs), -1)
        # the first loop in source order; 0 for a loop-free program (flip-flop)
        steps = steps[:, 0].astype(np.int64) if steps.shape[1] else np.zeros(len(inputs), np.int64)
        outputs = [list(map(int, o)) for o in res.outputs]
        return (outputs, steps, self.program.loop_needs(batch, res)) if needs else (outputs, steps)


class FunctionLabeler:
    """fn(tokens) -> (output tokens, T)."""

    def __init__(self, fn: Callable, symbols: dict, vocab: Sequence[int]):
        self.fn, self.symbols, self.vocab = fn, dict(symbols), sorted(int(v) for v in vocab)
        self.path = "<function>"

    def __call__(self, inputs):
        outs, steps = zip(*(self.fn(list(x)) for x in inputs)) if inputs else ((), ())
        return [list(o) for o in outs], np.asarray(steps, dtype=np.int64)
