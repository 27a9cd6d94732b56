"""AST -> ProgramIR: the checker and the lowering in one pass.

Lowering evaluates the program symbolically: every expression becomes a node
of the hash-consed graph in `rasp.ir`, user and library functions are inlined
at their call sites, lambdas become element-wise maps, constants are folded.
Every check of the language contract happens here, located at the source:
names, arity, types (s-op / selector / scalar / function), no recursion,
lambdas only in tok_map/seq_map, predicates and reductions, host expressions
for params and loop counts, and the RASP-L discipline of docs/language.md §10.
Expressions and calls are lowered by the `ExpressionLowering` mixin
(rasp/expressions.py); statements, node constructors and the driver are here.
"""
from __future__ import annotations

import graphlib
import re
from functools import lru_cache
from importlib import resources
from typing import Optional, cast

from . import ast as A
from . import builtins as _builtins
from . import ir
from .errors import RaspError, RaspWarning
from .expressions import ExpressionLowering
from .operators import PYTHON as PYTHON_OPS
from .parser import parse
from .values import UNDEFINED, Function, LazyLoopOut, Scope, describe

MAX_VOCAB = 100_000
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1   # s-op values are NumPy int64
HOST_OPS = {"add", "sub", "mul", "floordiv", "mod", "neg", "min", "max"}
# index-derived s-ops may go through these without leaving RASP-L (docs/language.md §10)
INDEX_SAFE = {"eq", "ne", "lt", "le", "gt", "ge", "where"}


# ---- the graph builder: hash-consing and loop-invariant placement ---------------

class Graph:
    """Nodes are placed in the outermost block where their inputs exist
    (`node.block`), which hoists them out of loops.  `node.use_block` is the
    block where the source computes them (the innermost block containing
    every use): the interpreter reports an error in a node only for inputs
    that run that block, so a hoisted `x // 0` in `loop 0:` is no error."""

    def __init__(self, top: ir.Block):
        self.top = top
        self.current = top             # the block whose statements are being lowered
        self.cache: dict = {}
        self.origin: Optional[str] = None     # the library function being inlined (for drawings)

    def add(self, node: ir.Node, key, loc: Optional[ir.Loc], index_derived=False) -> ir.Node:
        if key is not None and key in self.cache:
            cached = self.cache[key]
            self.used_in(cached, self.current)
            return cached
        node.loc = loc
        node.origin = self.origin
        node.index_derived = index_derived
        blocks = [i.block for i in node.inputs] or [self.top]
        node.block = max(blocks, key=lambda b: b.depth)
        node.use_block = self.current
        node.block.items.append(node)
        if key is not None:
            self.cache[key] = node
        return node

    def used_in(self, node: ir.Node, block: ir.Block):
        """`node` is also computed in `block`: its use block becomes the common
        ancestor, and so do those of the nodes it reads."""
        stack = [node]
        while stack:
            n = stack.pop()
            use = getattr(n, "use_block", None)
            if use is None:
                continue
            common = _common_block(use, block)
            if common is not use:
                n.use_block = common
                stack.extend(n.inputs)


def _common_block(a: ir.Block, b: ir.Block) -> ir.Block:
    # (the casts: a block deeper than another, or one of two distinct blocks
    # at the same depth, is not the top block, so its parent is a Block)
    while a.depth > b.depth:
        a = cast(ir.Block, a.parent)
    while b.depth > a.depth:
        b = cast(ir.Block, b.parent)
    while a is not b:
        a, b = cast(ir.Block, a.parent), cast(ir.Block, b.parent)
    return a


def _key(cls, attrs, inputs):
    return (cls.__name__, attrs, tuple(id(i) for i in inputs))


# ---- the lowering ---------------------------------------------------------------

