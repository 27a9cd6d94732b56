"""Implicit (fixed-point) models: the solver, the backward, the curriculum and
the two evaluation orders (docs/models.md §7)."""
import pytest
import torch
import torch.nn.functional as F

from trainer.models.base import EncoderConfig, get_encoder_spec
from trainer.models.fixed_point import (VariationalDropout, relative_residual, reset_variational_dropout,
                                        reset_weight_norm, solve)

torch.set_num_threads(1)
IMPLICIT = ["implicit_mamba2", "implicit_llama"]


def build(name, vocab=6, dropout=0.0, d_model=16, n_layer=1, **extra):
    spec = get_encoder_spec(name)
    cfg = EncoderConfig(vocab_size=vocab, d_model=d_model, n_layer=n_layer, n_head=2, d_ff=2 * d_model,
                        dropout=dropout, extra={**spec.defaults, "d_state": 4, "headdim": 8, **extra})
    return spec.build(cfg)


def prefix_sums(n, length, mod, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, mod, (n, length), generator=g)
    return x + 1, x.cumsum(1) % mod


def train_briefly(model, steps, mod=5, length=6):
    """A few optimiser steps on prefix sums mod `mod` (one warm-up step, then DEQ)."""
    head = torch.nn.Linear(model.d_model, mod)
    opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), 3e-3)
    model.extra["warmup_steps"] = 1
    model.train()
    for step in range(steps):
        x, y = prefix_sums(16, length, mod, step)
        model.set_progress(step, steps)
        out = model(x, torch.ones_like(x, dtype=torch.bool))
        loss = F.cross_entropy(head(out.hidden).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def make_contractive(model, read=0.05, write=20.0):
    """Make f a contraction, so that its fixed point is unique and the two
    evaluation orders must find the same one: the weights that read z (Mamba2
    in_proj; Llama wq, wk, wv, w1, w3) shrink, the residual-branch outputs
    (out_proj, wo) grow, so f(z) ≈ RMSNorm(z + c(x)) with |c| >> |z|.  (A trained
    model need not have a unique fixed point: P2 reports 97.6 % agreement of
    the two orders, not 100 %.)"""
    reads = tuple(f"{w}.weight_g" for w in ("in_proj", "wq", "wk", "wv", "w1", "w3"))
    with torch.no_grad():
        for name, p in model.core.named_parameters():
            if name.endswith(reads):
                p.mul_(read)
            elif name.endswith(("out_proj.weight_g", "wo.weight_g")):
                p.mul_(write)
    return model


# ---- the solver --------------------------------------------------------------

@pytest.mark.parametrize("seed,batch,dim", [(0, 3, 8), (1, 5, 32), (2, 1, 3)])
def test_solver_reaches_tolerance_on_a_contraction(seed, batch, dim):
    torch.manual_seed(seed)
    W = torch.randn(batch, dim, dim)
    W = 0.5 * W / torch.linalg.matrix_norm(W, ord=2)[:, None, None]
    b = torch.randn(batch, dim)

    def f(z):
        return torch.tanh(torch.einsum("bij,bj->bi", W, z)) + b
    z, iters, res = solve(f, torch.zeros(batch, dim), max_iter=200, tol=1e-6)
    assert (res < 1e-6).all() and (iters < 200).all() and (iters >= 1).all()
    assert (relative_residual(z, f(z)) < 1e-5).all()


def test_solver_returns_the_lowest_residual_iterate_per_sample():
    # component 0 converges (×0.5), component 1 grows (×g) from a tiny start: the
    # residual falls, then rises; the best iterate differs between the samples.
    growth = torch.tensor([1.5, 1.3])
    c = torch.tensor([[1.0, 1e-6], [1.0, 1e-2]])

    def f(z):
        return torch.stack([0.5 * z[:, 0], growth * z[:, 1]], 1) + c
    z, iters, res = solve(f, torch.zeros(2, 2), max_iter=60, tol=1e-12)
    xs, residuals = [torch.zeros(2, 2)], []
    for _ in range(60):
        xs.append(f(xs[-1]))
        residuals.append(relative_residual(xs[-2], xs[-1]))
    residuals = torch.stack(residuals, 1)
    best = residuals.argmin(1)
    assert best[0] != best[1] and (best > 0).all() and (best < 59).all()
    for i in range(2):
        assert torch.allclose(z[i], xs[best[i] + 1][i])
        assert torch.isclose(res[i], residuals[i, best[i]])
        assert iters[i] == best[i] + 1


# ---- the backward ------------------------------------------------------------

# (seed, d_model, n_layer, length, k, tau): the checker re-runs these with others
SIZES = [(1, 16, 1, 5, 3, 0.8), (8, 32, 2, 9, 1, 0.5), (9, 16, 3, 4, 5, 1.0)]


@pytest.mark.parametrize("seed,d_model,n_layer,length,k,tau", SIZES)
@pytest.mark.parametrize("name", IMPLICIT)
def test_phantom_gradient_equals_autograd_through_k_damped_steps(name, seed, d_model, n_layer, length, k, tau):
    torch.manual_seed(seed)
    model = build(name, d_model=d_model, n_layer=n_layer, grad=k, tau=tau, f_max_iter=6).train()
    x, y = prefix_sums(4, length, 5, seed)
    mask = torch.ones_like(x, dtype=torch.bool)
    out = model(x, mask)
    out.hidden.pow(2).mean().backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    # by hand: same detached z*, then k damped steps with autograd
    reset_weight_norm(model.core)
    v = model.core.inject(x)
    def f(z):
        return model.core.f(z, v)
    z_star, _, _ = solve(f, torch.zeros(4, length, d_model), 6, model.extra["f_tol"])
    z = z_star.detach()
    for _ in range(k):
        z = tau * f(z) + (1 - tau) * z
    assert torch.allclose(z, out.hidden, atol=1e-6)
    z.pow(2).mean().backward()
    for n, p in model.named_parameters():
        assert torch.allclose(got[n], p.grad, atol=1e-7, rtol=1e-5), n


@pytest.mark.parametrize("name", IMPLICIT)
@pytest.mark.parametrize("backward", ["phantom", "ift"])
@pytest.mark.parametrize("already_fixed", [False, True])
def test_every_parameter_gets_a_gradient(name, backward, already_fixed):
    """torchdeq issue #8: a solver that stops at once must still leave a gradient."""
    torch.manual_seed(2)
    # f_tol 1e9: the solver accepts its first iterate (the start is "already a fixed point")
    model = build(name, ift=(backward == "ift"), f_max_iter=5,
                  f_tol=1e9 if already_fixed else 0.05).train()
    x, _ = prefix_sums(3, 5, 5, 1)
    out = model(x, torch.ones_like(x, dtype=torch.bool))
    if already_fixed:
        assert (out.stats["iterations"] == 1).all()
    assert out.hidden.requires_grad
    out.hidden.pow(2).mean().backward()
    for n, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n
        if n != "core.embedding.weight":           # only the rows of seen tokens move
            assert p.grad.abs().sum() > 0, n


@pytest.mark.parametrize("seed", [6, 16])
def test_ift_gradient_equals_the_limit_of_phantom_gradients(seed):
    """On a contraction, k undamped phantom steps from z* converge to the IFT
    gradient as k grows (both differentiate the same fixed point)."""
    torch.manual_seed(seed)
    x, _ = prefix_sums(3, 5, 5, seed - 1)
    mask = torch.ones_like(x, dtype=torch.bool)
    grads = {}
    for mode, extra in (("ift", dict(ift=True, b_max_iter=200, b_tol=1e-9)), ("phantom", dict(grad=80, tau=1.0))):
        torch.manual_seed(seed + 1)
        model = make_contractive(build("implicit_mamba2", f_max_iter=200, f_tol=1e-9, **extra)).train()
        model(x, mask).hidden.pow(2).mean().backward()
        grads[mode] = torch.cat([p.grad.flatten() for p in model.parameters()])
    rel = (grads["ift"] - grads["phantom"]).norm() / grads["ift"].norm()
    assert rel < 1e-3, rel


# ---- curriculum ----------------------------------------------------------------

def test_curriculum_phases_and_caps():
    model = build("implicit_mamba2", warmup_steps=10, warmup_iter=3, bounded_until=0.5,
                  bounded_max_iter=2, f_max_iter=7, f_tol=0.0, test_max_iter=4, test_tol=0.0).train()
    x, _ = prefix_sums(2, 4, 5, 2)
    mask = torch.ones_like(x, dtype=torch.bool)
    seen = {}
    for step in (0, 9, 10, 49, 50, 99):
        model.set_progress(step, 100)
        seen[step] = (model.phase(), model(x, mask).stats["iterations"].max().item())
    assert seen == {0: ("warmup", 3), 9: ("warmup", 3), 10: ("bounded", 2), 49: ("bounded", 2),
                    50: ("free", 7), 99: ("free", 7)}
    model.eval()
    with torch.no_grad():
        assert model(x, mask).stats["iterations"].max().item() == 4
    # the unrolled warm-up back-propagates through every iteration
    model.train()
    model.set_progress(0, 100)
    assert model(x, mask).hidden.grad_fn is not None


# ---- causality, evaluation orders ------------------------------------------------

@pytest.mark.parametrize("seed,d_model,n_layer", [(3, 16, 1), (13, 32, 2)])
@pytest.mark.parametrize("name", IMPLICIT)
def test_outputs_at_t_do_not_depend_on_later_tokens(name, seed, d_model, n_layer):
    torch.manual_seed(seed)
    model = make_contractive(build(name, d_model=d_model, n_layer=n_layer, test_max_iter=300,
                                   test_tol=1e-7)).eval()
    a, _ = prefix_sums(3, 9, 5, seed)
    b = a.clone()
    b[:, 5:] = torch.randint(1, 6, (3, 4))
    b[:, 5] = a[:, 5] % 5 + 1                               # position 5 surely changes
    mask = torch.ones_like(a, dtype=torch.bool)
    with torch.no_grad():
        ha, hb = model(a, mask).hidden, model(b, mask).hidden
    assert (ha[:, :5] - hb[:, :5]).abs().max() < 1e-4
    assert (ha[:, 5:] - hb[:, 5:]).abs().max() > 1e-2
    # the unrolled warm-up is exactly causal (a fixed number of applications)
    model.train()
    model.set_progress(0, 10)
    ha, hb = model(a, mask).hidden, model(b, mask).hidden
    assert torch.allclose(ha[:, :5], hb[:, :5], atol=1e-6)


@pytest.mark.parametrize("seed,d_model,n_layer,length", [(4, 16, 1, 8), (14, 32, 2, 11)])
@pytest.mark.parametrize("name", IMPLICIT)
def test_sequential_equals_simultaneous(name, seed, d_model, n_layer, length):
    torch.manual_seed(seed)
    model = train_briefly(build(name, d_model=d_model, n_layer=n_layer), steps=6)
    make_contractive(model)
    model.extra.update(test_max_iter=300, test_tol=1e-7)
    x, _ = prefix_sums(4, length, 5, 99 + seed)
    mask = torch.ones_like(x, dtype=torch.bool)
    mask[0, length - 2:] = False                             # right padding
    x[0, length - 2:] = 0
    with torch.no_grad():
        sim = model(x, mask)
        model.extra["eval_mode"] = "sequential"
        seq = model(x, mask)
    assert (sim.hidden - seq.hidden)[mask].abs().max() < 1e-4
    assert (seq.stats["iterations"] > 1).all() and (seq.stats["residual"] < 1e-6).all()


# ---- weight norm and dropout -----------------------------------------------------

@pytest.mark.parametrize("name", IMPLICIT)
def test_f_is_one_function_within_a_forward(name):
    torch.manual_seed(5)
    model = build(name, dropout=0.3).train()
    x, _ = prefix_sums(2, 6, 5, 4)
    z = torch.randn(2, 6, 16)
    reset_weight_norm(model.core)
    reset_variational_dropout(model.core)
    v = model.core.inject(x)
    f1, f2 = model.core.f(z, v), model.core.f(z, v)
    assert torch.equal(f1, f2)                                # masks reused
    reset_variational_dropout(model.core)
    assert not torch.equal(model.core.f(z, v), f1)            # a new forward draws new masks
    # weight norm: W = g V / |V|_row, so rescaling V changes nothing
    lin = model.core.injection
    assert torch.allclose(lin.weight, lin.weight_g * lin.weight_v / lin.weight_v.norm(dim=1, keepdim=True))
    model.eval()
    with torch.no_grad():
        before = model.core.f(z, model.core.inject(x))
        for n, p in model.core.named_parameters():
            if n.endswith("weight_v"):
                p.mul_(3.0)
        reset_weight_norm(model.core)
        after = model.core.f(z, model.core.inject(x))
    assert torch.allclose(before, after, atol=1e-5)


@pytest.mark.parametrize("name", IMPLICIT)
def test_weight_norm_on_every_linear_and_conv(name):
    """docs/models.md §7.1: every nn.Linear / nn.Conv1d of the implicit backbone,
    the injection included, is weight-normalised."""
    model = build(name, n_layer=2)
    layers = [m for m in model.core.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv1d))]
    assert layers and all(hasattr(m, "weight_g") and hasattr(m, "weight_v") for m in layers)
    assert model.core.injection in layers


