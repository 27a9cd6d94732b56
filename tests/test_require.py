"""Input contracts: the `require` statement and every program's contract.

The property test builds well-formed inputs with the independent samplers of
tests/references.py, breaks some of them in a way the program's format
forbids (missing or extra `>`, a wrong token in a region, unequal summands,
a missing operand, repeated tokens where they must be distinct, ...), runs
the whole batch through `rasp run --inputs` and requires exit status 2 with
exactly the broken inputs listed, each under the message of the rule it
breaks.  Well-formed batches still run (exit 0).
"""
from __future__ import annotations

import contextlib
import io
import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import rasp
import references as R
from rasp.cli import main
from rasp.errors import RaspError, RaspRequireError

ROOT = Path(__file__).resolve().parents[1]

PROGRAMS = ROOT / "programs"
SETTINGS = dict(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ONE_EOQ = "exactly one '>'"
QUERY_REGION = "before '>', only '#' after it"


# ---- mutations: (name, applies(tokens) -> bool, mutate(rng, tokens) -> tokens, message part) ----

def _q_end(t):
    return t.index(">")


def _remove(sym):
    def mutate(rng, t):
        return [x for x in t if x != sym]
    return mutate


def _insert_anywhere(sym):
    def mutate(rng, t):
        i = rng.randint(0, len(t))
        return t[:i] + [sym] + t[i:]
    return mutate


def _token_after_eoq(rng, t):
    tail = [i for i in range(_q_end(t) + 1, len(t))]
    i = rng.choice(tail)
    return t[:i] + [rng.choice([0, 1])] + t[i + 1:]


def _eos_in_query(rng, t):
    i = rng.randrange(_q_end(t))
    return t[:i] + ["#"] + t[i + 1:]


def _duplicate(rng, t):
    q = t[:_q_end(t)]
    i = rng.randint(0, len(q))
    return q[:i] + [rng.choice(q)] + q[i:] + t[_q_end(t):]


def _unequal_summands(rng, t):
    plus = t.index("+")
    a, b, rest = t[:plus], t[plus + 1:_q_end(t)], t[_q_end(t):]
    side = rng.choice(["a", "b"])
    grow = rng.random() < 0.5 or not (a if side == "a" else b)
    s = list(a if side == "a" else b)
    if grow:
        s.insert(rng.randint(0, len(s)), rng.choice([0, 1]))
    else:
        del s[rng.randrange(len(s))]
    a, b = (s, b) if side == "a" else (a, s)
    return a + ["+"] + b + rest


def _empty_first_factor(rng, t):
    return t[t.index("*"):]


def _count_arity(rng, t):
    q, rest = t[:_q_end(t)], t[_q_end(t):]
    q = q[:rng.randint(0, 1)] if rng.random() < 0.5 else q + [rng.randint(0, 99)] * rng.randint(1, 2)
    return q + rest


def _flip_flop_break(rng, t):
    i = rng.randint(0, len(t))
    return t[:i] + [rng.choice([0, 1, "w", "r", "i"])] + t[i:]


def _flip_flop_broken(t):
    return any((x in (0, 1)) != (i % 2 == 1) for i, x in enumerate(t))


def _bit_after_padding(rng, t):
    i = t.index("_") + 1
    return t[:i] + [rng.choice([0, 1])] + t[i:]


ALWAYS = lambda t: True  # noqa: E731
FAP_MUTATIONS = [
    ("missing >", ALWAYS, _remove(">"), ONE_EOQ),
    ("extra >", ALWAYS, _insert_anywhere(">"), ONE_EOQ),
    ("token after >", lambda t: _q_end(t) < len(t) - 1, _token_after_eoq, QUERY_REGION),
    ("# in the query", lambda t: _q_end(t) > 0, _eos_in_query, QUERY_REGION),
]
MUTATIONS = {name: FAP_MUTATIONS for name in
             ("parity", "copy", "binary_sum", "reverse", "sort", "unique_set", "ones_mod3", "longest_run",
              "unary_ones")}
MUTATIONS["padded_parity"] = FAP_MUTATIONS + [
    ("bit after padding", lambda t: "_" in t[:_q_end(t)], _bit_after_padding, "the padding '_' comes after every bit")]
MUTATIONS["sort_unique"] = MUTATIONS["induction_copy"] = FAP_MUTATIONS + [
    ("repeated token", lambda t: 0 < _q_end(t) < 100, _duplicate, "distinct")]
MUTATIONS["count"] = FAP_MUTATIONS + [("not two numbers", ALWAYS, _count_arity, "exactly two numbers")]
MUTATIONS["addition"] = FAP_MUTATIONS + [
    ("unequal summands", ALWAYS, _unequal_summands, "same number of bits"),
    ("missing +", ALWAYS, _remove("+"), "exactly one '+'"),
    ("extra +", ALWAYS, _insert_anywhere("+"), "exactly one '+'"),
]
MUTATIONS["multiplication"] = FAP_MUTATIONS + [
    ("missing *", ALWAYS, _remove("*"), "exactly one '*'"),
    ("extra *", ALWAYS, _insert_anywhere("*"), "exactly one '*'"),
    ("empty first factor", ALWAYS, _empty_first_factor, "first factor"),
]
MUTATIONS["flip_flop"] = [("broken alternation", ALWAYS, _flip_flop_break, "alternate")]
MUTATIONS["copying"] = [("missing :", ALWAYS, _remove(":"), "exactly one indicator"),
                        ("extra :", ALWAYS, _insert_anywhere(":"), "exactly one indicator")]


def run_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(argv))
    return status, out.getvalue(), err.getvalue()