class Lowering(ExpressionLowering):
    # the scopes functions are defined in, set by _make_scope and _lower before any statement is lowered
    library_scope: Scope        # builtins <- library functions
    global_scope: Scope         # library_scope <- the program's functions and top-level names

    def __init__(self, source: str, path: str):
        self.source, self.path = source, path
        self.top = ir.Block()
        self.graph = Graph(self.top)
        self.warnings: list = []
        self.symbols: dict = {}
        self.consts: dict = {}
        self.params: dict = {}
        self.loops: list = []
        self.requires: list = []
        self.sampler = None                       # the `sample` statement (rasp/sampler.py)
        self.input: Optional[ir.Input] = None
        self.vocab: tuple = ()
        self.output: Optional[ir.Node] = None
        self.output_loc = None
        self.call_stack: list = []
        self.call_site: Optional[ir.Loc] = None   # set while inlining library code
        self.block = self.top
        self.int_vocab: list = []                 # (value, AST item) written as integers, not symbols
        self.symbol_names: set = set()            # consts that name symbols
        self.statement: Optional[A.Node] = None   # the top-level statement being lowered
        self.tables: dict = {}                    # const name -> ir.Table
        self.static_memo: dict = {}               # node -> its values known from the vocabulary (or None)

    @property
    def block(self) -> ir.Block:
        return self.graph.current

    @block.setter
    def block(self, block: ir.Block):
        self.graph.current = block

    # -- locations, errors, warnings --
    def loc(self, node: A.Node) -> ir.Loc:
        if self.call_site is not None:
            return self.call_site
        return ir.Loc(self.path, node.line, node.column)

    def error(self, message: str, node: A.Node):
        return RaspError(message, self.loc(node), self.source)

    def warn(self, message: str, loc: ir.Loc):
        if self.call_site is None and all(w.loc != loc for w in self.warnings):
            self.warnings.append(RaspWarning(message, loc, self.source))

    # -- node constructors --
    def const(self, value: int, loc=None) -> ir.Node:
        if not INT64_MIN <= value <= INT64_MAX:
            raise RaspError(f"the value {value} does not fit in a 64-bit int", loc, self.source)
        return self.graph.add(ir.Const(value), ("Const", int(value)), loc)

    def host(self, expr: ir.HostExpr, name=None, loc=None) -> ir.Node:
        if expr.op == "lit":
            return self.const(expr.args[0], loc)
        return self.graph.add(ir.Host(expr, name), ("Host", expr, name), loc)

    def indices(self, loc) -> ir.Node:
        return self.graph.add(ir.Indices(), ("Indices",), loc, index_derived=True)

    def full(self, value: ir.Node, loc) -> ir.Node:
        return self.graph.add(ir.Full(value), _key(ir.Full, (), [value]), loc)

    def as_sop(self, value, node: A.Node, what: str) -> ir.Node:
        value = self.as_value(value, node, what)
        return self.full(value, self.loc(node)) if value.kind == ir.SCALAR else value

    def as_value(self, value, node: A.Node, what: str) -> ir.Node:
        """An s-op or scalar operand (not a selector, function, ...)."""
        if isinstance(value, ir.Node) and value.kind != ir.SELECTOR:
            return value
        raise self.error(f"{what} must be an s-op or a number, not {describe(value)}", node)

    def as_scalar(self, value, node: A.Node, what: str) -> ir.Node:
        if isinstance(value, ir.Node) and value.kind == ir.SCALAR:
            return value
        raise self.error(f"{what} must be a number (literal, const or param), not {describe(value)}", node)

    def as_selector(self, value, node: A.Node, what: str) -> ir.Node:
        if isinstance(value, ir.Node) and value.kind == ir.SELECTOR:
            return value
        raise self.error(f"{what} must be a selector (from select), not {describe(value)}", node)

    def map(self, op: str, inputs: list, node: A.Node) -> ir.Node:
        loc = self.loc(node)
        if all(isinstance(i, ir.Const) for i in inputs):
            try:
                value = PYTHON_OPS[op](*(i.value for i in inputs))
                problem = None if INT64_MIN <= value <= INT64_MAX else "integer overflow: the result " \
                    "does not fit in a 64-bit int"
            except ZeroDivisionError:
                problem = "division by zero"
            if problem is None:
                return self.const(value, loc)
            if self.block is self.top:
                raise self.error(problem, node)
            # in a loop body that may run 0 times: left unfolded, the
            # interpreter reports it for the inputs that run the body
            return self.graph.add(ir.Map(op, inputs), _key(ir.Map, op, inputs), loc)
        if op in HOST_OPS and all(isinstance(i, (ir.Const, ir.Host)) for i in inputs):
            return self.host(ir.HostExpr(op, tuple(host_expr(i) for i in inputs)), loc=loc)
        derived = [getattr(i, "index_derived", False) for i in inputs]
        index_derived = any(derived)
        if any(derived):
            index_derived = self.check_index_arithmetic(op, inputs, derived, loc)
        return self.graph.add(ir.Map(op, inputs), _key(ir.Map, op, inputs), loc, index_derived)

    def check_index_arithmetic(self, op, inputs, derived, loc) -> bool:
        """RASP-L (docs/language.md §10): an index-derived s-op may only be shifted by a constant,
        compared, or used as a select key/query.  Returns whether the result
        is still index-derived."""
        if op in INDEX_SAFE:
            return op == "where"
        shift = op in ("add", "sub") and sum(derived) == 1 and not (op == "sub" and derived[1]) \
            and all(i.kind == ir.SCALAR for i, d in zip(inputs, derived) if not d)
        if not shift:
            self.warn(f"'{op}' on an index-derived s-op is outside RASP-L: indices may only be "
                      "shifted by a constant, compared, or used as a select key/query", loc)
            return False   # reported once; do not cascade through what depends on it
        return True

    # -- statements --
    def run_body(self, stmts: list, scope: Scope, in_def: Optional[Function] = None):
        """Lower statements; in a def, return the value(s) of its final `return`."""
        for i, stmt in enumerate(stmts):
            if isinstance(stmt, A.Return):
                if in_def is None:
                    raise self.error("'return' outside a function", stmt)
                if i != len(stmts) - 1:
                    raise self.error("statements after 'return' are never run", stmts[i + 1])
                values = [self.expr(v, scope) for v in stmt.values]
                for v, n in zip(values, stmt.values):
                    self.check_storable(v, n)
                return values[0] if len(values) == 1 else tuple(values)
            self.stmt(stmt, scope, in_def)
        if in_def is not None:
            # (a def's body is never empty: grammar.lark's suite is stmt+)
            raise self.error(f"function '{in_def.name}' has no 'return'", stmts[-1])
        return None

    def stmt(self, stmt: A.Node, scope: Scope, in_def):
        if self.block is self.top and in_def is None and not self.call_stack:
            self.statement = stmt
        top_only = (A.ConstStmt, A.InputStmt, A.ParamStmt, A.Output, A.Def, A.Require, A.Sample)
        if (in_def is not None or self.block is not self.top) and isinstance(stmt, top_only):
            what = type(stmt).__name__.replace("Stmt", "").lower()
            raise self.error(f"'{what}' is only allowed at the top level", stmt)
        getattr(self, "stmt_" + type(stmt).__name__)(stmt, scope)

    def check_storable(self, value, node):
        if isinstance(value, ir.Node):
            return
        if isinstance(value, tuple):
            raise self.error(f"this expression gives {len(value)} values; unpack them with "
                             f"{', '.join('abcdefgh'[:len(value)])} = ...", node)
        raise self.error(f"cannot store {describe(value)} in a variable", node)

    def stmt_Assign(self, stmt, scope):
        value = self.expr(stmt.value, scope)
        if len(stmt.targets) == 1:
            self.check_storable(value, stmt.value)
            values = [value]
        else:
            if not isinstance(value, tuple):
                raise self.error(f"cannot unpack one value into {len(stmt.targets)} names", stmt)
            if len(value) != len(stmt.targets):
                raise self.error(f"cannot unpack {len(value)} values into {len(stmt.targets)} names", stmt)
            values = list(value)
        for name, v in zip(stmt.targets, values):
            scope.vars[name] = v
            if self.call_site is None and not self.call_stack:
                self.block.items.append(ir.Bind(name, v, self.loc(stmt)))

    def stmt_ConstStmt(self, stmt, scope):
        if isinstance(stmt.value, A.Str):
            text = stmt.value.text
            if not text or re.search(r"\s", text) or re.fullmatch(r"[+-]?\d+", text):
                raise self.error(f"symbol text {text!r} must be non-empty, without spaces, and not a number",
                                 stmt.value)
            if text in self.symbols:
                raise self.error(f"symbol {text!r} is declared twice", stmt.value)
            self.symbols[text] = -(len(self.symbols) + 1)
            value = self.const(self.symbols[text])
            self.symbol_names.add(stmt.name)
        elif isinstance(stmt.value, A.ListLit):
            scope.vars[stmt.name] = self.tables[stmt.name] = self.const_table(stmt, scope)
            self.symbol_names.discard(stmt.name)
            return
        else:
            value = self.expr(stmt.value, scope)
            if isinstance(value, ir.Table):             # another name for a table
                scope.vars[stmt.name] = self.tables[stmt.name] = value
                self.symbol_names.discard(stmt.name)
                return
            if not isinstance(value, ir.Const):
                raise self.error("a const must be a symbol string, an int computed from literals and "
                                 "other consts, or a lookup table [[...], ...]", stmt.value)
        self.consts[stmt.name] = value.value
        scope.vars[stmt.name] = value
        if isinstance(stmt.value, A.Name) and stmt.value.id in self.symbol_names:
            self.symbol_names.add(stmt.name)          # another name for a symbol
        elif not isinstance(stmt.value, A.Str):
            self.symbol_names.discard(stmt.name)      # rebound to an int

    MAX_TABLE = 1_000_000        # entries of one lookup table

    def const_table(self, stmt, scope) -> ir.Table:
        """`const T = [...]` (1-D) or `[[...], ...]` (2-D, rectangular): ints only."""
        node = stmt.value
        if not node.items:
            raise self.error("a lookup table needs at least one entry", node)
        rows = [isinstance(i, A.ListLit) for i in node.items]
        if any(rows) and not all(rows):
            odd = node.items[rows.index(not rows[0])]
            raise self.error("a lookup table is a list of ints or a list of rows (lists of ints), not a "
                             "mix of both", odd)
        data: tuple         # of ints (1-D) or of rows, tuples of ints (2-D)
        if not rows[0]:
            data = tuple(self.table_entry(e, scope) for e in node.items)
        else:
            width = len(node.items[0].items)
            if width == 0:
                raise self.error("a lookup table's rows need at least one entry", node.items[0])
            for r, row in enumerate(node.items):
                if len(row.items) != width:
                    raise self.error(f"ragged table: row {r} has {len(row.items)} entr"
                                     f"{'y' if len(row.items) == 1 else 'ies'} but row 0 has {width} "
                                     "(a table is rectangular)", row)
            if len(node.items) * width > self.MAX_TABLE:
                raise self.error(f"the lookup table has {len(node.items) * width} entries (at most "
                                 f"{self.MAX_TABLE})", node)
            data = tuple(tuple(self.table_entry(e, scope) for e in row.items) for row in node.items)
        return ir.Table(stmt.name, data, self.loc(stmt))

    def table_entry(self, node, scope) -> int:
        if isinstance(node, A.ListLit):
            raise self.error("a lookup table has one or two dimensions (tok_map takes a list of ints, "
                             "seq_map a list of rows)", node)
        value = self.expr(node, scope)
        if not isinstance(value, ir.Const):
            raise self.error(f"a lookup table entry must be an int (a literal, a symbol or a const), not "
                             f"{describe(value)}", node)
        return value.value

    def lookup(self, table: ir.Table, operands: list, arg_nodes: list, call) -> ir.Node:
        """tok_map(x, T) / seq_map(x, y, T).  An index the checker can see
        leaving the table (from the input's declared values and the consts) is
        a located error here; others are run-time errors."""
        from .valuesets import static_values      # NumPy: only for programs with tables
        for k, (operand, size, arg) in enumerate(zip(operands, table.shape, arg_nodes)):
            values = static_values(operand, self.vocab, self.static_memo)
            bad = sorted(v for v in values or () if not 0 <= v < size)
            if bad:
                names = {code: text for text, code in self.symbols.items()}
                shown = ", ".join(f"{v} (symbol {names[v]!r})" if v in names else str(v) for v in bad[:4])
                more = f" and {len(bad) - 4} more" if len(bad) > 4 else ""
                axis = f"{'row' if k == 0 else 'column'} index" if len(table.shape) == 2 else "index"
                raise self.error(f"this {axis} can be {shown}{more}, outside the table '{table.name}' "
                                 f"(indices 0..{size - 1}); the values follow from the input's declared "
                                 "vocabulary", arg)
        if all(isinstance(o, ir.Const) for o in operands):
            value = table.get(*(o.value for o in operands))
            if value is not None:
                return self.const(value, self.loc(call))
        derived = [getattr(i, "index_derived", False) for i in operands]
        if any(derived):
            self.check_index_arithmetic("lookup", operands, derived, self.loc(call))
        key = ("Lookup", id(table), tuple(id(o) for o in operands))
        return self.graph.add(ir.Lookup(table, operands), key, self.loc(call))

    def stmt_InputStmt(self, stmt, scope):
        if self.input is not None:
            raise self.error("a program has exactly one 'input' statement", stmt)
        vocab = set()
        for item in stmt.items:
            low = self.vocab_value(item.low, scope)
            high = low if item.high is None else self.vocab_value(item.high, scope)
            if high < low:
                raise self.error(f"empty range {low}..{high}", item)
            if len(vocab) + high - low + 1 > MAX_VOCAB:
                raise self.error(f"the input vocabulary is too large (more than {MAX_VOCAB} values)", item)
            vocab.update(range(low, high + 1))
            if not (item.high is None and self.names_symbol(item.low)):
                self.int_vocab.append((low, high, item))
        self.vocab = tuple(sorted(vocab))
        self.input = self.graph.add(ir.Input(stmt.name), ("Input",), self.loc(stmt))
        scope.vars[stmt.name] = self.input

    def names_symbol(self, node) -> bool:
        return isinstance(node, A.Str) or (isinstance(node, A.Name) and node.id in self.symbol_names)

    def check_symbol_codes(self):
        """docs/language.md gives symbols the codes -1, -2, ...: an integer the
        input may hold that equals one would read and print as the symbol
        (input `-1` would come out as `>`).  Refuse the ambiguity."""
        codes = {code: text for text, code in self.symbols.items()}
        for low, high, item in self.int_vocab:
            for code in sorted(codes, reverse=True):
                if low <= code <= high:
                    raise self.error(f"the input value {code} is also the code of the symbol "
                                     f"{codes[code]!r} (symbols are -1, -2, ... in order of declaration), "
                                     "so the two could not be told apart; use integers that are not "
                                     "symbol codes", item)

    def vocab_value(self, node, scope) -> int:
        value = self.expr(node, scope)
        if not isinstance(value, ir.Const):
            raise self.error("input vocabulary items must be ints, symbols or consts", node)
        return value.value

    def stmt_ParamStmt(self, stmt, scope):
        if stmt.name in self.params:
            raise self.error(f"param '{stmt.name}' is declared twice (first at line "
                             f"{self.params[stmt.name].loc.line})", stmt)
        expr = self.host_expr(stmt.value, scope, "a param")
        self.params[stmt.name] = ir.Param(stmt.name, expr, self.loc(stmt))
        scope.vars[stmt.name] = self.host(ir.HostExpr("param", (stmt.name,)), stmt.name, self.loc(stmt))

    def host_expr(self, node, scope, what) -> ir.HostExpr:
        value = self.expr(node, scope)
        if isinstance(value, (ir.Const, ir.Host)):
            return host_expr(value)
        raise self.error(f"{what} must be a host expression: int literals, consts, params, + - * // %, "
                         "min, max, len(seq), count(seq, TOK), count_before(seq, TOK); "
                         f"this is {describe(value)}", node)

    def stmt_Def(self, stmt, scope):
        pass  # collected before lowering (see lower())

    def stmt_Output(self, stmt, scope):
        if self.output is not None:
            raise self.error("a program has exactly one 'output' statement", stmt)
        self.output = self.as_sop(self.expr(stmt.value, scope), stmt.value, "the output")
        self.output_loc = self.loc(stmt)

    def stmt_Require(self, stmt, scope):
        node = self.as_value(self.expr(stmt.condition, scope), stmt.condition, "a require condition")
        stack, seen = [node], set()
        while stack:            # the contract is about the input: loops run only after it holds
            n = stack.pop()
            if isinstance(n, (ir.LoopOut, ir.LoopState)):
                raise self.error("a require condition may use only the input, consts and params, not "
                                 "values computed by a loop", stmt.condition)
            if id(n) not in seen:
                seen.add(id(n))
                stack.extend(n.inputs)
        text = require_text(self.source, stmt)
        self.requires.append(ir.Require(node, stmt.message or f"the input must satisfy {text}", text,
                                        self.loc(stmt)))

    def stmt_Sample(self, stmt, scope):
        from .sampler import lower_sample
        self.sampler = lower_sample(self, stmt)

    def stmt_LoopStmt(self, stmt, scope):
        count = self.host_expr(stmt.count, scope, "a loop count")
        body = ir.Block(parent=self.block)
        loop = ir.Loop(count, stmt.until_stable, body, index=len(self.loops), loc=self.loc(stmt))
        body.loop = loop
        self.loops.append(loop)
        body_scope = Scope(scope.parent)
        body_scope.vars = dict(scope.vars)
        for name in assigned_names(stmt.body):
            init = self.resolve_init(scope, name, stmt)
            kind = ir.SOP if init is None else init.kind
            var = ir.LoopVar(name, kind, init)
            var.state = ir.LoopState(loop, var)   # set by the loop itself, so in no block's items
            var.state.loc, var.state.block = self.loc(stmt), body
            var.state.index_derived = getattr(init, "index_derived", False)
            loop.vars.append(var)
            body_scope.vars[name] = UNDEFINED if init is None else var.state
        outer, self.block = self.block, body
        try:
            self.run_body(stmt.body, body_scope)
        finally:
            self.block = outer
        for var in loop.vars:
            update = body_scope.vars[var.name]
            if isinstance(update, LazyLoopOut):
                update = self.loop_out(update)
            if var.init is None:
                var.kind = var.state.kind = update.kind
            if update.kind == ir.SCALAR:
                update = self.full(update, self.loc(stmt))
            if (update.kind == ir.SELECTOR) != (var.kind == ir.SELECTOR):
                raise self.error(f"loop variable '{var.name}' changes type in the loop body "
                                 f"({var.kind} before, {update.kind} after)", stmt)
            var.update = update
        self.block.items.append(loop)
        for var in loop.vars:
            scope.vars[var.name] = LazyLoopOut(loop, var)

    def resolve_init(self, scope, name, stmt) -> Optional[ir.Node]:
        try:
            value = scope.lookup(name)
        except KeyError:
            return None
        if value is UNDEFINED:
            return None
        if isinstance(value, LazyLoopOut):
            value = self.loop_out(value)
        if not isinstance(value, ir.Node):
            return None   # a function or predicate name, rebound by the body
        return self.full(value, self.loc(stmt)) if value.kind == ir.SCALAR else value

    def loop_out(self, lazy: LazyLoopOut) -> ir.Node:
        var = lazy.var
        if var.out is None:
            node = ir.LoopOut(lazy.loop, var)
            parent = cast(ir.Block, lazy.loop.body.parent)     # a loop body's parent: the block holding the loop
            node.loc, node.block = lazy.loop.loc, parent
            node.index_derived = getattr(var.update, "index_derived", False)
            parent.items.append(node)
            var.out = node
        return var.out


