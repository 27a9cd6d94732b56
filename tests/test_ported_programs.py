"""Programs ported from Tracr and Zhou et al.'s RASP-L (tests/ported_programs.py),
checked the way issue 8 is: (1) the interpreter equals an independent
reference of the original code base's semantics; (2) each program compiled at
a small --max-len either is a located refusal (the programs that need the
whole input) or equals the interpreter on every input up to 4 x max-len
(exhaustive for the shortest lengths, every length with random, task-format
and worst-case inputs); (3) past 4 x max-len, `run_batch` never answers
silently: it warns (DesignLengthWarning) or, asked to, refuses.

    python tests/test_ported_programs.py          # a table: compiled/refused, sizes, checks
"""
from __future__ import annotations

import itertools
import random
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rasp
from compiler import DesignLengthWarning, compile_program
from ported_programs import BY_NAME, PORTS, uniform
from rasp.errors import RaspError

HERE = Path(__file__).resolve().parent

COMPILED = [p for p in PORTS if p.refuse is None]
REFUSED = [p for p in PORTS if p.refuse is not None]
_CACHE: dict = {}


def program(port):
    return rasp.loads(port.source, f"<{port.name}>")


def compiled(port, max_len=None):
    key = (port.name, max_len or port.max_len)
    if key not in _CACHE:
        _CACHE[key] = compile_program(program(port), key[1])
    return _CACHE[key]


def inputs(port, prog, L, rng, per_length=6, exhaustive_budget=1500):
    """Every input of the shortest lengths (while the count stays in budget),
    then, at every length up to L: random inputs over the declared vocabulary,
    the code base's own input format, and worst cases for widths and counts
    (one token repeated; two tokens in two runs)."""
    vocab = sorted(prog.ir.vocab)
    out = []
    for n in itertools.count(1):
        if len(vocab) ** n > exhaustive_budget:
            break
        out += [list(t) for t in itertools.product(vocab, repeat=n)]
    sample = uniform(vocab)
    if port.heavy:
        per_length = max(1, per_length // 3)
    for n in range(1, L + 1):
        out += [sample(rng, n) for _ in range(per_length)]
        if port.sample:
            out += [port.sample(rng, n) for _ in range(per_length)]
        out += [[v] * n for v in (rng.sample(vocab, 3) if port.heavy else vocab)]
        a, b = rng.sample(vocab, 2) if len(vocab) > 1 else (vocab[0], vocab[0])
        k = rng.randint(0, n)
        out.append([a] * k + [b] * (n - k))
    return [x for x in out if x and len(x) <= L]


def assert_compiled_equals_interpreter(port, cm, batch):
    prog = cm.program
    ok, ref = [], []
    for x in batch:
        try:
            ref.append(prog.run(x))
            ok.append(x)
        except RaspError:       # an input the program itself rejects
            pass
    got = cm.run_batch(ok, beyond_design="error")
    bad = [(x, r, g) for x, r, g in zip(ok, ref, got) if r != g]
    assert not bad, f"{port.name}: {len(bad)} of {len(ok)} differ, e.g. input {bad[0][0]}: " \
                    f"interpreter {bad[0][1]}, compiled {bad[0][2]}"
    return len(ok)


# ---- (1) the interpreter is the original code base ----------------------------------

@pytest.mark.parametrize("port", PORTS, ids=lambda p: p.name)
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_interpreter_equals_reference(port, data):
    prog = program(port)
    rng = random.Random(data.draw(st.integers(0, 2 ** 32 - 1)))
    n = data.draw(st.integers(1, 24))
    x = (port.sample or uniform(prog.ir.vocab))(rng, n)
    if data.draw(st.booleans()):
        x = uniform(prog.ir.vocab)(rng, n)
    assert list(prog.run(x)) == list(port.reference(x)), x


# ---- (2) compiled = interpreter up to 4 x max-len, or a located refusal ---------------

@pytest.mark.heavy
@pytest.mark.parametrize("port", COMPILED, ids=lambda p: p.name)
def test_compiled_equals_interpreter_to_design_length(port):
    cm = compiled(port)
    L = cm.model.cfg.extra["compiler"]["design_length"]
    assert L == 4 * port.max_len
    n = assert_compiled_equals_interpreter(port, cm, inputs(port, cm.program, L, random.Random(8)))
    assert n > 0


@pytest.mark.parametrize("port", REFUSED, ids=lambda p: p.name)
def test_whole_input_programs_are_located_refusals(port):
    with pytest.raises(RaspError) as e:
        compile_program(program(port), port.max_len)
    assert e.value.loc is not None and e.value.loc.line >= 1
    assert port.refuse in e.value.message
    assert "internal" not in e.value.message


# ---- (3) past the design length: never a silent answer --------------------------------

def test_beyond_design_length_warns_or_refuses():
    port = BY_NAME["tracr_length"]            # sel_width: its decoder ends at 4 x max-len
    cm = compiled(port)
    L = cm.model.cfg.extra["compiler"]["design_length"]
    long = [[0] * (2 * L)]
    with pytest.warns(DesignLengthWarning, match=f"longer than the {L} tokens"):
        got = cm.run_batch(long)
    assert got[0][:L] == cm.program.run_batch(long).outputs[0][:L]     # positions inside the design length
    with pytest.raises(RaspError, match="recompile with a larger --max-len"):
        cm.run_batch(long, beyond_design="error")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cm.run_batch([[0] * L])                                         # at the design length: silent
        cm.run_batch(long, beyond_design="run")                         # the caller's own choice
    with pytest.raises(ValueError):
        cm.run_batch(long, beyond_design="ignore")


# ---- thorough: larger max-len, more inputs ----------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("port", COMPILED, ids=lambda p: p.name)
def test_compiled_equals_interpreter_larger_max_len(port):
    max_len = 2 * port.max_len
    cm = compiled(port, max_len)
    L = 4 * max_len
    assert_compiled_equals_interpreter(port, cm, inputs(port, cm.program, L, random.Random(9), per_length=20))


def table() -> str:
    rows = ["| port | origin | result | layers | residual | parameters | inputs checked (<= 4 x max-len) |",
            "|---|---|---|---|---|---|---|"]
    for port in PORTS:
        try:
            cm = compiled(port)
        except RaspError as e:
            rows.append(f"| {port.name} | {port.origin} | refused (line {e.loc.line if e.loc else '?'}): "
                        f"{e.message.split(';')[0]} | | | | |")
            continue
        s = cm.sizes()
        n = assert_compiled_equals_interpreter(port, cm, inputs(port, cm.program, 4 * port.max_len,
                                                                random.Random(8)))
        rows.append(f"| {port.name} | {port.origin} | compiled at --max-len {port.max_len} | {s['layers']} | "
                    f"{s['residual']} | {s['params']:,} | {n} exact |")
    return "\n".join(rows)


if __name__ == "__main__":
    import torch
    torch.set_num_threads(1)
    print(table())
