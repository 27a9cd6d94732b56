"""The values the checker (rasp/lower.py) tracks besides graph nodes: functions,
lambdas, predicates, reductions and scopes.  A leaf module: the lowering and
the builtins it calls (rasp/builtins.py) both use them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from . import ast as A
from . import ir


@dataclass(frozen=True)
class Predicate:
    name: str


@dataclass(frozen=True)
class Reduction:
    name: str


@dataclass
class LambdaValue:
    node: A.Lambda
    scope: "Scope"


@dataclass
class Function:
    name: str
    params: list                      # [(name, default)]; default: AST (defs) or value (builtins)
    body: Optional[list] = None       # statements (defs)
    builtin: Optional[Callable] = None
    library: bool = False
    loc: Optional[ir.Loc] = None


class _Undefined:
    """A loop-body name that has no value before the loop and is read before
    the body assigns it."""


UNDEFINED = _Undefined()


@dataclass
class LazyLoopOut:
    loop: ir.Loop
    var: ir.LoopVar


class Scope:
    def __init__(self, parent: Optional["Scope"] = None):
        self.vars: dict = {}
        self.parent = parent

    def lookup(self, name):
        scope = self
        while scope is not None:
            if name in scope.vars:
                return scope.vars[name]
            scope = scope.parent
        raise KeyError(name)

    def names(self):
        scope, out = self, set()
        while scope is not None:
            out |= set(scope.vars)
            scope = scope.parent
        return out


def describe(value) -> str:
    if isinstance(value, ir.Node):
        return {ir.SOP: "an s-op", ir.SCALAR: "a number", ir.SELECTOR: "a selector"}[value.kind]
    if isinstance(value, Function):
        return f"the function '{value.name}'"
    if isinstance(value, Predicate):
        return f"the predicate '{value.name}'"
    if isinstance(value, Reduction):
        return f"the reduction '{value.name}'"
    if isinstance(value, LambdaValue):
        return "a lambda"
    if isinstance(value, ir.Table):
        return f"the lookup table '{value.name}'"
    if isinstance(value, tuple):
        return f"{len(value)} values"
    return "nothing"