def test_variational_dropout_mask_shape():
    d = VariationalDropout(0.5).train()
    x = torch.ones(3, 7, 4)
    y = d(x)
    assert torch.equal(y[:, 0], y[:, 6])                     # one mask for all positions
    assert torch.equal(d(torch.ones(3, 4)), y[:, 0])         # and for the one-token form


@pytest.mark.parametrize("key,value", [("eval_mode", "fast"), ("test_max_iter", 0), ("tau", 1.5), ("f_tol", -1)])
def test_bad_settings_are_user_errors(key, value):
    from rasp.errors import RaspError
    with pytest.raises(RaspError, match=key):
        build("implicit_mamba2", **{key: value})


@pytest.mark.parametrize("name", IMPLICIT + ["mamba2", "llama"])
def test_cpu_preset_reaches_the_encoder(name):
    from trainer.benchmark.presets import make_seq_hparams
    from trainer.benchmark.kind import seq_task
    spec = get_encoder_spec(name)
    hp = make_seq_hparams("cpu", seq_task("words_z60"), spec, {}, {"test_max_iter": 7})
    assert (hp.d_model, hp.n_layer, hp.batch_size, hp.betas, hp.grad_clip) == (64, 1, 128, [0.9, 0.95], 0.25)
    if name.endswith("mamba2"):
        assert (hp.extra["d_state"], hp.extra["headdim"], hp.extra["expand"]) == (16, 16, 2)
    if name.startswith("implicit"):
        assert (hp.extra["warmup_steps"], hp.extra["f_max_iter"], hp.extra["grad"]) == (150, 16, 4)
        model = spec.build(EncoderConfig(vocab_size=61, **hp.encoder_fields(), extra=dict(hp.extra)))
        assert model.extra["test_max_iter"] == 7


