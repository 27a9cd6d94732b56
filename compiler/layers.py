"""Place operations in layers (as early as dependencies allow, per stage) and
add the loop body's bookkeeping so loop-carried variables are overwritten
correctly on every iteration.

Body invariants (h = state after an iteration, e = injected embedding):
  * dims of e ('pre') and body temporaries are 0 in h: each is cancelled by
    one ReLU unit (two if it can be negative) in the MLP of its last use;
  * a loop variable is S + init, where S (0 in e) holds current - init;
    the commit layer adds new - current to S (exact for one-hot and numbers);
  * a 'pre' dim the postlude reads is copied into a carry dim as it is
    cancelled (and the old copy cancelled), so h keeps it for the postlude.
"""
from __future__ import annotations

import dataclasses

from .basis import BOS, ONE, Cat, Num
from .mlp import step_units
from .ops import Op, Unit


def schedule(ops: list, max_units=None, max_heads=None) -> int:
    """ASAP layers for one stage's ops (in creation order, a topological order).
    An attention head reads the residual after the previous layer; an MLP
    reads it after this layer's attention.  With caps, an op that would make
    its layer hold more than max_units MLP units (or max_heads heads) goes to
    the first later layer with room (an op alone in a layer always fits)."""
    n = 0
    units: dict[int, int] = {}        # layer -> MLP units, attention heads in it
    heads: dict[int, int] = {}
    for op in ops:
        if op.kind == "attn":
            layer = max([d.layer + 1 for d in op.deps], default=0)
            while max_heads is not None and 0 < heads.get(layer, 0) and heads[layer] + 1 > max_heads:
                layer += 1
            heads[layer] = heads.get(layer, 0) + 1
        else:
            layer = max([d.layer if d.kind == "attn" else d.layer + 1 for d in op.deps], default=0)
            while max_units is not None and 0 < units.get(layer, 0) and units[layer] + len(op.units) > max_units:
                layer += 1
            units[layer] = units.get(layer, 0) + len(op.units)
        op.layer = layer
        n = max(n, op.layer + 1)
    return n


def copy_ops(ops: list) -> list:
    """Copies of a stage's ops that plan_body may change (its unit outputs
    and writes are reassigned, never changed in place), deps among the copies."""
    new = {op: dataclasses.replace(op, units=[Unit(u.inp, u.bias, u.out, u.gated) for u in op.units]) for op in ops}
    for c in new.values():
        c.deps = [new.get(d, d) for d in c.deps]
    return list(new.values())


def layer_loads(ops: list, n_layers: int) -> tuple:
    """Per layer of a stage: (MLP units, heads, widest head) lists."""
    n = max(n_layers, 1)
    units, heads, d_head = [0] * n, [0] * n, [0] * n
    for op in ops:
        if op.kind == "attn":
            heads[op.layer] += 1
            d_head[op.layer] = max(d_head[op.layer], op.width)
        else:
            units[op.layer] += len(op.units)
    return units, heads, d_head


def widths(ops: list, n_layers: int) -> tuple:
    """(most MLP units, most heads) in one layer of a stage."""
    units, heads, _ = layer_loads(ops, n_layers)
    return max(units), max(heads)


def stage_weights(ops: list, n_layers: int, d_model: int) -> int:
    """Weights of a stage's blocks, each only as wide as its own ops
    (assemble.layer_shape): heads x the layer's widest head for q, k, v, o,
    two per MLP unit, and the two residual biases every block has."""
    return sum(4 * d_model * h * w + (2 * d_model + 1) * u + 2 * d_model
               for u, h, w in zip(*layer_loads(ops, n_layers)))


def schedule_compact(stages: dict, fixed: int, d_model: int) -> tuple:
    """Layers for the stages in `stages` (name -> ops; e.g. prelude and
    postlude) that minimise the model's weights (stage_weights: a block pays
    for its widest head times its heads, so two heads of very different
    widths may cost less in two layers).  fixed: the weights of the stages
    scheduled elsewhere (the loop body).  Tries caps between the largest
    single op and the ASAP peak; returns (weights, name -> layer count)."""
    def run(cap_u, cap_h):
        ns = {name: schedule(ops, cap_u, cap_h) for name, ops in stages.items()}
        return fixed + sum(stage_weights(ops, ns[name], d_model) for name, ops in stages.items()), ns

    best = None
    for cu, ch in caps(stages):
        cost, _ = run(cu, ch)
        if best is None or cost < best[0]:
            best = (cost, cu, ch)
    assert best is not None           # caps() always offers (None, None)
    return run(best[1], best[2])


