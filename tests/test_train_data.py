"""Trainer units: samplers + program labels, batch layouts, schedules,
stopping rules, checkpoint plumbing, compiled-weight surgery.  Seconds."""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import references as R
from model import LoopedConfig, LoopedTransformer, zero_skipping
from rasp.errors import RaspError
from trainer.fan import stopping
from trainer.fan.compiled import compress, projection, remap_vocab, residual_second_moment
from trainer.fan.data import TaskData
from trainer.tasks.labels import ProgramLabeler
from trainer.settings.hparams import HParams
from trainer.fan.presets import make_hparams
from trainer.run.schedule import curriculum_max_n, lr_at, sample_lengths
from trainer.tasks import TASKS, Task, get_task, parse_lengths

ROOT = Path(__file__).resolve().parents[1]

FAN_TASKS = sorted(name for name, t in TASKS.items() if isinstance(t, Task))   # not the comparison SeqTasks


@pytest.fixture(scope="module")
def labelers():
    return {name: ProgramLabeler(TASKS[name].program_path) for name in FAN_TASKS}


def _text(tok, sym):
    inv = {v: k for k, v in sym.items()}
    return inv.get(tok, tok)


@pytest.mark.parametrize("name", FAN_TASKS)
def test_sampler_and_program_targets_match_reference(name, labelers):
    """Our samplers' inputs, labelled by the program, give the independent
    reference answer; the `#` tail and T(n) follow docs/tasks.md."""
    lab, task = labelers[name], TASKS[name]
    data = TaskData(task, lab)
    rng = np.random.default_rng(1)
    lengths = [int(n) for n in rng.integers(1, 13, size=40)]
    inputs = data.sample_inputs(rng, lengths, train=True)
    outputs, steps = lab(inputs)
    for x, y, n, T in zip(inputs, outputs, lengths, steps):
        xt = [_text(t, lab.symbols) for t in x]
        k = xt.index(">")
        tail = len(xt) - k - 1
        expect_tail = {"parity": 2, "padded_parity": 2, "copy": n + 1, "addition": n + 2, "binary_sum": n.bit_length() + 1,
                       "unique_set": n + 1}.get(name)
        if name == "multiplication":
            expect_tail = xt.index("*") + n + 1
        assert tail == expect_tail
        assert [_text(t, lab.symbols) for t in y[k:]] == R.REFERENCES[name](xt)
        if name == "multiplication":
            assert T == xt.index("*") * n
        elif name == "padded_parity":       # T = the real bits, 1..n of the n tokens before `>`
            assert T == sum(t in (0, 1) for t in xt[:k]) and 1 <= T <= n and k == n
        else:
            assert T == n + (1 if name == "addition" else 0)


def test_multiplication_test_inputs_use_two_bit_first_factor(labelers):
    data = TaskData(TASKS["multiplication"], labelers["multiplication"])
    xs = data.sample_inputs(np.random.default_rng(0), [5] * 20, train=False)
    assert all(x.index(data.sym["*"]) == 2 for x in xs)


def test_fap_batch_scores_from_eoq(labelers):
    data = TaskData(TASKS["copy"], labelers["copy"])
    b = data.batch(np.random.default_rng(0), [3, 5])
    eoq = data.in_id[data.sym[">"]]
    for i, n in enumerate([3, 5]):
        k = int((b.tokens[i] == eoq).nonzero()[0])
        assert k == n
        assert b.mask[i].nonzero().squeeze(1).tolist() == list(range(k, 2 * n + 2))
        ans = [data.output_tokens[j] for j in b.targets[i, k:2 * n + 2].tolist()]
        x = b.tokens[i, :n].tolist()
        assert ans == [data.input_tokens[j] for j in x] + [data.sym["#"]] * 2   # n bits, then `#`
    assert b.steps.tolist() == [3, 5]


