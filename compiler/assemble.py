"""Make the named-subspace ops dense and fill a `model.LoopedTransformer`.

BOS is tracked exactly while the weights are written: BOS attends only to
itself, so its residual vector is a fixed function of the weights; each
head's key/value rows get a correction on the `bos` dim so that BOS's key
and value are exactly the ones the construction asked for.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch

from model import LoopedConfig, LoopedTransformer
from model.looped import position_feature

from .basis import BOS, GATE, IDX, IDX2, ONE, Cat, ClockedNum
from .clock import DONE_LOGIT, OPEN_LOGIT


def _dense(lin: dict, d: int) -> np.ndarray:
    row = np.zeros(d)
    for k, v in lin.items():
        row[k] += v
    return row


class Layer:
    def __init__(self, ops):
        self.heads = [op for op in ops if op.kind == "attn"]
        self.mlps = [op for op in ops if op.kind == "mlp"]

    @property
    def units(self):
        return [u for op in self.mlps for u in op.units]


def layer_shape(layer: Layer) -> tuple:
    """(n_head, d_head, d_mlp) the layer's own ops need (build_stage puts head h's
    rows first in its d_head slot and the units first)."""
    return (len(layer.heads), max([op.width for op in layer.heads], default=0), len(layer.units))


def group(ops, n_layers):
    return [Layer([op for op in ops if op.layer == i]) for i in range(n_layers)]


def build_stage(layers, d, dh, nh, dm, x_bos, bos_cols=(BOS,)):
    """Dense weights for each layer; advances x_bos through them.  bos_cols:
    the dims that hold the BOS flag (the postlude also reads its carry copy)."""
    out = []
    for layer in layers:
        W = {name: np.zeros(shape) for name, shape in (
            ("q", (nh * dh, d)), ("k", (nh * dh, d)), ("v", (nh * dh, d)), ("o", (d, nh * dh)),
            ("up", (dm, d)), ("down", (d, dm)))}
        B = {"up": np.zeros(dm), "down": np.zeros(d)}
        attn_bos = np.zeros(d)
        for h, op in enumerate(layer.heads):
            base = h * dh
            for r, lin in enumerate(op.q):
                W["q"][base + r] = _dense(lin, d)
            for r, lin in enumerate(op.k):
                row = _dense(lin, d)
                row[list(bos_cols)] += op.k_bos[r] - row @ x_bos
                W["k"][base + r] = row
            for r, lin in enumerate(op.v):
                row = _dense(lin, d)
                row[list(bos_cols)] += op.v_bos[r] - row @ x_bos
                W["v"][base + r] = row
                for dim, c in op.o[r].items():
                    W["o"][dim, base + r] += c
                attn_bos += W["o"][:, base + r] * op.v_bos[r]
        x_bos = x_bos + attn_bos
        for i, u in enumerate(layer.units):
            W["up"][i] = _dense(u.inp, d)
            B["up"][i] = u.bias
            if u.gated:
                W["up"][i, list(bos_cols)] -= GATE
            for dim, c in u.out.items():
                W["down"][dim, i] += c
        for op in layer.mlps:
            for dim, c in op.out_bias.items():
                B["down"][dim] += c
        hidden = np.maximum(W["up"] @ x_bos + B["up"], 0.0)
        x_bos = x_bos + W["down"] @ hidden + B["down"]
        out.append((W, B))
    return out, x_bos


def unembed_rows(rep, d, gate=None):
    """Output token values and the unembedding (weights, bias).  With a halting
    clock (`gate`), a one-hot output's value v + gate.offset is token v with a
    smaller margin; a numeric output comes as a ClockedNum."""
    if isinstance(rep, Cat):
        if gate is None:
            tokens = sorted(rep.vals)
            W = np.stack([_dense(rep.vals[t], d) * 10.0 for t in tokens])
            return tokens, W, np.zeros(len(tokens))
        tokens = sorted(v for v in rep.vals if v - gate.offset not in rep.vals)
        W = np.stack([_dense(rep.vals[t], d) * DONE_LOGIT + _dense(rep.vals.get(t + gate.offset, {}), d) * OPEN_LOGIT
                      for t in tokens])
        return tokens, W, np.zeros(len(tokens))
    if gate is not None and not isinstance(rep, ClockedNum):
        # a number v + offset would read as itself (craft.readout.numeric_clock)
        raise ValueError("a clocked numeric output must come as a ClockedNum")
    num = rep.value if isinstance(rep, ClockedNum) else rep
    lo, hi = int(np.floor(num.lo)), int(np.ceil(num.hi))
    tokens = list(range(lo, hi + 1))
    x = _dense(num.lin, d)
    if not isinstance(rep, ClockedNum):
        W = np.stack([2.0 * t * x for t in tokens])       # argmax_t 2tx - t^2 = round(x)
        return tokens, W, -np.array([float(t * t) for t in tokens])
    # OPEN (2tx - t^2) + (DONE - OPEN) (2ty - t^2 done), y = done * x: the same
    # argmax, margin DONE_LOGIT where done and OPEN_LOGIT elsewhere
    y, done, extra = _dense(rep.done_value, d), _dense(rep.done, d), DONE_LOGIT - OPEN_LOGIT
    W = np.stack([2.0 * t * (OPEN_LOGIT * x + extra * y) - extra * t * t * done for t in tokens])
    return tokens, W, -OPEN_LOGIT * np.array([float(t * t) for t in tokens])


def assemble(crafter, stages: dict, out_rep, extra: dict, gate=None):
    """stages: name -> (ops, n_layers) for 'pre', 'body', 'post'."""
    res = crafter.res
    d = len(res)
    layers = {name: group(*stages[name]) for name in ("pre", "body", "post")}
    # each block only as wide as its own ops: a wide op is paid by its layer, not by all;
    # (nh, dh, dm) is the widest, the slots build_stage lays every layer out in
    shapes = [layer_shape(layer) for name in ("pre", "body", "post") for layer in layers[name]]
    nh, dh, dm = (max([s[i] for s in shapes] + [1]) for i in range(3))
    vocab = sorted(crafter.ir.vocab)
    x_bos = np.zeros(d)
    x_bos[ONE], x_bos[BOS], x_bos[IDX], x_bos[IDX2] = 1.0, 1.0, -1.0, 1.0
    features = [("one", ONE), ("index", IDX), ("index_sq", IDX2)]
    if crafter.rot_dims is not None:
        # the rotary features at BOS (position -1), as the model computes them
        period = crafter.rot_period
        names = (f"index_cos:{period}", f"index_sin:{period}")
        bos_pos = torch.tensor([-1.0], dtype=torch.float32)
        for name, dim in zip(names, crafter.rot_dims):
            x_bos[dim] = float(position_feature(name, bos_pos)[0])
            features.append((name, dim))
    pre, e_bos = build_stage(layers["pre"], d, dh, nh, dm, x_bos)
    body, _ = build_stage(layers["body"], d, dh, nh, dm, e_bos)
    post_bos = (BOS, res.carry[BOS]) if BOS in res.carry else (BOS,)
    post, _ = build_stage(layers["post"], d, dh, nh, dm, e_bos, post_bos)
    tokens, WU, bU = unembed_rows(out_rep, d, gate)
    WE = np.zeros((len(vocab) + 1, d))
    for t, v in enumerate(vocab):
        WE[t, crafter.input_dims[v]] = 1.0
    WE[len(vocab), BOS] = 1.0
    for dim, lin in crafter.embedded.items():       # token maps the embedding computes
        for t, v in enumerate(vocab):
            WE[t, dim] = lin.get(crafter.input_dims[v], 0.0)

    # drop residual dims nothing reads (state dims stay: halting compares them)
    read = np.zeros(d, dtype=bool)
    for W, _B in pre + body + post:
        for name in ("q", "k", "v", "up"):
            read |= np.abs(W[name]).sum(axis=0) > 0
    read |= np.abs(WU).sum(axis=0) > 0
    state_dims = sorted({dd for var in crafter.pg.loop_vars() for lin in _forms(crafter.state[var][0])
                         for dd in lin})
    read[state_dims] = True
    read[[ONE, BOS]] = True
    keep = np.flatnonzero(read)
    remap = {int(old): i for i, old in enumerate(keep)}
    feats = [(name, remap[dim]) for name, dim in features if dim in remap]
    cfg = LoopedConfig(vocab_size=len(vocab), out_vocab_size=len(tokens), d_model=len(keep), n_head=nh,
                       d_head=dh, d_mlp=dm, n_prelude=len(pre), n_body=len(body), n_postlude=len(post),
                       block_shapes=[list(s) for s in shapes],
                       norm="none", activation="relu", input_injection=True, body_final_norm=False,
                       bias=True, attn_scale=1.0, bos=True, position_features=feats,
                       extra=dict(extra, input_tokens=vocab, output_tokens=tokens,
                                  state_dims=[remap[s] for s in state_dims],
                                  dim_names=[res.dims[k].name for k in keep],
                                  kept_dims=[int(k) for k in keep]))
    # loop variables as forms over h + e (for halting/debugging/tests)
    cfg.extra["loop_vars"] = []
    for var in crafter.pg.loop_vars():
        rep = crafter.state_view(*crafter.state[var])
        forms = list(rep.vals.items()) if isinstance(rep, Cat) else [(None, rep.lin)]
        cfg.extra["loop_vars"].append({
            "name": var.name, "kind": "cat" if isinstance(rep, Cat) else "num",
            "values": [v for v, _ in forms],
            "forms": [{str(remap[k]): c for k, c in lin.items() if k in remap} for _, lin in forms]})
    with _no_random_init():                # every parameter is written below
        model = LoopedTransformer(cfg)
    def put(param, array):                 # share the float32 buffer instead of copying
        param.data = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))

    zeros = lambda n: np.zeros(n, dtype=np.float32)
    put(model.embed.weight, WE[:, keep])
    for blk, (W, B), (h, w, m) in zip(model.blocks(), pre + body + post, shapes):
        heads = lambda a, h=h, w=w: a.reshape(nh, dh, a.shape[1])[:h, :w].reshape(h * w, a.shape[1])  # the block's head rows
        for name, lin in (("q", blk.attn.q), ("k", blk.attn.k), ("v", blk.attn.v)):
            put(lin.weight, heads(W[name])[:, keep])
            put(lin.bias, zeros(lin.bias.shape[0]))
        put(blk.attn.o.weight, heads(W["o"].T)[:, keep].T)
        put(blk.attn.o.bias, zeros(len(keep)))
        put(blk.mlp.up.weight, W["up"][:m, keep])
        put(blk.mlp.up.bias, B["up"][:m])
        put(blk.mlp.down.weight, W["down"][keep, :m])
        put(blk.mlp.down.bias, B["down"][keep])
    put(model.unembed.weight, WU[:, keep])
    put(model.unembed.bias, bU)
    model.eval()
    layout = {name: [[op.label for op in ops if op.layer == i and op.kind == "attn"] +
                     [f"mlp: {op.label} ({len(op.units)} units)" for op in ops if op.layer == i and op.kind == "mlp"]
                     for i in range(n)] for name, (ops, n) in stages.items()}
    return model, layout


@contextmanager
def _no_random_init():
    saved = (torch.nn.Linear.reset_parameters, torch.nn.Embedding.reset_parameters,
             LoopedTransformer.__dict__["_init_weights"])
    torch.nn.Linear.reset_parameters = lambda self: None
    torch.nn.Embedding.reset_parameters = lambda self: None
    LoopedTransformer._init_weights = staticmethod(lambda m: None)
    try:
        yield
    finally:
        torch.nn.Linear.reset_parameters, torch.nn.Embedding.reset_parameters = saved[:2]
        LoopedTransformer._init_weights = saved[2]


def _forms(rep):
    return list(rep.vals.values()) if isinstance(rep, Cat) else [rep.lin]
