"""A name -> spec table that new tasks and models plug into."""
from __future__ import annotations

from typing import Any

from rasp.errors import RaspError


class Registry(dict):
    """`register(spec)` files a spec under `spec.name`; `lookup(name)` gives it
    back or a user error that lists what is known."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def register(self, spec):
        self[spec.name] = spec
        return spec

    def lookup(self, name: str):
        if name not in self:
            raise RaspError(f"unknown {self.kind} {name!r} (known: {', '.join(self)})")
        return self[name]


# the two kinds of task a model can train on
FAN, COMPARISON = "fan", "comparison"
KIND_NAMES = {FAN: "Fan et al.'s tasks", COMPARISON: "the comparison tasks"}

# The names that TASKS (trainer/tasks) and MODELS (trainer/models) hold per kind, in their
# order, written out so that `rasp train --help` lists them without importing the models
# (torch: seconds).  tests/test_cli_usability.py checks that they are the registries' names:
# a new task or model is added here too.
TASK_NAMES = {
    FAN: ("parity", "padded_parity", "copy", "addition", "binary_sum", "multiplication", "unique_set"),
    COMPARISON: ("flipflop", "words_z60", "words_a4z5", "words_a5", "words_s5", "words_mixed", "listops", "logic",
                 "copying", "denoising", "counting"),
}
MODEL_NAMES = {
    FAN: ("looped", "looped_noinj", "fap", "fap_pause", "ntp", "ntp_pause", "ntp_loop"),
    COMPARISON: ("looped", "mamba2", "llama", "implicit_mamba2", "implicit_llama", "s4d", "mamba", "nru", "ids4",
                 "ut_act", "ut", "gut", "gut_token", "gut_nogate", "gut_notrans", "tlb", "tlb_fixed", "gutlb", "rnn",
                 "lstm", "gru", "transformer", "transformer_rope", "transformer_xpos"),
}


class Model:
    """One named model and the ways it runs: on Fan et al.'s tasks (a
    `ModelSpec`: T(n) per sample, FAP/NTP layouts, trainer/fan/kind.py) and/or
    on the comparison tasks (an `EncoderSpec`: an encoder under a task head,
    trainer/benchmark/kind.py).  `looped` is the one model with both."""

    def __init__(self, name: str):
        self.name = name
        self.specs: dict[str, Any] = {}       # kind -> its spec (a ModelSpec or an EncoderSpec)

    def serves(self, kind: str) -> bool:
        return kind in self.specs


class ModelRegistry(Registry):
    """Every model by name, once, whatever kind of task it trains on."""

    def __init__(self):
        super().__init__("model")

    def add(self, kind: str, spec):
        model = self.setdefault(spec.name, Model(spec.name))
        if kind in model.specs:
            raise ValueError(f"model {spec.name!r} is registered twice for {KIND_NAMES[kind]}")
        model.specs[kind] = spec
        return spec

    def names(self, kind: str) -> list:
        return [n for n, m in self.items() if m.serves(kind)]

    def spec(self, name: str, kind: str):
        """The spec `name` runs with on `kind` tasks, or a user error that says
        which models those tasks take."""
        model = self.lookup(name)
        if not model.serves(kind):
            other = next(iter(model.specs))
            raise RaspError(f"model {name!r} trains on {KIND_NAMES[other]}, not on {KIND_NAMES[kind]} "
                            f"(models for those: {', '.join(self.names(kind))})")
        return model.specs[kind]
