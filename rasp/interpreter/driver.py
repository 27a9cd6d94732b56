"""The batch driver: `execute` pads a batch, checks the program's `require`
contract, runs it (`Run`) and unpads the outputs; large batches of very mixed
lengths run in a few groups of similar length (`length_groups`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import RaspRequireError, RaspRuntimeError
from ..ir import ProgramIR
from ..limits import RunLimits
from .hosts import pad_batch
from .run import Run


@dataclass
class BatchResult:
    outputs: list                    # list[list[int]], each as long as its input
    steps: np.ndarray                # [B, len(ir.loops)] iterations each loop ran
    trace: Optional[list] = None     # list[TraceEvent] for input 0, when asked
    # an `until stable` first loop: per input, the last step it changed each position (0: never)
    settled: Optional[list] = None


GROUP_WORK = 2**16                   # padded tokens per length group (see length_groups)


def execute(ir: ProgramIR, batch: list, params: Optional[dict] = None, *,
            trace: bool = False, limits: Optional[RunLimits] = None) -> BatchResult:
    """Run `ir` on every input of `batch` (validated lists of ints)."""
    limits = limits or RunLimits()
    groups = [] if trace else length_groups([len(x) for x in batch])
    if len(groups) > 1:
        try:
            parts = [(idx, execute_as_one(ir, [batch[b] for b in idx], params, False, limits))
                     for idx in groups]
        except RaspRuntimeError:
            pass        # run as one batch: the error names the same input as always
        else:
            outputs = [None] * len(batch)
            settled: Optional[list] = [None] * len(batch) if parts[0][1].settled is not None else None
            steps = np.empty((len(batch), len(ir.loops)), dtype=np.int64)
            for idx, res in parts:
                for i, b in enumerate(idx):
                    outputs[b] = res.outputs[i]
                    if settled is not None and res.settled is not None:
                        settled[b] = res.settled[i]
                steps[idx] = res.steps
            return BatchResult(outputs, steps, None, settled)
    return execute_as_one(ir, batch, params, trace, limits)


def length_groups(lengths: list) -> list:
    """Large batches of mixed lengths run in groups of similar length: padding
    to each group's own longest input and looping to each group's own largest
    count saves more than the extra per-group overhead costs.  Returns lists of
    input indices (a single group, or none, when grouping does not pay)."""
    if len(lengths) < 128:
        return []
    n_groups = 1
    while n_groups < 4 and len(lengths) * max(lengths) >= GROUP_WORK * 2 * n_groups:
        n_groups *= 2
    if n_groups == 1 or max(lengths) < 1.25 * min(lengths):
        return []
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    bounds = [len(order) * g // n_groups for g in range(n_groups + 1)]
    return [order[lo:hi] for lo, hi in zip(bounds, bounds[1:])]


def execute_as_one(ir, batch, params, trace, limits) -> BatchResult:
    """Run `batch` padded to one array (`execute` without length groups)."""
    if not batch:
        return BatchResult([], np.zeros((0, len(ir.loops)), dtype=np.int64), [] if trace else None)
    tokens, lengths = pad_batch(batch)
    # padded positions may overflow or divide garbage: never an error there
    with np.errstate(all="ignore"):
        run = Run(ir, tokens, lengths, params or {}, trace, limits)
        _check_requires(run)
        run.input_event()
        run.block(ir.body)
        out = run.sop(run.value(ir.output))
    run.output_event(out)
    if (lengths == run.N).all():
        outputs = out.tolist()
    else:
        outputs = [out[b, :n].tolist() for b, n in enumerate(lengths.tolist())]
    first = ir.loops[0] if ir.loops else None
    settled = None
    if first is not None and first.until_stable:
        last = run.settled.get(first, np.zeros((run.B, run.N), dtype=np.int64))
        settled = [last[b, :n] for b, n in enumerate(lengths.tolist())]
    return BatchResult(outputs, run.steps, run.events, settled)


def check_requires(ir: ProgramIR, batch: list, params: Optional[dict] = None) -> None:
    """Raise RaspRequireError if an input of `batch` breaks a `require` of
    the program (for back ends that do not run the program itself)."""
    if ir.requires and batch:
        tokens, lengths = pad_batch(batch)
        with np.errstate(all="ignore"):
            _check_requires(Run(ir, tokens, lengths, params or {}, False, RunLimits()))


def _check_requires(run: Run) -> None:
    """Every require condition must be nonzero at every (valid) position."""
    failures = []
    for req in run.ir.requires:
        v = run.value(req.node)
        if isinstance(v, np.ndarray) and v.shape == (run.B, run.N):
            bad = ((v == 0) & run.valid).any(axis=1)
        else:
            bad = np.broadcast_to(np.asarray(v).reshape(-1) == 0, (run.B,))
        if bad.any():
            failures.append((req.message, req.loc, np.flatnonzero(bad).tolist()))
    if failures:
        raise RaspRequireError(failures, run.ir.source)
