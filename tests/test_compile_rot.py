"""Positions compared by rotary codes (compiler/craft/rotary.py, rot_pair; attn.py,
rot_eq_exact): past the quadratic score's float32 range (design length 363 on)
an equality between positions scores SEL - R + R cos(2 pi (k - q) / P) from
two fixed position features, cos and sin of 2 pi i / P (P = L + 64), rotated
by constant offsets and copied through heads that return one key's position.
Checked: the score's float32 margins over every pair of positions, the model's
features and file check, the library shapes with the codes forced at small
lengths, and programs at --max-len 256 on inputs up to the design length."""
from __future__ import annotations

import itertools
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

import rasp
import references as R
from compiler import attn as A
from compiler import compile_program
from compiler.craft import Crafter
from model.looped import position_feature

ROOT = Path(__file__).resolve().parents[1]


def assert_same(prog, cm, batch):
    want = prog.run_batch(batch).outputs
    for x, g, w in zip(batch, cm.run_batch(batch), want):
        assert list(g) == list(w), (len(x), list(g), list(w))


def rot_features(period, positions):
    pos = torch.tensor(positions, dtype=torch.float32)
    return (position_feature(f"index_cos:{period}", pos), position_feature(f"index_sin:{period}", pos))


@pytest.mark.parametrize("period,offset", [(427, 0), (1088, 1), (1088, -37), (1120, 63)])
def test_float32_rotary_scores_keep_their_margins_on_every_pair(period, offset):
    """An independent float32 computation of the score of every key position j
    against every query position i, the query's code rotated by `offset` in
    float32 weights as the compiler writes them: the key j = i + offset scores
    within 5 of SEL, every other key at most SEL - EQ_GAP + 5 (what the
    compiler's margins assume)."""
    assert A.rot_eq_exact(period)
    L = period - 64
    c, s = rot_features(period, list(range(L)))
    r = A.rot_scale(period)
    a = 2 * math.pi * offset / period
    # query rows: R (cos(t + a), sin(t + a)) from the features, in float32 weights
    w = torch.tensor([[r * math.cos(a), -r * math.sin(a)], [r * math.sin(a), r * math.cos(a)]], dtype=torch.float32)
    q = torch.stack([c, s], 1) @ w.T
    q = torch.cat([q, torch.full((L, 1), A.SEL - r, dtype=torch.float32)], 1)
    k = torch.cat([torch.stack([c, s], 1), torch.ones(L, 1)], 1)
    score = (q @ k.T).double().numpy()                         # [query i, key j], float32 products
    i, j = np.meshgrid(np.arange(L), np.arange(L), indexing="ij")
    match = j == i + offset
    assert np.all(np.abs(score[match] - A.SEL) < 5.0)
    assert np.all(score[~match] <= A.SEL - A.EQ_GAP + 5.0)


def test_the_rotary_bound_refuses_long_periods():
    assert A.rot_eq_exact(1088) and not A.rot_eq_exact(4096)


def test_position_features_are_cos_and_sin_of_the_position_mod_the_period():
    c, s = rot_features(1000, [-1, 0, 1, 999, 1000, 1999])
    want = np.array([-1, 0, 1, 999, 0, 999]) * 2 * math.pi / 1000
    assert np.allclose(c.numpy(), np.cos(want), atol=1e-7) and np.allclose(s.numpy(), np.sin(want), atol=1e-7)
    with pytest.raises(ValueError):
        position_feature("index_cos:0", torch.zeros(1))


SHAPES = ["shift_right(seq, 1)", "shift_right(seq, 3, 2)", "index_select(seq, indices(seq) - 2)",
          "induct(seq, seq, 1)", "firsts(seq, seq)", "index_select(seq, lasts(seq, 1))",
          "index_select(seq, firsts(seq, 2) + 1, 1)", "aggr(select(indices(seq), indices(seq) - 2, le), seq, 0, max)"]


@pytest.fixture
def forced_rot(monkeypatch):
    monkeypatch.setattr(Crafter, "FORCE_ROT", True)


