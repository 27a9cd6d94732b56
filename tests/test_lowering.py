"""Front-end semantics: scoping, loops, calls, sharing of identical work."""
import numpy as np
import pytest

import rasp
from rasp import ir

HEADER = 'const EOQ = ">"\nconst EOS = "#"\ninput seq: {0, 1, 2, EOQ, EOS}\n'


def run(body, tokens, params=None):
    return rasp.loads(HEADER + body).run(tokens, params)


def test_identical_expressions_share_one_node():
    prog = rasp.loads(HEADER + "a = shift_right(seq, 1)\nb = shift_right(seq, 1)\noutput a + b\n")
    add = prog.ir.output
    assert isinstance(add, ir.Map) and add.inputs[0] is add.inputs[1]


def test_loop_invariant_work_is_hoisted_out_of_the_body():
    prog = rasp.loads(HEADER + "s = seq\nloop 3:\n    k = indices(seq) + 1\n    s = kqv(k, indices(seq), s, eq)\n"
                              "output s\n")
    loop = prog.ir.loops[0]
    body_nodes = loop.body.nodes()
    assert all(not isinstance(n, (ir.Indices, ir.Select)) for n in body_nodes)
    assert any(isinstance(n, ir.Aggregate) for n in body_nodes)


def test_assignments_in_a_loop_stay_visible_after_it():
    assert run("c = 0\nloop 3:\n    c = c + 1\n    d = c * 2\noutput d\n", [0, 1]) == [6, 6]


def test_zero_iterations_keep_the_value_from_before_the_loop():
    body = "param n = count_before(seq, EOQ)\nc = seq\nloop n:\n    c = c + 1\noutput c\n"
    assert run(body, [-1, 0]) == [-1, 0]
    assert run(body, [1, 1, -1]) == [3, 3, 1]


def test_until_stable_stops_after_the_first_unchanged_iteration():
    prog = rasp.loads(HEADER + "x = seq\nloop 100 until stable:\n    x = max(x - 1, 0)\noutput x\n")
    res = prog.run_batch([[2, 0, 1], [0, 0], [1]])
    assert res.outputs == [[0, 0, 0], [0, 0], [0]]
    # x needs max(seq) iterations to reach 0 and one more to see nothing change
    assert res.steps[:, 0].tolist() == [3, 1, 2]


def test_nested_loops_count_total_iterations():
    prog = rasp.loads(HEADER + "c = 0\nloop 3:\n    loop 2:\n        c = c + 1\noutput c\n")
    res = prog.run_batch([[0, 1]])
    assert res.outputs == [[6, 6]] and res.steps.tolist() == [[3, 6]]


def test_loop_inside_a_function_and_keyword_calls():
    body = ("def rotate(x, times=1, fill=0):\n    loop times:\n        x = shift_right(x, 1, fill)\n    return x\n"
            "output rotate(seq, fill=2, times=2)\n")
    assert run(body, [0, 1, 0, 1]) == [2, 2, 0, 1]


def test_chained_comparison_and_not_precedence():
    assert run("output 0 < seq < 2\n", [0, 1, 2]) == [0, 1, 0]
    assert run("output not seq == 1\n", [0, 1, 2]) == [1, 0, 1]
    assert run("output seq & 1 == 1\n", [0, 1, 2]) == [0, 1, 0]     # (seq & 1) == 1 ... as Python: & binds tighter


def test_user_function_returning_a_selector():
    body = "def same(x):\n    return select(x, x, eq)\noutput sel_width(same(seq))\n"
    assert run(body, [1, 0, 1, 1]) == [1, 1, 2, 3]


def test_predicates_and_reductions_pass_through_functions():
    body = "def agg(x, p, r):\n    return kqv(x, x, x, p, 0, r)\noutput agg(seq, le, max)\n"
    assert run(body, [2, 0, 1]) == [2, 0, 1]


def test_user_definition_shadows_the_library():
    body = "def cumsum(b):\n    return b + 10\noutput cumsum(seq)\n"
    assert run(body, [1, 0]) == [11, 10]
    # ...but the library's own functions keep using the library's cumsum
    assert run(body.replace("output cumsum(seq)", "output has_seen(seq, 1)"), [0, 1, 0]) == [0, 1, 1]


def test_params_can_be_values_and_overridden():
    body = "param n = count(seq, 1) + 1\noutput seq + n\n"
    assert run(body, [1, 1, 0]) == [4, 4, 3]
    assert run(body, [1, 1, 0], {"n": 0}) == [1, 1, 0]


def test_symbols_constants_and_ranges():
    prog = rasp.loads('const A = "a"\nconst K = 2 * 3\ninput x: {A, 0..K}\noutput x + K\n')
    assert prog.ir.vocab == (-1, 0, 1, 2, 3, 4, 5, 6)
    assert prog.run([-1, 6]) == [5, 12]


def test_scalar_output_is_broadcast():
    assert run("output 7\n", [0, 1, 2]) == [7, 7, 7]


@pytest.mark.parametrize("n", [1, 5, 17])
def test_loop_count_is_per_input_in_a_batch(n):
    prog = rasp.loads(HEADER + "param n = count_before(seq, EOQ)\nc = 0\nloop n:\n    c = c + 1\noutput c\n")
    batch = [[0] * k + [-1] for k in range(n)]
    res = prog.run_batch(batch)
    assert [o[0] for o in res.outputs] == list(range(n))
    assert np.array_equal(res.steps[:, 0], np.arange(n))
