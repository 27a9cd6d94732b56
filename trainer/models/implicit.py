"""Implicit models: one block stack iterated to a fixed point (docs/models.md §7;
the blocks: §6), registered as `implicit_mamba2` and `implicit_llama`.

    x = Dropout(Embedding(tokens));  v = Linear(RMSNorm_inj(x))   (one injection for all layers)
    f(z) = RMSNorm_f(Block_N(... Block_1(z; v) ...; v));  z* = f(z*),  z(0) = 0

A *core* (ImplicitMamba2Core in mamba2.py, ImplicitLlamaCore in llama.py)
supplies `inject(tokens) -> v`, `f(z, v)` on the whole sequence,
`step(z_t, v_t, t, caches) -> (z_t', caches')` on one token and
`empty_caches(batch, device)`.  `ImplicitEncoder` owns everything about the
fixed point:

Training (`set_progress(step, total)` picks the phase before each step):
* warm-up, `step < warmup_steps`: weight-tied unrolling with full backprop,
  z1 = f(0) then `warmup_iter - 1` damped steps (τ) (MSI "pretrain");
* bounded, `step < bounded_until * total`: the solver capped at
  `bounded_max_iter`, then `bounded_grad` phantom steps — P2's "(4+1)";
* free: the solver capped at `f_max_iter`, stop `f_tol` (relative), then
  `grad` phantom steps (τ) — or, with `ift`, the implicit-function-theorem
  backward (`b_max_iter`, `b_tol`).
  A model never given `set_progress` trains in the free phase.
Evaluation (`eval()`): the same solver capped at `test_max_iter` with stop
`test_tol` ("simultaneous"), or with `eval_mode = "sequential"` token by token
over the converged caches of earlier tokens (below).

Decisions where the sources differ (docs/models.md §7.6): stop tolerance 0.05 by default, 0.01 is `--set f_tol=0.01`;
dropout 0 by default as in the paper; "(4+1)" exists both as the
unrolled warm-up and as the bounded DEQ phase.

Stats: "iterations" (B,) — simultaneous: the solver step at which the
sample's relative residual first fell below the tolerance (else the step of
its best iterate); sequential: the mean over the sample's tokens of the
per-token iteration counts.  "residual" (B,) — relative residual at stop
(sequential: the largest over the sample's tokens).
"""
from __future__ import annotations

import torch
from torch import nn

from rasp.errors import RaspError

from trainer.models.base import EncoderOutput, EncoderSpec, register_encoder
from trainer.models.fixed_point import (add_weight_norm, ift_gradient, phantom_gradient,
                                        reset_variational_dropout, reset_weight_norm, solve, unroll)
from trainer.models.llama import IMPLICIT_LLAMA_DEFAULTS, LLAMA_CPU, LLAMA_PAPER, ImplicitLlamaCore
from trainer.models.mamba2 import MAMBA2_CPU, MAMBA2_DEFAULTS, MAMBA2_PAPER, ImplicitMamba2Core, causal_presets

# docs/models.md §7.4: MSI's state-tracking config (4005 warm-up steps with
# 4 iterations, DEQ f_max_iter 32, f_tol 0.05, phantom 4, τ 0.8, test cap 2048).
IMPLICIT_DEFAULTS = dict(
    warmup_steps=4005, warmup_iter=4,
    bounded_until=0.0, bounded_max_iter=4, bounded_grad=1,
    f_max_iter=32, f_tol=0.05, grad=4, tau=0.8,
    ift=False, b_max_iter=32, b_tol=1e-3,
    test_max_iter=2048, test_tol=None,          # None: the training tolerance
    eval_mode="simultaneous", seq_tau=0.8, weight_norm=True)
EVAL_MODES = ("simultaneous", "sequential")