def test_scored_padding_follows_fan_et_al_training_rows(labelers):
    """--padding scored: every training row padded to the length of a row of the
    curriculum's longest size, the padding scored with target `#`; ignored: the
    padding is neither added nor scored."""
    from trainer.fan.kind import train_padding
    data = TaskData(TASKS["parity"], labelers["parity"])
    hp = make_hparams("cpu", TASKS["parity"])
    assert hp.padding == "scored" and hp.read_in_dims == 6
    step = 250                                   # curriculum max n = 3
    kw = train_padding(hp, data, step)
    assert kw == {"pad_to": 3 + 3, "score_padding": True}        # n bits, `>`, `#`, `#`
    inputs = data.sample_inputs(np.random.default_rng(0), [1, 3])
    b = data.make_batch(inputs, [1, 3], **kw)
    plain = data.make_batch(inputs, [1, 3])
    hash_id = data.out_id[data.sym["#"]]
    assert b.tokens.shape == (2, 6) and b.mask.tolist() == [[False] + [True] * 5, [False] * 3 + [True] * 3]
    assert bool((b.targets[0, 2:] == hash_id).all())             # padding after row 0 scored as `#`
    assert torch.equal(b.targets[1], plain.targets[1]) and torch.equal(b.mask[1], plain.mask[1])
    assert torch.equal(b.targets[0, :4], plain.targets[0, :4])   # the row's own answer unchanged
    assert train_padding(make_hparams("cpu", TASKS["parity"], padding="ignored"), data, step) == {}
    assert make_hparams("cpu", TASKS["parity"], init="compiled").padding == "ignored"


def test_pause_and_ntp_layouts(labelers):
    task, lab = TASKS["parity"], labelers["parity"]
    fap = TaskData(task, lab)
    fp = TaskData(task, lab, "fap", pause=3)
    ntp = TaskData(task, lab, "ntp", pause=2)
    x = fap.task.sample(np.random.default_rng(0), 4, fap.sym, True)
    a, b, c = fap.make_batch([x], [4]), fp.make_batch([x], [4]), ntp.make_batch([x], [4])
    # pause: same targets, shifted by the pause count
    assert b.tokens.shape[1] == a.tokens.shape[1] + 3
    assert b.targets[0, b.mask[0]].tolist() == a.targets[0, a.mask[0]].tolist()
    assert (b.tokens[0, 4:7] == fp.in_id[fp.pause_token]).all()
    # NTP: reading S[:-1] and predicting S[1:]; prompt = query, pauses, `>`
    ans = [fap.output_tokens[j] for j in a.targets[0, a.mask[0]].tolist()]
    solved = x[:4] + [ntp.pause_token] * 2 + [ntp.sym[">"]] + ans
    assert c.tokens[0].tolist() == [ntp.in_id[v] for v in solved[:-1]]
    assert [ntp.output_tokens[j] for j in c.targets[0, c.mask[0]].tolist()] == ans
    assert int(c.prompt_len[0]) == 7


def test_parse_lengths_and_user_errors():
    assert parse_lengths("1:5") == [1, 2, 3, 4, 5]
    assert parse_lengths("2,8,4") == [2, 4, 8]
    assert parse_lengths("1:9:4") == [1, 5, 9]
    for bad in ("", "a:b", "5:1", "0:3", "1:2:3:4", "1:4:0"):
        with pytest.raises(RaspError):
            parse_lengths(bad)
    with pytest.raises(RaspError):
        get_task("sorting")
    with pytest.raises(RaspError):
        make_hparams("gpu-huge", TASKS["parity"])


def test_curriculum_and_lr_schedule():
    hp = HParams(lr=1.0, warmup=10, steps=100, start_n=1, max_train_n=5, interval=10)
    assert [curriculum_max_n(s, hp) for s in (0, 9, 10, 39, 40, 99)] == [1, 1, 2, 4, 5, 5]
    assert lr_at(0, hp) == pytest.approx(0.1) and lr_at(9, hp) == pytest.approx(1.0)
    assert lr_at(30, hp) == 1.0                     # constant while the curriculum grows
    assert lr_at(40, hp) == pytest.approx(1.0)      # cosine starts when it ends
    assert lr_at(70, hp) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_at(99, hp) < 0.01
    n = sample_lengths(np.random.default_rng(0), 25, hp, 1, 4000)
    assert n.min() == 1 and n.max() == 3 and abs(np.mean(n == 3) - 1 / 3) < 0.05


def _random_model(**kw):
    torch.manual_seed(0)
    cfg = LoopedConfig(**{**dict(vocab_size=4, out_vocab_size=3, d_model=16, n_head=2), **kw})
    m = LoopedTransformer(cfg)
    for p in m.parameters():
        p.data.normal_(0, 0.3)
    return m.eval()


