"""`rasp train --recipe clock` (issue 39): the halting unit on a looped network of
its own, with a BOS position and local attention.  The answering model then
trains exactly as Fan et al.'s; `head` reads the clock."""
from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

from model import LoopedConfig, LoopedTransformer
from model.files import check_config
from rasp.cli import main
from rasp.errors import RaspFileError

TINY = ["--task", "padded_parity", "--d-model", "16", "--n-head", "2", "--eval-samples", "8",
        "--no-progress", "--threads", "1"]


def _train(capsys, *argv):
    try:
        status = main(["train", *TINY, *argv])
    except SystemExit as e:
        status = e.code
    err = capsys.readouterr().err
    assert status == 0 and "Traceback" not in err, err


def _weights(run):
    (path,) = sorted(run.glob("checkpoints/*/model.safetensors"))[-1:]
    return load_file(path)


def trunk_beside_fan(capsys, folder, steps: int, seed: int, *clock_flags) -> tuple:
    """Train Fan et al.'s recipe and a clock recipe (`clock_flags`) for the same steps from the
    same seed, check that every weight the two share is equal, bit for bit, and that the rest
    are the clock's; -> (the clock run's weights, its clock's weight names)."""
    common = ["--steps", str(steps), "--seed", str(seed)]
    _train(capsys, *common, "--recipe", "fan", "--out", str(folder / "fan"))
    _train(capsys, *common, *clock_flags, "--out", str(folder / "clock"))
    fan, clock = _weights(folder / "fan"), _weights(folder / "clock")
    extra = set(clock) - set(fan)
    assert extra and all(k.startswith("clock.") for k in extra)
    for k, v in fan.items():
        assert torch.equal(v, clock[k]), k
    return clock, extra


def test_the_answering_model_trains_exactly_as_fan_et_al_s_beside_a_clock(capsys, tmp_path):
    """Same seed, same steps: every weight the two runs share is equal, bit for bit, so the
    clock's loss, initialisation and gradient clipping never touch the answering trunk."""
    clock, _ = trunk_beside_fan(capsys, tmp_path, 12, 5, "--recipe", "clock")
    trained = [k for k in clock if k.startswith("clock.body")]
    assert any(float(clock[k].abs().sum()) for k in trained)


def _attention_by_hand(attn, x):
    """The same attention, one query at a time: scores + the bias of the offset back,
    softmax over the window (itself and the positions at most `window` back), values."""
    B, n, _ = x.shape
    H, dh = attn.n_head, attn.d_head
    q, k, v = (f(x).view(B, n, H, dh) for f in (attn.q, attn.k, attn.v))
    out = torch.zeros(B, n, H, dh, dtype=x.dtype)
    window = attn.rel_bias.shape[1] - 1
    for i in range(n):
        first = max(0, i - window)
        for h in range(H):
            s = torch.stack([(q[:, i, h] * k[:, j, h]).sum(-1) * attn.scale + attn.rel_bias[h, i - j]
                             for j in range(first, i + 1)], dim=-1)
            out[:, i, h] = (torch.softmax(s, -1)[..., None] * v[:, first:i + 1, h]).sum(1)
    return attn.o(out.reshape(B, n, H * dh))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 12), window=st.integers(1, 5), seed=st.integers(0, 2 ** 16))
def test_local_attention_equals_a_loop_over_queries(n, window, seed):
    torch.manual_seed(seed)
    cfg = LoopedConfig(vocab_size=3, d_model=8, n_head=2, attn_window=window)
    attn = LoopedTransformer(cfg).body[0].attn
    with torch.no_grad():
        attn.rel_bias.normal_(std=3.0)
        x = torch.randn(2, n, 8)
        assert torch.allclose(attn(x), _attention_by_hand(attn, x), atol=1e-5)


def test_head_on_a_clock_model_is_the_first_step_every_clock_position_says_done(capsys, tmp_path):
    """`rasp.load(RUN, stop="head")` answers with the answering model's output at the first
    step at which every position of the clock's unit is positive (the last step if none),
    found here step by step on the two networks."""
    import rasp
    run = tmp_path / "c"
    _train(capsys, "--recipe", "clock", "--steps", "30", "--out", str(run))
    model = rasp.load(run, stop="head")
    module, data = model.module, model.data
    assert module.clock is not None and module.cfg.halt_clock > 0
    texts = ["1 0 1 _ _ > # #", "1 > # #", "0 0 1 1 0 1 _ > # #", "_ _ > # #"]
    for text, answer in zip(texts, model(texts)):
        x = model.program.parse_input(text, 1, "input")
        _, (T,) = model.labeler([x])
        batch = data.make_batch([x], [data.task.size_of(x, data.sym)])
        with torch.no_grad():
            e, c = module.encode(batch.tokens), module.clock.encode(batch.tokens)
            h, g = module.initial_state(e), module.clock.initial_state(c)
            for _ in range(T + data.task.t_max_extra):
                h, g = module.step(h, e), module.clock.step(g, c)
                if bool((module.clock.decode(g)[..., 0] > 0).all()):
                    break
            ids = module.decode(h).argmax(-1)[0][batch.mask[0]]
        assert [model._output_text(int(v)) for v in ids] == answer, text


def test_a_model_file_names_a_clock_only_with_its_unit():
    cfg = json.loads(LoopedConfig(vocab_size=3, d_model=8, n_head=2).to_json())
    assert check_config({**cfg, "halt_unit": True, "halt_marker": True, "halt_clock": 8}, "m.json").halt_clock == 8
    with pytest.raises(RaspFileError, match="halt_clock: expected 0 unless halt_unit"):
        check_config({**cfg, "halt_clock": 8}, "m.json")
    with pytest.raises(RaspFileError, match="attn_window: expected an integer in 0..64"):
        check_config({**cfg, "attn_window": 65}, "m.json")