def caps(stages: dict) -> list:
    """Candidate (max_units, max_heads) caps for `schedule`: head caps from 1 to
    the ASAP peak, and None (no cap).  A unit cap only adds layers (every unit
    costs the same in any layer, stage_weights) while a head cap may keep a
    narrow head out of a wide head's layer."""
    peak_h = max([widths(ops, schedule(ops))[1] for ops in stages.values()], default=0)
    return [(None, ch) for ch in [*range(1, peak_h), None]]


def plan_body(crafter, body_ops: list, spread: bool = False) -> int:
    """Add commit, cancel and carry units to the body; returns its layer count.
    spread: each loop variable commits in its own earliest layer, not all in one."""
    stage, crafter.stage = crafter.stage, "body"
    try:
        return _plan_body(crafter, body_ops, spread)
    finally:
        crafter.stage = stage


def _plan_body(crafter, body_ops: list, spread: bool) -> int:
    # Runs in the body's view: a prelude value the update reads is its 'pre'
    # dim (in e), never the postlude's dim + carry form (the carry copy of the
    # last iteration is still in h when the commit reads it: doubled values).
    res = crafter.res
    _drop_dead(crafter, body_ops)
    states = [(var, *crafter.state[var]) for var in crafter.pg.loop_vars()]
    last_read: dict[int, int] = {}    # dim -> last body layer reading it
    for op in body_ops:
        for d in op.reads():
            last_read[d] = max(last_read.get(d, -1), op.layer)
    writer = {d: op for op in body_ops for d in op.writes}

    # each variable's commit layer: after every read of its old state and its update;
    # with `spread` each commits as early as that allows (the bookkeeping of a wide
    # one-hot variable then need not share the widest layer with another's),
    # otherwise all in one layer
    commit = {}
    for var, s, _init in states:
        cv = max([last_read.get(d, 0) for lin in _forms(s) for d in lin] + [0])
        new = crafter.reps.get(var.update) if crafter.pg.stage.get(var.update) == "body" else None
        for d in _dims(new) if new is not None else ():
            w = writer.get(d)
            if w is not None:
                cv = max(cv, w.layer)
        commit[var] = cv
    if not spread:
        commit = dict.fromkeys(commit, max(commit.values(), default=0))
    direct = {}
    for var, s, _init in states:
        new = crafter.reps.get(var.update)
        op = _pure_writer(new, writer) if crafter.pg.stage.get(var.update) == "body" else None
        if op is not None and op.layer == commit[var] and isinstance(s, Cat) and set(new.vals) <= set(s.vals) \
                and not any(last_read.get(d, -1) >= 0 for d in op.writes):
            direct[var] = op
    for var, _s, _init in states:
        if var in direct:
            continue
        new = crafter.reps.get(var.update)
        if crafter.pg.stage.get(var.update) == "body":
            for d in _dims(new):
                w = writer.get(d)
                if w is not None and w.kind == "mlp" and w.layer >= commit[var]:
                    commit[var] = w.layer + 1
    if not spread:
        commit = dict.fromkeys(commit, max(commit.values(), default=0))
    direct = {v: op for v, op in direct.items() if op.layer == commit[v]}
    c = max(commit.values(), default=0)
    n_layers = c + 1
    extra = {layer: Op("mlp", "loop bookkeeping", "body", layer=layer) for layer in range(n_layers)}

    # commit: S += new - current  (gated: BOS keeps S = 0)
    for var, s, init in states:
        cv = commit[var]
        cur = crafter.state_view(s, init)
        new = crafter.rep(var.update) if not isinstance(var.update, int) else var.update
        if isinstance(s, Cat):
            if isinstance(new, Num):
                raise crafter.error(var.update, f"loop variable '{var.name}' gets a numeric update but "
                                    "holds few values (internal)")
            assert not isinstance(new, int)     # LoopVar.update is a node, so `new` is its rep
            for v, lin in s.vals.items():
                (sd,) = lin
                extra[cv].units.append(Unit(cur.vals[v], 0.0, {sd: -1.0}))
                if var not in direct:     # a sharp copy: removes any float noise of the update
                    extra[cv].units += step_units(new.vals.get(v, {}), 1.0, {sd: 1.0})
                for d in cur.vals[v]:
                    last_read[d] = max(last_read.get(d, -1), cv)
                for d in new.vals.get(v, {}):
                    last_read[d] = max(last_read.get(d, -1), cv)
        else:
            (sd,) = s.lin
            lo = float(s.lo)
            nl = new.numeric() if not isinstance(new, int) else {ONE: float(new), BOS: -float(new)}
            extra[cv].units.append(Unit(cur.numeric(), -lo, {sd: -1.0}))
            extra[cv].units.append(Unit(nl, -lo, {sd: 1.0}))
            for d in list(cur.numeric()) + list(nl):
                last_read[d] = max(last_read.get(d, -1), cv)
    for var, op in direct.items():
        s = crafter.state[var][0]
        new = crafter.reps[var.update]
        remap: dict[int, list[int]] = {}     # update dim -> the state dims it goes to
        for v, lin in new.vals.items():
            (d,) = lin
            remap.setdefault(d, []).append(next(iter(s.vals[v])))
        for u in op.units:
            out: dict[int, float] = {}
            for d, cf in u.out.items():
                for sd in remap.get(d, [d]):
                    out[sd] = out.get(sd, 0.0) + cf
            u.out = out
        op.writes = sorted({d for u in op.units for d in u.out})
    redirected = {d for var in direct for d in _dims(crafter.reps[var.update])}

    # cancel every 'pre' dim and every body temporary at its last use
    gated_reads = bool(extra[c].units) or any(op.kind == "mlp" for op in body_ops)
    for d, dim in enumerate(res.dims):
        if dim.stage == "pre":
            layer = last_read.get(d, -1)
            if d == BOS and gated_reads:
                layer = c                      # gated units read bos up to the commit layer
            if layer < 0:
                layer = 0
            _cancel(extra[layer], d, dim.signed, res.carry.get(d))
        elif dim.stage == "body" and d in writer and d not in redirected:
            w = writer[d]
            layer = max(last_read.get(d, -1), w.layer if w.kind == "attn" else w.layer + 1)
            if layer > c:
                # only an update value outside its loop variable's value set (one
                # the last counted iteration could produce but never does) lands
                # here: the dim is never written with a nonzero value
                continue
            _cancel(extra[layer], d, dim.signed, None)
    for op in extra.values():
        if op.units:
            body_ops.append(op)
    return n_layers