def test_step_stats_and_rules():
    logits = torch.zeros(3, 2, 2, 3)
    logits[0, :, :, 0] = 1.0        # step 1: predicts 0, unsure
    logits[1, :, :, 1] = 9.0        # step 2: predicts 1, confident
    logits[2, :, :, 1] = 4.0        # step 3: predicts 1, less confident
    logits[2, 1, :, 1] = 20.0       # ... except sample 1, most confident at step 3
    targets = torch.ones(2, 2, dtype=torch.long)
    mask = torch.ones(2, 2, dtype=torch.bool)
    st = stopping.step_stats(logits, targets, mask)
    assert st.correct.tolist() == [[False, False], [True, True], [True, True]]
    assert stopping.choose_steps("confidence_sample", st, torch.tensor([1, 1])).tolist() == [2, 3]
    assert stopping.choose_steps("confidence", st, torch.tensor([1, 1])).tolist() == [2, 2]
    assert stopping.choose_steps("oracle", st, torch.tensor([1, 7])).tolist() == [1, 3]


def test_threshold_rule_exits_at_first_confident_step():
    m = _random_model()
    x = torch.randint(0, 4, (6, 7))
    mask = torch.zeros(6, 7, dtype=torch.bool)
    mask[:, 3:] = True
    with torch.no_grad():
        st = stopping.step_stats(m.all_steps(x, 12), torch.zeros(6, 7, dtype=torch.long), mask)
    thr = float(st.conf_ce.median())
    pred, chosen, ran = stopping.threshold_run(m, x, mask, thr, 12)
    for i in range(6):
        below = (st.conf_ce[:, i] < thr).nonzero()
        if len(below):
            assert int(ran[i]) == int(below[0]) + 1 == int(chosen[i])
        else:
            assert int(ran[i]) == 12 and int(chosen[i]) == int(st.conf_ce[:, i].argmin()) + 1
        assert torch.equal(pred[i][mask[i]], st.pred[chosen[i] - 1, i][mask[i]])
    assert float(ran.float().mean()) < 12


def test_remap_vocab_keeps_outputs_and_blocks_unknown_tokens():
    m = _random_model(norm="none", activation="relu", bos=True, body_final_norm=False,
                      extra={"input_tokens": [-2, -1, 0, 1], "output_tokens": [-2, 0, 1]})
    x = torch.randint(0, 4, (5, 9))
    ref = m.all_steps(x, 3)
    new_in, new_out = [0, 1, -1, -2], [0, 1, -2, -5]
    r = remap_vocab(m, new_in, new_out)
    xm = torch.tensor([[new_in.index([-2, -1, 0, 1][i]) for i in row] for row in x.tolist()])
    out = r.all_steps(xm, 3)
    # same logits up to the 1e-3 tie-break offsets, hence the same argmax
    assert torch.allclose(out[..., :3], ref[..., [1, 2, 0]], atol=3e-3)
    assert torch.equal(torch.tensor(new_out)[out.argmax(-1)],
                       torch.tensor([-2, 0, 1])[ref.argmax(-1)])
    # all logits equal in the compiled model -> its first token (-2) must still win
    with torch.no_grad():
        m.unembed.weight.zero_()
        m.unembed.bias.zero_()
    tie = remap_vocab(m, new_in, new_out).all_steps(xm, 1)
    assert (tie.argmax(-1) == new_out.index(-2)).all()
    assert (out[..., 3] <= -1e3).all()
    with pytest.raises(RaspError):
        remap_vocab(m, [0, 1, 7], new_out)