# ---- helpers ------------------------------------------------------------------

def host_expr(node: ir.Node) -> ir.HostExpr:
    if isinstance(node, ir.Const):
        return ir.HostExpr("lit", (node.value,))
    host = cast(ir.Host, node)      # callers pass a Const or a Host (a host expression's operand)
    return host.expr if host.name is None else ir.HostExpr("param", (host.name,))


def require_text(source: str, stmt: A.Require) -> str:
    """The condition of a `require` statement as written on its line."""
    lines = source.splitlines()[stmt.line - 1:]
    text = lines[0][stmt.column - 1:] if lines else ""
    for more in lines[1:]:              # a `\` continues the statement on the next line
        if not text.rstrip().endswith("\\"):
            break
        text = text.rstrip()[:-1] + " " + more
    text = text.strip()
    text = text[len("require"):] if text.startswith("require") else text
    if stmt.message is not None:
        for quote in ('"', "'"):
            cut = text.rfind(f"{quote}{stmt.message}{quote}")
            if cut >= 0:
                text = text[:cut].rstrip().rstrip(",")
                break
    else:
        text = text.split("#", 1)[0]
    return " ".join(text.split())


def assigned_names(stmts: list) -> list:
    names = []
    for stmt in stmts:
        if isinstance(stmt, A.Assign):
            names += [t for t in stmt.targets if t not in names]
        elif isinstance(stmt, A.LoopStmt):
            names += [t for t in assigned_names(stmt.body) if t not in names]
    return names


