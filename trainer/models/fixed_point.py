"""Fixed-point machinery of the implicit models (docs/models.md §7.2-7.3), on torchdeq.

torchdeq (locuslab, v0.1.0, pure PyTorch) is the library the official
implicit-model code uses; we take from it what MSI takes:

* the forward solver `fixed_point_iter`: undamped `z <- f(z)` from z = 0
  without gradient, per-sample residuals on the flattened tensor
  (`abs = |f(z) - z|`, `rel = abs / (|f(z)| + 1e-9)`), the lowest-residual
  iterate kept per sample, stop when the *largest* residual in the batch is
  below the tolerance;
* the backward: phantom gradient (k damped steps `z <- τ f(z) + (1-τ) z` from
  the detached solution; backprop through those only) or the implicit-function-
  theorem backward (one differentiable `f(z*)` whose gradient solves
  `g = J_fᵀ g + ∂ℓ/∂z` with a fixed-point solver);
* weight normalisation of every Linear / Conv1d (`W = g·V/|V|_row`,
  re-materialised by `reset_weight_norm` at every forward).

Our own pieces: the variational dropout (torchdeq's draws its mask on the CPU
whatever the device), the unrolled warm-up, and per-sample iteration counts.
"""
from __future__ import annotations

import torch
from torch import nn
from torchdeq.grad import backward_factory
from torchdeq.norm import apply_norm, reset_norm
from torchdeq.solver.fp_iter import fixed_point_iter


class VariationalDropout(nn.Module):
    """Dropout with one mask per sample and channel, shared by all positions and
    reused by every application of f until `reset()` (MSI `VariationalDropout1d`,
    `reset_dropout`): the map f is then one fixed function within a forward,
    which a fixed point needs."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.mask = None

    def reset(self):
        self.mask = None

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        if self.mask is None or self.mask.shape[0] != x.shape[0]:
            keep = torch.full((x.shape[0], x.shape[-1]), 1.0 - self.p, device=x.device, dtype=x.dtype)
            self.mask = torch.bernoulli(keep) / (1.0 - self.p)
        return x * self.mask.view(x.shape[0], *([1] * (x.dim() - 2)), x.shape[-1])


def reset_variational_dropout(model: nn.Module):
    for module in model.modules():
        if isinstance(module, VariationalDropout):
            module.reset()


def add_weight_norm(model: nn.Module):
    """Weight normalisation on every nn.Linear / nn.Conv1d of `model` (torchdeq)."""
    apply_norm(model, "weight_norm")


def reset_weight_norm(model: nn.Module):
    """Recompute the normalised weights from (g, V); call once per forward, with
    gradient enabled in training, so every application of f shares them."""
    reset_norm(model)


def relative_residual(z: torch.Tensor, fz: torch.Tensor) -> torch.Tensor:
    """Per-sample |f(z) - z| / (|f(z)| + 1e-9) over all non-batch dimensions."""
    diff = (fz - z).flatten(1).norm(dim=1)
    return diff / (fz.flatten(1).norm(dim=1) + 1e-9)


def solve(f, z0: torch.Tensor, max_iter: int, tol: float):
    """Undamped fixed-point iteration without gradient (torchdeq `fixed_point_iter`,
    relative stop).  Returns (z*, iterations (B,), residual (B,)): z* is each
    sample's lowest-residual iterate; `iterations` is the first step at which
    that sample's residual fell below `tol`, or the step of its best iterate
    when it never did; `residual` is the relative residual of z*."""
    with torch.no_grad():
        z, _, info = fixed_point_iter(f, z0, max_iter=max_iter, tol=tol, stop_mode="rel")
    below = info["rel_trace"][:, 1:] < tol      # (B, steps); torchdeq's column 0 is a 1e8 placeholder
    first = torch.where(below.any(dim=1), below.float().argmax(dim=1).float() + 1, info["nstep"].float())
    return z, first, info["rel_lowest"]


def phantom_gradient(f, z_star: torch.Tensor, steps: int, tau: float) -> torch.Tensor:
    """`steps` damped applications from the detached z* with gradient (torchdeq's
    phantom gradient, P2 Eq. 5).  Always >= 1 differentiable application of f,
    so parameters get gradients even when z* is already a fixed point
    (torchdeq issue #8)."""
    def damped(z, tau=1.0):
        return tau * f(z) + (1.0 - tau) * z
    grad = backward_factory(grad_type=int(steps), tau=tau)
    return grad(None, damped, z_star.detach())[-1]


def ift_gradient(f, z_star: torch.Tensor, b_max_iter: int, b_tol: float) -> torch.Tensor:
    """One differentiable f(z*) whose backward solves the implicit-function-theorem
    linear system by fixed-point iteration (torchdeq `ift=True`, P2 Eq. 4)."""
    grad = backward_factory(grad_type="ift", b_solver=fixed_point_iter,
                            b_solver_kwargs=dict(max_iter=b_max_iter, tol=b_tol, stop_mode="rel"))
    return grad(None, f, z_star.detach())[-1]


def unroll(f, z0: torch.Tensor, steps: int, tau: float):
    """Weight-tied warm-up (MSI "pretrain"): z1 = f(z0), then steps-1 damped steps,
    with full back-propagation.  Returns (z, relative residual of the last step)."""
    z = f(z0)
    prev = z
    for _ in range(steps - 1):
        prev = z
        z = tau * f(z) + (1.0 - tau) * z
    with torch.no_grad():
        res = relative_residual(prev, z) if steps > 1 else relative_residual(z0, z)
    return z, res


class InjectedCore(nn.Module):
    """The f of an implicit model over a stack of blocks (docs/models.md §7.1):
    embedding -> dropout -> RMSNorm_inj -> ONE injection Linear shared by all
    layers; f(z) = RMSNorm_f(Block_N(... Block_1(z; v) ...; v)).  Subclasses
    set `embedding`, `emb_dropout`, `blocks` (each with `forward(z, v)` and
    `step(z, v, position, cache)`), `norm_inj`, `injection`, `norm_f` and
    define `empty_caches(batch, device)`."""

    def inject(self, tokens):
        return self.injection(self.norm_inj(self.emb_dropout(self.embedding(tokens))))

    def f(self, z, v):
        for block in self.blocks:
            z = block(z, v)
        return self.norm_f(z)

    def step(self, z, v, position: int, caches):
        """One application of f on token `position` over the caches of the earlier
        tokens; returns (f_t(z), caches with this token written) and leaves the
        given caches unchanged."""
        new = []
        for block, cache in zip(self.blocks, caches):
            z, cache = block.step(z, v, position, cache)
            new.append(cache)
        return self.norm_f(z), new
