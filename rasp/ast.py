"""Syntax tree of an n-RASP-L file.  Every node carries its source line and column."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class Node:
    line: int
    column: int


# ---- expressions -------------------------------------------------------------

@dataclass
class Name(Node):
    id: str


@dataclass
class Num(Node):
    value: int


@dataclass
class Str(Node):
    text: str


@dataclass
class ListLit(Node):
    """`[e1, e2, ...]`: only as the value of a const (a lookup table)."""
    items: list


@dataclass
class BinOp(Node):
    op: str                 # add sub mul floordiv mod truediv bitand bitor bitxor and or
    left: Node
    right: Node


@dataclass
class UnaryOp(Node):
    op: str                 # neg pos invert not
    operand: Node


@dataclass
class Compare(Node):
    """Python-style chain: a < b <= c means (a < b) and (b <= c)."""
    ops: list               # of "==", "!=", "<", "<=", ">", ">="
    operands: list


@dataclass
class Keyword(Node):
    name: str
    value: Node


@dataclass
class Call(Node):
    func: Node
    args: list
    keywords: list          # of Keyword


@dataclass
class Lambda(Node):
    params: list            # of str
    body: Node


# ---- statements ----------------------------------------------------------------

@dataclass
class ConstStmt(Node):
    name: str
    value: Node             # Str for a symbol, else an int expression


@dataclass
class VocabItem(Node):
    low: Node
    high: Optional[Node]    # set for `low..high`


@dataclass
class InputStmt(Node):
    name: str
    items: list


@dataclass
class ParamStmt(Node):
    name: str
    value: Node


@dataclass
class Assign(Node):
    targets: list           # of str
    value: Node


@dataclass
class Return(Node):
    values: list


@dataclass
class Output(Node):
    value: Node


@dataclass
class Require(Node):
    """`require CONDITION, "message"`: the input contract."""
    condition: Node
    message: Optional[str]
    text: str = ""          # the condition as written (for messages and metadata)


@dataclass
class SampleSeg(Node):
    """One segment of a `sample` statement: tokens drawn uniformly from `items`
    (a set `{...}`, or one token), `low` (..`high`) of them (None: one)."""
    items: list             # of VocabItem
    low: Optional[Node]
    high: Optional[Node]


@dataclass
class Sample(Node):
    """`sample n in LO..HI: SEGMENT ...`: how to draw an input of size n."""
    var: str
    low: Node
    high: Node
    segments: list          # of SampleSeg


@dataclass
class DefParam(Node):
    name: str
    default: Optional[Node]


@dataclass
class Def(Node):
    name: str
    params: list            # of DefParam
    body: list


@dataclass
class LoopStmt(Node):
    count: Node
    until_stable: bool
    body: list


@dataclass
class Module(Node):
    body: list = field(default_factory=list)
