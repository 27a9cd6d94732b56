"""Task registry, one module per benchmark family.

    fan.py      Fan et al.'s six length-generalization tasks (labels from programs/)
    base.py     the contract of the comparison tasks (flip-flop, word problems,
                ListOps, Logic, copying/denoising, counting): `SeqTask`, `Example`

`TASKS` holds both kinds; `rasp train --task NAME` picks the training loop
by the kind of entry it finds (`isinstance(task, SeqTask)`).
"""
from trainer.tasks.fan import (TASKS, PaperHParams, Task, get_task, parse_lengths,  # noqa: F401
                               register, PROGRAMS, REPO)

# the comparison families register their SeqTasks on import (docs/benchmarks.md)
from trainer.tasks import flipflop  # noqa: E402,F401
from trainer.tasks import words  # noqa: E402,F401
from trainer.tasks import listops  # noqa: E402,F401
from trainer.tasks import logic  # noqa: E402,F401
from trainer.tasks import memory  # noqa: E402,F401
from trainer.tasks import counting  # noqa: E402,F401
