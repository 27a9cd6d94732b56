"""The linear-recurrence baselines (trainer/models/linear_recurrence.py):
S4D's convolution against its own recurrence and P3 App. I's analytic
counter, Mamba's scans against a naive loop, causality, gradients, and a
few steps of learning for every model."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import trainer.models  # noqa: F401  (registers the encoders)
from trainer.models import linear_recurrence as lr
from trainer.models.base import EncoderConfig, get_encoder_spec

MODELS = ["s4d", "mamba", "nru", "ids4"]

torch.set_num_threads(1)


def small_encoder(name, vocab=8, d_model=16, n_layer=2, **extra):
    cfg = EncoderConfig(vocab_size=vocab, d_model=d_model, n_layer=n_layer, extra=extra)
    return get_encoder_spec(name).build(cfg)


# --------------------------------------------------------------------------- S4D

@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), H=st.integers(1, 6), N=st.sampled_from([2, 8, 64]),
       L=st.integers(1, 70))
def test_s4d_convolution_equals_recurrence(seed, H, N, L):
    torch.manual_seed(seed)
    layer = lr.S4DLayer(H, N)
    u = torch.randn(3, H, L)
    with torch.no_grad():
        conv, rec = layer.ssm(u, "conv"), layer.ssm(u, "recurrent")
    assert torch.allclose(conv, rec, atol=1e-5, rtol=1e-5)


def test_s4d_discretisation_is_zoh():
    """exp(ΔA) and (exp(ΔA) − 1)/A·C from the closed form, against a matrix
    exponential of the 2×2 real block of one complex mode."""
    torch.manual_seed(0)
    layer = lr.S4DLayer(1, 2)
    dtA, dC = layer.discretise()
    dt = math.exp(layer.log_dt.item())
    a, b = -math.exp(layer.log_A_real.item()), layer.A_imag.item()
    block = torch.tensor([[a, -b], [b, a]], dtype=torch.float64) * dt
    expm = torch.linalg.matrix_exp(block)
    assert abs(expm[0, 0].item() - torch.exp(dtA).real.item()) < 1e-6
    assert abs(expm[1, 0].item() - torch.exp(dtA).imag.item()) < 1e-6


def counting_signal(rng, length, isi, iti):
    """P3 §4.3 / docs/benchmarks.md §7: off runs of random length, on runs of
    fixed length `isi`, starting with an off run, truncated to `length`."""
    x = []
    while len(x) < length:
        x += [0] * int(rng.integers(*iti)) + [1] * isi
    return np.array(x[:length], dtype=np.float32)


@pytest.mark.parametrize("isi,mode", [(10, "conv"), (10, "recurrent"), (7, "conv")])
def test_s4d_app_i_analytic_counter(isi, mode):
    """P3 App. I: one complex state with A = e^{i2π/n} and B = A − 1 (state
    g = h − 1 of the paper's h_0 = 1 system) returns to 0 exactly after n
    `on` tokens; reading 1[|g| > 0] predicts every next token but the ISI
    onsets.  Plugged into our ZOH parameterisation: Δ = 1, Re A ≈ 0,
    Im A = 2π/n, C chosen so that the two channels output Re g and Im g."""
    layer = lr.S4DLayer(2, 2)
    omega = 2 * math.pi / isi
    A = complex(-math.exp(-50.0), omega)
    with torch.no_grad():
        layer.log_dt.zero_()
        layer.log_A_real.fill_(-50.0)
        layer.A_imag.fill_(omega)
        layer.D.zero_()
        # y = 2 Re(dC h'), h' the B = 1 state; g = (e^{ΔA} − 1) h' needs dC = (e^{ΔA} − 1)/2 (Re g)
        # and −i (e^{ΔA} − 1)/2 (Im g); dC = C (e^{ΔA} − 1)/A gives C = A/2 and −iA/2
        C = torch.tensor([[A / 2], [-1j * A / 2]], dtype=torch.cfloat)
        layer.C.copy_(torch.view_as_real(C))
    rng = np.random.default_rng(isi)
    x = counting_signal(rng, 300, isi, (20, 40))
    u = torch.from_numpy(x).expand(1, 2, -1).contiguous()
    with torch.no_grad():
        g = layer.ssm(u, mode)[0]
    predicted = (g.pow(2).sum(0).sqrt() > math.sin(math.pi / isi)).numpy().astype(np.float32)
    target = x[1:]
    onset = (x[1:] == 1) & (x[:-1] == 0)
    scored = ~onset
    assert np.array_equal(predicted[:-1][scored], target[scored])
    # and the counter really counts: predicting "still on" at every on token fails
    assert not np.array_equal(x[:-1][scored], target[scored])


# --------------------------------------------------------------------------- Mamba

def naive_selective_scan(u, delta, A, B, C, D):
    """Per sample, per channel, per step; the textbook Mamba recurrence."""
    Bsz, L, Dm = u.shape
    y = torch.zeros_like(u)
    for b in range(Bsz):
        for d in range(Dm):
            h = torch.zeros(A.shape[1], dtype=u.dtype)
            for t in range(L):
                h = torch.exp(delta[b, t, d] * A[d]) * h + delta[b, t, d] * B[b, t] * u[b, t, d]
                y[b, t, d] = (C[b, t] * h).sum() + D[d] * u[b, t, d]
    return y


def random_scan_inputs(seed, Bsz=2, L=13, Dm=3, N=4):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(Bsz, L, Dm, generator=g, dtype=torch.float64)
    delta = torch.nn.functional.softplus(torch.randn(Bsz, L, Dm, generator=g, dtype=torch.float64))
    A = -torch.rand(Dm, N, generator=g, dtype=torch.float64) * 4
    B = torch.randn(Bsz, L, N, generator=g, dtype=torch.float64)
    C = torch.randn(Bsz, L, N, generator=g, dtype=torch.float64)
    D = torch.randn(Dm, generator=g, dtype=torch.float64)
    return u, delta, A, B, C, D


@pytest.mark.parametrize("seed", [0, 1])
def test_mamba_scan_matches_naive_loop(seed):
    args = random_scan_inputs(seed)
    expected = naive_selective_scan(*args)
    assert torch.allclose(lr.selective_scan(*args), expected, atol=1e-10)
    for chunk in (1, 4, 5, 13, 32):
        assert torch.allclose(lr.selective_scan_chunked(*args, chunk=chunk), expected, atol=1e-10)


def test_mamba_chunked_path_agrees_in_the_mixer():
    torch.manual_seed(0)
    mixer = lr.MambaMixer(8, d_state=4, chunk=6)
    x = torch.randn(2, 20, 8)
    with torch.no_grad():
        assert torch.allclose(mixer(x, "sequential"), mixer(x, "chunked"), atol=1e-5)


def test_mamba_init_follows_the_reference():
    mixer = lr.MambaMixer(32, d_state=16)
    assert mixer.dt_rank == 2
    assert torch.allclose(-torch.exp(mixer.A_log[0]), -torch.arange(1, 17).float())
    dt = torch.nn.functional.softplus(mixer.dt_proj.bias)
    assert dt.min() >= 1e-4 - 1e-7 and dt.max() <= 0.1 + 1e-6


# --------------------------------------------------------------------------- all models

@pytest.mark.parametrize("name", MODELS)
def test_shapes_and_causality(name):
    torch.manual_seed(1)
    enc = small_encoder(name).eval()
    tokens = torch.randint(1, 8, (3, 12))
    out = enc(tokens, tokens > 0)
    assert out.hidden.shape == (3, 12, 16) and out.mask.shape == (3, 12)
    assert torch.isfinite(out.hidden).all()
    for t in (0, 5, 10):
        changed = tokens.clone()
        changed[:, t + 1:] = torch.randint(1, 8, changed[:, t + 1:].shape)
        changed[:, t + 1:] = (changed[:, t + 1:] % 7) + 1       # make sure it differs somewhere
        other = enc(changed, changed > 0).hidden
        assert torch.allclose(out.hidden[:, :t + 1], other[:, :t + 1], atol=1e-5)
        assert not torch.allclose(out.hidden[:, t + 1:], other[:, t + 1:])


@pytest.mark.parametrize("name", MODELS)
def test_right_padding_does_not_touch_valid_positions(name):
    torch.manual_seed(2)
    enc = small_encoder(name).eval()
    tokens = torch.randint(1, 8, (2, 9))
    padded = torch.cat([tokens, torch.zeros(2, 4, dtype=torch.long)], dim=1)
    a = enc(tokens, tokens > 0).hidden
    b = enc(padded, padded > 0).hidden[:, :9]
    assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_gradients_reach_every_parameter(name):
    torch.manual_seed(3)
    enc = small_encoder(name)
    tokens = torch.randint(1, 8, (4, 10))
    hidden = enc(tokens, tokens > 0).hidden
    (hidden * torch.randn_like(hidden)).sum().backward()
    for pname, p in enc.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("name", MODELS)
def test_each_model_learns_a_copy_like_task(name):
    """Target at t = token at t − 2 (a short delay line); a few dozen Adam
    steps must cut the cross-entropy well below its start."""
    torch.manual_seed(4)
    vocab = 6
    enc = small_encoder(name, vocab=vocab + 1, d_model=24, n_layer=1)
    head = torch.nn.Linear(24, vocab)
    model = torch.nn.ModuleDict({"enc": enc, "head": head})
    opt = torch.optim.AdamW(lr.param_groups(model, 1e-2, 0.0))
    tokens = torch.randint(1, vocab + 1, (32, 12))
    target = torch.full_like(tokens, -1)
    target[:, 2:] = tokens[:, :-2] - 1
    losses = []
    for _ in range(60):
        logits = head(enc(tokens, tokens > 0).hidden)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), target.reshape(-1),
                                                 ignore_index=-1)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.6 * losses[0], losses[::10]


def test_param_groups_honour_the_ssm_settings():
    s4d = small_encoder("s4d")
    groups = s4d.optim_groups(lr=1e-2, weight_decay=0.1)
    assert {g["lr_scale"] for g in groups} == {1.0, 0.1}
    seen = [id(p) for g in groups for p in g["params"]]
    assert sorted(seen) == sorted(id(p) for p in s4d.parameters())
    ssm = {id(p) for layer in s4d.stack.mixers for p in (layer.log_dt, layer.log_A_real, layer.A_imag)}
    for g in groups:
        if {id(p) for p in g["params"]} & ssm:
            assert {id(p) for p in g["params"]} == ssm
            assert g["lr"] == 1e-3 and g["weight_decay"] == 0.0
        else:
            assert g["lr"] == 1e-2 and g["weight_decay"] == 0.1
    # a smaller base lr wins over the SSM cap
    assert all(g["lr"] == 1e-4 for g in s4d.optim_groups(lr=1e-4, weight_decay=0.1))
    mamba = small_encoder("mamba")
    no_wd = {id(p) for g in mamba.optim_groups(1e-3, 0.1) if g["weight_decay"] == 0.0
             for p in g["params"]}
    assert no_wd == {id(p) for m in mamba.stack.mixers for p in (m.A_log, m.D)}


@pytest.mark.parametrize("name", MODELS)
def test_presets_build(name):
    """Presets are flat: EncoderConfig fields and extra keys (the trainer's
    merge puts any non-field key into `extra`)."""
    spec = get_encoder_spec(name)
    assert spec.family == "linear_recurrence"
    for preset in ("paper", "cpu"):
        assert set(spec.presets[preset]) == {"words", "memory", "counting"}
    for over in spec.presets["cpu"].values():
        fields = {k: v for k, v in over.items() if k in ("d_model", "n_layer")}
        extra = {k: v for k, v in over.items() if k not in fields and k != "lr"}
        assert set(extra) <= set(spec.defaults), extra
        cfg = EncoderConfig(vocab_size=10, extra=extra, **fields)
        enc = spec.build(cfg)
        tokens = torch.randint(1, 10, (2, 6))
        assert enc(tokens, tokens > 0).hidden.shape == (2, 6, cfg.d_model)


def test_counting_sizes_match_p3_table_8():
    """One S4D layer of width 8 / 64 with N = 64, its LayerNorm, a scalar
    input Linear(1, H) and read-out Linear(H, 1): P3's 1 225 and 16 961."""
    for H, expected in ((8, 1225), (64, 16961)):
        layer_and_norm = sum(p.numel() for p in lr.S4DLayer(H, 64).parameters()) + 2 * H
        assert layer_and_norm + 2 * H + H + 1 == expected
    # Mamba, d_state 64: mixer + LayerNorm + Linear(1, H) + Linear(H, 1): 3 641 / 51 393
    for H, expected in ((8, 3641), (64, 51393)):
        mixer = sum(p.numel() for p in lr.MambaMixer(H, d_state=64).parameters())
        assert mixer + 2 * H + 2 * H + H + 1 == expected


def test_bad_options_are_reported():
    with pytest.raises(ValueError, match="norm"):
        small_encoder("s4d", norm="sideways")
    with pytest.raises(ValueError, match="act"):
        small_encoder("ids4", act="cube")
    with pytest.raises(ValueError, match="scan"):
        small_encoder("mamba", scan="magic")(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.bool))


def test_rasp_train_uses_the_ssm_groups_and_resumes(tmp_path):
    """`rasp train --model s4d` builds its optimiser from the tagged groups
    (SSM lr = 0.1 × the base lr at lr 1e-2), the checkpoint keeps them, and
    every linear-recurrence model trains end to end on a toy task."""
    import json
    from seq_toys import TOYS, register_toys
    from rasp.cli import main
    from trainer.tasks import TASKS
    register_toys()
    try:
        for name in MODELS:
            out = tmp_path / name
            args = ["train", "--task", "toy_parity", "--model", name, "--out", str(out), "--no-progress",
                    "--steps", "4", "--d-model", "8", "--lr", "1e-2", "--set", "ckpt_every=2",
                    "--set", "eval_every=0"]
            assert main(args) == 0
            assert json.loads((out / "summary.json").read_text())["finished"] is True
        state = json.loads(next((tmp_path / "s4d" / "checkpoints").glob("step_*4")).joinpath(
            "state.json").read_text())
        scales = sorted(g["lr_scale"] for g in state["optimizer"]["param_groups"])
        assert scales == pytest.approx([0.1, 1.0])
    finally:
        for t in TOYS:
            TASKS.pop(t.name, None)
