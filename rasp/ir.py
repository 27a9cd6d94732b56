"""The lowered program: a hash-consed dataflow graph of primitive operations.

The front end (parser + checker + lowering) turns a `.rasp` file into a
`ProgramIR`.  Both back ends consume it: the NumPy interpreter and the
compiler.  User functions and library functions are inlined, lambdas are
expanded into element-wise `Map` nodes, constants are folded, and identical
nodes are shared (structural CSE), so the graph holds only primitives:

    Input, Indices, Const, Host, Full, Map (Lookup: a Map over a const
    table), Select, Aggregate, SelWidth, LoopState (+ the Loop item that owns it).

Scalars: `Const` (a compile-time int) and `Host` (an int computed per input
from the raw tokens, e.g. a `param`) are scalar nodes (`node.kind == SCALAR`).
Element-wise ops broadcast scalars.  `Full` turns a scalar into an s-op.

Blocks: a `Block` lists its items in execution order.  An item is a `Node`
(compute it), a `Loop` (run its body block), or a `Bind` (a named assignment
from the source, kept for `--trace` and for error messages).  Every node is
placed in the outermost block where all its inputs exist (loop-invariant code
is hoisted out of loop bodies).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

# node kinds (the checker's types)
SOP = "sop"
SCALAR = "scalar"
SELECTOR = "selector"

# element-wise operators of `Map` and how many operands they take
MAP_ARITY = {
    "add": 2, "sub": 2, "mul": 2, "floordiv": 2, "mod": 2, "neg": 1,
    "eq": 2, "ne": 2, "lt": 2, "le": 2, "gt": 2, "ge": 2,
    "bitand": 2, "bitor": 2, "bitxor": 2, "invert": 1,
    "and": 2, "or": 2, "not": 1,          # logical: give 0/1
    "min": 2, "max": 2, "abs": 1,
    "where": 3,                            # where(c, x, y): x if c != 0 else y
}
PREDICATES = ("eq", "ne", "lt", "le", "gt", "ge", "always")
REDUCTIONS = ("mean", "max", "min")


@dataclass(frozen=True)
class Loc:
    """A place in a source file (1-based line and column)."""
    path: str
    line: int
    column: int


class Node:
    """Base class.  Nodes are immutable and compared by identity (hash-consed)."""
    kind: str = SOP
    inputs: tuple = ()
    loc: Optional[Loc] = None
    block: Optional["Block"] = None       # the block this node is computed in
    origin: Optional[str] = None   # the library function whose inlined code made it
    # set by the lowering (rasp/lower.py, Graph.add) on the nodes it makes:
    use_block: Optional["Block"] = None   # the innermost block containing every use (Graph's docstring)
    index_derived: bool = False           # computed from indices (the RASP-L check, docs/language.md §10)

    def label(self) -> str:
        return type(self).__name__


class Input(Node):
    """The input s-op (token values as ints; symbols have negative codes)."""
    def __init__(self, name: str):
        self.name = name

    def label(self):
        return f"input {self.name}"


class Indices(Node):
    """0, 1, ..., n-1."""
    def label(self):
        return "indices"


class Const(Node):
    kind = SCALAR

    def __init__(self, value: int):
        self.value = int(value)

    def label(self):
        return str(self.value)


class Host(Node):
    """A per-input scalar computed from the raw input (a `param`, or a host
    expression used as a value).  `expr` is a HostExpr; `name` is the param
    name when there is one (params can be overridden from the CLI)."""
    kind = SCALAR

    def __init__(self, expr: "HostExpr", name: Optional[str] = None):
        self.expr = expr
        self.name = name

    def label(self):
        return self.name or str(self.expr)


class Full(Node):
    """Broadcast a scalar node to an s-op."""
    def __init__(self, value: Node):
        self.inputs = (value,)

    def label(self):
        return "full"


class Map(Node):
    """Element-wise operator `op` (a key of MAP_ARITY) on s-ops/scalars.
    A Map whose inputs are all scalars is itself a scalar (only for Host
    operands: Const operands are folded)."""
    def __init__(self, op: str, inputs: Union[tuple, list]):
        self.op = op
        self.inputs = tuple(inputs)
        if all(i.kind == SCALAR for i in self.inputs):
            self.kind = SCALAR

    def label(self):
        return self.op


class Lookup(Map):
    """`tok_map(x, T)` = T[x[i]] and `seq_map(x, y, T)` = T[x[i]][y[i]] for a
    const lookup table T (a `Table`).  A Map whose op is "lookup": back ends
    that tabulate maps evaluate it with `Table.get`; an index outside the
    table is a run-time error (the interpreter), never a silent value."""
    def __init__(self, table: "Table", inputs: Union[tuple, list]):
        super().__init__("lookup", inputs)
        self.table = table

    def label(self):
        return f"lookup {self.table.name}"


@dataclass(frozen=True, eq=False)
class Table:
    """A const lookup table (`const T = [[...], ...]`): `rows` holds its ints,
    a tuple (1-D) or a tuple of equal-length tuples (2-D)."""
    name: str
    rows: tuple
    loc: Optional[Loc] = None

    @property
    def shape(self) -> tuple:
        return (len(self.rows),) if not isinstance(self.rows[0], tuple) else (len(self.rows), len(self.rows[0]))

    def get(self, *index):
        """T[i] / T[i][j] as a Python int, or None where an index is outside the table."""
        value = self.rows
        for i, n in zip(index, self.shape):
            if not 0 <= i < n:
                return None
            value = value[i]
        return value

    def entries(self) -> set:
        return set(self.rows) if len(self.shape) == 1 else {v for row in self.rows for v in row}


class Select(Node):
    """A[q, k] = pred(key[k], query[q]) for k <= q."""
    kind = SELECTOR
    one_key: bool = False       # set by the compiler on a select it built with at most one key per query

    def __init__(self, key: Node, query: Node, pred: str):
        self.inputs = (key, query)
        self.pred = pred

    @property
    def key(self):
        return self.inputs[0]

    @property
    def query(self):
        return self.inputs[1]

    def label(self):
        return f"select {self.pred}"


class Aggregate(Node):
    """Reduce `value` over the selected keys; `default` where none is selected."""
    def __init__(self, selector: Select, value: Node, reduction: str, default: Node):
        self.inputs = (selector, value, default)
        self.reduction = reduction

    @property
    def selector(self):
        return self.inputs[0]

    @property
    def value(self):
        return self.inputs[1]

    @property
    def default(self):
        return self.inputs[2]

    def label(self):
        return f"aggregate {self.reduction}"


class SelWidth(Node):
    def __init__(self, selector: Select):
        self.inputs = (selector,)

    def label(self):
        return "sel_width"


class LoopState(Node):
    """Inside a loop body: the value of loop variable `var` at the start of the
    current iteration.  Never shared between loops."""
    def __init__(self, loop: "Loop", var: "LoopVar"):
        self.loop = loop
        self.var = var
        self.kind = var.kind

    def label(self):
        return f"state {self.var.name}"


@dataclass(eq=False)
class LoopVar:
    """A variable assigned in a loop body.  `init` is its value before the
    loop (None if the body defines it first: then it is undefined if the loop
    runs 0 times).  `update` is its value at the end of an iteration.  After
    the loop the program reads `state`'s final value through `LoopOut`
    (`out`, the one LoopOut node of the variable once something reads it).
    `state` and `update` are None only while the loop is being built."""
    name: str
    kind: str
    init: Optional[Node]
    state: Optional[LoopState] = None
    update: Optional[Node] = None
    out: Optional[LoopOut] = field(default=None, repr=False)


class LoopOut(Node):
    """After a loop: the final value of a loop variable."""
    def __init__(self, loop: "Loop", var: LoopVar):
        self.loop = loop
        self.var = var
        self.kind = var.kind

    def label(self):
        return f"{self.var.name} after loop"


@dataclass(eq=False)
class Loop:
    """`loop count [until stable]:` with `body`.  `index` numbers loops in
    source order (the order of `BatchResult.steps` columns)."""
    count: "HostExpr"
    until_stable: bool
    body: "Block"
    vars: list = field(default_factory=list)
    index: int = 0
    loc: Optional[Loc] = None


@dataclass(eq=False)
class Bind:
    """`name = node` as written in the source at `loc` (for traces)."""
    name: str
    node: Node
    loc: Optional[Loc] = None


@dataclass(eq=False)
class Block:
    items: list = field(default_factory=list)
    loop: Optional[Loop] = None      # the loop whose body this is (None: top level)
    parent: Optional["Block"] = None

    @property
    def depth(self) -> int:
        return 0 if self.parent is None else self.parent.depth + 1

    def nodes(self):
        return [i for i in self.items if isinstance(i, Node)]


# ---- host expressions: ints computed from the raw input --------------------

@dataclass(frozen=True)
class HostExpr:
    """op in {'lit', 'param', 'len', 'count', 'count_before', 'add', 'sub',
    'mul', 'floordiv', 'mod', 'neg', 'min', 'max'}.  For 'lit' args=(int,);
    'param' args=(name,); 'count'/'count_before' args=(token_code,)."""
    op: str
    args: tuple = ()

    def __str__(self):
        if self.op == "lit":
            return str(self.args[0])
        if self.op == "param":
            return self.args[0]
        if self.op in ("len",):
            return "len(seq)"
        if self.op in ("count", "count_before"):
            return f"{self.op}(seq, {self.args[0]})"
        return f"{self.op}({', '.join(map(str, self.args))})"


@dataclass
class Param:
    name: str
    expr: HostExpr
    loc: Optional[Loc] = None


@dataclass
class Require:
    """`require CONDITION, "message"`: `node` (an s-op or scalar over the
    input and params) must be nonzero at every position of every input.
    Checked before the program runs; back ends never compute it."""
    node: Node
    message: str
    text: str                    # the condition as written
    loc: Optional[Loc] = None


@dataclass
class ProgramIR:
    path: str
    source: str
    input_name: str
    vocab: tuple                 # allowed input token values (ints), sorted
    symbols: dict                # symbol text -> code (negative int)
    consts: dict                 # const name -> int value (symbols included)
    params: dict                 # name -> Param, in declaration order
    input: Input
    body: Block                  # the top-level block
    output: Node
    loops: list                  # every Loop, in source order
    output_loc: Optional[Loc] = None
    requires: list = field(default_factory=list)     # of Require, in source order
    tables: dict = field(default_factory=dict)       # const name -> Table (lookup tables)
    sampler: Optional[Any] = None                    # the `sample` statement (rasp/sampler.py Sampler)

    def symbol_text(self, code: int) -> Optional[str]:
        for text, c in self.symbols.items():
            if c == code:
                return text
        return None


Item = Union[Node, Loop, Bind]
