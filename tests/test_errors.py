"""The error contract (docs/language.md §12): one test per error class.

Each malformed program must give `PATH:LINE:COL: error: MESSAGE`, the source
line and a caret, exit status 2 and no traceback.
"""
import re
import textwrap

import pytest

from rasp.cli import main

HEADER = 'const EOQ = ">"\nconst EOS = "#"\ninput seq: {0, 1, EOQ, EOS}\n'


def run_cli(tmp_path, capsys, source, *args, inputs="1 0 > #"):
    path = tmp_path / "prog.rasp"
    path.write_text(textwrap.dedent(source))
    argv = ["run", str(path), "--input", inputs, *args] if not args or args[0] != "check" \
        else ["check", str(path), *args[1:]]
    status = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return status, out, err, str(path)


def expect_error(tmp_path, capsys, source, line, col, fragment, *args, inputs="1 0 > #"):
    status, out, err, path = run_cli(tmp_path, capsys, source, *args, inputs=inputs)
    assert status == 2, err
    first = err.splitlines()[0]
    assert first.startswith(f"{path}:{line}:{col}: error: "), err
    assert fragment in first, err
    # the source line and a caret under the column
    lines = err.splitlines()
    assert len(lines) >= 3 and lines[2].strip() == "^"
    assert lines[2].index("^") - 4 == col - 1
    return err


SYNTAX = [
    ("unexpected character", HEADER + "x = seq $ 1\noutput x\n", 4, 9, "unexpected character '$'"),
    ("unexpected token", HEADER + "x = seq + * 1\noutput x\n", 4, 11, "unexpected '*'"),
    ("unexpected end of line", HEADER + "x = seq +\noutput x\n", 4, 10, "unexpected end of line"),
    ("unexpected end of file", HEADER + "x = f(seq\n", 4, 10, "unexpected end of file"),
    ("unexpected indentation", HEADER + "x = seq\n    y = seq\noutput x\n", 5, 1, "unexpected indentation"),
    ("missing block", HEADER + "loop 3:\nx = seq\noutput x\n", 5, 1, "expected an indented block"),
    ("bad dedent", HEADER + "loop 3:\n    x = seq\n  y = seq\noutput x\n", 6, 1, "inconsistent indentation"),
    ("unterminated string", 'const EOQ = ">\ninput seq: {0}\noutput seq\n', 1, 13, "unterminated string"),
    ("true division", HEADER + "output seq / 2\n", 4, 8, "use '//'"),
]


@pytest.mark.parametrize("name,source,line,col,fragment", SYNTAX, ids=[s[0] for s in SYNTAX])
def test_syntax_errors(tmp_path, capsys, name, source, line, col, fragment):
    expect_error(tmp_path, capsys, source, line, col, fragment)