def called_names(node) -> set:
    """Names of every function called anywhere inside an AST node."""
    out = set()
    if isinstance(node, A.Call) and isinstance(node.func, A.Name):
        out.add(node.func.id)
    if isinstance(node, list):
        for item in node:
            out |= called_names(item)
    elif isinstance(node, A.Node):
        for value in vars(node).values():
            if isinstance(value, (A.Node, list)):
                out |= called_names(value)
    return out


def check_recursion(defs: dict, lowering: Lowering):
    calls = {name: {callee for callee in called_names(d.body) | called_names([p.default for p in d.params
                                                                              if p.default]) if callee in defs}
             for name, d in defs.items()}
    try:    # the usual case, cheaply (networkx costs ~0.1 s of every `rasp` start)
        graphlib.TopologicalSorter(calls).prepare()
        return
    except graphlib.CycleError:
        pass
    import networkx as nx   # name the cycle as before: the first networkx finds
    graph = nx.DiGraph()
    for name, callees in calls.items():
        graph.add_node(name)
        graph.add_edges_from((name, callee) for callee in callees)
    for cycle in nx.simple_cycles(graph):
        first = min(cycle, key=lambda n: (defs[n].line, defs[n].column))
        i = cycle.index(first)
        path = " -> ".join(cycle[i:] + cycle[:i] + [first])
        raise lowering.error(f"recursion is not allowed: {path}", defs[first])


