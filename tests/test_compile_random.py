"""Fuzzing the compiler with random well-typed programs (issue 8).

For every generated program (tests/random_programs.py), `compile_program` at a
small --max-len must either refuse with a located RaspError, or give the
interpreter's outputs on random inputs of every length 1 .. 4 x max-len.
Anything else fails: a silent mismatch, an exception that is not a RaspError,
a RaspError without a location, or one that calls itself internal.

    python tests/test_compile_random.py --stats 300     # statistics for 300 programs
    python tests/test_compile_random.py --stats 300 --show mismatch

CI runs a fixed list of seeds (`test_random_program_ci`); `@pytest.mark.slow`
runs a hypothesis search.  Known compiler bugs found by the fixed seeds are
listed in KNOWN_MISMATCHES with the minimised program saved under
tests/data/compile_mismatches/ (the file's `# input:` comment gives the input);
remove an entry when the compiler is fixed.
"""
from __future__ import annotations

import argparse
import collections
import random
import re
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rasp
from compiler import compile_program
from rasp.errors import RaspError, RaspRequireError
from random_programs import programs, random_program
from test_compiler import interpreter_ok

HERE = Path(__file__).resolve().parent

MISMATCH_DIR = HERE / "data" / "compile_mismatches"
CI_SEEDS = range(120)
# Compiler bugs the fuzzer found that are not fixed yet: saved minimised program
# (tests/data/compile_mismatches/NAME.rasp) -> the CI seeds that hit the same bug.
# Their tests are expected to fail (xfail, not strict); remove an entry once the
# compiler is fixed, and the file and its seeds are checked strictly again.
KNOWN_MISMATCHES: dict = {}      # all six saved files are fixed and checked strictly


@dataclass
class Outcome:
    kind: str            # compiled | refused | mismatch | crash | unlocated | internal
    detail: str = ""     # refusal message, mismatch (input, interpreter, compiled), or traceback
    sizes: dict = None

    @property
    def ok(self) -> bool:
        return self.kind in ("compiled", "refused")


def random_inputs(prog, rng: random.Random, max_len: int, extra: int = 8) -> list:
    """One random input of every length 1 .. 4 x max-len, plus `extra` of the
    longest length; tokens uniform over the input vocabulary."""
    vocab = list(prog.ir.vocab)
    lengths = list(range(1, 4 * max_len + 1)) + [4 * max_len] * extra
    return [[rng.choice(vocab) for _ in range(n)] for n in lengths]


def first_mismatch(prog, cm, batch):
    """(input text, interpreter output, compiled output) of the first input
    whose outputs differ, or None.  Every position is compared (`rasp run DIR`
    prints them all), but for a program that uses a param as a value: the
    model knows it from `>` on, so only the scored positions (compiler/params.py)."""
    batch = interpreter_ok(prog, batch)
    if not batch:
        return None
    ref = prog.run_batch(batch).outputs
    got = cm.run_batch(batch)
    scored_only = bool(cm.config.extra["compiler"]["value_params"])
    for x, r, g in zip(batch, ref, got):
        p = prog.scored_start(x) if scored_only else 0
        if r[p:] != g[p:]:
            return prog.format_output(x), prog.format_output(r), prog.format_output(g)
    return None


def check_source(src: str, max_len: int, seed: int = 0) -> Outcome:
    """Compile `src` at `max_len` and compare with the interpreter."""
    prog = rasp.loads(src, "<random>")
    try:
        cm = compile_program(prog, max_len)
    except RaspError as e:
        if e.loc is None:
            return Outcome("unlocated", e.message)
        if "internal" in e.message:
            return Outcome("internal", e.format())
        return Outcome("refused", e.message)
    except Exception:
        return Outcome("crash", traceback.format_exc(limit=-4))
    try:
        bad = first_mismatch(prog, cm, random_inputs(prog, random.Random(seed), max_len))
    except RaspError as e:
        return Outcome("crash", f"running the compiled model: {e.format()}")
    except Exception:
        return Outcome("crash", traceback.format_exc(limit=-4))
    if bad is not None:
        return Outcome("mismatch", "input: {}\ninterpreter: {}\ncompiled:    {}".format(*bad))
    return Outcome("compiled", sizes=cm.sizes())