def listed_inputs(err: str) -> dict:
    """error text -> {1-based input number: [messages it was rejected with]}"""
    found = {}
    for message, which in re.findall(r"error: input rejected: (.*) \(inputs? ([\d, ]+)\)", err):
        for number in which.split(", "):
            found.setdefault(int(number), []).append(message)
    return found


def test_every_program_declares_its_contract():
    for path in PROGRAMS.glob("*.rasp"):
        source = path.read_text()
        assert "# the input contract" in source, path.name
        has_require = bool(rasp.load(path).ir.requires)
        assert has_require == (path.stem in MUTATIONS), path.name


@pytest.mark.parametrize("name", sorted(MUTATIONS))
@settings(**SETTINGS)
@given(seed=st.integers(0, 2**32 - 1), n_inputs=st.integers(1, 8))
def test_malformed_inputs_are_rejected(tmp_path_factory, name, seed, n_inputs):
    rng = random.Random(seed)
    batch, expect = [], {}
    for _ in range(n_inputs):
        tokens = R.SAMPLERS[name](rng, rng.randint(0 if name != "flip_flop" else 1, 12))
        if rng.random() < 0.6:
            options = [m for m in MUTATIONS[name] if m[1](tokens)]
            _, _, mutate, message = rng.choice(options)
            tokens = mutate(rng, tokens)
            if name == "flip_flop" and not _flip_flop_broken(tokens):
                continue    # an inserted pair can leave the alternation intact
            expect[len(batch) + 1] = message
        batch.append(tokens)
    assume(batch)       # every input of a flip-flop draw may have been skipped above
    path = tmp_path_factory.mktemp("inputs") / "in.txt"
    path.write_text("\n".join(" ".join(map(str, t)) for t in batch) + "\n")
    status, out, err = run_cli("run", str(PROGRAMS / f"{name}.rasp"), "--inputs", str(path))
    if not expect:
        assert status == 0, err
        assert len(out.splitlines()) == len(batch)
        return
    assert status == 2, (batch, expect, out)
    assert "Traceback" not in err
    found = listed_inputs(err)
    assert set(found) == set(expect), (batch, err)
    for number, message in expect.items():
        assert any(message in m for m in found[number]), (batch[number - 1], message, err)
    assert out == ""


def test_issue_examples():
    """The two wrong answers of issue 17 are now located errors."""
    status, out, err = run_cli("run", str(PROGRAMS / "parity.rasp"), "--input", "1 0 1 1")
    assert status == 2 and out == ""
    assert "programs/parity.rasp:" in err and "exactly one '>' (input 1)" in err
    assert "require count(seq, EOQ) == 1" in err          # the source line, with a caret
    status, out, err = run_cli("run", str(PROGRAMS / "addition.rasp"), "--input", "1 0 1 + 1 1 > # # # # #")
    assert status == 2 and "same number of bits (input 1)" in err


