"""Fuzzing the front end: random text and random token soup never produce a
traceback — only a located RaspError (or a valid program)."""
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rasp
from rasp.cli import main

HEADER = 'const EOQ = ">"\nconst EOS = "#"\ninput seq: {0, 1, EOQ, EOS}\n'
SOUP = ["const", "input", "param", "def", "return", "loop", "until stable", "output", "lambda", "and", "or",
        "not", "seq", "x", "y", "f", "n", "EOQ", "eq", "lt", "always", "max", "mean", "select", "aggr", "kqv",
        "shift_right", "tok_map", "seq_map", "sel_width", "indices", "full", "where", "count_before", "len",
        "0", "1", "2", "-1", "999999999999999999999", '">"', '"#"', "(", ")", "{", "}", ",", ":", "=", "==",
        "!=", "<", "<=", "+", "-", "*", "//", "%", "/", "&", "|", "^", "~", "..", "\n", "\n    ", "\n        ",
        "#c", "\t", "\\\n"]
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


def assert_only_rasp_errors(source):
    try:
        program = rasp.loads(source, "fuzz.rasp")
    except rasp.RaspError as e:
        text = e.format()
        assert text.startswith("fuzz.rasp:") or text.startswith("error:"), text
        return
    # a program that checks must also run without crashing on a small input
    try:
        program.run_batch([[program.ir.vocab[0]] * 3], limits=rasp.RunLimits(max_steps=50))
    except rasp.RaspError:
        pass


@SETTINGS
@given(st.text(alphabet=string.printable, max_size=200))
def test_random_text(text):
    assert_only_rasp_errors(text)


@SETTINGS
@given(st.lists(st.sampled_from(SOUP), max_size=40))
def test_token_soup(words):
    assert_only_rasp_errors(" ".join(words))


@SETTINGS
@given(st.lists(st.sampled_from(SOUP), max_size=25))
def test_token_soup_after_valid_header(words):
    assert_only_rasp_errors(HEADER + " ".join(words) + "\noutput seq\n")


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(alphabet=string.printable, max_size=40))
def test_random_inputs_to_cli(tmp_path_factory, capsys, text):
    path = tmp_path_factory.mktemp("fuzz") / "p.rasp"
    path.write_text(HEADER + "output shift_right(seq, 1)\n")
    status = main(["run", str(path), "--input", text])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err
    assert status in (0, 2)
    if status == 2:
        assert err.startswith("input: error: ")