CHECKS = [
    ("undefined name", HEADER + "output sqe\n", 4, 8, "undefined name 'sqe'; did you mean 'seq'?"),
    ("not a function", HEADER + "output seq(1)\n", 4, 8, "'seq' is not a function"),
    ("too many arguments", HEADER + "output shift_right(seq, 1, 0, 4)\n", 4, 8, "takes 3 arguments but 4"),
    ("missing argument", HEADER + "output shift_right(seq)\n", 4, 8, "missing the argument 's'"),
    ("unknown keyword", HEADER + "output shift_right(seq, 1, fill=0)\n", 4, 28, "has no parameter 'fill'"),
    ("keyword twice", HEADER + "output shift_right(seq, s=1, s=2)\n", 4, 30, "given twice"),
    ("positional after keyword", HEADER + "output shift_right(seq, s=1, 2)\n", 4, 25, "positional argument follows"),
    ("selector as s-op", HEADER + "output seq + select(seq, seq, eq)\n", 4, 14, "must be an s-op or a number, not a selector"),
    ("s-op as selector", HEADER + "output aggr(seq, seq)\n", 4, 13, "must be a selector"),
    ("bad predicate", HEADER + "output kqv(seq, seq, seq, 3)\n", 4, 27, "predicate must be one of"),
    ("bad reduction", HEADER + "output kqv(seq, seq, seq, eq, reduction=sum)\n", 4, 41, "undefined name 'sum'"),
    ("reduction not a name", HEADER + "output kqv(seq, seq, seq, eq, reduction=eq)\n", 4, 41, "reduction must be one of"),
    ("lambda outside map", HEADER + "f = lambda a: a\noutput seq\n", 4, 5, "only allowed as the function argument"),
    ("lambda arity", HEADER + "output tok_map(seq, lambda a, b: a)\n", 4, 21, "lambda of 1 parameter"),
    ("lambda uses s-op", HEADER + "y = seq\noutput tok_map(seq, lambda a: a + y)\n", 5, 35, "'y' is an s-op"),
    ("map without lambda", HEADER + "output tok_map(seq, 3)\n", 4, 21, "needs a lambda"),
    ("full of s-op", HEADER + "output full(seq, seq)\n", 4, 18, "full()'s value must be a number"),
    ("unpack mismatch", HEADER + "def f(x):\n    return x, x\na, b, c = f(seq)\noutput a\n", 6, 1, "cannot unpack 2 values into 3"),
    ("tuple as value", HEADER + "def f(x):\n    return x, x\noutput f(seq)\n", 6, 8, "not 2 values"),
    ("no return", HEADER + "def f(x):\n    y = x\noutput f(seq)\n", 5, 5, "has no 'return'"),
    ("after return", HEADER + "def f(x):\n    return x\n    y = x\noutput f(seq)\n", 6, 5, "never run"),
    ("return outside def", HEADER + "return seq\n", 4, 1, "'return' outside a function"),
    ("no input", 'output 1\n', 1, 1, "'input' statement must come before"),
    ("two inputs", HEADER + "input x: {0}\noutput seq\n", 4, 1, "exactly one 'input'"),
    ("no output", HEADER + "x = seq\n", 4, 1, "exactly one 'output'"),
    ("two outputs", HEADER + "output seq\noutput seq\n", 5, 1, "exactly one 'output'"),
    ("output in loop", HEADER + "loop 2:\n    output seq\n", 5, 5, "only allowed at the top level"),
    ("def in def", HEADER + "def f(x):\n    def g(y):\n        return y\n    return x\noutput f(seq)\n", 5, 5,
     "only allowed at the top level"),
    ("const not int", HEADER + "const K = seq\noutput seq\n", 4, 11, "a const must be"),
    ("duplicate symbol", HEADER + 'const X = ">"\noutput seq\n', 4, 11, "declared twice"),
    ("numeric symbol", HEADER + 'const X = "12"\noutput seq\n', 4, 11, "not a number"),
    ("unknown symbol string", HEADER + 'output seq == "?"\n', 4, 15, "unknown symbol '?'"),
    ("direct recursion", HEADER + "def f(x):\n    return f(x)\noutput f(seq)\n", 4, 1, "recursion is not allowed: f -> f"),
    ("mutual recursion", HEADER + "def f(x):\n    return g(x)\ndef g(x):\n    return f(x)\noutput f(seq)\n", 4, 1,
     "recursion is not allowed: f -> g -> f"),
    ("loop count not host", HEADER + "loop seq:\n    seq = seq\noutput seq\n", 4, 6, "a loop count must be a host expression"),
    ("param not host", HEADER + "param n = indices(seq)\noutput seq\n", 4, 11, "a param must be a host expression"),
    ("count of non-input", HEADER + "x = seq + 1\nparam n = count(x, EOQ)\noutput seq\n", 5, 17, "must be the input"),
    ("read before assign in loop", HEADER + "loop 2:\n    y = z + 1\n    z = seq\noutput seq\n", 5, 9,
     "read before the loop body assigns it"),
    ("loop var changes type", HEADER + "a = seq\nloop 2:\n    a = select(seq, seq, eq)\noutput seq\n", 5, 1,
     "changes type"),
    ("duplicate parameter", HEADER + "def f(x, x):\n    return x\noutput f(seq, seq)\n", 4, 10, "duplicate parameter"),
    ("non-default after default", HEADER + "def f(x=1, y):\n    return x\noutput f(seq, seq)\n", 4, 1,
     "without a default follows"),
    ("division by zero (constant)", HEADER + "output seq + 1 // 0\n", 4, 14, "division by zero"),
    ("empty range", 'input seq: {5..2}\noutput seq\n', 1, 13, "empty range"),
    ("literal out of range", HEADER + "output seq + 99999999999999999999\n", 4, 14, "does not fit in a 64-bit int"),
]


@pytest.mark.parametrize("name,source,line,col,fragment", CHECKS, ids=[c[0] for c in CHECKS])
def test_checker_errors(tmp_path, capsys, name, source, line, col, fragment):
    expect_error(tmp_path, capsys, source, line, col, fragment)


def test_runtime_division_by_zero(tmp_path, capsys):
    expect_error(tmp_path, capsys, HEADER + "output 1 // seq\n", 4, 8, "division by zero", inputs="1 1 0 > #")


