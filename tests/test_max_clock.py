"""The max clock (issue 54): a halting clock with one head that reads the running
maximum of its values over every earlier position, so "some earlier 1 is not done
yet" reads alike at every length, and the clock recipe's `--clock-reach auto`,
which picks it, taught on every step, where the loop counts elsewhere than the
query's first positions (a count of ones, an `until stable` loop) and keeps the
window clock on every --clock-every-th step where it counts them."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from model import LoopedConfig, LoopedTransformer
from model.files import check_config
from model.looped import running_max
from rasp.errors import RaspFileError
from trainer.settings.hparams import HParams, clock_plan
from test_global_clock import last_output_reads


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 3), st.integers(0, 2 ** 16))
def test_running_max_is_the_largest_value_before_each_position(n, d, seed):
    """Against a loop over the positions; the gradient reaches the position each maximum came from."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(2, 3, n, d, generator=g, requires_grad=True)
    y = running_max(v)
    want = torch.stack([v[:, :, 0]] + [v[:, :, :i].amax(2) for i in range(1, n)], 2)
    assert torch.equal(y, want)
    y.sum().backward()
    assert v.grad is not None and float(v.grad.sum()) == 2 * 3 * n * d


@pytest.mark.parametrize("max_heads", [0, 1])
def test_only_a_max_head_reads_past_the_window(max_heads):
    """One step: the last position's output depends on a token five positions back
    exactly when a head reads the running maximum."""
    torch.manual_seed(1)
    model = LoopedTransformer(LoopedConfig(vocab_size=3, d_model=8, n_head=2, bos=True, attn_window=2,
                                           max_heads=max_heads))
    assert last_output_reads(model, [2, 0, 0, 0, 0, 0, 0], at=0, token=1) == (max_heads == 1)


def test_the_max_clock_is_one_narrow_block_whose_first_head_is_a_max_head():
    torch.manual_seed(0)
    model = LoopedTransformer(LoopedConfig(vocab_size=3, d_model=16, n_head=2, halt_unit=True, halt_marker=True,
                                           halt_clock=2, clock_d_model=8, clock_n_head=2, clock_max_heads=1))
    clock = model.clock
    assert clock is not None and clock.cfg.max_heads == 1 and clock.cfg.global_heads == 0
    attn = clock.body[0].attn
    assert (attn.max_heads, attn.global_heads) == (1, 0)
    tokens = torch.randint(0, 3, (4, 7))
    assert model.done_every(tokens, 5).shape == (5, 4, 7)


def test_clock_plan_resolves_auto_by_what_the_loop_counts():
    hp = HParams.from_dict({"halt": 1.0, "halt_target": "clock", "clock_reach": "auto", "clock_every": 4})
    assert clock_plan(hp, needs=False) == ("window", 4)
    assert clock_plan(hp, needs=False, by_size=False) == ("max", 4)
    assert clock_plan(hp, needs=True) == clock_plan(hp, needs=True, by_size=False) == ("max", 1)
    for reach in ("window", "wide", "max", "global"):
        given_hp = HParams.from_dict({"halt": 1.0, "halt_target": "clock", "clock_reach": reach, "clock_every": 4})
        assert clock_plan(given_hp, needs=True) == clock_plan(given_hp, needs=False, by_size=False) == (reach, 4)


@pytest.mark.parametrize("name, needs, by_size", [("parity", False, True), ("unary_ones", True, False),
                                                  ("increment", False, False), ("longest_run", True, False)])
def test_the_recipe_builds_the_clock_the_loop_needs(name, needs, by_size):
    """The default recipe's models: parity's clock as before (no max head, every 6th step);
    a count of ones and an erosion: a max head, taught each position's need on every step;
    a carry chain (the first positions, as many as the chain is long): a max head, taught
    the marker on every 6th step."""
    from trainer.fan.kind import build_data
    from trainer.fan.objectives import clock_due
    from trainer.fan.presets import make_hparams, RECIPES
    from trainer.models.looped import get_model_spec
    from trainer.tasks import TASKS, get_task
    from trainer.tasks.program import program_record, task_of_record
    spec = get_model_spec("looped")
    task = get_task(name) if name in TASKS else task_of_record(program_record(f"programs/{name}.rasp"))
    hp = make_hparams("cpu", task, **RECIPES["clock"])
    data = build_data(task, spec, hp)
    assert (data.needs, data.count_by_size) == (needs, by_size)
    model = spec.make(hp, data)
    assert model.cfg.clock_max_heads == int(needs or not by_size) and model.cfg.clock_d_model == 32
    batch = data.batch(np.random.default_rng(0), [5] * 4, taught=True)
    assert [clock_due(hp, step, batch.need is not None) for step in range(7)] == \
        ([True] * 7 if needs else [True] + [False] * 5 + [True])


def test_model_files_check_the_max_heads():
    cfg = json.loads(LoopedConfig(vocab_size=3, d_model=8, n_head=2).to_json())
    for key in ("clock_max_heads", "max_heads"):        # files from before the max clock
        cfg.pop(key)
    clock = {**cfg, "halt_unit": True, "halt_marker": True, "halt_clock": 2, "clock_d_model": 8, "clock_n_head": 2}
    assert check_config(clock, "m.json").clock_max_heads == 0
    assert check_config({**clock, "clock_max_heads": 1}, "m.json").clock_max_heads == 1
    with pytest.raises(RaspFileError, match="clock_max_heads: expected at most clock_n_head"):
        check_config({**clock, "clock_max_heads": 3}, "m.json")
    with pytest.raises(RaspFileError, match="max_heads: expected an integer"):
        check_config({**cfg, "max_heads": -1}, "m.json")
    with pytest.raises(RaspFileError, match="max_heads: expected at most n_head"):
        check_config({**cfg, "max_heads": 3}, "m.json")