P2_MODELS = ["mamba2", "implicit_mamba2", "llama", "implicit_llama"]


def test_p2_models_cpu_words_train_at_one_length():
    """trainer/models/mamba2.py: on the word problems the cpu preset trains P2's
    four models at length k only with a constant lr; P3's models keep the
    mixed-length `train` split; other families are untouched."""
    from trainer.benchmark.presets import make_seq_hparams
    from trainer.benchmark.kind import check_splits, seq_task
    from trainer.tasks import TASKS
    for task_name in [n for n in TASKS if n.startswith("words_")]:
        task = seq_task(task_name)
        for name in P2_MODELS:
            hp = make_seq_hparams("cpu", task, get_encoder_spec(name), {}, {})
            check_splits(task, hp)
            assert (hp.train_split, hp.schedule) == ("train_k", "constant"), name
        for name in ("gru", "lstm", "transformer"):
            assert make_seq_hparams("cpu", task, get_encoder_spec(name), {}, {}).train_split == "train"
    for name in P2_MODELS:
        hp = make_seq_hparams("cpu", seq_task("counting"), get_encoder_spec(name), {}, {})
        assert hp.train_split == "train_cpu" and hp.schedule == "cosine" and hp.batch_size == 32


def test_implicit_llama_cpu_words_preset_trains_longer():
    """trainer/models/implicit.py IMPLICIT_LLAMA_WORDS_CPU: on full-length words implicit Llama
    sits on a plateau (bench/implicit.md), so its cpu word-problem runs train on a curriculum
    over positions for 6 000 steps, a curriculum that reaches every position of each group
    task's training words; implicit Mamba2 and the other families keep the family's recipe."""
    from trainer.benchmark.presets import FAMILY, make_seq_hparams
    from trainer.benchmark.kind import check_position_curriculum, seq_task
    for name in ("words_z60", "words_a4z5", "words_a5"):
        words = seq_task(name)
        hp = make_seq_hparams("cpu", words, get_encoder_spec("implicit_llama"), {}, {})
        assert (hp.steps, hp.loss_first, hp.loss_grow_every, hp.lr) == (6000, 2, 125, 6e-3)
        assert check_position_curriculum(words, hp) is None
        other = make_seq_hparams("cpu", words, get_encoder_spec("implicit_mamba2"), {}, {})
        assert other.steps == FAMILY["cpu"]["words"]["steps"] and other.loss_first == 0
    counting = seq_task("counting")
    hp = make_seq_hparams("cpu", counting, get_encoder_spec("implicit_llama"), {}, {})
    assert hp.steps == FAMILY["cpu"]["counting"]["steps"] and hp.loss_first == 0


