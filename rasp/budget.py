"""One work budget per input for a whole run (`--max-work`).

`--max-steps` bounds each loop alone, so nested loops multiply: three nested
loops of 10,000 steps are 10^12 steps.  The budget bounds the total instead,
in element operations: every s-op or scalar the interpreter computes costs
n (the input's length), every selector reduced through the dense [n, n]
matrix costs n^2.

It is checked twice:
  * before the run, from the loop counts (host expressions: known per input
    before anything runs) -- a lower bound that counts every node at n and
    an `until stable` loop as one iteration, so it never refuses a run that
    fits;
  * during the run, after each loop iteration, from the measured cost of the
    iteration times the iterations left (for `until stable` loops, from the
    work done so far) -- this catches dense selectors within one iteration.
Either way the error is located at the loop and names the estimate.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .errors import RaspRuntimeError
from .ir import SELECTOR, Loop, LoopOut, LoopState, Node, ProgramIR

_RAISE = "raise it with --max-work"


def _computed_items(block) -> int:
    """Nodes the interpreter computes each time it runs `block` (selectors,
    loop states and loop outputs are built on demand, and cost nothing here)."""
    return sum(1 for item in block.items
               if isinstance(item, Node) and item.kind != SELECTOR
               and not isinstance(item, (LoopOut, LoopState)))


def loop_counts(hosts, loop: Loop, max_steps=None) -> np.ndarray:
    """[B] float iterations a loop may run per entry (an error in its count: 0;
    a count over max_steps: max_steps, that limit reports it)."""
    count, err = hosts.value(loop.count)
    n = np.maximum(count, 0).astype(np.float64)
    if err is not None:
        n = np.where(err != 0, 0.0, n)
    if max_steps is not None:
        n = np.minimum(n, float(max_steps))
    return n


def static_work(ir: ProgramIR, hosts, lengths, max_steps=None):
    """([B] lower bound of each input's work, [(loop, [B] work of that loop
    with the loops inside it, over the whole run)] in source order)."""
    length = np.asarray(lengths, dtype=np.float64)
    per_loop: list[Optional[tuple[Loop, np.ndarray]]] = []     # None while its body is costed

    def cost(block, times):
        total = _computed_items(block) * length
        for item in block.items:
            if isinstance(item, Loop):
                n = loop_counts(hosts, item, max_steps)
                if item.until_stable:
                    n = np.minimum(n, 1.0)          # may stop after its first iteration
                slot = len(per_loop)
                per_loop.append(None)
                body = n * cost(item.body, times * n)
                per_loop[slot] = (item, times * body)
                total = total + body
        return total

    return cost(ir.body, np.ones_like(length)), per_loop


def _iterations_text(n: float) -> str:
    return f"{n:,.0f}" if n < 1e15 else f"{n:.3g}"


class Meter:
    """Counts the work of a batched run and enforces the budget."""

    def __init__(self, ir: ProgramIR, hosts, lengths, max_work: int, max_steps=None, advice: str = _RAISE):
        self.ir, self.hosts, self.max_work, self.max_steps = ir, hosts, max_work, max_steps
        self.advice = advice        # what an error says to do (RunLimits.advice)
        self.length = np.asarray(lengths, dtype=np.float64)
        self.work = np.zeros(len(self.length))      # charged so far, per input
        self.longest = float(self.length.max()) if len(self.length) else 0.0
        self.upper = 0.0         # >= self.work.max(): lets the common case skip array work
        self.linear = 0          # node evaluations (cost n each), counted by the interpreter
        self.quadratic = 0       # dense selector reductions (cost n^2 each)
        self._done = (0, 0)

    def check_before_run(self):
        total, per_loop = static_work(self.ir, self.hosts, self.length, self.max_steps)
        over = total > self.max_work
        if not over.any():
            return
        b = int(np.argmax(over))
        # name the outermost loop that alone exceeds the budget, else the costliest
        culprit = next((loop for loop, w in per_loop if w[b] > self.max_work), None)
        if culprit is None:
            culprit = max(per_loop, key=lambda lw: lw[1][b])[0]
        raise RaspRuntimeError(
            f"this run would cost at least {total[b]:.3g} element operations (this loop and the loops in "
            f"it: {_iterations_text(_iterations(self.hosts, culprit, self.max_steps)[b])} iterations on "
            f"{int(self.length[b])} tokens); the limit is {self.max_work:.3g} per input ({self.advice})",
            loc=culprit.loc, source=self.ir.source, input_index=b)

    def flush(self, live: np.ndarray):
        """Charge the work counted since the last flush to the inputs in `live`."""
        done = (self.linear, self.quadratic)
        if done != self._done:
            dl, dq = done[0] - self._done[0], done[1] - self._done[1]
            cost = dl * self.length if dq == 0 else dl * self.length + dq * self.length * self.length
            self.work += live * cost
            self.upper += dl * self.longest + dq * self.longest * self.longest
            self._done = done

    def check_loop(self, loop: Loop, active, before, upper_before, count, t: int, fail):
        """After iteration t: refuse if the work so far, plus this
        iteration's cost times the iterations left (count - t; unknown for
        `until stable`), exceeds the budget.  Scalar bounds settle the common
        case without array work."""
        if loop.until_stable:
            if self.upper <= self.max_work:
                return
        elif self.upper + (self.upper - upper_before) * max(int(count.max()) - t, 0) <= self.max_work:
            return
        left = count - t
        spent = self.work - before
        if loop.until_stable:
            projected = self.work
        else:
            projected = self.work + spent * np.maximum(left, 0)
        over = (projected > self.max_work) & active
        if not over.any():
            return
        b = int(np.argmax(over))
        if loop.until_stable or self.work[b] > self.max_work:
            message = (f"the run has cost {self.work[b]:.3g} element operations so far, more than the "
                       f"limit of {self.max_work:.3g} per input ({self.advice})")
        else:
            message = (f"this loop would cost about {projected[b]:.3g} element operations in all "
                       f"({spent[b]:.3g} per iteration on {int(self.length[b])} tokens, "
                       f"{_iterations_text(float(left[b]))} iterations to go); the limit is "
                       f"{self.max_work:.3g} per input ({self.advice})")
        fail(message, loop.loc, over)


def _iterations(hosts, loop: Loop, max_steps) -> np.ndarray:
    """[B] iterations of `loop` and the loops nested in it, all together
    (each loop counted at most max_steps, `until stable` ones once)."""
    n = loop_counts(hosts, loop, max_steps)
    if loop.until_stable:
        n = np.minimum(n, 1.0)
    inner = np.zeros_like(n)
    for item in loop.body.items:
        if isinstance(item, Loop):
            inner = inner + _iterations(hosts, item, max_steps)
    return n * (1 + inner)
