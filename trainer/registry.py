"""A name -> spec table that new tasks and models plug into."""
from __future__ import annotations

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
