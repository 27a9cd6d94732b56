"""The compiler's value-set inference (compiler/values.py) against a plain
fixpoint: its loop recomputes only what a grown variable reaches, a map only
on operand values new since the previous iteration, and jumps over the last
iterations of a step counter (issue 27: compile time); the reference below
recomputes every body node in full on every iteration.  Both must give the
same set for every node, or both refuse."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

import rasp
from compiler.clock import try_clock
from compiler.graph import ProgramGraph
from compiler.loops import one_loop
from compiler.params import causal_params
from compiler.values import MAX_ITER, MAX_SET, ValueSets, host_bound
from ported_programs import PORTS
from random_programs import random_program
from rasp.errors import RaspError

HERE = Path(__file__).resolve().parent


class PlainValueSets(ValueSets):
    """Every body node recomputed in full on every iteration, every map over
    the whole product of its operand sets."""

    def grown_map(self, node, sets):
        return None

    def run_loop(self, loop):
        vars_ = [v for v in loop.vars if self.keep is None or v.state in self.keep]
        for var in vars_:
            self.sets[var.state] = self.get(var.init) if var.init is not None else frozenset()
        bound = host_bound(self.ir, loop.count, self.length)
        const = bound is not None and bound <= MAX_ITER
        body = [n for n in loop.body.nodes() if self.keep is None or n in self.keep]
        for _ in range(max(bound if const else MAX_ITER, 0)):
            for n in body:
                self.sets.pop(n, None)
            for n in body:
                self.get(n)
            grown = False
            for var in vars_:
                new = self.sets[var.state] | self.get(var.update)
                if len(new) > MAX_SET:
                    raise self.error(var.update, "grows without bound")
                if new != self.sets[var.state]:
                    self.sets[var.state], grown = new, True
            if not grown:
                return
        if not const:
            raise self.error(loop.body.nodes()[0], "does not converge")


def sets_or_refusal(cls, pir, length):
    pg = ProgramGraph(pir)
    try:
        return cls(pir, length, pg.names, set(pg.g)).sets
    except RaspError:
        return "refused"


def programs():
    out = [(p.stem, p.read_text()) for p in sorted((HERE.parent / "programs").glob("*.rasp"))
           if not p.stem.startswith("words_")]          # (their large tables only slow the parse)
    out += [(f"ported {p.name}", p.source) for p in PORTS]
    rng = random.Random(27)
    out += [(f"random {k}", random_program(rng)) for k in range(25)]
    return out


@pytest.mark.parametrize("name, source", programs(), ids=[n for n, _ in programs()])
def test_value_sets_equal_a_plain_fixpoint(name, source):
    try:
        pir = causal_params(one_loop(rasp.loads(source, name).ir))
    except RaspError:
        return                       # refused before value sets (params used as values...)
    clocked, _ = try_clock(pir, 16)  # the clock adds a step counter to the loop
    for prog in (pir, clocked):
        for length in (16, 32):
            assert sets_or_refusal(ValueSets, prog, length) == sets_or_refusal(PlainValueSets, prog, length)
