"""Lowering of expressions: literals, names, operators, comparisons and calls
(argument binding, then a builtin's rule or the inlined body of a user or
library function).  A mixin of `rasp.lower.Lowering`, whose node
constructors, errors, statements and scopes these methods call."""
from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any, Optional, cast

from . import ast as A
from . import ir
from .values import (UNDEFINED, Function, LambdaValue, LazyLoopOut, Predicate, Reduction, Scope,
                     describe)

if TYPE_CHECKING:
    from .errors import RaspError

COMPARE = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}


class ExpressionLowering:
    # what these methods use of rasp.lower.Lowering, the class this is a mixin
    # of (declared for the type checker; Lowering defines them)
    graph: Any      # a rasp.lower.Graph (not imported: rasp.lower imports this module, and
                    # tests/test_layers.py allows no import circle, under TYPE_CHECKING either)
    call_stack: list                 # the names of the functions being inlined
    call_site: Optional[ir.Loc]
    library_scope: Scope
    global_scope: Scope

    if TYPE_CHECKING:
        def loc(self, node: A.Node) -> ir.Loc: ...

        def error(self, message: str, node: A.Node) -> RaspError: ...

        def run_body(self, stmts: list, scope: Scope, in_def: Optional[Function] = None) -> Any: ...

    def expr(self, node: A.Node, scope: Scope, allow_lambda=False):
        method = getattr(self, "expr_" + type(node).__name__)
        return method(node, scope, allow_lambda) if isinstance(node, A.Lambda) else method(node, scope)

    def expr_Num(self, node, scope):
        return self.const(node.value, self.loc(node))

    def expr_Str(self, node, scope):
        if node.text not in self.symbols:
            raise self.error(f"unknown symbol {node.text!r}: declare it with const NAME = {node.text!r}", node)
        return self.const(self.symbols[node.text], self.loc(node))

    def expr_Name(self, node, scope):
        try:
            value = scope.lookup(node.id)
        except KeyError:
            if node.id in ir.PREDICATES:
                return Predicate(node.id)
            if node.id in ir.REDUCTIONS:
                return Reduction(node.id)
            hint = difflib.get_close_matches(node.id, scope.names() | set(ir.PREDICATES), n=1)
            extra = f"; did you mean '{hint[0]}'?" if hint else ""
            raise self.error(f"undefined name '{node.id}'{extra}", node) from None
        if value is UNDEFINED:
            raise self.error(f"'{node.id}' is read before the loop body assigns it, and it has no "
                             "value before the loop", node)
        if isinstance(value, LazyLoopOut):
            return self.loop_out(value)
        if isinstance(value, Function) and value.builtin is not None and node.id in ir.REDUCTIONS:
            return Reduction(node.id)      # `reduction=max`: the name, not the function
        return value

    def expr_ListLit(self, node, scope):
        raise self.error("a list is only allowed as the value of a const: a lookup table "
                         "(const T = [[...], ...]) for tok_map(x, T) / seq_map(x, y, T)", node)

    def expr_Lambda(self, node, scope, allow_lambda=False):
        if not allow_lambda:
            raise self.error("a lambda is only allowed as the function argument of tok_map or seq_map", node)
        return LambdaValue(node, scope)

    def expr_UnaryOp(self, node, scope):
        operand = self.as_value(self.expr(node.operand, scope), node.operand, "the operand")
        if node.op == "pos":
            return operand
        return self.map(node.op, [operand], node)

    def expr_BinOp(self, node, scope):
        if node.op == "truediv":
            raise self.error("'/' is not an n-RASP-L operator: values are ints, use '//'", node)
        left = self.as_value(self.expr(node.left, scope), node.left, "the left operand")
        right = self.as_value(self.expr(node.right, scope), node.right, "the right operand")
        return self.map(node.op, [left, right], node)

    def expr_Compare(self, node, scope):
        values = [self.as_value(self.expr(o, scope), o, "a comparison operand") for o in node.operands]
        result = None
        for op, a, b in zip(node.ops, values, values[1:]):
            term = self.map(COMPARE[op], [a, b], node)
            result = term if result is None else self.map("and", [result, term], node)
        return result

    def expr_Call(self, node, scope):
        if not isinstance(node.func, A.Name):
            raise self.error("only named functions can be called", node.func)
        try:
            fn = scope.lookup(node.func.id)
        except KeyError:
            fn = None
        if not isinstance(fn, Function):
            if fn is None:
                self.expr_Name(node.func, scope)          # raises 'undefined name'
            raise self.error(f"'{node.func.id}' is not a function (it is {describe(fn)})", node.func)
        for kw in node.keywords:
            if any((a.line, a.column) > (kw.line, kw.column) for a in node.args):
                raise self.error("positional argument follows keyword argument", kw)
        args = [(a, self.expr(a, scope, allow_lambda=True)) for a in node.args]
        keywords = {}
        for kw in node.keywords:
            if kw.name in keywords:
                raise self.error(f"keyword argument '{kw.name}' given twice", kw)
            keywords[kw.name] = (kw, self.expr(kw.value, scope, allow_lambda=True))
        bound = self.bind(fn, args, keywords, node)
        return self.apply(fn, bound, node)

    def bind(self, fn: Function, args, keywords, node) -> dict:
        names = [p for p, _ in fn.params]
        if len(args) > len(names):
            raise self.error(f"{fn.name}() takes {len(names)} argument{'s' * (len(names) != 1)} "
                             f"but {len(args)} were given", node)
        bound = {name: pair for name, pair in zip(names, args)}
        for name, pair in keywords.items():
            if name not in names:
                raise self.error(f"{fn.name}() has no parameter '{name}' (parameters: "
                                 f"{', '.join(names) or 'none'})", pair[0])
            if name in bound:
                raise self.error(f"{fn.name}() got two values for '{name}'", pair[0])
            bound[name] = (pair[0].value, pair[1])
        for name, default in fn.params:
            if name not in bound:
                if default is None:
                    raise self.error(f"{fn.name}() is missing the argument '{name}'", node)
                value = default if fn.builtin else self.expr(default, self.globals_for(fn))
                bound[name] = (node, value)
        for arg_node, value in bound.values():
            if isinstance(value, LambdaValue) and not fn.builtin:
                raise self.error("a lambda is only allowed as the function argument of tok_map or seq_map",
                                 arg_node)
        return bound

    def globals_for(self, fn: Function) -> Scope:
        return self.library_scope if fn.library else self.global_scope

    def apply(self, fn: Function, bound: dict, node: A.Call):
        if fn.builtin is not None:
            return fn.builtin(self, bound, node)
        if fn.name in self.call_stack and not fn.library:
            raise self.error(f"recursion is not allowed: '{fn.name}' calls itself", node)
        outer_site, outer_origin = self.call_site, self.graph.origin
        if fn.library and self.call_site is None:
            self.call_site = self.loc(node)
            self.graph.origin = fn.name
        self.call_stack.append(fn.name)
        try:
            local = Scope(self.globals_for(fn))
            for name, (_, value) in bound.items():
                local.vars[name] = value
            body = cast(list, fn.body)      # not a builtin (returned above): a def, which has statements
            return self.run_body(body, local, in_def=fn)
        finally:
            self.call_stack.pop()
            self.call_site, self.graph.origin = outer_site, outer_origin
