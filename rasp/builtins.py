"""The core primitives of docs/language.md §4 (and host/element-wise helpers), as
lowering rules: each takes the bound arguments and builds graph nodes."""
from __future__ import annotations

from . import ast as A
from . import ir
from .values import Function, LambdaValue, Predicate, Reduction, Scope, describe

# parameter lists: (name, default) where None means required
_SIGNATURES: dict[str, list[tuple[str, int | str | None]]] = {
    "full": [("x", None), ("c", None)],
    "indices": [("x", None)],
    "tok_map": [("x", None), ("f", None)],
    "seq_map": [("x", None), ("y", None), ("f", None)],
    "select": [("k", None), ("q", None), ("pred", None)],
    "sel_width": [("A", None)],
    "aggr": [("A", None), ("v", None), ("default", 0), ("reduction", "mean")],
    "kqv": [("k", None), ("q", None), ("v", None), ("pred", None), ("default", 0), ("reduction", "mean")],
    "where": [("c", None), ("x", None), ("y", None)],
    "len": [("x", None)],
    "count": [("x", None), ("tok", None)],
    "count_before": [("x", None), ("tok", None)],
    "min": [("a", None), ("b", None)],
    "max": [("a", None), ("b", None)],
    "abs": [("a", None)],
}


def _arg(low, bound, name):
    node, value = bound[name]
    if isinstance(value, int):          # a builtin default
        value = low.const(value)
    elif isinstance(value, str):        # a builtin default predicate/reduction name
        value = Reduction(value)
    return node, value


def _full(low, bound, call):
    x_node, x = _arg(low, bound, "x")
    low.as_value(x, x_node, "full()'s first argument")
    c_node, c = _arg(low, bound, "c")
    return low.full(low.as_scalar(c, c_node, "full()'s value"), low.loc(call))


def _indices(low, bound, call):
    x_node, x = _arg(low, bound, "x")
    low.as_value(x, x_node, "indices()'s argument")
    return low.indices(low.loc(call))


def _map_with(arity):
    names = ["x", "y"][:arity]

    def build(low, bound, call):
        operands = []
        for name in names:
            node, value = _arg(low, bound, name)
            operands.append(low.as_value(value, node, f"{call.func.id}()'s argument '{name}'"))
        f_node, f = _arg(low, bound, "f")
        if isinstance(f, ir.Table):
            if len(f.shape) != arity:
                shape = " x ".join(map(str, f.shape))
                other = "tok_map(x, T) takes a list of ints" if arity == 1 else \
                    "seq_map(x, y, T) takes a list of rows"
                raise low.error(f"the lookup table '{f.name}' is {len(f.shape)}-D ({shape}); {other}", f_node)
            return low.lookup(f, operands, [bound[name][0] for name in names], call)
        if not isinstance(f, LambdaValue):
            raise low.error(f"{call.func.id}() needs a lambda or a lookup table as its function argument, "
                            f"not {describe(f)}", f_node)
        if len(f.node.params) != arity:
            raise low.error(f"{call.func.id}() needs a lambda of {arity} parameter{'s' * (arity > 1)}, "
                            f"this one has {len(f.node.params)}", f_node)
        return _apply_lambda(low, f, operands)
    return build


def _apply_lambda(low, f: LambdaValue, operands):
    """Inline the lambda body over the operands: element-wise maps."""
    scope = Scope(f.scope)
    for name, value in zip(f.node.params, operands):
        scope.vars[name] = value
    allowed = set(f.node.params)
    _check_lambda_body(low, f.node.body, scope, allowed)
    value = low.expr(f.node.body, scope)
    return low.as_value(value, f.node.body, "a lambda's result")


def _check_lambda_body(low, node, scope, params):
    """A lambda body is an expression over ints: its parameters, literals,
    consts and params; only min/max/abs may be called."""
    if isinstance(node, A.Name) and node.id not in params:
        try:
            value = scope.lookup(node.id)
        except KeyError:
            return                       # expr() reports the undefined name
        if isinstance(value, ir.Node) and value.kind != ir.SCALAR:
            raise low.error(f"a lambda body may use only its parameters, numbers, consts and params; "
                            f"'{node.id}' is {describe(value)}", node)
    if isinstance(node, A.Call):
        if not (isinstance(node.func, A.Name) and node.func.id in ("min", "max", "abs")):
            raise low.error("a lambda body may call only min, max and abs", node)
        for a in node.args + [k.value for k in node.keywords]:
            _check_lambda_body(low, a, scope, params)
        return
    if isinstance(node, A.Lambda):
        raise low.error("a lambda cannot contain a lambda", node)
    for value in vars(node).values():
        children = value if isinstance(value, list) else [value]
        for child in children:
            if isinstance(child, A.Node):
                _check_lambda_body(low, child, scope, params)


