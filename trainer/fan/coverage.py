"""Which sizes a compiled start's fine-tune checks (issue 54).

A compiled start is exact at every size up to the one it was compiled for
(`guard_max_n`, trainer/fan/presets.py compiled_max_n); a fine-tune keeps it
exact only where the descent guard (trainer/run/guard.py) checks it.  So the
guard draws inputs of every size min_n..guard_max_n, each of exactly that
size: from the task's own sampler (a registered task, a program's `sample`
statement) or, for a program trained from files, from the held-out and
training files' inputs of that size, topped up by the program's `sample`
statement when it has one (`Task.draw_exact`).  A file's sampler answers a
size it lacks with the nearest size it has, which would check size 8 under
the name 16; here a size with no input anywhere is never checked, and the
run's summary, `rasp eval` and an export's card name it (`never_checked`,
`coverage_note`) instead of calling the model exact there.
"""
from __future__ import annotations

from typing import Optional

import numpy as np


def guard_sizes(task, hp) -> range:
    """Every size the guard of a run checks: min_n..guard_max_n (or the training sizes)."""
    return range(task.min_n, (hp.guard_max_n or hp.max_train_n) + 1)


def never_checked(task, sizes) -> list:
    """The sizes among `sizes` with no input of exactly that size (only a task whose
    inputs come from files has such sizes)."""
    if task.draw_exact is None:
        return []
    rng = np.random.default_rng(0)
    return [int(n) for n in sizes if not task.draw_exact(rng, int(n), 1, {})]


def exact_size_batches(data, counts: dict, rng, chunks: int = 4, taught: bool = False) -> list:
    """Batches of inputs of exactly each size n, counts[n] of them (fewer where a file
    holds fewer; none where it holds none), sorted by size and cut into `chunks`
    batches of similar sizes (a batch runs to its longest input's T; `taught`: as
    `TaskData.make_batch` takes it)."""
    inputs, sizes = [], []
    for n in sorted(counts):
        if data.task.draw_exact is None:
            got = data.sample_inputs(rng, [int(n)] * int(counts[n]), train=True)
        else:
            got = data.task.draw_exact(rng, int(n), int(counts[n]), data.sym)
        inputs += got
        sizes += [int(n)] * len(got)
    cuts = [c for c in np.array_split(np.arange(len(inputs)), min(chunks, len(inputs))) if len(c)]
    return [data.make_batch([inputs[i] for i in c], [sizes[i] for i in c], taught=taught) for c in cuts]


def size_list(sizes: list) -> str:
    """[1, 2, 3, 7, 9, 10] -> '1-3, 7, 9-10'."""
    out, start = [], None
    for i, n in enumerate(sizes):
        if start is None:
            start = n
        if i + 1 == len(sizes) or sizes[i + 1] != n + 1:
            out.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(out)


def unchecked_sizes(task, hp, init: str, steps) -> list:
    """The sizes a compiled start fine-tuned for `steps` > 0 steps was never checked at."""
    if init != "compiled" or not steps:
        return []
    return never_checked(task, guard_sizes(task, hp))


def coverage_note(missing: list, top: int) -> Optional[str]:
    """The one line every report gives for `unchecked_sizes` (None when there are none);
    `top`: the largest size the compiled start is exact at."""
    if not missing:
        return None
    return (f"never checked at size{'s' if len(missing) > 1 else ''} n = {size_list(missing)}: the compiled start "
            f"is exact up to n = {top}, but the fine-tune's guard found no input of "
            f"{'these sizes' if len(missing) > 1 else 'this size'} (the program has no `sample` statement and "
            "neither --inputs nor --eval-inputs holds one), so the fine-tuned weights may answer them wrong")


def coverage(task, hp, init: str, step) -> tuple:
    """(unchecked sizes, note) of a compiled start fine-tuned to `step`."""
    missing = unchecked_sizes(task, hp, init, step)
    return missing, coverage_note(missing, guard_sizes(task, hp)[-1])


def run_coverage(run: dict, step) -> tuple:
    """`coverage` of a run's checkpoint at `step` (run.json's description)."""
    if run.get("init") != "compiled" or not step:
        return [], None
    from trainer.settings.hparams import HParams
    from trainer.tasks.program import task_of
    return coverage(task_of(run), HParams.from_dict(run["hparams"]), run["init"], step)


def beyond_compiled(task, hp, init: str, lengths) -> tuple:
    """(the sizes among `lengths` past the largest a compiled start was built for and its
    guard checks, the warning line on them); nothing for another start."""
    if init != "compiled":
        return [], None
    top = guard_sizes(task, hp)[-1]
    beyond = sorted(int(n) for n in lengths if n > top)
    return beyond, (f"n = {size_list(beyond)}: beyond n = {top}, the largest size this compiled start was built "
                    "for and its guard checked; nothing promises the answers there (a fine-tune may have changed "
                    "them)") if beyond else None
