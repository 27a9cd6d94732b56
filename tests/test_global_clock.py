"""`rasp train --clock-reach global` (issue 54): a narrow halting clock with one head
that sees every earlier position, saying done at its last position, so it can time a
loop whose count is a count over the input.  The answering model trains exactly as
without it; old runs and model files keep the window clock."""
from __future__ import annotations

import json

import pytest
import torch

from model import LoopedConfig, LoopedTransformer
from model.files import check_config
from rasp.errors import RaspFileError
from trainer.settings.hparams import HParams
from test_clock import _train, trunk_beside_fan

GLOBAL = dict(vocab_size=3, d_model=8, n_head=2, halt_unit=True, halt_marker=True, halt_clock=2,
              clock_d_model=8, clock_n_head=2, clock_global_heads=1)


def test_the_global_clock_is_one_narrow_block_with_two_rows_and_reads_its_last_position():
    torch.manual_seed(0)
    model = LoopedTransformer(LoopedConfig(**{**GLOBAL, "d_model": 16, "n_body": 2}))
    clock = model.clock
    assert clock is not None
    assert (clock.cfg.d_model, clock.cfg.n_body, clock.cfg.out_vocab_size) == (8, 1, 2)
    assert clock.cfg.bos and clock.cfg.attn_window == 2 and clock.cfg.global_heads == 1
    tokens = torch.randint(0, 3, (4, 7))
    assert model.done_every(tokens, 5).shape == (5, 4, 1)
    every = model.clock_targets(tokens, 5)
    assert every.shape == (5, 4, 7, 2)
    assert torch.equal(model.done_every(tokens, 5)[..., 0], model.clock_unit(every))


def last_output_reads(model: LoopedTransformer, tokens: list, at: int, token: int) -> bool:
    """Whether one step's output at the last position changes when the token at `at` does."""
    a = torch.tensor([tokens])
    b = a.clone()
    b[0, at] = token
    with torch.no_grad():
        return not torch.equal(model.all_steps(a, 1)[0, 0, -1], model.all_steps(b, 1)[0, 0, -1])


@pytest.mark.parametrize("global_heads", [0, 1])
def test_only_a_global_head_reads_past_the_window(global_heads):
    """One clock step: the last position's output depends on a token five positions back
    exactly when a head sees past the two-position window."""
    torch.manual_seed(1)
    model = LoopedTransformer(LoopedConfig(vocab_size=3, d_model=8, n_head=2, bos=True, attn_window=2,
                                           global_heads=global_heads))
    assert last_output_reads(model, [0, 1, 2, 1, 0, 1, 2], at=1, token=0) == (global_heads == 1)
    bias = model.body[0].attn.relative_bias(6, "cpu", torch.float32)
    assert bool(torch.isinf(bias[1, 5, 0])) and bool(torch.isinf(bias[:, 0, 1]).all())
    assert bool(torch.isfinite(bias[0, 5, 0])) == (global_heads == 1)


def test_the_answering_model_trains_bit_for_bit_as_beside_the_window_clock(capsys, tmp_path):
    """Same seed, same steps, Fan et al.'s recipe against the clock recipe with the global
    clock: every weight they share is equal."""
    clock, extra = trunk_beside_fan(capsys, tmp_path, 12, 5, "--clock-reach", "global")
    assert any(float(clock[k].abs().sum()) for k in extra if k.startswith("clock.body"))
    assert clock["clock.embed.weight"].shape[1] == 16        # at most the answering model's width (32 beside 64)
    run = json.loads((tmp_path / "clock" / "run.json").read_text())
    assert run["hparams"]["clock_reach"] == "global"


def test_a_global_clock_run_loads_and_stops_by_its_clock(capsys, tmp_path):
    import rasp
    _train(capsys, "--steps", "10", "--clock-reach", "global", "--out", str(tmp_path / "g"))
    model = rasp.load(tmp_path / "g")
    assert model.module.cfg.clock_global_heads == 1
    texts = ["1 0 1 _ _ > # #", "1 > # #"]
    assert len(model(texts)) == 2
    assert model(texts) == rasp.load(tmp_path / "g")(texts)


def test_runs_and_files_from_before_keep_the_window_clock():
    assert HParams.from_dict({"halt": 1.0, "halt_target": "clock"}).clock_reach == "window"
    cfg = json.loads(LoopedConfig(vocab_size=3, d_model=8, n_head=2).to_json())
    for key in ("clock_d_model", "clock_n_head", "clock_global_heads", "global_heads"):
        cfg.pop(key)
    old = check_config({**cfg, "halt_unit": True, "halt_marker": True, "halt_clock": 2}, "m.json")
    assert old.clock_d_model == 0 and LoopedTransformer(old).clock.cfg.d_model == 8
    with pytest.raises(RaspFileError, match="clock_d_model: expected 0 unless halt_clock"):
        check_config({**cfg, "clock_d_model": 8}, "m.json")
    with pytest.raises(RaspFileError, match="clock_global_heads: expected at most clock_n_head"):
        check_config({**cfg, "halt_unit": True, "halt_marker": True, "halt_clock": 2, "clock_d_model": 8,
                      "clock_n_head": 1, "clock_global_heads": 2}, "m.json")


def test_a_global_reach_without_a_clock_is_refused(capsys, tmp_path):
    from rasp.cli import main
    from test_clock import TINY
    try:
        status = main(["train", *TINY, "--recipe", "fan", "--clock-reach", "global", "--steps", "1",
                       "--out", str(tmp_path / "r")])
    except SystemExit as e:
        status = e.code
    err = capsys.readouterr().err
    assert status == 2 and "error: --clock-reach global" in err and "--recipe clock" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_a_run_recorded_before_the_clock_reach_is_the_same_run_as_one_at_window():
    from trainer.run.checkpoint import run_fingerprint
    old = {"task": "parity", "model": "looped", "hparams": {"seed": 1, "halt": 1.0, "halt_target": "clock"}}
    new = {**old, "hparams": {**old["hparams"], "clock_reach": "window"}}
    assert run_fingerprint(old) == run_fingerprint(new)
    assert run_fingerprint(old) != run_fingerprint({**new, "hparams": {**new["hparams"], "clock_reach": "global"}})
