"""tfx.model.attention against torch.nn.MultiheadAttention and F.scaled_dot_product_attention."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

import tfx
from tfx.model.attention import (
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)

shapes = st.tuples(
    st.integers(1, 3),  # B
    st.integers(1, 9),  # L
    st.sampled_from([1, 2, 4]),  # H
    st.sampled_from([1, 4, 8]),  # d_k
    st.booleans(),  # bias
)


def _pair(B, L, H, d_k, bias, seed=0):
    tfx.set_seed(seed)
    ref = nn.MultiheadAttention(H * d_k, H, bias=bias, batch_first=True).eval()
    ours = MultiHeadAttention.from_torch(ref).eval()
    x = torch.randn(B, L, H * d_k)
    return ref, ours, x


def _lengths_mask(B, L):
    """A (B, L) Hugging Face mask with a different number of real tokens per row (at least one)."""
    lengths = torch.arange(B) % L + 1
    return (torch.arange(L)[None, :] < lengths[:, None]).long()  # (B, L)


@settings(max_examples=25, deadline=None)
@given(shapes)
def test_mha_matches_torch_no_mask(s):
    ref, ours, x = _pair(*s)
    want, want_w = ref(x, x, x, average_attn_weights=False)
    got, got_w = ours(x)
    assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert_close(got_w, want_w, atol=1e-6, rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(shapes)
def test_mha_matches_torch_causal(s):
    ref, ours, x = _pair(*s)
    L = x.size(1)
    mask = causal_mask(L)
    want, _ = ref(x, x, x, attn_mask=~mask)  # torch: True = NOT allowed
    got, _ = ours(x, mask)
    assert_close(got, want, atol=1e-5, rtol=1e-4)


@settings(max_examples=25, deadline=None)
@given(shapes)
def test_mha_matches_torch_padding(s):
    ref, ours, x = _pair(*s)
    am = _lengths_mask(x.size(0), x.size(1))
    want, _ = ref(x, x, x, key_padding_mask=~am.bool())
    got, _ = ours(x, padding_mask(am))
    assert_close(got, want, atol=1e-5, rtol=1e-4)


@settings(max_examples=25, deadline=None)
@given(shapes, st.sampled_from(["none", "causal", "padding"]))
def test_naive_equals_sdpa(s, kind):
    _, ours, x = _pair(*s)
    fast = MultiHeadAttention(
        ours.d_model, ours.n_heads, bias=ours.qkv.bias is not None, attn_impl="sdpa"
    )
    fast.load_state_dict(ours.state_dict())
    B, L, _ = x.shape
    mask = {"none": None, "causal": causal_mask(L), "padding": padding_mask(_lengths_mask(B, L))}[
        kind
    ]
    got, w = fast(x, mask)
    want, _ = ours(x, mask)
    assert w is None
    assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_function_matches_torch_sdpa():
    tfx.set_seed(0)
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4)
    mask = torch.rand(2, 1, 5, 7) > 0.3
    mask[..., 0] = True  # every query keeps one key, so torch's result is defined too
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert_close(w.sum(-1), torch.ones(2, 3, 5))


def test_fully_masked_row_is_zero_not_nan():
    tfx.set_seed(0)
    m = MultiHeadAttention(8, 2, bias=False)
    x = torch.randn(2, 4, 8)
    am = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]])  # the second sequence is all padding
    for impl in ("naive", "sdpa"):
        m.attn_impl = impl
        out, w = m(x, padding_mask(am))
        assert not out.isnan().any()
        assert_close(out[1], torch.zeros(4, 8))
        if w is not None:
            assert_close(w[1], torch.zeros(2, 4, 4))


def test_head_scale_zero_removes_a_head():
    tfx.set_seed(0)
    m = MultiHeadAttention(8, 2)
    x = torch.randn(1, 3, 8)
    with torch.no_grad():
        m.out.weight[:, 4:] = 0  # W_O ignores head 1 ...
    assert_close(
        m(x, head_scale=torch.tensor([1.0, 0.0]))[0], m(x)[0]
    )  # ... so ablating it changes nothing


def test_gradcheck_attention_float64():
    tfx.set_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = causal_mask(4)
    assert torch.autograd.gradcheck(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, mask)[0], (q, k, v)
    )
    m = MultiHeadAttention(6, 2).double()
    x = torch.randn(2, 4, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: m(x, mask)[0], (x,))


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda m: m(torch.randn(4, 8)), r"expected shape \(\*, \*, 8\), got \(4, 8\)"),
        (lambda m: m(torch.randn(1, 4, 6)), r"expected shape \(\*, \*, 8\), got \(1, 4, 6\)"),
        (
            lambda m: m(torch.randn(1, 4, 8), torch.ones(5, 5, dtype=torch.bool)),
            r"\(5, 5\).*\(1, 2, 4, 4\)",
        ),
        (lambda m: m(torch.randn(1, 4, 8), torch.ones(4, 4)), r"bool"),
        (lambda m: m(torch.randn(1, 4, 8), head_scale=torch.ones(3)), r"\(2,\).*\(3,\)"),
    ],
)
def test_bad_input_names_both_shapes(bad, message):
    with pytest.raises(ValueError, match=message):
        bad(MultiHeadAttention(8, 2))


def test_bad_constructor_and_function_inputs():
    with pytest.raises(ValueError, match=r"d_model \(10\).*n_heads \(3\)"):
        MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match=r"\(2, 4, 3\).*\(2, 4, 5\)"):
        scaled_dot_product_attention(
            torch.randn(2, 4, 3), torch.randn(2, 4, 5), torch.randn(2, 4, 5)
        )
    with pytest.raises(ValueError, match=r"\(2, 5, 3\).*\(2, 4, 3\)"):
        scaled_dot_product_attention(
            torch.randn(2, 4, 3), torch.randn(2, 5, 3), torch.randn(2, 4, 3)
        )
    with pytest.raises(ValueError, match=r"\(B, L\).*\(2, 1, 4\)"):
        padding_mask(torch.ones(2, 1, 4))


@pytest.mark.parametrize("impl", ["naive", "sdpa"])
@pytest.mark.parametrize("B, L", [(3, 5), (4, 4)])  # B == L: a (B, L) mask could pass as (L, L)
def test_key_padding_mask_matches_torch(impl, B, L):
    """key_padding_mask is the (B, L) padding mask, 1 = real token; with B == L it still means
    padding, never an (L, L) mask. Joined with a causal mask, it matches torch given both."""
    ref, ours, x = _pair(B, L, 2, 4, True)
    ours.attn_impl = impl
    am = _lengths_mask(B, L)  # (B, L), every row keeps at least one token
    want, _ = ref(x, x, x, key_padding_mask=~am.bool())
    got, _ = ours(x, key_padding_mask=am)
    assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert_close(got, ours(x, padding_mask(am))[0])  # the 4-D mask of padding_mask: the same
    cm = causal_mask(L)
    want, _ = ref(x, x, x, attn_mask=~cm, key_padding_mask=~am.bool())
    got, _ = ours(x, cm, key_padding_mask=am)
    assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_encoder_layer_takes_key_padding_mask():
    tfx.set_seed(0)
    layer = tfx.model.layers.EncoderLayer(8, 2, 16, dropout=0.0).eval()
    x, am = torch.randn(4, 4, 8), _lengths_mask(4, 4)  # B == L
    assert_close(layer(x, key_padding_mask=am), layer(x, padding_mask(am)))
    assert not torch.allclose(layer(x, key_padding_mask=am), layer(x, am.bool()))  # not (L, L)


def test_float16_scores_do_not_overflow_like_torch():
    """q·k reaches ~1e5 here, past float16's 65 504, while q·k/√d_k does not: torch's SDPA stays
    finite, and so must tfx (scores and softmax in float32, result back in float16)."""
    tfx.set_seed(0)
    base = torch.randn(1, 2, 6, 64)
    q, k = (base * 40).half(), (base * 40 + torch.randn_like(base)).half()
    v = torch.randn(1, 2, 6, 64).half()
    assert (q @ k.transpose(-2, -1)).isinf().any()  # the unscaled float16 product overflows
    mask = causal_mask(6)
    for m in (None, mask):
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        got, w = scaled_dot_product_attention(q, k, v, mask=m)
        assert want.isfinite().all() and got.dtype == w.dtype == torch.float16
        assert_close(got, want)
        assert_close(w.float().sum(-1), torch.ones(1, 2, 6), atol=1e-3, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fully_masked_rows_are_zero_on_both_paths(dtype):
    tfx.set_seed(0)
    m = MultiHeadAttention(8, 2, bias=False).to(dtype)
    x = torch.randn(2, 4, 8).to(dtype)
    am = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]])  # the second sequence is all padding
    empty = causal_mask(4).clone()
    empty[2] = False  # query 2 may attend to nothing
    for impl in ("naive", "sdpa"):
        m.attn_impl = impl
        for kwargs in ({"key_padding_mask": am}, {"mask": empty}):
            out, w = m(x, **kwargs)
            assert out.dtype == dtype and not out.isnan().any()
            rows = out[1] if "key_padding_mask" in kwargs else out[:, 2]
            assert (rows == 0).all()
            if w is not None:
                assert not w.isnan().any()
                assert (
                    (w[1] == 0).all() if "key_padding_mask" in kwargs else (w[:, :, 2] == 0).all()
                )


def test_naive_attention_with_a_mask_runs_under_bf16_autocast():
    """Under CPU autocast the score matmul returns bfloat16: the mask's fill value must fit it."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2, attn_impl="naive").eval()
    x = torch.randn(2, 5, 16)  # (B, L, d)
    keep = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)  # (B, L)
    with torch.no_grad():
        ref, _ = mha(x, key_padding_mask=keep)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, w = mha(x, key_padding_mask=keep)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert (w[0, :, :, 3:] == 0).all()  # the padded keys get no weight
    assert (out.float() - ref).abs().max() < 0.1  # bf16 rounding, not a different answer