def _predicate(low, bound, name="pred"):
    node, value = _arg(low, bound, name)
    if not isinstance(value, Predicate):
        raise low.error(f"a predicate must be one of {', '.join(ir.PREDICATES)}, not {describe(value)}", node)
    return value.name


def _reduction(low, bound):
    node, value = _arg(low, bound, "reduction")
    if not isinstance(value, Reduction):
        raise low.error(f"reduction must be one of {', '.join(ir.REDUCTIONS)}, not {describe(value)}", node)
    return value.name


def _make_select(low, k_node, k, q_node, q, pred, call):
    key = low.as_sop(k, k_node, "select's key")
    query = low.as_sop(q, q_node, "select's query")
    return low.graph.add(ir.Select(key, query, pred), ("Select", pred, id(key), id(query)), low.loc(call))


def _select(low, bound, call):
    k_node, k = _arg(low, bound, "k")
    q_node, q = _arg(low, bound, "q")
    return _make_select(low, k_node, k, q_node, q, _predicate(low, bound), call)


def _sel_width(low, bound, call):
    a_node, a = _arg(low, bound, "A")
    sel = low.as_selector(a, a_node, "sel_width()'s argument")
    return low.graph.add(ir.SelWidth(sel), ("SelWidth", id(sel)), low.loc(call))


def _make_aggregate(low, sel, bound, call):
    v_node, v = _arg(low, bound, "v")
    value = low.as_sop(v, v_node, "the aggregated value")
    d_node, d = _arg(low, bound, "default")
    default = low.as_value(d, d_node, "the default")
    reduction = _reduction(low, bound)
    key = ("Aggregate", reduction, id(sel), id(value), id(default))
    return low.graph.add(ir.Aggregate(sel, value, reduction, default), key, low.loc(call),
                         index_derived=getattr(value, "index_derived", False))


def _aggr(low, bound, call):
    a_node, a = _arg(low, bound, "A")
    return _make_aggregate(low, low.as_selector(a, a_node, "aggr()'s selector"), bound, call)


def _kqv(low, bound, call):
    k_node, k = _arg(low, bound, "k")
    q_node, q = _arg(low, bound, "q")
    sel = _make_select(low, k_node, k, q_node, q, _predicate(low, bound), call)
    return _make_aggregate(low, sel, bound, call)


def _elementwise(op, names):
    def build(low, bound, call):
        operands = []
        for name in names:
            node, value = _arg(low, bound, name)
            operands.append(low.as_value(value, node, f"{call.func.id}()'s argument '{name}'"))
        return low.map(op, operands, call)
    return build


def _host_sequence(low, bound, call):
    node, value = _arg(low, bound, "x")
    if value is not low.input:
        raise low.error(f"{call.func.id}() is computed on the host from the raw input: its first argument "
                        f"must be the input '{low.input.name if low.input else 'seq'}'", node)


def _len(low, bound, call):
    _host_sequence(low, bound, call)
    return low.host(ir.HostExpr("len"), loc=low.loc(call))


def _counter(op):
    def build(low, bound, call):
        _host_sequence(low, bound, call)
        node, value = _arg(low, bound, "tok")
        if not isinstance(value, ir.Const):
            raise low.error(f"{op}()'s token must be a literal, symbol or const", node)
        return low.host(ir.HostExpr(op, (value.value,)), loc=low.loc(call))
    return build


_HANDLERS = {
    "full": _full, "indices": _indices, "tok_map": _map_with(1), "seq_map": _map_with(2),
    "select": _select, "sel_width": _sel_width, "aggr": _aggr, "kqv": _kqv,
    "where": _elementwise("where", ["c", "x", "y"]),
    "len": _len, "count": _counter("count"), "count_before": _counter("count_before"),
    "min": _elementwise("min", ["a", "b"]), "max": _elementwise("max", ["a", "b"]),
    "abs": _elementwise("abs", ["a"]),
}

BUILTINS = {name: Function(name, _SIGNATURES[name], builtin=handler) for name, handler in _HANDLERS.items()}