def ci_program(seed: int) -> tuple:
    """(source, max_len) of the CI program with this seed."""
    return random_program(random.Random(seed)), 4 + seed % 5


def check_seed(seed: int) -> tuple:
    """(source, max_len, Outcome) of the CI program with this seed."""
    src, max_len = ci_program(seed)
    return src, max_len, check_source(src, max_len, seed)


def refusal_reason(message: str, words: int = 6) -> str:
    """A refusal message's first words, with names and numbers blanked, so
    that refusals of the same kind group together."""
    text = re.sub(r"'[^']*'", "'_'", message.splitlines()[0])
    text = re.sub(r"\([^)]*\)", "(…)", text)
    text = re.sub(r"-?\d+", "N", text)
    return " ".join(text.split()[:words])


def report(seeds, show: str = "", out=sys.stdout) -> collections.Counter:
    """Run every seed; print the counts by outcome and refusals by reason."""
    kinds, reasons = collections.Counter(), collections.Counter()
    t0 = time.perf_counter()
    for seed in seeds:
        src, max_len, res = check_seed(seed)
        kinds[res.kind] += 1
        if res.kind == "refused":
            reasons[refusal_reason(res.detail)] += 1
        if res.kind in show.split(","):
            print(f"--- seed {seed} ({res.kind}, --max-len {max_len})\n{src}{res.detail}\n", file=out)
    n = sum(kinds.values())
    print(f"{n} random programs, seeds {seeds[0]}..{seeds[-1]}, {time.perf_counter() - t0:.1f}s", file=out)
    for kind in ("compiled", "refused", "mismatch", "crash", "internal", "unlocated"):
        print(f"  {kind:10} {kinds[kind]:5d}  ({100 * kinds[kind] / max(n, 1):.1f}%)", file=out)
    print("refusals by reason:", file=out)
    for reason, count in reasons.most_common():
        print(f"  {count:5d}  {reason}", file=out)
    return kinds


def signature(res: Outcome) -> tuple:
    """What must stay the same while minimising: the outcome kind, and for
    errors the exception's type and first words."""
    if res.kind == "internal":
        message = res.detail.splitlines()[0].split("error: ", 1)[-1]
        message = message.split("internal error: ")[-1]        # craft's wrapper names the node
        return res.kind, re.sub(r"'[^']*'|<[^>]*>|\d+", "_", message)[:60]
    if res.kind == "crash":
        last = [ln for ln in res.detail.splitlines() if ln.strip()][-1] if res.detail else ""
        return res.kind, re.sub(r"<[^>]*>|0x[0-9a-f]+|\d+", "_", last)[:60]
    return (res.kind,)


def candidates(lines: list):
    """Smaller variants of a program: one statement deleted, a loop header
    deleted with its body dedented, or a variable made the output."""
    for i, line in enumerate(lines):
        text = line.strip()
        if text.startswith(("input ", "const ", "output ")):
            continue
        if text.startswith("loop "):
            ind = len(line) - len(line.lstrip())
            body = []
            for j in range(i + 1, len(lines)):
                if len(lines[j]) - len(lines[j].lstrip()) <= ind:
                    break
                body.append(j)
            yield lines[:i] + [lines[j][4:] for j in body] + lines[i + 1 + len(body):]
            yield [ln for j, ln in enumerate(lines) if j != i and j not in body]
        else:
            yield lines[:i] + lines[i + 1:]
    names = [ln.split("=")[0].strip() for ln in lines if re.match(r"^v\d+ = ", ln)]
    for name in names:
        yield [ln for ln in lines if not ln.startswith("output ")] + [f"output {name}"]


def minimise(src: str, max_len: int, seed: int = 0) -> tuple:
    """Greedy: keep any smaller variant that checks and fails the same way.
    Returns (source, Outcome)."""
    want = signature(check_source(src, max_len, seed))
    lines = src.rstrip("\n").split("\n")
    changed = True
    while changed:
        changed = False
        for cand in candidates(lines):
            text = "\n".join(cand) + "\n"
            try:
                prog = rasp.loads(text, "<min>")
            except RaspError:
                continue
            if prog.warnings or len(text) >= len("\n".join(lines)) + 1:
                continue
            if signature(check_source(text, max_len, seed)) == want:
                lines, changed = cand, True
                break
    text = "\n".join(lines) + "\n"
    return text, check_source(text, max_len, seed)