def check_deq_settings(ex: dict) -> dict:
    """User-settable (`--set`) fixed-point settings: a RaspError naming the key."""
    def bad(key, what):
        raise RaspError(f"{key} = {ex[key]!r}: {what}")
    for key in ("warmup_steps",):
        if isinstance(ex[key], bool) or not isinstance(ex[key], int) or ex[key] < 0:
            bad(key, "an integer >= 0")
    for key in ("warmup_iter", "bounded_max_iter", "bounded_grad", "f_max_iter", "grad", "b_max_iter",
                "test_max_iter"):
        if isinstance(ex[key], bool) or not isinstance(ex[key], int) or ex[key] < 1:
            bad(key, "an integer >= 1")
    for key in ("f_tol", "b_tol", "bounded_until") + (("test_tol",) if ex["test_tol"] is not None else ()):
        if isinstance(ex[key], bool) or not isinstance(ex[key], (int, float)) or not ex[key] >= 0:
            bad(key, "a number >= 0")
    for key in ("tau", "seq_tau"):
        if isinstance(ex[key], bool) or not isinstance(ex[key], (int, float)) or not 0 < ex[key] <= 1:
            bad(key, "a damping factor in (0, 1]")
    if ex["eval_mode"] not in EVAL_MODES:
        bad("eval_mode", f"one of {', '.join(EVAL_MODES)}")
    return ex


