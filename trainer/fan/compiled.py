"""Starting from the compiler's weights.

`remap_vocab` puts a compiled model into the task's token tables: embedding
rows are gathered by token value (the BOS row is kept), unembedding rows too,
and output tokens the compiled model never produces get weight 0 and a very
negative bias, so the argmax is unchanged.

`compress` maps the residual stream of a (norm-free) compiled model into a
smaller width D with a matrix P [D, d]: readers W become W Pᵀ, writers W
become P W.  Dimensions that carry fixed position features stay coordinate
axes (the features are added to a single residual dimension).  `shrink`
picks P:

* `merge` (default): dims whose live ranges never clash share a coordinate
  (`liveness_conflicts`, `merge_projection`); exact, and usually far below
  the compiled width.  Below the merged width it continues with `pca` on the
  merged model.
* `pca`: the orthonormal directions where the residual stream lives (exact
  down to its rank; beyond that training has to recover what was dropped).
* `random`: a random orthonormal projection (exact only at D = d).
"""
from __future__ import annotations

from dataclasses import replace

import networkx as nx
import torch

from model import LoopedTransformer, zero_skipping
from rasp.errors import RaspError
from trainer.run.kind import FRAGILE_NOT_PROBED

NEG_BIAS = -1e4
TIE_BREAK = 1e-3


def has_clock(model: LoopedTransformer) -> bool:
    """Whether a compiled model carries the halting clock (compiler/clock.py)."""
    return "count" in model.cfg.extra.get("compiler", {}).get("clock", {})


def compile_task_model(program, max_len: int, knob: str) -> LoopedTransformer:
    """The compiled model of a run's program for inputs of up to `max_len` tokens; `knob`:
    what sets that length in `rasp train` (a compile error names it, not `rasp compile`'s --max-len)."""
    try:
        from compiler import compile_program
    except ImportError as e:
        raise RaspError(f"--init compiled: the compiler is not available ({e})") from e
    try:
        cm = compile_program(program, max_len=max_len)
    except RaspError as e:
        e.message = f"--init compiled, inputs of up to {max_len} tokens: {e.message.replace('--max-len', knob)}"
        raise
    model = cm.model
    for key in ("input_tokens", "output_tokens"):
        if key not in model.cfg.extra:
            raise RaspError(f"the compiled model does not record cfg.extra[{key!r}]")
    return model


@torch.no_grad()
def remap_vocab(cmodel: LoopedTransformer, input_tokens, output_tokens, extra=None) -> LoopedTransformer:
    ccfg = cmodel.cfg
    cin = [int(v) for v in ccfg.extra["input_tokens"]]
    cout = [int(v) for v in ccfg.extra["output_tokens"]]
    missing = [v for v in input_tokens if v not in cin]
    if missing:
        raise RaspError(f"the compiled model has no embedding for input tokens {missing}")
    cfg = replace(ccfg, vocab_size=len(input_tokens), out_vocab_size=len(output_tokens),
                  extra={**ccfg.extra, **(extra or {}), "input_tokens": list(input_tokens),
                         "output_tokens": list(output_tokens)})
    cfg.position_features = list(ccfg.position_features)
    model = LoopedTransformer(cfg)
    sd = {k: v for k, v in cmodel.state_dict().items()
          if not k.startswith("embed.") and not k.startswith("unembed.")}
    model.load_state_dict(sd, strict=False)
    rows = [cin.index(v) for v in input_tokens] + ([ccfg.vocab_size] if ccfg.bos else [])
    model.embed.weight.copy_(cmodel.embed.weight[rows])
    model.unembed.weight.zero_()
    if model.unembed.bias is not None:
        model.unembed.bias.fill_(NEG_BIAS)
    for j, v in enumerate(output_tokens):
        if v in cout:
            i = cout.index(v)
            model.unembed.weight[j] = cmodel.unembed.weight[i]
            if model.unembed.bias is not None:
                # The compiled model may leave all logits equal (0) at some positions and
                # rely on argmax picking its first token; keep that tie-break in our order.
                model.unembed.bias[j] = cmodel.unembed.bias[i] - TIE_BREAK * i
    return model


# ---- length-fragile parameters --------------------------------------------

SAFE_EPS = [10.0 ** (-k / 2) for k in range(2, 21)]     # 1e-1 .. 1e-10, half decades


def _direction(p, mask, seed):
    return torch.randn(p.shape, generator=torch.Generator().manual_seed(seed)).to(p) * mask


