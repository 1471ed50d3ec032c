"""tfx.model.layers against nn.LayerNorm and nn.TransformerEncoderLayer."""

import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

import tfx
from tfx.model.attention import causal_mask, padding_mask
from tfx.model.layers import EncoderLayer, FeedForward, LayerNorm


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.integers(1, 6), st.integers(1, 16), st.sampled_from([1e-5, 1e-12]))
def test_layernorm_matches_torch(B, L, d, eps):
    tfx.set_seed(0)
    ref = nn.LayerNorm(d, eps=eps)
    with torch.no_grad():
        ref.weight.normal_()
        ref.bias.normal_()
    ours = LayerNorm(d, eps)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(B, L, d) * 3 + 1
    assert_close(ours(x), ref(x))


def test_layernorm_gradcheck_float64():
    tfx.set_seed(0)
    ln = LayerNorm(5).double()
    with torch.no_grad():
        ln.weight.normal_()
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ln, (x,))
    assert torch.autograd.gradcheck(
        lambda w, b: torch.nn.functional.layer_norm(x, (5,), w, b),
        (ln.weight.detach().requires_grad_(), ln.bias.detach().requires_grad_()),
    )


layer_cfg = st.tuples(
    st.integers(1, 3),  # B
    st.integers(1, 7),  # L
    st.sampled_from([(8, 2), (12, 3), (16, 4)]),  # d_model, n_heads
    st.sampled_from([16, 32]),  # d_ff
    st.booleans(),  # norm_first
    st.sampled_from(["relu", "gelu"]),
    st.sampled_from(["none", "causal", "padding"]),
)


@settings(max_examples=30, deadline=None)
@given(layer_cfg)
def test_encoder_layer_matches_torch(cfg):
    B, L, (d, h), d_ff, norm_first, act, mask_kind = cfg
    tfx.set_seed(0)
    ref = nn.TransformerEncoderLayer(
        d, h, d_ff, dropout=0.0, activation=act, batch_first=True, norm_first=norm_first
    ).eval()
    for p in ref.parameters():  # non-trivial LayerNorm and biases, so a swapped copy would show
        nn.init.normal_(p, std=0.3)
    ours = EncoderLayer.from_torch(ref).eval()
    x = torch.randn(B, L, d)
    lengths = torch.arange(B) % L + 1
    am = (torch.arange(L)[None] < lengths[:, None]).long()  # (B, L)
    if mask_kind == "none":
        want, got = ref(x), ours(x)
    elif mask_kind == "causal":
        want, got = ref(x, src_mask=~causal_mask(L)), ours(x, causal_mask(L))
    else:
        want, got = ref(x, src_key_padding_mask=~am.bool()), ours(x, padding_mask(am))
        keep = am.bool()  # torch's fast path may zero padded rows; compare the real tokens
        want, got = want[keep], got[keep]
    assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_encoder_layer_sdpa_equals_naive_and_trains():
    tfx.set_seed(0)
    a = EncoderLayer(16, 4, 32, dropout=0.0)
    b = EncoderLayer(16, 4, 32, dropout=0.0, attn_impl="sdpa")
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 5, 16)
    assert_close(a(x, causal_mask(5)), b(x, causal_mask(5)))
    y, w = a(x, return_weights=True)
    assert w.shape == (2, 4, 5, 5)
    y.sum().backward()
    assert all(p.grad is not None for p in a.parameters())


def test_bad_input():
    with pytest.raises(ValueError, match=r"expected last dim 8, got shape \(2, 3, 4\)"):
        LayerNorm(8)(torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match=r"expected shape \(\*, \*, 8\), got \(2, 3, 4\)"):
        FeedForward(8, 16)(torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="activation"):
        FeedForward(8, 16, activation="swish")
    with pytest.raises(ValueError, match=r"expected shape \(\*, \*, 8\), got \(3, 8\)"):
        EncoderLayer(8, 2, 16)(torch.randn(3, 8))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layernorm_half_precision_matches_torch(dtype):
    """Rows with std ~250 and a constant row, with BERT's eps = 1e-12. Computed in float16, the
    variance overflows and eps rounds to 0 (0 / 0 on the constant row); nn.LayerNorm computes its
    statistics in float32, and so does tfx, returning the input dtype."""
    tfx.set_seed(0)
    x = (torch.randn(4, 6, 64) * 250).to(dtype)
    x[0, 0] = 3.0  # a constant row
    ref = nn.LayerNorm(64, eps=1e-12)
    with torch.no_grad():
        ref.weight.normal_(1.0, 0.1)
        ref.bias.normal_(0.0, 0.1)
    ref = ref.to(dtype)
    ours = LayerNorm(64, eps=1e-12).to(dtype)
    ours.load_state_dict(ref.state_dict())
    if dtype == torch.float16:  # the failure this guards against, in the input dtype
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        assert var.isinf().any() and (var[0, 0] + 1e-12 == 0).all()
    got, want = ours(x), ref(x)
    assert got.dtype == dtype and got.isfinite().all()
    assert_close(got, want)
    assert (got[0, 0] == ref.bias).all()  # the constant row normalises to 0: only β is left


def _contiguous_dropout_input(module, args):
    """nn.MultiheadAttention returns a non-contiguous (L, B, d)-strided tensor, and dropout draws
    its mask in memory order: made contiguous, the same draws land on the same entries."""
    return (args[0].contiguous(),)