# ---- tests -----------------------------------------------------------------------------------

def _known(seed):
    files = [name for name, seeds in KNOWN_MISMATCHES.items() if seed in seeds]
    if files:
        reason = f"known compiler bug: {MISMATCH_DIR.name}/{files[0]}.rasp"
        return pytest.param(seed, marks=pytest.mark.xfail(reason=reason, strict=False))
    return seed


@pytest.mark.parametrize("seed", [_known(s) for s in CI_SEEDS])
def test_random_program_ci(seed):
    src, max_len, res = check_seed(seed)
    assert res.ok, f"--max-len {max_len}\n{src}\n{res.kind}: {res.detail}"


# Measured 2026-11: 111 of the 120 CI programs compile (92.5%; 371 of seeds 0..399);
# the floor leaves 3 programs of slack, so a compiler that refuses (nearly)
# everything fails here instead of passing every seed above as "refused".
CI_COMPILED_FLOOR = 0.9


def test_most_ci_programs_compile():
    """At least CI_COMPILED_FLOOR of the CI programs compile (compile only: the
    seed tests above check that each compiled one gives the interpreter's outputs)."""
    compiled, refusals = 0, []
    for seed in CI_SEEDS:
        src, max_len = ci_program(seed)
        try:
            compile_program(rasp.loads(src, "<random>"), max_len)
            compiled += 1
        except RaspError as e:
            refusals.append(f"seed {seed}: {refusal_reason(e.message)}")
    assert compiled >= CI_COMPILED_FLOOR * len(CI_SEEDS), \
        f"{compiled} of {len(CI_SEEDS)} compiled; refusals:\n" + "\n".join(refusals)


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(src=programs())
def test_generated_programs_check_without_warnings(src):
    """The generator's promise: every program it makes passes the checker,
    RASP-L discipline included, and runs."""
    prog = rasp.loads(src, "<random>")
    assert not prog.warnings, (src, [w.format() for w in prog.warnings])
    rng = random.Random(0)
    vocab = list(prog.ir.vocab)
    for n in (1, 5, 17):
        x = [rng.choice(vocab) for _ in range(n)]
        try:
            prog.run(x)
        except RaspRequireError:      # the input contract (a '>', where a count_before param needs one)
            pass


def saved_mismatches():
    return sorted(MISMATCH_DIR.glob("*.rasp"))


def saved_input(path: Path, prog) -> list:
    m = re.search(r"^# input: (.*)$", path.read_text(), re.M)
    return prog.parse_input(m.group(1))


@pytest.mark.parametrize("path", [
    pytest.param(p, marks=[pytest.mark.xfail(reason="known compiler bug", strict=False)]
                 if p.stem in KNOWN_MISMATCHES else [])
    for p in saved_mismatches()], ids=lambda p: p.stem)
def test_saved_mismatch(path):
    """Each minimised program: a located refusal, or the interpreter's output on its saved input
    (and on random inputs)."""
    m = re.search(r"^# max-len: (\d+)$", path.read_text(), re.M)
    max_len = int(m.group(1)) if m else 4
    prog = rasp.load(str(path))
    try:
        cm = compile_program(prog, max_len)
    except RaspError as e:
        assert e.loc is not None and "internal" not in e.message, e.format()
        return
    x = saved_input(path, prog)
    assert cm.run_batch([x]) == prog.run_batch([x]).outputs
    assert first_mismatch(prog, cm, random_inputs(prog, random.Random(0), max_len)) is None


@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(src=programs(), max_len=st.integers(4, 8), seed=st.integers(0, 2**16))
def test_random_program_thorough(src, max_len, seed):
    res = check_source(src, max_len, seed)
    assert res.ok, f"--max-len {max_len}\n{src}\n{res.kind}: {res.detail}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stats", type=int, default=300, metavar="N", help="number of random programs")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--show", default="mismatch,crash,internal,unlocated",
                    help="outcomes whose programs to print (comma-separated)")
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    report(list(range(args.first_seed, args.first_seed + args.stats)), args.show)


if __name__ == "__main__":
    main()