@lru_cache(maxsize=1)
def _library_module() -> A.Module:
    text = resources.files(__package__).joinpath("lib.rasp").read_text()
    return parse(text, "<library>")


def _make_scope(lowering: Lowering) -> Scope:
    """builtins <- library functions"""
    builtin_scope = Scope()
    for name, fn in _builtins.BUILTINS.items():
        builtin_scope.vars[name] = fn
    library_scope = Scope(builtin_scope)
    for d in _library_module().body:
        library_scope.vars[d.name] = Function(d.name, [(p.name, p.default) for p in d.params],
                                              d.body, library=True)
    lowering.library_scope = library_scope
    return library_scope


MAX_DEPTH_HINT = "function calls, loops or expressions nested too deeply"


def lower(source: str, path: str = "<string>") -> tuple:
    """Parse, check and lower a program.  Returns (ProgramIR, warnings)."""
    module = parse(source, path)
    lowering = Lowering(source, path)
    try:
        return _lower(module, lowering, source, path)
    except RecursionError:
        # Python's stack ran out (the parser bounds syntactic depth; inlined
        # calls can still nest deeply): locate the top-level statement
        where = lowering.statement
        loc = ir.Loc(path, where.line, where.column) if where is not None else ir.Loc(path, 1, 1)
        raise RaspError(f"this statement is too complex to check ({MAX_DEPTH_HINT})", loc, source) from None