@pytest.mark.parametrize("norm_first", [False, True])
def test_torch_layout_matches_torch_in_training(norm_first):
    """ff_inner_dropout=True is nn.TransformerEncoderLayer's dropout layout: in training, with the
    same seed, both draw dropout1, the FFN's inner dropout and dropout2 in the same order and give
    the same output and gradients. (Attention dropout is set to 0 on both: torch's runs inside its
    fused kernel.) BERT's layout, ff_inner_dropout=False, draws one mask fewer and differs."""
    tfx.set_seed(0)
    ref = nn.TransformerEncoderLayer(
        16, 4, 32, dropout=0.3, activation="gelu", batch_first=True, norm_first=norm_first
    ).train()
    ref.self_attn.dropout = 0.0
    ours = EncoderLayer.from_torch(ref).train()
    ours.attn.dropout = 0.0
    assert ours.ff_inner_dropout and ours.ff.drop.p == 0.3
    bert = EncoderLayer(16, 4, 32, dropout=0.3, norm_first=norm_first, ff_inner_dropout=False)
    bert.load_state_dict(ours.state_dict())
    bert.attn.dropout = 0.0
    assert bert.ff.drop.p == 0.0 and bert.drop2.p == 0.3
    for m in ref.modules():
        if isinstance(m, nn.Dropout):
            m.register_forward_pre_hook(_contiguous_dropout_input)
    x = torch.randn(2, 5, 16)
    tfx.set_seed(1)
    want = ref(x)
    tfx.set_seed(1)
    got = ours(x)
    assert_close(got, want, atol=1e-5, rtol=1e-4)
    got.pow(2).sum().backward()
    want.pow(2).sum().backward()
    assert_close(ours.ff.fc1.weight.grad, ref.linear1.weight.grad, atol=1e-4, rtol=1e-4)
    tfx.set_seed(1)
    assert (bert(x) - want).abs().max() > 0.1  # the BERT layout is another function in training
    ref.eval(), ours.eval(), bert.eval()
    with torch.no_grad():  # ... and the same one in eval mode
        assert_close(bert(x), ours(x))


def _hf_bert_layer(hidden_act="gelu", seed=0):
    """A small Hugging Face BertLayer with non-zero biases and LayerNorm offsets, eval mode."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.bert.modeling_bert import BertLayer

    tfx.set_seed(seed)
    cfg = transformers.BertConfig(
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=64,
        hidden_act=hidden_act,
        attn_implementation="eager",
    )
    layer = BertLayer(cfg)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return layer.eval()


def test_torch_layer_from_hf_bert_computes_what_bertlayer_computes():
    """The copy behind chapters 01 (A21) and 05 (A23): same function in eval mode, and each
    setting reverted to torch's default changes it."""
    from tfx.model.layers import hf_bert_torch_settings, torch_layer_from_hf_bert

    bert = _hf_bert_layer()
    settings = hf_bert_torch_settings(bert)
    assert settings == dict(
        d_model=32,
        nhead=4,
        dim_feedforward=64,
        dropout=0.1,
        activation="gelu",
        layer_norm_eps=1e-12,
        batch_first=True,
        norm_first=False,
    )
    ref = torch_layer_from_hf_bert(bert)
    assert isinstance(ref, nn.TransformerEncoderLayer) and not ref.training
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        assert_close(ref(x), bert(x))
        relu = torch_layer_from_hf_bert(bert, activation="relu")(x)
        assert (relu - ref(x)).abs().max() > 1e-3
    # the weights are copies, not shared: changing the copy leaves BERT's alone
    with torch.no_grad():
        ref.linear1.weight.zero_()
    assert bert.intermediate.dense.weight.abs().sum() > 0


def test_torch_layer_from_hf_bert_relu_layer():
    from tfx.model.layers import torch_layer_from_hf_bert

    bert = _hf_bert_layer(hidden_act="relu")
    ref = torch_layer_from_hf_bert(bert)
    x = torch.randn(1, 3, 32)
    with torch.no_grad():
        assert_close(ref(x), bert(x))


def test_torch_layer_from_hf_bert_bad_input_gets_a_clear_error():
    from tfx.model.layers import hf_bert_torch_settings, torch_layer_from_hf_bert

    with pytest.raises(TypeError, match="expected a Hugging Face BertLayer"):
        torch_layer_from_hf_bert(nn.Linear(4, 4))
    with pytest.raises(TypeError, match="expected a Hugging Face BertLayer"):
        torch_layer_from_hf_bert("bert")
    with pytest.raises(TypeError, match="expected a Hugging Face BertLayer"):
        hf_bert_torch_settings(EncoderLayer(32, 4, 64))
    bert = _hf_bert_layer()
    with pytest.raises(ValueError, match=r"linear1.weight the shape \(2048, 32\).*\(64, 32\)"):
        torch_layer_from_hf_bert(bert, dim_feedforward=2048)
    with pytest.raises(ValueError, match="exact GELU and ReLU only"):
        hf_bert_torch_settings(_hf_bert_layer(hidden_act="gelu_new"))


def test_article_encoder_layer_is_the_articles_construction():
    from tfx.model.layers import ArticleEncoderLayer

    tfx.set_seed(0)
    lay = ArticleEncoderLayer(32, 4).eval()
    assert lay.attention.qkv.bias is None and lay.attention.out.bias is None
    assert lay.norm1.eps == lay.norm2.eps == 1e-5
    assert lay.dropout1.p == lay.dropout2.p == 0.1
    assert tuple(lay.ffn[0].weight.shape) == (128, 32) and lay.ffn[0].bias is not None
    x = torch.randn(2, 5, 32)
    y = lay(x)
    assert y.shape == (2, 5, 32)
    assert_close(y.sum(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)  # post-LN: rows sum to 0
