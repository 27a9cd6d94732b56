"""Mamba2 (plain-PyTorch SSD) and the Llama block: parallel paths against
independent per-token forms, and causality."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.models.base import EncoderConfig, get_encoder_spec
from trainer.models.mamba2 import Mamba2Mixer, ssd_chunked

torch.set_num_threads(1)


def naive_scan(x, dt, A, B, C):
    """The recurrence of docs/models.md §6.1 written out per token and head."""
    b, l, h, p = x.shape
    S = torch.zeros(b, h, p, B.shape[-1], dtype=x.dtype)
    ys = []
    for t in range(l):
        for hh in range(h):
            S[:, hh] = torch.exp(dt[:, t, hh] * A[hh])[:, None, None] * S[:, hh] \
                + dt[:, t, hh, None, None] * x[:, t, hh, :, None] * B[:, t, None, :]
        ys.append(torch.einsum("bhpn,bn->bhp", S, C[:, t]))
    return torch.stack(ys, 1), S


@settings(max_examples=15, deadline=None)
@given(l=st.integers(1, 13), chunk=st.integers(1, 6), h=st.integers(1, 3), seed=st.integers(0, 10**6))
def test_ssd_chunked_equals_naive_scan(l, chunk, h, seed):
    g = torch.Generator().manual_seed(seed)
    b, p, n = 2, 3, 4
    x = torch.randn(b, l, h, p, generator=g, dtype=torch.float64)
    dt = torch.rand(b, l, h, generator=g, dtype=torch.float64)
    A = -torch.rand(h, generator=g, dtype=torch.float64) * 4
    B = torch.randn(b, l, n, generator=g, dtype=torch.float64)
    C = torch.randn(b, l, n, generator=g, dtype=torch.float64)
    y, final = ssd_chunked(x, dt, A, B, C, chunk)
    y_ref, final_ref = naive_scan(x, dt, A, B, C)
    assert torch.allclose(y, y_ref, atol=1e-10)
    assert torch.allclose(final, final_ref, atol=1e-10)
    # a split sequence carries the state across the cut
    if l > 1:
        cut = l // 2
        y1, s1 = ssd_chunked(x[:, :cut], dt[:, :cut], A, B[:, :cut], C[:, :cut], chunk)
        y2, s2 = ssd_chunked(x[:, cut:], dt[:, cut:], A, B[:, cut:], C[:, cut:], chunk, initial_state=s1)
        assert torch.allclose(torch.cat([y1, y2], 1), y_ref, atol=1e-10)
        assert torch.allclose(s2, final_ref, atol=1e-10)


# (seed, d_model, d_state, headdim, chunk_size, length): several seeds and sizes,
# chunk smaller than, equal to and larger than the sequence.
MIXER_CASES = [(0, 16, 8, 8, 4, 11), (1, 16, 8, 8, 256, 9), (2, 16, 8, 8, 3, 3),
               (3, 32, 16, 16, 5, 23), (4, 24, 4, 12, 7, 7), (5, 64, 16, 16, 8, 40)]


@pytest.mark.parametrize("seed,d_model,d_state,headdim,chunk_size,length", MIXER_CASES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_mixer_parallel_equals_recurrent_step(seed, d_model, d_state, headdim, chunk_size, length, dtype):
    """SSD ≡ the per-token step within 1e-5 (float64; float32 within 1e-5 of the
    output scale, since its rounding grows with the sizes)."""
    torch.manual_seed(seed)
    m = Mamba2Mixer(d_model, d_state=d_state, expand=2, headdim=headdim, chunk_size=chunk_size).to(dtype)
    u = torch.randn(2, length, d_model, dtype=dtype)
    v = torch.randn(2, length, m.d_in_proj, dtype=dtype)
    y = m(u, v)
    cache = m.empty_cache(2, dtype=dtype)
    steps = []
    for t in range(length):
        out, new_cache = m.step(u[:, t], v[:, t], cache)
        steps.append(out)
        cache = new_cache
    scale = 1.0 if dtype == torch.float64 else max(1.0, y.abs().max().item())
    assert (y - torch.stack(steps, 1)).abs().max() < 1e-5 * scale
    # step leaves the cache it was given untouched
    before = [c.clone() for c in cache]
    m.step(u[:, 0], v[:, 0], cache)
    assert all(torch.equal(a, b) for a, b in zip(before, cache))


def _encoder(name, d_model=16, n_layer=2, n_head=2, **extra):
    spec = get_encoder_spec(name)
    cfg = EncoderConfig(vocab_size=8, d_model=d_model, n_layer=n_layer, n_head=n_head, d_ff=2 * d_model,
                        extra={**spec.defaults, "d_state": 4, "headdim": 8, **extra})
    return spec.build(cfg).eval()


@pytest.mark.parametrize("seed", [1, 11])
@pytest.mark.parametrize("name", ["mamba2", "llama"])
def test_explicit_encoders_are_causal(name, seed):
    torch.manual_seed(seed)
    model = _encoder(name)
    a = torch.randint(1, 8, (3, 10))
    b = a.clone()
    b[:, 6:] = torch.randint(1, 8, (3, 4))
    b[:, 6] = a[:, 6] % 7 + 1                  # position 6 surely changes
    mask = torch.ones_like(a, dtype=torch.bool)
    with torch.no_grad():
        ha, hb = model(a, mask).hidden, model(b, mask).hidden
    assert torch.allclose(ha[:, :6], hb[:, :6], atol=1e-6)
    assert not torch.allclose(ha[:, 6:], hb[:, 6:], atol=1e-3)


@pytest.mark.parametrize("seed,d_model,n_head,length", [(2, 16, 2, 7), (3, 32, 4, 13), (4, 24, 3, 1)])
def test_llama_step_with_kv_cache_equals_parallel(seed, d_model, n_head, length):
    torch.manual_seed(seed)
    model = _encoder("llama", d_model=d_model, n_head=n_head).double()
    block = model.blocks[0]
    z = torch.randn(2, length, d_model, dtype=torch.float64)
    inj = torch.randn(2, length, 3 * d_model, dtype=torch.float64)
    full = block(z, inj)
    cache, outs = None, []
    for t in range(length):
        out, cache = block.step(z[:, t], inj[:, t], t, cache)
        outs.append(out)
    assert (full - torch.stack(outs, 1)).abs().max() < 1e-5