def test_runtime_loop_variable_undefined(tmp_path, capsys):
    src = HEADER + "param n = count_before(seq, EOQ)\nloop n:\n    y = seq\noutput y\n"
    expect_error(tmp_path, capsys, src, 5, 1, "ran 0 times", inputs="> #")


@pytest.mark.heavy
def test_runtime_step_limit(tmp_path, capsys):
    src = HEADER + "loop 100000:\n    seq = shift_right(seq, 1)\noutput seq\n"
    err = expect_error(tmp_path, capsys, src, 4, 1, "max-steps")
    status, _, err, _ = run_cli(tmp_path, capsys, src, "--max-steps", "200000")
    assert status == 0, err


INPUT_ERRORS = [
    ("unknown token", "1 0 x #", "unknown token 'x'"),
    ("not in vocabulary", "1 7 > #", "token '7' at position 2 is not in the input vocabulary"),
    ("empty input", "   ", "empty input"),
]


@pytest.mark.parametrize("name,text,fragment", INPUT_ERRORS, ids=[e[0] for e in INPUT_ERRORS])
def test_input_errors(tmp_path, capsys, name, text, fragment):
    status, out, err, _ = run_cli(tmp_path, capsys, HEADER + "output seq\n", inputs=text)
    assert status == 2 and err.startswith("input: error: ") and fragment in err, err


def test_inputs_file_names_the_line(tmp_path, capsys):
    prog = tmp_path / "p.rasp"
    prog.write_text(HEADER + "output seq\n")
    inputs = tmp_path / "in.txt"
    inputs.write_text("1 0 > #\n0 > #\n1 2 > #\n")
    assert main(["run", str(prog), "--inputs", str(inputs)]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"{inputs}:3: error: token '2' at position 2") and out == ""


def test_length_limit(tmp_path, capsys):
    status, _, err, _ = run_cli(tmp_path, capsys, HEADER + "output seq\n", "--max-len", "3", inputs="1 0 > #")
    assert status == 2 and "limit is 3" in err and "--max-len" in err


def test_bad_param_override(tmp_path, capsys):
    src = HEADER + "param n = count_before(seq, EOQ)\noutput seq + n\n"
    status, _, err, _ = run_cli(tmp_path, capsys, src, "--param", "n=x")
    assert status == 2 and "NAME=INT" in err
    status, _, err, _ = run_cli(tmp_path, capsys, src, "--param", "m=3")
    assert status == 2 and "unknown param 'm'" in err and "declares: n" in err


def test_missing_program_file(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.rasp"), "--input", "1"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_discipline_warning_and_strict(tmp_path, capsys):
    src = HEADER + "output indices(seq) * 2\n"
    status, out, err, path = run_cli(tmp_path, capsys, src)
    assert status == 0 and re.match(rf"{re.escape(path)}:4:8: warning: 'mul' on an index-derived", err)
    status, out, err, path = run_cli(tmp_path, capsys, src, "check", "--strict")
    assert status == 2 and err.startswith(f"{path}:4:8: error: 'mul' on an index-derived")


@pytest.mark.parametrize("expr", ["indices(seq) + 2", "indices(seq) - 1 == seq", "shift_right(seq, 2)",
                                  "index_select(seq, indices(seq) - 1)", "firsts(seq, seq) + 1"])
def test_discipline_allows_shifts_and_comparisons(tmp_path, capsys, expr):
    status, out, err, _ = run_cli(tmp_path, capsys, HEADER + f"output {expr}\n", "check", "--strict")
    assert status == 0 and "warning" not in err, err


@pytest.mark.parametrize("expr", ["indices(seq) * 2", "indices(seq) + indices(seq)", "indices(seq) % 2",
                                  "tok_map(indices(seq), lambda i: i + i)", "-indices(seq)"])
def test_discipline_flags_other_index_arithmetic(tmp_path, capsys, expr):
    status, out, err, _ = run_cli(tmp_path, capsys, HEADER + f"output {expr}\n", "check", "--strict")
    assert status == 2 and "index-derived" in err, err


def test_runtime_integer_overflow_is_an_error_not_a_wrap(tmp_path, capsys):
    src = HEADER + "c = seq\nloop 70:\n    c = c * 2 + 1\noutput c\n"
    expect_error(tmp_path, capsys, src, 6, 9, "integer overflow")
    # 60 doublings still fit: exact values, no error
    status, out, err, _ = run_cli(tmp_path, capsys, src.replace("loop 70", "loop 60"), inputs="1 0")
    assert status == 0 and out.split() == [str(2 ** 61 - 1), str(2 ** 60 - 1)], err