def _drop_dead(crafter, body_ops: list) -> None:
    """Remove body ops no update reads (e.g. the inputs of a map whose value
    turned out constant): they could sit after the commit layer, where
    nothing would cancel their outputs and the pre dims they read."""
    live = set()
    for var in crafter.pg.loop_vars():
        if crafter.pg.stage.get(var.update) == "body":
            live |= _dims(crafter.reps.get(var.update))
    keep = []
    for op in reversed(body_ops):             # creation order is topological
        if live & set(op.writes):
            keep.append(op)
            live |= op.reads()
    body_ops[:] = reversed(keep)


def _forms(rep):
    return list(rep.vals.values()) if isinstance(rep, Cat) else [rep.lin]


def _dims(rep):
    if rep is None or isinstance(rep, int):
        return set()
    return {d for lin in _forms(rep) for d in lin}


def _pure_writer(rep, writer):
    """The MLP op writing every value of a one-hot rep as a single dim, if so."""
    if not isinstance(rep, Cat):
        return None
    ops = set()
    for lin in rep.vals.values():
        if len(lin) != 1 or next(iter(lin.values())) != 1.0:
            return None
        (d,) = lin
        if d not in writer or writer[d].kind != "mlp":
            return None
        ops.add(writer[d])
    return ops.pop() if len(ops) == 1 else None


def _cancel(op: Op, d: int, signed: bool, carry):
    """Units making dim d zero (and, with carry, copying it to the carry dim
    and removing the previous copy)."""
    op.units.append(Unit({d: 1.0}, 0.0, {d: -1.0, **({carry: 1.0} if carry is not None else {})}, gated=False))
    if signed:
        op.units.append(Unit({d: -1.0}, 0.0, {d: 1.0, **({carry: -1.0} if carry is not None else {})},
                             gated=False))
    if carry is not None:
        op.units.append(Unit({carry: 1.0}, 0.0, {carry: -1.0}, gated=False))
        if signed:
            op.units.append(Unit({carry: -1.0}, 0.0, {carry: 1.0}, gated=False))
