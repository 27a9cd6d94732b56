"""The state every part of the Crafter shares and the helpers over it: the
base of each mixin (fusion, maps, selects, rotary, digits, aggregates,
readout) and so of core.Crafter, which composes them and sets the rest
(need_sq, fused, embedded_maps) from its constructor."""
from __future__ import annotations

from rasp import ir
from rasp.errors import RaspError
from rasp.operators import PYTHON as PYTHON_OPS

from .. import attn as A
from ..basis import IDX, IDX2, NOTBOS, Cat, Num, Residual, lin_add
from ..graph import ProgramGraph
from ..ops import Op

CAT_LIMIT = 160          # larger (or length-dependent) value sets are encoded as numbers
NUMBER_ABOVE = 24        # compact models: a wider set of small, dense ints is a number too


def dense_small(vals) -> bool:
    """A value set a number holds as compactly as a one-hot code: ints within
    the quadratic equality score's float32 range (numeric selects stay one
    head; tables of one operand step only between the values it takes)."""
    lo, hi = min(vals), max(vals)
    return A.numeric_eq_exact([max(abs(lo), abs(hi))])


class CrafterBase:
    """The base of every Crafter mixin: through it each sees (and the type
    checker knows) the state and helpers the others use."""
    FORCE_DIGITS = False     # tests: compare every numeric equality by digits (digit_select)
    FORCE_ROT = False        # tests: compare positions by rotary codes wherever they have them
    ONEHOT_LIMIT = 4096      # widest numeric range turned into a one-hot code for a select

    # set by core.Crafter.__init__, once the state below exists
    need_sq: set             # numeric s-ops a numeric equality select compares (find_need_sq)
    embedded_maps: set       # token maps the embedding writes (plan_embedded_maps)

    def __init__(self, pg: ProgramGraph, sets: dict, sets2: dict, length: int, compact: bool = False,
                 gate=None):
        self.pg, self.ir = pg, pg.ir
        self.compact = compact          # encode wide dense value sets as numbers (see is_cat)
        self.gate = gate                # the halting clock (clock.Clock) the program was given, or None
        self.sets, self.sets2, self.L = sets, sets2, length
        self.res = Residual()
        self.ops: list[Op] = []
        self.writer: dict = {}          # dim -> op writing it
        self.reps: dict = {}            # node -> rep in its own stage
        self.state: dict = {}           # LoopVar -> (S rep, init rep or None)
        self.stage = "pre"
        self.input_dims: dict = {}
        self.fused: dict = {}          # map node -> (leaf nodes, composed function)
        self.absorbed: set = set()      # maps computed inside a consumer's fused MLP
        self.onehots: dict = {}         # (numeric node, stage) -> its one-hot code (see onehot)
        self.droppable: list = []       # tables built before knowing anything reads them (drop_unread)
        self.width_raw: dict = {}       # sel_width node -> its head's BOS share 1/(w+1) (a dim)
        self.value_heads: dict = {}     # numeric aggregate -> (head, value rep, default): one key's value
        self.embedded: dict = {}        # dim the embedding writes -> its form over the input's one-hot dims
        # (cos, sin) position-feature dims, allocated on first use (index_rot)
        self.rot_dims: tuple[int, int] | None = None

    def error(self, node, message):
        return RaspError(message, loc=node.loc, source=self.ir.source)

    def what(self, node):
        n = self.pg.name(node)
        return f"'{n}'" if n else node.label()

    def alloc(self, name, signed=True):
        return self.res.new(name, self.stage, signed)

    def vals(self, node):
        key = node.var.state if isinstance(node, (ir.LoopState, ir.LoopOut)) else node
        return self.sets[key]

    def fixed_set(self, node) -> bool:
        """Whether node's values do not depend on the length (a one-hot code
        could hold them; is_cat says whether one does)."""
        key = node.var.state if isinstance(node, (ir.LoopState, ir.LoopOut)) else node
        return not isinstance(node, (ir.Indices, ir.SelWidth)) and self.sets[key] == self.sets2[key]

    def is_cat(self, node) -> bool:
        if isinstance(node, ir.Input):
            return True
        if isinstance(node, (ir.Indices, ir.SelWidth)):
            return False
        key = node.var.state if isinstance(node, (ir.LoopState, ir.LoopOut)) else node
        s1, s2 = self.sets[key], self.sets2[key]
        if s1 != s2 or len(s1) > CAT_LIMIT:
            return False
        return not (self.compact and len(s1) > NUMBER_ABOVE and dense_small(s1))

    def op_label(self, what, node) -> str:
        name = self.pg.name(node)
        where = f" @{node.loc.line}" if node.loc is not None else ""
        return f"{what} {name}{where}" if name else f"{what}{where}"

    def add_op(self, op: Op) -> Op:
        op.stage = self.stage
        deps = {self.writer[d] for d in op.reads() if d in self.writer}
        op.deps = [d for d in deps if d.stage == self.stage]
        for d in op.writes:
            self.writer[d] = op
        self.ops.append(op)
        return op

    def mlp(self, label, units, writes) -> None:
        if not units:
            return
        self.add_op(Op("mlp", label, self.stage, writes=sorted(writes), units=units))

    @staticmethod
    def unit_writes(units):
        return {d for u in units for d in u.out}

    def rep(self, node):
        """The representation of `node` as seen from the current stage."""
        if isinstance(node, ir.Const):
            return node.value
        if isinstance(node, ir.Full) and isinstance(node.inputs[0], ir.Const):
            return Cat({node.inputs[0].value: dict(NOTBOS)})
        if isinstance(node, ir.LoopOut):
            s, init = self.state[node.var]
            return self.state_view(s, init)
        # (in the postlude a 'pre' dim d is read as d + its carry copy; forms stay
        # over d alone while crafting and `run` maps every postlude form at the
        # end: a linear map, so combining forms -- e.g. a value form minus
        # c * NOTBOS -- cannot leave d and its carry with different coefficients)
        return self.reps[node]

    def state_view(self, s, init):
        """A loop variable = its state dims S (0 before the first iteration) plus
        its initial value's dims: S holds (current - init)."""
        if init is None:
            return s
        if isinstance(s, Cat):
            return Cat({v: lin_add(l, init.vals.get(v, {})) for v, l in s.vals.items()})
        return Num(lin_add(s.lin, init.numeric()), s.lo, s.hi)

    def in_node_stage(self, node, key, build):
        """build(), run in the stage that computes `node` (a prelude value's
        tables are not recomputed at every loop iteration); cached by key and
        that stage."""
        stage = self.pg.stage.get(node, self.stage)
        key = (key, stage)
        if key not in self.onehots:
            outer, self.stage = self.stage, stage if stage in ("pre", "body", "post") else self.stage
            try:
                self.onehots[key] = build()
            finally:
                self.stage = outer
        return self.onehots[key]

    def attn(self, label, spec, outs):
        op = Op("attn", label, self.stage, q=spec["q"], k=spec["k"], k_bos=spec["k_bos"],
                v=spec["v"], v_bos=spec["v_bos"], o=outs)
        op.writes = sorted({d for o in outs for d in o})
        return self.add_op(op)

    def reps_indices(self):
        return Num({IDX: 1.0}, 0, self.L - 1, {IDX2: 1.0}, (1, 0))

    def fn(self, node):
        """A map node's element-wise function on Python ints (maps tabulate it, fusion composes it)."""
        if isinstance(node, ir.Lookup):       # None outside the table: a run-time error, never tabulated
            return node.table.get
        op = PYTHON_OPS[node.op]
        zero_check = node.op in ("floordiv", "mod")

        def f(*args):
            if zero_check and args[1] == 0:
                return None
            return int(op(*args))
        return f

    def one_operand(self, node):
        """(x, g) when every non-constant input of the map is the same s-op x,
        read more than once (seq == seq, x & x, c * c): the map is then the
        one-operand map g(v) = f(v, v) of x.  The constructions that take each
        operand on its own would treat x's two reads as independent inputs: a
        product table over value pairs that never occur (which a token map the
        embedding computes cannot hold), or a refusal of a product of two
        numbers.  None for any other map."""
        reads = [i for i in node.inputs if not isinstance(i, ir.Const)]
        if len(reads) < 2 or any(i is not reads[0] for i in reads):
            return None
        f, x = self.fn(node), reads[0]
        consts = [None if i is x else i.value for i in node.inputs]

        def g(v):
            return f(*[v if c is None else c for c in consts])
        return x, g