def test_large_mixed_batch_lists_every_bad_input(tmp_path):
    """Big batches of mixed lengths run in length groups: still every bad input is listed."""
    rng = random.Random(5)
    batch = [R.sample_parity(rng, rng.randint(0, 300)) for _ in range(300)]
    bad = sorted(rng.sample(range(300), 17))
    for b in bad:
        batch[b] = batch[b][:-len(batch[b]) + batch[b].index(">")] if batch[b].index(">") else [1]
    prog = rasp.load(PROGRAMS / "parity.rasp")
    with pytest.raises(RaspRequireError) as info:
        prog.run_batch([prog.parse_input(" ".join(map(str, t))) for t in batch])
    assert info.value.input_indices == bad


# ---- the statement itself -------------------------------------------------------

HEAD = 'const EOQ = ">"\nconst EOS = "#"\ninput seq: {0..9, EOQ, EOS}\n'


def run_source(source, text):
    prog = rasp.loads(HEAD + source, "t.rasp")
    return prog.format_output(prog.run(prog.parse_input(text)))


def test_scalar_and_sop_conditions():
    src = 'require len(seq) >= 2, "too short"\nrequire seq != 7, "no sevens"\noutput seq\n'
    assert run_source(src, "1 2") == "1 2"
    with pytest.raises(RaspRequireError, match="too short"):
        run_source(src, "1")
    with pytest.raises(RaspRequireError, match="no sevens") as info:
        run_source(src, "1 7 3")
    assert info.value.loc.line == 5
    # both broken: both reported
    with pytest.raises(RaspRequireError) as info:
        run_source(src, "7")
    assert [f[0] for f in info.value.failures] == ["too short", "no sevens"]


def test_default_message_quotes_the_condition():
    with pytest.raises(RaspRequireError, match=r"the input must satisfy count\(seq, EOQ\) == 1"):
        run_source("require count(seq, EOQ) == 1\noutput seq\n", "1 2")


def test_params_and_overrides_are_visible():
    src = 'param n = count_before(seq, EOQ)\nrequire n <= 3, "at most 3 tokens before >"\noutput seq\n'
    assert run_source(src, "1 2 > #") == "1 2 > #"
    with pytest.raises(RaspRequireError):
        run_source(src, "1 2 3 4 > #")


@pytest.mark.parametrize("source, message", [
    ('def f(x):\n    require x > 0, "m"\n    return x\noutput f(seq)\n', "only allowed at the top level"),
    ('loop 2:\n    require seq > 0, "m"\n    seq = seq + 1\noutput seq\n', "only allowed at the top level"),
    ('x = seq\nloop 2:\n    x = x + 1\nrequire x > 0, "m"\noutput x\n', "not values computed by a loop"),
    ('require select(seq, seq, eq), "m"\noutput seq\n', "must be an s-op or a number"),
])
def test_misplaced_require_is_a_located_error(source, message):
    with pytest.raises(RaspError, match=message) as info:
        rasp.loads(HEAD + source, "t.rasp")
    assert info.value.loc is not None


def test_compiled_model_states_and_checks_the_contract(tmp_path):
    model = tmp_path / "m"
    status, _, err = run_cli("compile", str(PROGRAMS / "parity.rasp"), "--max-len", "8", "-o", str(model))
    assert status == 0, err
    config = json.loads((model / "config.json").read_text())
    requires = config["extra"]["compiler"]["requires"]
    assert [r["condition"] for r in requires] == [
        "count(seq, EOQ) == 1", "where(has_seen(seq, EOQ), seq == EOQ or seq == EOS, seq != EOS)"]
    status, out, _ = run_cli("run", str(model), "--input", "1 1 0 1 > # #")
    assert status == 0 and out.split()[4:] == ["1", "#", "#"]
    status, out, err = run_cli("run", str(model), "--input", "1 0 1 1")
    assert status == 2 and out == "" and "exactly one '>' (input 1)" in err