@torch.no_grad()
def _safe_index(p, mask, exact, seeds: int):
    """Index into SAFE_EPS of the largest relative perturbation p * (1 + eps z),
    z ~ N(0, 1) on `mask`, that keeps `exact()` true, worst over `seeds`
    directions (None: not even the smallest).  Bisection: exactness is taken
    to be lost monotonically as eps grows."""
    old, worst = p.detach().clone(), 0
    for seed in range(seeds):
        z = _direction(p, mask, seed)

        def ok(i, z=z):
            p.copy_(old * (1 + SAFE_EPS[i] * z))
            return exact()

        lo, hi = worst, len(SAFE_EPS) - 1    # eps above the worst so far need not be tried
        try:
            if ok(lo):
                continue
            if not ok(hi):
                return None
            while hi - lo > 1:               # invariant: not ok(lo), ok(hi)
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if ok(mid) else (mid, hi)
            worst = hi
        finally:
            p.copy_(old)
    return worst


def fragile_info(hp, probe) -> dict:
    """init_info's record of a compiled start's length-fragile tensors (`length_fragile`):
    {"frozen": probe()} with --freeze-fragile when the run trains at all; a run of --steps 0
    moves nothing, so it is not probed ({"fragile_probe": FRAGILE_NOT_PROBED}; the probe costs
    minutes on long programs, words_mixed: over 8 CPU-minutes against 42 s for the rest of the
    run); {} without --freeze-fragile."""
    if not hp.freeze_fragile:
        return {}
    return {"frozen": probe()} if hp.steps > 0 else {"fragile_probe": FRAGILE_NOT_PROBED}


@torch.no_grad()
def length_fragile(model: LoopedTransformer, short_exact, long_exact, seeds: int = 3) -> list:
    """Names of the parameter tensors whose tolerance shrinks with length: the
    largest relative perturbation of their nonzero entries (on the SAFE_EPS
    grid, worst of `seeds` random directions) that keeps the model exact on
    training-length inputs (`short_exact`) breaks it on long inputs
    (`long_exact`) in one of those directions.  These are the
    weights that act on position-scaled quantities (attention queries/keys
    comparing numeric position features, the embedding rows they compare,
    MLP readers of counters): a step that is harmless at n <= max_train_n is
    amplified at large n, so a fine-tune that only sees short inputs must not
    move them.  Empty where the model is not exact on both to begin with."""
    if not (short_exact() and long_exact()):
        return []
    names = []
    model.eval()
    for name, p in model.named_parameters():
        mask = (p != 0).to(p.dtype)
        if not bool(mask.any()):
            continue
        i = _safe_index(p, mask, short_exact, seeds)
        if i is None:
            continue
        old = p.detach().clone()
        try:
            for seed in range(seeds):
                p.copy_(old * (1 + SAFE_EPS[i] * _direction(p, mask, seed)))
                if not long_exact():
                    names.append(name)
                    break
        finally:
            p.copy_(old)
    return names


# ---- compression ----------------------------------------------------------

def _sites(model):
    """(module, readers) for every place the residual stream is read: each
    block's input (attention q/k/v), each MLP's input, the unembedding."""
    for blk in [*model.prelude, *model.body, *model.postlude]:
        yield blk, (blk.attn.q, blk.attn.k, blk.attn.v)
        yield blk.mlp, (blk.mlp.up,)
    yield model.unembed, (model.unembed,)


def _readers(model):
    for _site, readers in _sites(model):
        yield from readers


def _writers(model):
    for blk in [*model.prelude, *model.body, *model.postlude]:
        yield from (blk.attn.o, blk.mlp.down)


@torch.no_grad()
def _visit(model, tokens: torch.Tensor, steps: int, visit):
    """Run `steps` iterations and call visit(x [N, d], read_mask [d]) with the
    residual stream at every site, each time the site is reached."""
    d = model.cfg.d_model
    model = zero_skipping(model)        # the same states, without the products with zero weights
    hooks = []
    for module, readers in _sites(model):
        reads = torch.zeros(d, dtype=torch.bool)
        for lin in readers:
            reads |= (lin.weight != 0).any(0)
        def hook(_module, args, r=reads):
            visit(args[0].reshape(-1, d), r)         # returns None: the input is not replaced

        hooks.append(module.register_forward_pre_hook(hook))
    try:
        model.all_steps(tokens, steps)
    finally:
        for h in hooks:
            h.remove()


def residual_second_moment(model: LoopedTransformer, tokens: torch.Tensor, steps: int) -> torch.Tensor:
    """Σ x xᵀ over every residual state the model visits."""
    d = model.cfg.d_model
    acc = torch.zeros(d, d, dtype=torch.float64)
    _visit(model, tokens, steps, lambda x, _r: acc.add_(x.double().T @ x.double()))
    return acc


def liveness_conflicts(model: LoopedTransformer, tokens: torch.Tensor, steps: int,
                       tol: float = 1e-3) -> torch.Tensor:
    """[d, d] bool: residual dims that cannot share one coordinate, because at
    some site both are nonzero, or one is nonzero where a layer reads the other
    (it would read the wrong value).  A compiled model cancels each temporary
    after its last use, so many dims are live only for a few layers."""
    d = model.cfg.d_model
    clash = torch.zeros(d, d, dtype=torch.bool)

    def visit(x, reads):
        live = (x.abs() > tol).any(0)
        clash.logical_or_(live[:, None] & (live | reads)[None, :])
        clash.logical_or_(reads[:, None] & live[None, :])

    _visit(model, tokens, steps, visit)
    return clash


