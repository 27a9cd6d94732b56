"""Task registry, one module per benchmark family.

    base.py     the two task contracts (`Task`: a program plus its inputs;
                `SeqTask`, `Example`: the comparison tasks) and `TASKS`
    program.py  `program_task`, which makes every `Task`, and `rasp train --program`
    fan.py      Fan et al.'s length-generalization tasks: programs/NAME.rasp and
                their samplers, registered through `program_task`
    flipflop.py, words.py, ...  the comparison families (flip-flop, word problems,
                ListOps, Logic, copying/denoising, counting)

`TASKS` holds both kinds; `rasp train --task NAME` picks the training loop
by the kind of entry it finds (`isinstance(task, SeqTask)`).
"""
from trainer.tasks.base import TASKS, PaperHParams, Task, get_task, register, PROGRAMS, REPO  # noqa: F401
from trainer.tasks.fan import parse_lengths  # noqa: F401

# the comparison families register their SeqTasks on import (docs/benchmarks.md)
from trainer.tasks import flipflop  # noqa: E402,F401
from trainer.tasks import words  # noqa: E402,F401
from trainer.tasks import listops  # noqa: E402,F401
from trainer.tasks import logic  # noqa: E402,F401
from trainer.tasks import memory  # noqa: E402,F401
from trainer.tasks import counting  # noqa: E402,F401
