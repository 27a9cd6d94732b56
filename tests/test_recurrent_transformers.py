"""UT / GUT / TLB / GUTLB encoders (trainer/models/recurrent_transformers.py):
halting arithmetic against hand-computed values, causality, TLB's fast
stream, the GUT ablations, gradients, and a few seconds of toy training."""
import json
import random

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from seq_toys import TOYS, register_toys

from rasp.cli import main
from trainer.models.base import EncoderConfig, get_encoder_spec
from trainer.models import recurrent_transformers as rt
from trainer.models.blocks import positions

torch.set_num_threads(1)
MODELS = ["ut_act", "ut", "gut", "gut_token", "gut_nogate", "gut_notrans", "tlb", "tlb_fixed", "gutlb"]


def build(name, causal, vocab=12, d=32, layers=4, seed=0, **extra):
    torch.manual_seed(seed)
    spec = get_encoder_spec(name)
    cfg = EncoderConfig(vocab_size=vocab, d_model=d, n_layer=layers, n_head=4, d_ff=64, causal=causal,
                        extra={**spec.defaults, **extra})
    return spec.build(cfg).eval()


def batch(B=3, L=23, vocab=12, seed=1, pad_row=True):
    g = torch.Generator().manual_seed(seed)
    tok = torch.randint(1, vocab, (B, L), generator=g)
    mask = torch.ones(B, L, dtype=torch.bool)
    if pad_row:
        mask[1, L * 2 // 3:] = False
    return tok.masked_fill(~mask, 0), mask


# ---------------------------------------------------------------- halting arithmetic

def scalar_states(*values):
    """H tensors (B=1, S=1, d=1) holding the given numbers."""
    return [torch.tensor([[[v]]]) for v in values]


def test_halting_step_alpha_products_and_marginal_state():
    H0, H1, H2 = scalar_states(1.0, 10.0, 100.0)
    st = rt.HaltingState.start(H0, 1)
    yes = torch.ones(1, 1, dtype=torch.bool)
    st, flag = rt.halting_step(st, H1, torch.tensor([[0.5]]), 0, yes)
    # α0 = 0.5 (weights H0), S1 = 0.5·H1 + 0.5·H0; penalty 0.5·1, slack 0.5·1
    assert flag.item() and st.S.item() == pytest.approx(5.5)
    assert (st.total.item(), st.penalty.item(), st.slack.item(), st.depth.item()) == pytest.approx((0.5, 0.5, 0.5, 1))
    st, flag = rt.halting_step(st, H2, torch.tensor([[0.5]]), 1, yes)
    # α1 = 0.5·(1-0.5) = 0.25 weights H1; S2 = 0.25·H2 + 0.5·H0 + 0.25·H1
    assert st.S.item() == pytest.approx(25 + 0.5 + 2.5)
    assert st.total.item() == pytest.approx(0.75) and st.not_halted.item() == pytest.approx(0.25)
    assert st.penalty.item() == pytest.approx(0.5 + 0.25 * 2) and st.slack.item() == pytest.approx(0.25 * 2)
    assert st.final_penalty().item() == pytest.approx(1.5) and st.H.item() == 100.0


def test_threshold_crossing_layer_is_discarded_and_unit_stays_frozen():
    H0, H1, H2, H3 = scalar_states(1.0, 2.0, 3.0, 4.0)
    yes = torch.ones(1, 1, dtype=torch.bool)
    st, _ = rt.halting_step(rt.HaltingState.start(H0, 1), H1, torch.tensor([[0.5]]), 0, yes)
    before = st
    # α1 = 0.5·0.998 = 0.499 -> Σα = 0.999 >= 0.999: H, S, penalty, slack revert
    st, flag = rt.halting_step(st, H2, torch.tensor([[0.998]]), 1, yes)
    assert not flag.item()
    assert st.total.item() == pytest.approx(0.999)
    for field in ("H", "S", "penalty", "slack", "depth"):
        assert torch.equal(getattr(st, field), getattr(before, field)), field
    # Σα, Π(1-α̂) and Σα·H still accumulate (as the code), but nothing un-freezes
    st2, flag = rt.halting_step(st, H3, torch.tensor([[0.0]]), 2, yes)
    assert not flag.item() and torch.equal(st2.S, before.S) and st2.depth.item() == 1
    # just below the threshold the layer is kept
    st3, flag = rt.halting_step(before, H2, torch.tensor([[0.9978]]), 1, yes)
    assert flag.item() and st3.total.item() < 0.999 and st3.depth.item() == 2


def test_run_halting_remainder_slack_at_depth_cap():
    # constant α̂ = 0.1, cap 3 layers (length 4 allows 5): α = 0.1, 0.09, 0.081; Σα = 0.271
    H0 = torch.zeros(1, 4, 1)
    st = rt.run_halting(lambda H, S: H + 1, lambda H, Hn: torch.full((1, 1), 0.1), H0,
                        torch.ones(1, 4, dtype=torch.bool), max_layers=3, per_unit_position=False)
    assert st.penalty.item() == pytest.approx(0.1 * 1 + 0.09 * 2 + 0.081 * 3)
    assert st.slack.item() == pytest.approx((1 - 0.271) * 3)
    # H_l = l, so S_3 = 0.729·3 + 0.1·0 + 0.09·1 + 0.081·2
    assert st.S[0, :, 0].tolist() == pytest.approx([0.729 * 3 + 0.09 + 0.162] * 4)
    assert st.depth.item() == 3


def test_run_halting_forced_halt_and_per_position_freezing():
    # two samples of lengths 1 and 4 (padded to 4): the short one is forced to
    # stop once layer >= length + 1 = 2; padding positions never update
    H0 = torch.zeros(2, 4, 1)
    mask = torch.tensor([[True, False, False, False], [True] * 4])
    p = lambda H, Hn: torch.zeros(2, 4)                                   # never halts by itself
    st = rt.run_halting(lambda H, S: H + 1, p, H0, mask, max_layers=10, per_unit_position=True)
    assert st.depth[0].tolist() == [2, 0, 0, 0] and st.depth[1].tolist() == [5, 5, 5, 5]   # cap min(10, S+1) = 5
    assert st.S[0, 0].item() == 2 and st.S[0, 1].item() == 0 and st.S[1, 3].item() == 5
    # per-position thresholds: position 0 halts at once (α̂ = 1 -> discarded layer 0)
    p2 = lambda H, Hn: torch.tensor([[1.0, 0.0, 0.0, 0.0]]).expand(2, 4)
    st = rt.run_halting(lambda H, S: H + 1, p2, H0, mask, max_layers=3, per_unit_position=True)
    assert st.depth[1].tolist() == [0, 3, 3, 3] and st.S[1, 0].item() == 0


def test_act_step_hand_values_and_parenthesised_update():
    st = rt.ACTState.start(torch.zeros(1, 1, 1))
    ws = []
    for _ in range(4):
        st, w = rt.act_step(st, torch.tensor([[0.4]]), eps=0.01)
        ws.append(w.item())
    # 0.4, 0.8 run; 1.2 > 0.99 halts with remainder 0.2; then weight 0
    assert ws == pytest.approx([0.4, 0.4, 0.2, 0.0])
    assert (st.H.item(), st.R.item(), st.N.item()) == pytest.approx((1.0, 0.2, 3.0))
    assert st.halted.item() and not st.running(0.01).item()
    # threshold 1 - ε: 0.5 + 0.49 = 0.99 is not above it, 0.5 + 0.491 is
    st = rt.ACTState.start(torch.zeros(1, 1, 1))
    st, _ = rt.act_step(st, torch.tensor([[0.5]]), 0.01)
    assert not rt.act_step(st, torch.tensor([[0.49]]), 0.01)[0].halted.item()
    assert rt.act_step(st, torch.tensor([[0.491]]), 0.01)[0].halted.item()
    acc = rt.act_accumulate(torch.tensor([[[10.0]]]), torch.tensor([[[2.0]]]), torch.tensor([[0.25]]))
    assert acc.item() == pytest.approx(0.25 * 2 + 0.75 * 10)        # not 10·1 - 0.25 (T2T issue #1004)


def test_ut_act_ponder_loss_is_tau_times_steps_plus_remainder():
    m = build("ut_act", causal=True, layers=5)
    nn.init.zeros_(m.halt.weight)
    nn.init.constant_(m.halt.bias, torch.logit(torch.tensor(0.4)).item())
    tok, mask = batch(pad_row=False)
    out = m(tok, mask)
    assert out.aux_loss.item() == pytest.approx(0.01 * 3.2, rel=1e-5)
    assert torch.all(out.stats["depth"] == 3)


def test_ut_penalty_is_beta_times_masked_mean():
    m = build("ut", causal=False, layers=3, beta=0.5)
    nn.init.zeros_(m.halt.net[2].weight)
    nn.init.constant_(m.halt.net[2].bias, torch.logit(torch.tensor(0.1)).item())
    tok, mask = batch()
    out = m(tok, mask)
    per_position = 0.1 * 1 + 0.09 * 2 + 0.081 * 3 + 0.729 * 3       # every position, every sample
    assert out.aux_loss.item() == pytest.approx(0.5 * per_position, rel=1e-5)


# ---------------------------------------------------------------- model properties

@pytest.mark.parametrize("name", MODELS)
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_causal_outputs_ignore_later_tokens(name, data):
    L = 25
    t = data.draw(st.integers(0, L - 2), label="t")
    seed = data.draw(st.integers(0, 1000), label="seed")
    m = build(name, causal=True, chunk=6)
    tok, mask = batch(B=2, L=L, seed=seed, pad_row=False)
    tok2 = tok.clone()
    g = torch.Generator().manual_seed(seed + 1)
    tok2[:, t + 1:] = torch.randint(1, 12, (2, L - t - 1), generator=g)
    with torch.no_grad():
        a, b = m(tok, mask), m(tok2, mask)
    assert torch.allclose(a.hidden[:, :t + 1], b.hidden[:, :t + 1], atol=1e-5)
    assert torch.equal(a.stats["depth"][:, :t + 1], b.stats["depth"][:, :t + 1])


@pytest.mark.parametrize("name", MODELS)
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_causal_outputs_ignore_how_many_tokens_follow(name, data):
    """Position t's output and depth are the same whether the sequence ends at
    t or goes on: on short sequences the depth cap (8 layers > length + 1)
    binds, and in causal mode it reads the prefix length, not the whole
    length (JRC's cap would let a later token change an earlier output)."""
    L = data.draw(st.integers(2, 9), label="L")
    t = data.draw(st.integers(0, L - 2), label="t")
    seed = data.draw(st.integers(0, 1000), label="seed")
    m = build(name, causal=True, layers=8, chunk=4)
    tok, mask = batch(B=2, L=L, seed=seed, pad_row=False)
    short_mask = mask.clone()
    short_mask[:, t + 1:] = False
    with torch.no_grad():
        a, b = m(tok, mask), m(tok.masked_fill(~short_mask, 0), short_mask)
    assert torch.allclose(a.hidden[:, :t + 1], b.hidden[:, :t + 1], atol=1e-5)
    assert torch.equal(a.stats["depth"][:, :t + 1], b.stats["depth"][:, :t + 1])


def test_causal_depth_cap_reads_the_prefix_length():
    # α̂ = 0 never halts: position t runs min(cap, t + 2) layers, whatever follows it
    H0, mask = torch.zeros(1, 6, 1), torch.ones(1, 6, dtype=torch.bool)
    st_ = rt.run_halting(lambda H, S: H + 1, lambda H, Hn: torch.zeros(1, 6), H0, mask, max_layers=5,
                         per_unit_position=True, causal=True)
    assert st_.depth[0].tolist() == [2, 3, 4, 5, 5, 5] and st_.S[0, :, 0].tolist() == [2, 3, 4, 5, 5, 5]
    # non-causal (JRC): every position of the sample reads its whole length 6
    st_ = rt.run_halting(lambda H, S: H + 1, lambda H, Hn: torch.zeros(1, 6), H0, mask, max_layers=5,
                         per_unit_position=True)
    assert st_.depth[0].tolist() == [5] * 6
    # GUTLB's later chunks: position t also sees the earlier chunks' tokens
    st_ = rt.run_halting(lambda H, S: H + 1, lambda H, Hn: torch.zeros(1, 6), H0, mask, max_layers=5,
                         per_unit_position=True, causal=True, seen_before=torch.tensor([[2]]))
    assert st_.depth[0].tolist() == [4, 5, 5, 5, 5, 5]
    with pytest.raises(ValueError):
        rt.run_halting(lambda H, S: H, lambda H, Hn: torch.zeros(1, 1), H0, mask, 5, False, causal=True)


def test_gutlb_causal_cap_counts_the_earlier_chunks():
    """Chunk 2 of a causal GUTLB (chunk 4, cap 8 layers): its first position
    sees 5 tokens, so it may run min(8, 5 + 1, chunk 4 + 1) = 5 layers when
    it never halts, not the 2 a chunk-local prefix would allow."""
    m = build("gutlb", causal=True, layers=8, chunk=4)
    with torch.no_grad():
        m.halt.net[2].bias.fill_(-200.0)
        tok, mask = batch(B=1, L=8, pad_row=False)
        depth = m(tok, mask).stats["depth"][0].tolist()
    assert depth == [2, 3, 4, 5, 5, 5, 5, 5]


def test_tlb_single_chunk_equals_fast_stream_without_memory_read():
    m = build("tlb", causal=True, chunk=64)
    tok, mask = batch()
    with torch.no_grad():
        out = m(tok, mask).hidden
        x, _ = m.front(tok, mask)
        pseudo = mask.clone()
        pseudo[:, 0] = True
        h = x
        for blk in m.blocks:
            h = blk(h, pseudo, positions(pseudo), True, memory=None)    # no cross-attention at all
    assert torch.allclose(out, h, atol=1e-6)
    # with several chunks the memory does matter
    with torch.no_grad():
        nn.init.normal_(m.memory0)
        assert not torch.allclose(m(tok, mask).hidden, out, atol=1e-3)


def test_tlb_fixed_uses_five_chunks_whatever_the_length():
    x, mask = torch.zeros(1, 23, 4), torch.ones(1, 23, dtype=torch.bool)
    assert [c.shape[1] for c, _ in rt.chunk_sequence(x, mask, 10, 5)] == [5, 5, 5, 5, 3]
    assert [c.shape[1] for c, _ in rt.chunk_sequence(x, mask, 10, None)] == [8, 8, 7]


@pytest.mark.parametrize("causal", [False, True])
def test_gut_ablations_differ_only_in_the_removed_component(causal):
    tok, mask = batch()
    gut = build("gut", causal)
    ref = {k: v.shape for k, v in gut.state_dict().items()}
    with torch.no_grad():
        base = gut(tok, mask)
    # -gate: same parameters minus the gate; a gate forced open is the plain block
    nogate = build("gut_nogate", causal, seed=1)
    keys = {k: v.shape for k, v in nogate.state_dict().items()}
    assert set(ref) - set(keys) == {k for k in ref if k.startswith("block.gate.")} and set(keys) <= set(ref)
    nogate.load_state_dict({k: gut.state_dict()[k] for k in keys})
    with torch.no_grad():
        assert not torch.allclose(nogate(tok, mask).hidden, base.hidden, atol=1e-4)
        gut.block.gate.down.bias.fill_(60.0)                                # σ(60) = 1
        assert torch.allclose(nogate(tok, mask).hidden, gut(tok, mask).hidden, atol=1e-5)
    gut = build("gut", causal)
    # -transition: W1 is d x d; GUT with the H_l half of W1 zeroed is the ablation
    notrans = build("gut_notrans", causal, seed=1)
    diff = {k for k in ref if notrans.state_dict()[k].shape != ref[k]}
    assert set(notrans.state_dict()) == set(ref) and diff == {"halt.net.0.weight"}
    sd = dict(gut.state_dict())
    sd["halt.net.0.weight"] = sd["halt.net.0.weight"][:, :32]
    notrans.load_state_dict(sd)
    with torch.no_grad():
        assert not torch.allclose(notrans(tok, mask).hidden, base.hidden, atol=1e-4)
        gut.halt.net[0].weight[:, 32:] = 0
        assert torch.allclose(notrans(tok, mask).hidden, gut(tok, mask).hidden, atol=1e-5)
    gut = build("gut", causal)
    # -global halt: identical parameters; when nothing halts (α̂ = 0) the token
    # and global versions coincide (S = H, so even their K/V streams agree) on
    # real positions (token halting never updates padding)
    token = build("gut_token", causal, seed=1)
    token.load_state_dict(gut.state_dict())
    with torch.no_grad():
        if not causal:
            assert not torch.allclose(token(tok, mask).hidden, base.hidden, atol=1e-4)
        for m in (gut, token):
            m.halt.net[2].bias.fill_(-200.0)
        a, b = token(tok, mask), gut(tok, mask)
    real = a.mask[..., None]
    assert torch.allclose(a.hidden * real, b.hidden * real, atol=1e-5)
    assert torch.equal(a.stats["depth"].float().view(a.stats["depth"].shape[0], -1).amax(1),
                       b.stats["depth"].float().view(b.stats["depth"].shape[0], -1).amax(1))


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("causal", [False, True])
def test_gradients_reach_every_parameter(name, causal):
    m = build(name, causal, chunk=6).train()
    tok, mask = batch(L=23)
    out = m(tok, mask)
    w = torch.randn_like(out.hidden)
    loss = (out.hidden * w * out.mask[..., None]).sum() + (out.aux_loss if out.aux_loss is not None else 0)
    loss.backward()
    missing = [n for n, p in m.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing


def test_presets_cover_the_task_families():
    for name in MODELS:
        spec = get_encoder_spec(name)
        assert spec.family == "recurrent_transformers"
        for fam in ("flipflop", "listops", "logic"):
            cpu = spec.presets["cpu"][fam]
            assert (cpu["d_model"], cpu["n_head"], cpu["d_ff"]) == (64, 4, 128)
            assert spec.presets["paper"][fam]["d_model"] == 512
    assert get_encoder_spec("gut").presets["paper"]["flipflop"]["n_layer"] == 20
    assert get_encoder_spec("ut").presets["paper"]["logic"]["beta"] == 0.0
    assert get_encoder_spec("tlb").presets["paper"]["listops"]["chunk"] == 20
    assert get_encoder_spec("gut").defaults["pooling"] == "end" and get_encoder_spec("ut").defaults["pooling"] == "mean"


# ---------------------------------------------------------------- toy training

def flipflop_batch(n=24, pairs=8, seed=0):
    """Tiny flip-flop: ids 1..3 = w/r/i, 4..5 = bits; after `r` the target is
    the last written bit (scored at the bit position), -1 elsewhere."""
    rng = random.Random(seed)
    toks, tgts = [], []
    for _ in range(n):
        seq, tgt, mem = [1, 4 + rng.randint(0, 1)], [-1, -1], None
        mem = seq[1] - 4
        for _ in range(pairs - 1):
            ins = rng.choice([1, 2, 3, 3])
            bit = rng.randint(0, 1) if ins != 2 else mem
            if ins == 1:
                mem = bit
            seq += [ins, 4 + bit]
            tgt += [-1, bit if ins == 2 else -1]
        toks.append(seq)
        tgts.append(tgt)
    return torch.tensor(toks), torch.tensor(tgts)


def listops_batch(n=24, seed=0):
    """Tiny ListOps: `[OP a b (c)]` with MAX / MIN / SM, one level; 10 classes."""
    rng = random.Random(seed)
    ops = {11: max, 12: min, 13: lambda xs: sum(xs) % 10}
    toks, labels = [], []
    for _ in range(n):
        op = rng.choice(list(ops))
        args = [rng.randint(0, 9) for _ in range(rng.randint(2, 3))]
        toks.append([op] + [a + 1 for a in args] + [14] + [0] * (3 - len(args)))
        labels.append(ops[op](args))
    tok = torch.tensor(toks)
    return tok, tok != 0, torch.tensor(labels)


def pooled(out, pool):
    if pool == "mean":
        return rt.masked_mean(out.hidden, out.mask)
    last = out.mask.long().cumsum(1).argmax(1)
    return out.hidden[torch.arange(out.hidden.shape[0]), last]


@pytest.mark.parametrize("name", MODELS)
def test_toy_training_lowers_the_loss(name):
    for task in ("flipflop", "listops"):
        causal = task == "flipflop"
        m = build(name, causal, vocab=15, layers=3, chunk=6).train()
        classes = 2 if causal else 10
        head = nn.Linear(32, classes)
        opt = torch.optim.Adam(list(m.parameters()) + list(head.parameters()), lr=1e-2)
        if causal:
            tok, tgt = flipflop_batch()
            mask = torch.ones_like(tok, dtype=torch.bool)
        else:
            tok, mask, tgt = listops_batch()
        losses = []
        for _ in range(20):
            out = m(tok, mask)
            if causal:
                loss = F.cross_entropy(head(out.hidden).reshape(-1, classes), tgt.reshape(-1), ignore_index=-1)
            else:
                loss = F.cross_entropy(head(pooled(out, m_pool(name))), tgt)
            losses.append(loss.item())
            opt.zero_grad()
            (loss + (out.aux_loss if out.aux_loss is not None else 0)).backward()
            opt.step()
        assert min(losses[-3:]) < 0.75 * losses[0], (task, losses[0], losses[-3:])


def m_pool(name):
    return get_encoder_spec(name).defaults["pooling"]


# ---------------------------------------------------------------- through rasp train / rasp eval

@pytest.fixture
def toys():
    from trainer.tasks import TASKS
    register_toys()
    yield
    for t in TOYS:
        TASKS.pop(t.name, None)


@pytest.mark.parametrize("name,task", [("gut", "toy_pair"), ("gutlb", "toy_parity")])
def test_rasp_train_and_eval_report_depth_and_halting_settings(tmp_path, toys, name, task):
    out = tmp_path / name
    assert main(["train", "--task", task, "--model", name, "--out", str(out), "--no-progress", "--steps", "6",
                 "--d-model", "16", "--set", "eval_every=0", "--set", "n_layer=3", "--set", "chunk=4"]) == 0
    hp = json.loads((out / "run.json").read_text())["hparams"]
    assert hp["extra"]["threshold"] == 0.999 and hp["extra"]["beta"] == 0.1
    assert hp["pooling"] == ("end" if name == "gut" else "mean") and hp["n_layer"] == 3
    assert main(["eval", str(out), "-n", "16", "--no-progress", "--splits", "valid,long"]) == 0
    res = json.loads((out / "eval.json").read_text())
    for split in ("valid", "long"):
        depth = res["splits"][split]["stats"]["depth"]
        assert 0 < depth["mean"] <= depth["max"] <= 3


# ---------------------------------------------------------------- the evidence table

def test_bench_tabulates_compare_runs_with_depth_and_ordering(tmp_path):
    """bench/recurrent_transformers.py reads result folders (no runner of its
    own): accuracy mean ± SE over seeds (depth) per split, P1 beside, the
    ordering from means and which of its steps are within seed noise."""
    from bench import recurrent_transformers as bench
    from trainer.compare import report as R
    from trainer.compare.grid import expand
    from trainer.compare.suite import load_suite
    suite = load_suite("flipflop")
    splits = [c.attrs["split"]["cpu"] for c in suite.tables[0].columns]
    # P1 at p_i 0.98: Transformer > GUT > UT; ours: Transformer > GUT (every seed) > UT (seeds overlap GUT's)
    accs = {"transformer": [0.9, 0.92, 0.94], "gut": [0.7, 0.72, 0.68], "ut": [0.69, 0.71, 0.6]}
    out = tmp_path / "flipflop"
    for spec in expand(suite, "cpu", seeds=3):
        if spec.model_entry not in accs:
            continue
        d = out / spec.run_id
        d.mkdir(parents=True)
        (d / "run.json").write_text("{}")
        (d / "summary.json").write_text(json.dumps({"finished": True, "step": 200}))
        (d / "compare_run.json").write_text(json.dumps({"steps": [{"step": "train", "seconds": 12.0},
                                                                  {"step": "eval_default", "seconds": 3.0}]}))
        acc = accs[spec.model_entry][spec.seed]
        (d / "eval.json").write_text(json.dumps({"splits": {s: {"n": 400, "metrics": {"last_read_acc": {"mean": acc}},
                                                                 "stats": {"depth": {"mean": 2.0 + spec.seed}}}
                                                             for s in splits}}))
    R.record_selection(out, suite, "cpu", 3, ["transformer", "ut", "gut", "tlb"], None)
    md = tmp_path / "out.md"
    md.write_text("old table\n## Reading\nhand-written\n")
    assert bench.main(["--results", str(tmp_path), "--suites", "flipflop,listops", "--out", str(md)]) == 0
    text = md.read_text()
    assert "| Transformer | 92.0 ± 1.2 (3 seeds), depth 3.0 |" in text and "| 200 | 12 | 3 |" in text
    assert "| TLB | missing | missing |" in text and "Not run: Transformer (NoPE)" in text
    assert "old table" not in text and text.endswith("## Reading\nhand-written\n")
    assert "ours Transformer 92.0 > GUT 70.0 > UT 66.7" in text and "3 of 3 model pairs are ordered as in P1." in text
    assert "1 of its 2 steps are within noise: GUT > UT." in text
    assert "Not run: no `listops` selection at preset cpu" in text


def test_tlb_blocks_keep_default_init_ut_blocks_xavier():
    """JRC inits the FFN of TransformerBlock / GatedTransformerBlock (xavier,
    biases N(0, 1e-6)) but leaves TLBBlock, GatedTLBBlock and the memory
    update at PyTorch's defaults (biases U(±1/sqrt(fan_in)))."""
    gut, tlb, gutlb = build("gut", False, d=64), build("tlb", False, d=64), build("gutlb", False, d=64)
    assert gut.block.core.ffn.up.bias.abs().max() < 1e-4 and gut.block.gate.up.bias.abs().max() < 1e-4
    for b in (tlb.blocks[0].core.ffn.up.bias, gutlb.block.core.ffn.down.bias, gutlb.block.gate.up.bias,
              tlb.updates[0].ffn.up.bias):
        assert b.abs().max() > 1e-2
