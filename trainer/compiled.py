"""Starting from the compiler's weights.

`remap_vocab` puts a compiled model into the task's token tables: embedding
rows are gathered by token value (the BOS row is kept), unembedding rows too,
and output tokens the compiled model never produces get weight 0 and a very
negative bias, so the argmax is unchanged.

`compress` projects the residual stream of a (norm-free) compiled model into
a smaller width D with a matrix P [D, d] whose rows are orthonormal: readers
W become W Pᵀ, writers W become P W.  Dimensions that carry fixed position
features stay coordinate axes (the features are added to a single residual
dimension).  With D = d this is an exact rotation; with D < d it loses what
lies outside P's row space, which training then recovers.  `pca` keeps the
directions where the residual stream actually lives; `random` is a random
orthonormal projection.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from rasp.errors import RaspError
from trainer.model import LoopedTransformer

NEG_BIAS = -1e4
TIE_BREAK = 1e-3


def compile_task_model(program, max_len: int) -> LoopedTransformer:
    try:
        from compiler import compile_program
    except ImportError as e:
        raise RaspError(f"--init compiled: the compiler is not available ({e})")
    cm = compile_program(program, max_len=max_len)
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

        def ok(i):
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
    move them."""
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

def _readers(model):
    for blk in [*model.prelude, *model.body, *model.postlude]:
        yield from (blk.attn.q, blk.attn.k, blk.attn.v, blk.mlp.up)
    yield model.unembed


def _writers(model):
    for blk in [*model.prelude, *model.body, *model.postlude]:
        yield from (blk.attn.o, blk.mlp.down)


@torch.no_grad()
def residual_second_moment(model: LoopedTransformer, tokens: torch.Tensor, steps: int) -> torch.Tensor:
    """Σ x xᵀ over every residual state the model visits (block inputs, the
    state after attention, the final states)."""
    d = model.cfg.d_model
    acc = torch.zeros(d, d, dtype=torch.float64)

    def grab(_m, args):
        x = args[0].reshape(-1, d).double()
        acc.add_(x.T @ x)

    hooks = [blk.register_forward_pre_hook(grab) for blk in [*model.prelude, *model.body, *model.postlude]]
    hooks += [blk.mlp.register_forward_pre_hook(grab) for blk in [*model.prelude, *model.body, *model.postlude]]
    hooks.append(model.unembed.register_forward_pre_hook(grab))
    try:
        model.all_steps(tokens, steps)
    finally:
        for h in hooks:
            h.remove()
    return acc


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