def test_implicit_llama_injection_has_msi_bias():
    """MSI's injection is `nn.Linear(d, 3d)` with a bias, zero at the start (ours had none,
    bench/implicit.md 2026-11-26): while z is 0 the bias is the only token-independent part
    of the queries and keys, so only with it can the first iterate's attention score depend
    on the position alone (through RoPE) whatever the tokens."""
    from rasp.errors import RaspError
    model = build("implicit_llama").eval()
    lin = model.core.injection
    assert lin.bias is not None and lin.bias.shape == (3 * 16,) and not lin.bias.any()
    assert build("implicit_llama", injection_bias=False).core.injection.bias is None
    with pytest.raises(RaspError, match="injection_bias"):
        build("implicit_llama", injection_bias="yes")
    # zero the weights that read the tokens: the queries and keys at z = 0 are then the bias
    # alone, and attention at the last position prefers one offset over the others
    with torch.no_grad():
        lin.weight_g.zero_()
        lin.bias.copy_(torch.randn(3 * 16, generator=torch.Generator().manual_seed(0)) * 3)
    reset_weight_norm(model.core)
    x, _ = prefix_sums(2, 6, 5, 0)
    v = model.core.inject(x)
    attn = model.core.blocks[0].attn
    q, k, _ = attn._qkv(torch.zeros(2, 6, 16), v)
    q, k = attn.rope(q, k, torch.arange(6, dtype=torch.float32).expand(2, 6))
    scores = q[:, :, -1:] @ k.transpose(-1, -2)                  # (batch, heads, 1, 6)
    assert torch.allclose(scores[0], scores[1])                  # the same for any tokens
    assert scores[0].std(dim=-1).min() > 1e-3                    # and not the same at every offset