def merge_projection(model: LoopedTransformer, clash: torch.Tensor) -> torch.Tensor:
    """P [k, d] with 0/1 entries: dims that never clash share a coordinate
    (a greedy colouring of the clash graph, like register allocation); the
    position-feature dims come first, one coordinate each.  Exact on every
    input whose liveness the `clash` sample covered."""
    d = model.cfg.d_model
    fixed = sorted({int(dim) for _, dim in model.cfg.position_features})
    g = nx.Graph()
    g.add_nodes_from(range(d))
    g.add_edges_from((i, j) for i, j in torch.nonzero(clash).tolist() if i != j)
    g.add_edges_from((f, j) for f in fixed for j in range(d) if j != f)
    colour = nx.greedy_color(g, strategy="largest_first")
    order = [colour[f] for f in fixed]
    order += sorted(set(colour.values()) - set(order))
    P = torch.zeros(len(order), d, dtype=torch.float64)
    for dim, c in colour.items():
        P[order.index(c), dim] = 1.0
    return P


def projection(model: LoopedTransformer, width: int, method: str, seed: int = 0,
               moment: torch.Tensor = None) -> torch.Tensor:
    """P [width, d] with orthonormal rows; position-feature dims kept as axes."""
    d = model.cfg.d_model
    fixed = sorted({int(dim) for _, dim in model.cfg.position_features})
    if width < len(fixed) or width > d:
        raise RaspError(f"--compress {width}: must lie between {len(fixed)} and the compiled width {d}")
    rest = [i for i in range(d) if i not in fixed]
    k = width - len(fixed)
    P = torch.zeros(width, d, dtype=torch.float64)
    for j, dim in enumerate(fixed):
        P[j, dim] = 1.0
    if k:
        if method == "pca":
            if moment is None:
                raise ValueError("pca needs the residual second moment")
            evals, evecs = torch.linalg.eigh(moment[rest][:, rest])
            Q = evecs[:, torch.argsort(evals, descending=True)[:k]].T       # [k, |rest|]
        elif method == "random":
            g = torch.Generator().manual_seed(seed)
            A = torch.randn(len(rest), k, generator=g, dtype=torch.float64)
            Q = torch.linalg.qr(A).Q.T
        else:
            raise RaspError(f"unknown projection {method!r} (pca or random)")
        P[len(fixed):, rest] = Q
    return P


@torch.no_grad()
def compress(model: LoopedTransformer, P: torch.Tensor) -> LoopedTransformer:
    cfg = model.cfg
    if cfg.norm != "none":
        raise RaspError("--compress needs a norm-free (compiled) model")
    width = P.shape[0]
    fixed = sorted({int(dim) for _, dim in cfg.position_features})
    newpos = [(name, fixed.index(int(dim))) for name, dim in cfg.position_features]
    ncfg = replace(cfg, d_model=width, d_head=cfg.d_head, d_mlp=cfg.d_mlp,
                   extra={**cfg.extra, "compressed_from": cfg.d_model})
    ncfg.position_features = newpos
    new = LoopedTransformer(ncfg).to(torch.float64)
    src = model.to(torch.float64)
    new.embed.weight.copy_(src.embed.weight @ P.T)
    for a, b in zip(_readers(new), _readers(src)):
        a.weight.copy_(b.weight @ P.T)
        if a.bias is not None:
            a.bias.copy_(b.bias)
    for a, b in zip(_writers(new), _writers(src)):
        a.weight.copy_(P @ b.weight)
        if a.bias is not None:
            a.bias.copy_(P @ b.bias)
    model.to(torch.float32)
    return new.to(torch.float32)


def shrink(model: LoopedTransformer, width: int, method: str, tokens: torch.Tensor, steps: int,
           seed: int = 0):
    """The compiled start in `width` dims -> (model, info, exact): `exact` is
    the narrowest exact model on the way (the merged one, or the compiled
    one), for the fragility probe.  `tokens` and `steps`: inputs of every
    length the model is meant for (liveness and the PCA moment are measured
    on them)."""
    info = {"compressed_to": width, "compress_method": method}
    exact = model
    if method == "merge":
        d = model.cfg.d_model
        if width > d:
            raise RaspError(f"--compress {width}: must lie below the compiled width {d}")
        P = merge_projection(model, liveness_conflicts(model, tokens, steps))
        info["merged_width"] = P.shape[0]
        if width >= P.shape[0]:           # exact; spare coordinates start unused (zero)
            small = compress(model, torch.cat([P, P.new_zeros(width - P.shape[0], d)]))
            return small, info, small
        model = exact = compress(model, P)
        method = "pca"
    moment = residual_second_moment(model, tokens, steps) if method == "pca" else None
    return compress(model, projection(model, width, method, seed, moment)), info, exact
