"""Heads, pooling, the P1 block and the reference encoders (comparison half)."""
import pytest
import torch

from trainer.models import get_encoder_spec
from trainer.models.base import EncoderConfig, EncoderOutput
from trainer.models.blocks import XPos, add_start_end
from trainer.models.heads import ClassifierHead, PairHead, SeqModel, pair_features, pool, sample_stat

REFERENCE = ("transformer", "transformer_rope", "transformer_xpos", "rnn", "lstm", "gru", "looped")


def _mask(lengths, width):
    return torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]


def test_pooling_on_hand_made_tensors():
    h = torch.arange(2 * 4 * 2, dtype=torch.float).view(2, 4, 2)     # h[b, t] = [8b + 2t, 8b + 2t + 1]
    m = _mask([3, 1], 4)
    assert torch.equal(pool(h, m, "mean"), torch.tensor([[2.0, 3.0], [8.0, 9.0]]))
    assert torch.equal(pool(h, m, "end"), torch.tensor([[4.0, 5.0], [8.0, 9.0]]))
    assert torch.equal(pool(h, m, "cls"), torch.tensor([[0.0, 1.0], [8.0, 9.0]]))
    with pytest.raises(ValueError):
        pool(h, m, "max")


def test_pair_features_and_heads_shapes():
    u, v = torch.tensor([[1.0, -2.0]]), torch.tensor([[3.0, 1.0]])
    assert torch.equal(pair_features(u, v), torch.tensor([[1.0, -2.0, 3.0, 1.0, 3.0, -2.0, 2.0, 3.0]]))
    enc = EncoderOutput(torch.randn(3, 5, 8), _mask([5, 2, 3], 5))
    assert ClassifierHead(8, 7, "end")(enc).shape == (3, 7)
    head = PairHead(8, 7)
    assert head.mlp[0].in_features == 32 and head(enc, enc).shape == (3, 7)


class _Recorder(torch.nn.Module):
    """An encoder that returns its embedded tokens and remembers its calls."""

    def __init__(self):
        super().__init__()
        self.calls = []
        self.emb = torch.nn.Embedding(5, 4)

    def forward(self, tokens, mask):
        self.calls.append(tokens.shape)
        return EncoderOutput(self.emb(tokens), mask, None, {"depth": mask.float() * 2})


def test_pair_model_encodes_both_sentences_in_one_batch():
    enc = _Recorder()
    model = SeqModel(enc, PairHead(4, 3, "mean"))
    t1, t2 = torch.tensor([[1, 2, 0], [3, 0, 0]]), torch.tensor([[1, 1, 1, 4], [2, 2, 0, 0]])
    logits, out = model(t1, t1 != 0, t2, t2 != 0)
    assert enc.calls == [(4, 4)] and logits.shape == (2, 3)
    # each half pooled on its own: the same as pooling the sentences separately
    u = pool(enc.emb(t1), t1 != 0, "mean")
    v = pool(enc.emb(t2), t2 != 0, "mean")
    assert torch.allclose(logits, model.head.mlp(pair_features(u, v)))
    assert torch.equal(out.stats["depth"], torch.tensor([2.0, 2.0]))


def test_sample_stat():
    m = _mask([2, 3], 3)
    assert torch.equal(sample_stat(torch.tensor([[1.0, 3.0, 100.0], [1.0, 2.0, 3.0]]), m), torch.tensor([2.0, 2.0]))
    assert torch.equal(sample_stat(torch.tensor(4.0), m), torch.tensor([4.0, 4.0]))


def test_start_end_positions():
    h = torch.ones(2, 3, 2)
    start, end = torch.tensor([5.0, 5.0]), torch.tensor([7.0, 7.0])
    out, m = add_start_end(h, _mask([3, 1], 3), start, end)
    assert out.shape == (2, 5, 2)
    assert m.tolist() == [[True] * 5, [True, True, True, False, False]]
    assert out[0, :, 0].tolist() == [5, 1, 1, 1, 7] and out[1, :, 0].tolist() == [5, 1, 7, 0, 0]


@pytest.mark.parametrize("name", REFERENCE)
def test_causal_encoders_ignore_later_tokens(name):
    torch.manual_seed(0)
    model = get_encoder_spec(name).build(EncoderConfig(vocab_size=6, d_model=16, n_layer=2, n_head=2, d_ff=32,
                                               causal=True)).eval()
    a = torch.randint(1, 6, (3, 10))
    b = a.clone()
    b[:, 6:] = torch.randint(1, 6, (3, 4))
    mask = torch.ones_like(a, dtype=torch.bool)
    ha, hb = model(a, mask).hidden, model(b, mask).hidden
    assert torch.allclose(ha[:, :6], hb[:, :6], atol=1e-5)
    assert not torch.allclose(ha[:, 6:], hb[:, 6:], atol=1e-5)


@pytest.mark.parametrize("name", ["transformer", "transformer_xpos", "gru"])
def test_right_padding_does_not_change_real_positions(name):
    torch.manual_seed(0)
    model = get_encoder_spec(name).build(EncoderConfig(vocab_size=6, d_model=16, n_layer=2, n_head=2, d_ff=32,
                                               causal=False)).eval()
    t = torch.tensor([[1, 2, 3, 4]])
    padded = torch.tensor([[1, 2, 3, 4, 0, 0, 0]])
    o1, o2 = model(t, t != 0), model(padded, padded != 0)
    n = int(o1.mask.sum())
    assert torch.allclose(o1.hidden[:, :n], o2.hidden[:, :n], atol=1e-5)
    assert int(o2.mask.sum()) == n


def test_xpos_scores_depend_on_relative_position_only():
    torch.manual_seed(0)
    xp = XPos(8)
    q, k = torch.randn(1, 1, 1, 8).expand(1, 1, 12, 8), torch.randn(1, 1, 1, 8).expand(1, 1, 12, 8)
    pos = torch.arange(12).float()[None]
    qr, kr = xp(q.clone(), k.clone(), pos)
    s = qr[0, 0] @ kr[0, 0].T            # s[i, j] = score of query at i, key at j
    assert torch.allclose(s[5, 2], s[9, 6], atol=1e-5) and torch.allclose(s[3, 3], s[10, 10], atol=1e-5)
    assert not torch.allclose(s[5, 2], s[5, 4], atol=1e-3)