def _lower(module, lowering: Lowering, source: str, path: str) -> tuple:
    lowering.global_scope = scope = Scope(_make_scope(lowering))
    defs = {}
    for stmt in module.body:
        if isinstance(stmt, A.Def):
            if stmt.name in defs:
                raise lowering.error(f"function '{stmt.name}' is defined twice", stmt)
            seen = set()
            for p in stmt.params:
                if p.name in seen:
                    raise lowering.error(f"duplicate parameter '{p.name}'", p)
                seen.add(p.name)
            defaults = [p.default is not None for p in stmt.params]
            if defaults != sorted(defaults):
                raise lowering.error("a parameter without a default follows one with a default", stmt)
            defs[stmt.name] = stmt
            scope.vars[stmt.name] = Function(stmt.name, [(p.name, p.default) for p in stmt.params],
                                             stmt.body, loc=lowering.loc(stmt))
    check_recursion(defs, lowering)
    for stmt in module.body:
        if isinstance(stmt, A.Return):
            raise lowering.error("'return' outside a function", stmt)
        if not isinstance(stmt, (A.ConstStmt, A.Def)) and lowering.input is None \
                and not isinstance(stmt, A.InputStmt):
            raise lowering.error("the 'input' statement must come before this statement", stmt)
        lowering.stmt(stmt, scope, None)
    lowering.check_symbol_codes()
    last = len(source.rstrip("\n").splitlines()) or 1
    end = ir.Loc(path, last, 1)
    if lowering.input is None:
        raise RaspError("a program needs exactly one 'input NAME: {...}' statement", end, source)
    if lowering.output is None:
        raise RaspError("a program needs exactly one 'output' statement", end, source)
    program = ir.ProgramIR(path=path, source=source, input_name=lowering.input.name,
                           vocab=lowering.vocab, symbols=lowering.symbols, consts=lowering.consts,
                           params=lowering.params, input=lowering.input, body=lowering.top,
                           output=lowering.output, loops=lowering.loops,
                           output_loc=lowering.output_loc, requires=lowering.requires,
                           tables=lowering.tables, sampler=lowering.sampler)
    return program, lowering.warnings
