"""Which positions a program's first loop waits on, and until which step: what a
trained model's halting clock is taught at each position.

The program is causal: its values at positions 0..i depend on the input up to i
only.  So the loop's count on the prefix x[:i+1] is the step from which
positions 0..i are done, `reach_i`.  It is taken as a running maximum along the
input, capped at the whole input's count T (a count that a longer prefix lowers
does not lower it).  Position i is *counting* where reach rises there,
`need_i = reach_i`, and 0 elsewhere.  So every position is done from T on, and before T the position
where reach first gets to T is not.  Where reach rises wherever a loop counts
positions (`loop n`, n the query's size), the counting positions are the first
T, with need_i = i + 1: a marker that passes one position per step.

* `loop COUNT`: reach_i is COUNT on the prefix (its host expression, which
  reads the raw input only): `count(seq, 1)` counts at every 1, each waiting
  for as many steps as there are ones up to it.
* `loop N until stable`: a prefix's loop stops one step after the last step
  that changed any of its positions, so reach_i is 1 + the last step that
  changed a position up to i (capped at T: N ran out).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import ProgramIR
from .driver import BatchResult
from .hosts import prefix_values


def loop_needs(ir: ProgramIR, batch: list, result: BatchResult, params: Optional[dict] = None) -> list:
    """Per input of `batch` (run as `result`), [len(x)] int64: the step from which
    each position stops the first loop from being done, 0 at the positions it
    does not count."""
    first = ir.loops[0]
    if first.until_stable:
        assert result.settled is not None, "an `until stable` loop's run records where it settled"
        reach = [last + 1 for last in result.settled]
    else:
        reach = prefix_values(ir, batch, first.count, params)
    needs = []
    for r, T in zip(reach, result.steps[:, 0]):
        r = np.minimum(np.maximum.accumulate(np.maximum(r, 0)), T)
        rises = r > np.concatenate([[0], r[:-1]])
        needs.append(np.where(rises, r, 0).astype(np.int64))
    return needs
