"""Batched NumPy interpreter for lowered n-RASP-L programs (`ProgramIR`).

`execute(ir, batch)` runs a whole batch at once.  Inputs are right-padded to a
`[B, N]` int64 array; every operation is causal, so padding never changes a
valid position (and errors are only raised for valid positions of inputs
that actually execute the operation).

Values, by node kind:
    s-op      int array [B, N] (possibly a read-only broadcast view)
    scalar    Python int (Const) or int array [B, 1] (Host and maps of it)
    selector  bool array [B, N, N], built only when something needs the matrix

Integer arrays use the narrowest dtype that holds every value the node can
take (`ranges.Ranges`: interval analysis over the graph, with the batch's
actual tokens, lengths and params).  Element-wise work on bits in int8 moves
an eighth of the memory of int64; each operation computes in a dtype that
holds its operands and its result, so results are exactly those of int64.

Aggregates and sel_width never need the matrix for the common selector
shapes: a table of rules (`reductions.RULES`) recognises them and computes
the same result in O(N) or O(N log N) per sequence; anything else falls back
to the dense path, chunked over the batch so [B, N, N] temporaries stay small.

Large batches of very mixed lengths are split into a few groups of similar
length (`driver.length_groups`), each padded and looped only as far as it
needs.

The modules, by job:
    driver      execute, check_requires: padding, the require contract, length groups
    run         Run: one batched execution (values, blocks, loops, errors, trace)
    nodes       EVAL: how each node kind computes its value
    elementwise the operators on arrays (rasp/operators.py has them on ints)
    hosts       HostValues: params and loop counts per input; int64 overflow checks
    needs       loop_needs: the positions the first loop waits on (a halting clock's targets)
    ranges      Ranges: value intervals and the narrowest dtype of every node
    reductions  dense_reduce and the fast aggregate rules (RULES)
"""
from .driver import BatchResult, check_requires, execute
from .hosts import HostValues, check_param_names, host_values, int64_overflow, pad_batch, prefix_values
from .needs import loop_needs

__all__ = ["BatchResult", "HostValues", "check_param_names", "check_requires", "execute", "host_values",
           "int64_overflow", "loop_needs", "pad_batch", "prefix_values"]
