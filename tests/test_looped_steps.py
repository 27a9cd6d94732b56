"""`LoopedTransformer.forward` with a step count per sample: each sample leaves the
loop once its own steps are done (model/looped.py `final_states`), so it must give
what running every sample to the longest count and reading each at its own step
gives (`all_steps`), values and gradients, in any order of the counts."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from model import LoopedConfig, LoopedTransformer

SHAPES = {"fan": dict(), "bos_window": dict(bos=True, attn_window=2),
          "no_injection": dict(input_injection=False, n_prelude=1, n_postlude=1)}


def _picked(model, tokens, steps):
    """Every sample run to the longest count, each read at its own step (0: the initial state)."""
    h0 = model.decode(model.initial_state(model.encode(tokens)))
    most = int(steps.max())
    every = torch.cat([h0[None], model.all_steps(tokens, most)]) if most else h0[None]
    return every[steps, torch.arange(len(steps))]


@pytest.mark.parametrize("shape", SHAPES)
@settings(max_examples=6, deadline=None)
@given(steps=st.lists(st.integers(0, 6), min_size=1, max_size=9), n=st.integers(1, 7), seed=st.integers(0, 999))
def test_each_sample_at_its_own_step_as_all_steps_reads_it(shape, steps, n, seed):
    torch.manual_seed(seed)
    model = LoopedTransformer(LoopedConfig(vocab_size=5, d_model=16, n_head=4, **SHAPES[shape]))
    tokens = torch.randint(0, 5, (len(steps), n))
    steps = torch.tensor(steps)
    got, want = model(tokens, steps), _picked(model, tokens, steps)
    # the same operations on a slice of the batch: equal up to float32 rounding (a matmul over
    # fewer rows may block its sums otherwise, and the gradients sum the rows in another order)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    weights = torch.randn_like(want)
    grads = [torch.autograd.grad((out * weights).sum(), list(model.parameters()), allow_unused=True)
             for out in (got, want)]
    for g, w in zip(*grads):
        if w is None:
            assert g is None or not g.any()
        else:
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_one_count_for_every_sample_is_that_step():
    torch.manual_seed(0)
    model = LoopedTransformer(LoopedConfig(vocab_size=5, d_model=16, n_head=4))
    tokens = torch.randint(0, 5, (3, 4))
    torch.testing.assert_close(model(tokens, 3), model.all_steps(tokens, 3)[-1], rtol=1e-5, atol=1e-5)
    assert model(tokens[:0], 2).shape == (0, 4, 5)