@pytest.mark.parametrize("expr", SHAPES)
def test_forced_rotary_library_shapes_exact(forced_rot, expr):
    prog = rasp.loads(f"input seq: {{0, 1, 2}}\noutput {expr}\n", "<shape>")
    cm = compile_program(prog, max_len=4)
    batch = [list(x) for n in range(1, 6) for x in itertools.product([0, 1, 2], repeat=n)]
    rng = random.Random(5)
    batch += [[rng.choice([0, 1, 2]) for _ in range(n)] for n in range(6, 17) for _ in range(4)]
    assert_same(prog, cm, batch)


def test_forced_rotary_codes_are_position_features_of_the_model(forced_rot):
    prog = rasp.loads("input seq: {0, 1, 2}\noutput shift_right(seq, 1)\n", "<shape>")
    names = [f for f, _ in compile_program(prog, max_len=4).model.cfg.position_features]
    assert "index_cos:80" in names and "index_sin:80" in names        # P = 4 x 4 + 64


def test_long_lengths_use_rotary_codes_not_digit_tables():
    """flip_flop at --max-len 256: its shifts and the index_select of the last
    write compare positions up to 1023; rotary codes instead of digit MLPs."""
    prog = rasp.load(ROOT / "programs" / "flip_flop.rasp")
    cm = compile_program(prog, max_len=256)
    assert "digit" not in cm.report() and sum(p.numel() for p in cm.model.parameters()) < 2000
    rng = random.Random(11)
    batch = [prog.parse_input(" ".join(map(str, R.sample_flip_flop(rng, n)))) for n in (1, 3, 100, 300, 511, 512)]
    assert_same(prog, cm, batch)


def test_an_offset_beyond_the_period_falls_back_to_digits():
    """shift by 100 at --max-len 100: key - query spans L - 1 + 100 >= P = L + 64."""
    prog = rasp.loads("input seq: {0, 1}\noutput shift_right(seq, 100)\n", "<shape>")
    cm = compile_program(prog, max_len=100)
    assert "digit" in cm.report()
    rng = random.Random(2)
    assert_same(prog, cm, [[rng.choice([0, 1]) for _ in range(n)] for n in (99, 101, 250, 400)])


def test_a_lag_beyond_the_period_takes_the_general_path(monkeypatch):
    # a prefix select lagged 30 back is a 'lag' (craft.selects.select_kind): a prefix head and
    # a shift head; with the shift past the rotary period it is an order select instead
    prog = rasp.loads("input seq: {0, 1, 2}\n"
                      "output aggr(select(indices(seq), indices(seq) - 30, le), seq, 0, max)\n", "<lag>")
    assert "(lag)" in compile_program(prog, max_len=100).report()
    monkeypatch.setattr(Crafter, "ROT_OFFSETS", 8)
    cm = compile_program(prog, max_len=100)
    assert "(lag)" not in cm.report()
    rng = random.Random(4)
    assert_same(prog, cm, [[rng.choice([0, 1, 2]) for _ in range(n)] for n in (1, 31, 200, 400)])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["copy", "parity", "induction", "flip_flop"])
def test_programs_at_max_len_256_exact_to_the_design_length(name):
    prog = rasp.load(ROOT / "programs" / f"{name}.rasp")
    cm = compile_program(prog, max_len=256)
    assert_same(prog, cm, R.sampled_inputs(prog, name, 12, 500, 1024, 13))


def test_model_files_accept_rotary_features_and_refuse_others(tmp_path):
    import json
    from dataclasses import asdict

    from model.files import check_config
    from rasp.errors import RaspFileError
    prog = rasp.load(ROOT / "programs" / "flip_flop.rasp")
    cfg = json.loads(json.dumps(asdict(compile_program(prog, max_len=256).model.cfg)))
    names = [f for f, _ in cfg["position_features"]]
    assert {"index_cos:1088", "index_sin:1088"} <= set(names)
    assert check_config(cfg, tmp_path / "config.json").position_features == [tuple(f) for f in cfg["position_features"]]
    for bad in ("index_cos:0", "index_tan:1088", "index_cos:-5", "index_sin:1088x"):
        broken = {**cfg, "position_features": [[bad, 0]]}
        with pytest.raises(RaspFileError, match="position_features"):
            check_config(broken, tmp_path / "config.json")