@torch.no_grad()
def test_compress_is_exact_for_a_full_width_rotation_and_pca_of_full_rank():
    m = _random_model(norm="none", activation="relu", bos=True, body_final_norm=False,
                      position_features=[("index", 3), ("one", 7)])
    x = torch.randint(0, 4, (5, 9))
    ref = m.all_steps(x, 3)
    scale = float(ref.abs().max())
    rot = compress(m, projection(m, 16, "random", seed=1))
    assert float((rot.all_steps(x, 3) - ref).abs().max()) < 1e-4 * scale
    assert rot.cfg.position_features == [("index", 0), ("one", 1)]
    M = residual_second_moment(m, x, 3)
    small = compress(m, projection(m, 12, "pca", moment=M))
    assert small.cfg.d_model == 12
    err12 = float((small.all_steps(x, 3) - ref).abs().max())
    rnd12 = compress(m, projection(m, 12, "random", seed=3))
    assert err12 > 0          # information was really dropped ...
    assert err12 < float((rnd12.all_steps(x, 3) - ref).abs().max())   # ... less of it by PCA
    with pytest.raises(RaspError):
        projection(m, 1, "random")


@pytest.mark.parametrize("kw", [{}, dict(norm="none", activation="relu", bos=True, bias=False, n_prelude=1,
                                         n_postlude=1, position_features=[("index", 3)])])
def test_zero_skipping_copy_computes_what_the_model_computes(kw):
    """model.zero_skipping (the evaluator of the fragile-tensor probe): with
    most weights zero, a dead attention and dead MLP units, the copy's
    outputs are the model's, before and after an in-place change of the
    nonzero entries; its parameters have the model's names."""
    m = _random_model(**kw)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name != "embed.weight":
                p.mul_(torch.rand(p.shape, generator=g) < 0.3)
        mlp = m.body[0].mlp
        for t in (m.body[0].attn.o.weight, m.body[0].attn.o.bias, mlp.up.weight[:8], mlp.down.weight[:, 8:16],
                  None if mlp.up.bias is None else mlp.up.bias[:8]):
            if t is not None:
                t.zero_()
    live = zero_skipping(m)
    assert [n for n, _ in live.named_parameters()] == [n for n, _ in m.named_parameters()]
    assert len(live.body[0].attn.o.rows) == 0 and len(live.body[0].mlp.up.rows) <= m.cfg.d_mlp - 16
    x = torch.randint(0, 4, (3, 7))
    with torch.no_grad():
        torch.testing.assert_close(live.all_steps(x, 3), m.all_steps(x, 3), rtol=1e-5, atol=1e-5)
        for model in (m, live):
            dict(model.named_parameters())["body.0.mlp.up.weight"].mul_(1.5)
        torch.testing.assert_close(live.all_steps(x, 3), m.all_steps(x, 3), rtol=1e-5, atol=1e-5)


def test_batch_confidence_rule_is_the_token_mean_of_eq2_on_hand_made_logits():
    """Fan et al.'s rule (test_func.py): one step for the batch, the lowest
    cross-entropy of the outputs against their own argmax averaged over all
    scored tokens.  Sample 0 has 3 scored tokens, sample 1 one: the token mean
    picks step 1 where the mean of per-sample means would pick step 2."""
    V = 2
    def logits_with(p_first):           # [B=2, L=3, V] with P(class 0) = p at every position
        lg = torch.zeros(2, 3, V)
        for b, p in enumerate(p_first):
            lg[b, :, 0] = math.log(p) - math.log(1 - p)
        return lg
    step1 = logits_with([0.99, 0.6])     # sample 0 confident, sample 1 not
    step2 = logits_with([0.8, 0.95])
    all_logits = torch.stack([step1, step2])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    st = stopping.step_stats(all_logits, torch.zeros(2, 3, dtype=torch.long), mask)
    ce = lambda p: -math.log(p)
    by_hand = [(3 * ce(0.99) + ce(0.6)) / 4, (3 * ce(0.8) + ce(0.95)) / 4]
    assert torch.allclose(stopping.batch_confidence_ce(st), torch.tensor(by_hand), atol=1e-5)
    assert by_hand[0] < by_hand[1] and (ce(0.99) + ce(0.6)) > (ce(0.8) + ce(0.95))
    assert stopping.choose_steps("confidence", st, torch.tensor([1, 1])).tolist() == [1, 1]
    assert stopping.choose_steps("confidence_sample", st, torch.tensor([1, 1])).tolist() == [1, 2]


