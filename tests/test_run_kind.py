"""The run-kind contract (trainer/run/kind.py): both kinds implement every
method it declares with the declared parameters, and the training loop and
its descent guard use nothing of a kind that the contract does not declare,
so a new call cannot slip in undeclared."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from trainer.benchmark.kind import SeqKind, SeqRunConfig
from trainer.fan.kind import FanKind, RunConfig
from trainer.run import guard, loop
from trainer.run.kind import RunKind

METHODS = sorted(RunKind.__abstractmethods__)
ATTRIBUTES = sorted(RunKind.__annotations__)          # cfg, hp
CONTRACT = set(METHODS) | set(ATTRIBUTES)
USERS = (loop, guard)                                 # the modules that hold a kind
# the functions of USERS a kind may be handed to (each analysed here in turn)
KIND_TAKERS = {"_train", "_summary", "Guard", "adamw"}


def kind_uses(source: str) -> tuple:
    """({attribute names used on a kind}, {callees a kind is passed to}).  A
    kind is a parameter annotated RunKind, or `self.kind`."""
    tree = ast.parse(source)
    used, passed = set(), set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        names = {a.arg for a in args if isinstance(a.annotation, ast.Name) and a.annotation.id == "RunKind"}

        def is_kind(node, names=names) -> bool:
            return ((isinstance(node, ast.Name) and node.id in names)
                    or (isinstance(node, ast.Attribute) and node.attr == "kind"
                        and isinstance(node.value, ast.Name) and node.value.id == "self"))
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and is_kind(node.value):
                used.add(node.attr)
            elif isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Name) and func.id in ("getattr", "hasattr", "setattr") and node.args \
                        and is_kind(node.args[0]):
                    arg = node.args[1] if len(node.args) > 1 else None
                    used.add(arg.value if isinstance(arg, ast.Constant) else f"<{func.id} of a computed name>")
                    continue
                if any(is_kind(a) for a in node.args + [k.value for k in node.keywords]):
                    passed.add(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ast.unparse(func)))
    return used, passed


def test_the_loop_and_guard_use_only_what_the_contract_declares():
    used, passed = set(), set()
    for module in USERS:
        u, p = kind_uses(Path(module.__file__).read_text())
        used |= u
        passed |= p
    assert used - CONTRACT == set(), "declare these in trainer/run/kind.py RunKind"
    assert CONTRACT - used == set(), "declared in RunKind but never used by the loop or the guard"
    assert passed <= KIND_TAKERS, "a kind handed to code this test does not read"


def test_the_check_catches_an_undeclared_call():
    src = ("def f(kind: RunKind):\n    kind.new_hook(1)\n    getattr(kind, 'other', None)\n    g(kind)\n"
           "class G:\n    def m(self):\n        return self.kind.third\n")
    used, passed = kind_uses(src)
    assert used == {"new_hook", "other", "third"} and passed == {"g"}


def test_the_loop_is_typed_with_the_contract():
    for fn in (loop.train, loop._train, loop._summary, loop.adamw, guard.Guard.__init__):
        assert inspect.signature(fn).parameters["kind"].annotation in ("RunKind", RunKind)


@pytest.mark.parametrize("kind", [FanKind, SeqKind])
def test_kind_implements_the_contract(kind):
    assert issubclass(kind, RunKind) and not kind.__abstractmethods__
    for name in METHODS:
        declared = inspect.signature(getattr(RunKind, name)).parameters
        own = inspect.signature(getattr(kind, name)).parameters
        assert list(own) == list(declared), f"{kind.__name__}.{name}"
        for p, q in zip(own.values(), declared.values()):
            assert p.kind == q.kind and (q.default is inspect.Parameter.empty
                                         or p.default == q.default), f"{kind.__name__}.{name}({p.name})"


@pytest.mark.parametrize("make", [lambda: FanKind(RunConfig(task="parity", out="-")),
                                  lambda: SeqKind(SeqRunConfig(task="flipflop", model="gru", out="-"))],
                         ids=["FanKind", "SeqKind"])
def test_kind_instance_has_the_declared_attributes(make):
    run = make()
    assert isinstance(run, RunKind)
    for name in ATTRIBUTES:
        assert getattr(run, name) is not None, name