class ImplicitEncoder(nn.Module):
    def __init__(self, core: nn.Module, d_model: int, extra: dict):
        super().__init__()
        self.core = core
        self.d_model = d_model
        self.extra = check_deq_settings({**IMPLICIT_DEFAULTS, **extra})
        if self.extra["weight_norm"]:
            add_weight_norm(core)
        self._step = None
        self._total = None

    # ---- curriculum ----
    def set_progress(self, step: int, total_steps: int):
        self._step, self._total = int(step), int(total_steps)

    def phase(self) -> str:
        """"warmup", "bounded" or "free" for the current training step."""
        if self._step is None:
            return "free"
        if self._step < self.extra["warmup_steps"]:
            return "warmup"
        if self._step < self.extra["bounded_until"] * self._total:
            return "bounded"
        return "free"

    # ---- forward ----
    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        ex = self.extra
        if ex["weight_norm"]:
            reset_weight_norm(self.core)
        reset_variational_dropout(self.core)
        v = self.core.inject(tokens)
        keep = mask[..., None].to(v.dtype)

        def f(z):
            # padded positions held at 0: they never enter a residual (and, the
            # model being causal with right padding, never reach a real token)
            return self.core.f(z, v) * keep

        z0 = torch.zeros(*tokens.shape, self.d_model, device=v.device, dtype=v.dtype)
        if not self.training:
            if ex["eval_mode"] == "sequential":
                return self._sequential(v, mask)
            tol = ex["test_tol"] if ex["test_tol"] is not None else ex["f_tol"]
            z, iters, res = solve(f, z0, int(ex["test_max_iter"]), float(tol))
        elif self.phase() == "warmup":
            z, res = unroll(f, z0, int(ex["warmup_iter"]), float(ex["tau"]))
            iters = torch.full_like(res, float(ex["warmup_iter"]))
        else:
            bounded = self.phase() == "bounded"
            cap = ex["bounded_max_iter"] if bounded else ex["f_max_iter"]
            z_star, iters, res = solve(f, z0, int(cap), float(ex["f_tol"]))
            if ex["ift"] and not bounded:
                z = ift_gradient(f, z_star, int(ex["b_max_iter"]), float(ex["b_tol"]))
            else:
                steps = ex["bounded_grad"] if bounded else ex["grad"]
                z = phantom_gradient(f, z_star, int(steps), float(ex["tau"]))
            if torch.is_grad_enabled() and not z.requires_grad:
                raise RuntimeError("implicit model: the fixed point carries no gradient (torchdeq #8)")
        return EncoderOutput(hidden=z, mask=mask, stats={"iterations": iters, "residual": res})

    def _sequential(self, v: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        """Token by token (MSI `_sequential_step`): for token t, iterate
        z <- (1-τ) z + τ f_t(z) from 0 over the caches of tokens < t without
        writing them, until |f_t(z) - z| / (1e-6 + |z|) < test_tol (each sample
        stops on its own) or test_max_iter; then one call with the converged z
        writes the caches."""
        ex = self.extra
        tol = float(ex["test_tol"] if ex["test_tol"] is not None else ex["f_tol"])
        cap, tau = int(ex["test_max_iter"]), float(ex["seq_tau"])
        B, L = mask.shape
        caches = self.core.empty_caches(B, v.device)
        outs = []
        iters = torch.zeros(B, L, device=v.device)
        res = torch.zeros(B, L, device=v.device)
        for t in range(L):
            z = torch.zeros(B, self.d_model, device=v.device, dtype=v.dtype)
            active = mask[:, t].clone()
            last = torch.full((B,), float("inf"), device=v.device)
            for _ in range(cap):
                if not active.any():
                    break
                fz, _ = self.core.step(z, v[:, t], t, caches)
                rel = (fz - z).norm(dim=-1) / (1e-6 + z.norm(dim=-1))
                iters[:, t] += active.float()
                last = torch.where(active, rel, last)
                done = active & (rel < tol)
                active = active & ~done
                z = torch.where(active[:, None], (1 - tau) * z + tau * fz, z)
            _, caches = self.core.step(z, v[:, t], t, caches)
            outs.append(z)
            res[:, t] = torch.where(mask[:, t], last, torch.zeros_like(last))
        n = mask.sum(1).clamp(min=1)
        stats = {"iterations": (iters * mask).sum(1) / n, "residual": res.max(dim=1).values}
        return EncoderOutput(hidden=torch.stack(outs, dim=1) * mask[..., None], mask=mask, stats=stats)


def with_deq(preset: dict, deq: dict) -> dict:
    """A model preset plus the fixed-point settings (flat: keys that are not
    hyper-parameter fields become EncoderConfig.extra, trainer/benchmark/presets.py)."""
    return {**preset, **deq}


# docs/benchmarks.md §9: 150 warm-up steps unrolled 4x (τ 0.8), then <= 16 undamped
# iterations + 4 phantom steps; <= 64 test iterations.
DEQ_CPU = dict(warmup_steps=150, warmup_iter=4, f_max_iter=16, grad=4, tau=0.8, test_max_iter=64)
# docs/models.md §7.4, §11 (MSI state-tracking config; paper: no dropout, no weight decay).
DEQ_PAPER = dict(warmup_steps=4005, warmup_iter=4, f_max_iter=32, grad=4, tau=0.8, test_max_iter=2048)


def implicit_presets(cpu: dict, paper: dict) -> dict:
    """presets[preset][task family] for an implicit model."""
    return causal_presets(with_deq(cpu, DEQ_CPU), with_deq(paper, DEQ_PAPER))


# Implicit Llama on the word problems, cpu preset (bench/implicit.md has every run behind it).
# Trained on every position of L-8 words from the first step, this d-64 one-layer model sits for
# thousands of steps with only position 0 right: the loss of the positions it cannot yet compute
# swamps the first composition's gradient (a larger or decaying lr, P2's solver setting, the length
# mix and the injection bias did not shorten it).  So it trains on a curriculum over positions
# (loss_first / loss_grow_every: the first 2 targets, one more every 125 steps, all 8 by step 750)
# at lr 6e-3 after a 100-step warm-up, 6 000 steps: valid (L 8, 500 words) sequence accuracy
# 0.922 / 0.922 / 0.940 on seeds 0 / 1 / 2 (P3's 0.9 on each); about 25 min a run on one idle core.
IMPLICIT_LLAMA_WORDS_CPU = dict(steps=6000, eval_every=250, lr=6e-3, warmup=100, loss_first=2, loss_grow_every=125)


def implicit_llama_presets() -> dict:
    presets = implicit_presets(LLAMA_CPU, LLAMA_PAPER)
    presets["cpu"]["words"] = {**presets["cpu"]["words"], **IMPLICIT_LLAMA_WORDS_CPU}
    return presets


def build_implicit_mamba2(cfg):
    return ImplicitEncoder(ImplicitMamba2Core(cfg), cfg.d_model, cfg.extra)


def build_implicit_llama(cfg):
    return ImplicitEncoder(ImplicitLlamaCore(cfg), cfg.d_model, cfg.extra)


register_encoder(EncoderSpec(
    name="implicit_mamba2", build=build_implicit_mamba2, family="implicit",
    description="Mamba2 block stack iterated to a fixed point, phantom-gradient training (docs/models.md §7)",
    defaults={**MAMBA2_DEFAULTS, "emb_std": 0.01, **IMPLICIT_DEFAULTS},
    presets=implicit_presets(MAMBA2_CPU, MAMBA2_PAPER)))

register_encoder(EncoderSpec(
    name="implicit_llama", build=build_implicit_llama, family="implicit",
    description="Llama block stack iterated to a fixed point, injection into Q, K, V (docs/models.md §7)",
    defaults={**IMPLICIT_LLAMA_DEFAULTS, **IMPLICIT_DEFAULTS},
    presets=implicit_llama_presets()))