def test_token_and_sample_loss_reductions_against_a_hand_computation():
    from trainer.fan import objectives
    from trainer.fan.data import Batch
    logits = torch.tensor([[[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]],
                           [[0.0, 3.0], [5.0, 5.0], [0.0, 0.0]]])
    targets = torch.tensor([[0, 1, 0], [1, 0, 0]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    z = torch.zeros(2, dtype=torch.long)
    batch = Batch(torch.zeros(2, 3, dtype=torch.long), targets, mask, z, z, z)
    ce = lambda lg, t: math.log(sum(math.exp(v) for v in lg)) - lg[t]
    toks = [ce([2, 0], 0), ce([0, 1], 1), ce([1, 1], 0), ce([0, 3], 1)]
    tok_loss, acc = objectives.loss_and_accuracy(logits, batch, "token")
    smp_loss, _ = objectives.loss_and_accuracy(logits, batch, "sample")
    assert tok_loss.item() == pytest.approx(sum(toks) / 4, abs=1e-6)
    assert smp_loss.item() == pytest.approx((sum(toks[:3]) / 3 + toks[3]) / 2, abs=1e-6)
    assert acc.item() == 1.0          # every scored argmax is right (the tie at [1, 1] resolves to 0)


def test_gpt2_init_statistics_match_fan_et_al():
    """Fan et al.'s model: GPT-2 blocks (N(0, 0.02), residual writers
    N(0, 0.02/sqrt(2L)), zero biases, LayerNorm 1/0) between a one-hot read-in
    Linear and a read-out Linear at PyTorch's default uniform(+-1/sqrt(fan_in))."""
    from model import gpt2_init_
    torch.manual_seed(0)
    cfg = LoopedConfig(vocab_size=6, out_vocab_size=5, d_model=256, n_head=8, n_body=2, embed_bias=True,
                       decode_norm=False, activation="gelu_tanh")
    m = gpt2_init_(LoopedTransformer(cfg))
    b_in, b_out = 1 / math.sqrt(6), 1 / math.sqrt(256)
    for t in (m.embed.weight, m.embed_bias):
        assert t.abs().max() <= b_in and t.abs().max() > 0.9 * b_in
        assert t.std().item() == pytest.approx(b_in / math.sqrt(3), rel=0.15)   # uniform's std
    assert m.unembed.weight.abs().max() <= b_out and m.unembed.weight.abs().max() > 0.95 * b_out
    assert m.unembed.bias.abs().max() <= b_out and bool(m.unembed.bias.ne(0).all())
    for blk in m.body:
        for lin in (blk.attn.q, blk.attn.k, blk.attn.v, blk.mlp.up):
            assert lin.weight.std().item() == pytest.approx(0.02, rel=0.05) and not lin.bias.any()
        for lin in (blk.attn.o, blk.mlp.down):      # 2 layers -> 0.02 / sqrt(4)
            assert lin.weight.std().item() == pytest.approx(0.01, rel=0.05) and not lin.bias.any()
        assert bool((blk.ln1.weight == 1).all()) and not blk.ln1.bias.any()
    assert isinstance(m.final_norm, torch.nn.Identity)
    wide = gpt2_init_(LoopedTransformer(LoopedConfig(vocab_size=4, d_model=64, n_head=4, embed_bias=True)),
                      "linear", read_in_dims=6)                  # Fan et al.'s one-hot width 6
    assert wide.embed.weight.abs().max() <= 1 / math.sqrt(6) < 0.5
    emb = gpt2_init_(LoopedTransformer(LoopedConfig(vocab_size=52, d_model=256, n_head=8)), "embedding")
    assert emb.embed.weight.std().item() == pytest.approx(1.0, rel=0.05)   # nn.Embedding default (unique set)


def test_read_out_dims_widens_the_read_out_with_never_targeted_logits():
    """--read-out-dims 6 (Fan et al.'s n_dims): six read-out logits for parity's three
    outputs; the extra ones share the softmax, so the loss of the same hidden state
    is higher while they are not yet pushed down.  Never fewer rows than outputs."""
    from trainer.models import get_model_spec
    from trainer.fan.objectives import loss_and_accuracy
    from trainer.fan.kind import build_data
    spec = get_model_spec("looped")
    hp = make_hparams("cpu", TASKS["parity"], read_out_dims=6)
    data = build_data("parity", spec, hp)
    assert len(data.output_tokens) == 3
    torch.manual_seed(0)
    wide = spec.make(hp, data)
    assert wide.unembed.out_features == 6
    assert spec.make(replace(hp, read_out_dims=2), data).unembed.out_features == 3
    assert spec.make(replace(hp, read_out_dims=None), data).unembed.out_features == 3
    batch = data.make_batch(data.sample_inputs(np.random.default_rng(0), [4, 7]), [4, 7])
    logits = wide(batch.tokens, batch.steps)
    assert logits.shape[-1] == 6
    full, _ = loss_and_accuracy(logits, batch, "token")
    narrow, _ = loss_and_accuracy(logits[..., :3], batch, "token")
    assert full.item() > narrow.item()       # the never-target logits take softmax mass
    full.backward()
    assert wide.unembed.weight.grad[3:].abs().sum() > 0   # ... and are trained down


def test_weight_decay_param_groups():
    from trainer.fan.kind import param_groups
    m = LoopedTransformer(LoopedConfig(vocab_size=4, d_model=16, n_head=2))
    params = list(m.parameters())
    (g,) = param_groups(m, 0.01, "all")           # Fan et al.: every parameter decays
    assert g["weight_decay"] == 0.01 and len(g["params"]) == len(params)
    dec, rest = param_groups(m, 0.01, "matrices")
    assert dec["weight_decay"] == 0.01 and rest["weight_decay"] == 0.0
    assert {id(p) for p in dec["params"]} == {id(m.embed.weight), id(m.unembed.weight)} | {
        id(lin.weight) for blk in m.body for lin in (blk.attn.q, blk.attn.k, blk.attn.v, blk.attn.o,
                                                     blk.mlp.up, blk.mlp.down)}
    assert len(dec["params"]) + len(rest["params"]) == len(params)
    assert all(p.dim() == 1 for p in rest["params"])
    # AdamW's decoupled decay really applies per group: zero gradient, one step
    opt = torch.optim.AdamW(param_groups(m, 0.5, "matrices"), lr=0.1)
    before = {id(p): p.detach().clone() for p in params}
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()
    assert torch.allclose(m.embed.weight, before[id(m.embed.weight)] * (1 - 0.1 * 0.5))
    assert torch.equal(m.body[0].ln1.weight, before[id(m.body[0].ln1.weight)])


def test_ema_update_by_hand():
    from trainer.run import ema
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    frozen = torch.nn.Parameter(torch.tensor([5.0]))        # never updated: no optimizer state
    opt = torch.optim.SGD([w, frozen], lr=1.0)
    w.grad = torch.tensor([1.0, 1.0])
    opt.step()                                              # w = [0, 1]; SGD keeps no state...
    opt.state[w]["seen"] = True                             # ...so mark it as an updated parameter
    ema.update(opt, 0.9)                                    # first call copies
    assert torch.equal(opt.state[w]["ema"], torch.tensor([0.0, 1.0])) and "ema" not in opt.state[frozen]
    with torch.no_grad():
        w.copy_(torch.tensor([10.0, 11.0]))
    ema.update(opt, 0.9)
    assert torch.allclose(opt.state[w]["ema"], torch.tensor([0.9 * 0 + 0.1 * 10, 0.9 * 1 + 0.1 * 11]))
    m = torch.nn.Linear(1, 1)
    opt2 = torch.optim.AdamW(m.parameters(), lr=0.1)
    m(torch.ones(1, 1)).sum().backward()
    opt2.step()
    ema.update(opt2, 0.5)
    sd = ema.averaged_state_dict(m, opt2)
    assert torch.equal(sd["weight"], m.weight.detach()) and ema.has_average(opt2)


def test_fan_decay_start_and_cosine_to_zero():
    from trainer.fan.presets import fan_decay_start
    hp = make_hparams("cpu", get_task("parity"))
    assert hp.decay_start == fan_decay_start(10, 100) == 1100 and hp.warmup == 0
    assert lr_at(0, hp) == lr_at(1100, hp) == hp.lr
    assert lr_at(1101, hp) < hp.lr and lr_at(hp.steps, hp) == pytest.approx(0.0, abs=1e-12)
    c = make_hparams("cpu", get_task("parity"), "compiled")
    assert c.weight_decay == 0.0 and c.ema == 0.0       # a compiled start's exact weights never decay
