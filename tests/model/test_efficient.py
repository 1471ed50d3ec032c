"""tfx.model.efficient: chunked attention equals full attention for every mask, linear attention
against its O(L²) definition, the sliding-window mask, and the profiler's peak-memory count."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import tfx
from tfx.inspect.memory import peak_memory
from tfx.model.attention import causal_mask, scaled_dot_product_attention
from tfx.model.efficient import (
    DEFAULT_BLOCK_SIZE,
    chunked_attention,
    elu_feature_map,
    linear_attention,
    online_softmax_attention,
    sliding_window_mask,
)


def _qkv(shape_q=(2, 3, 37, 8), L_k=29, d_v=5, dtype=torch.float32):
    tfx.set_seed(0)
    *batch, L_q, d_k = shape_q
    q = torch.randn(*batch, L_q, d_k, dtype=dtype)
    k = torch.randn(*batch, L_k, d_k, dtype=dtype)
    v = torch.randn(*batch, L_k, d_v, dtype=dtype)
    return q, k, v


def _masks(B, H, L_q, L_k):
    g = torch.Generator().manual_seed(1)
    full_rows = torch.rand(B, H, L_q, L_k, generator=g) > 0.5
    full_rows[0, 0, 3] = False  # a fully masked query row
    keys = torch.ones(B, 1, 1, L_k, dtype=torch.bool)
    keys[0, ..., -4:] = False  # padding keys
    return {
        "none": None,
        "per row (B, H, L_q, L_k)": full_rows,
        "key padding (B, 1, 1, L_k)": keys,
        "2-D (L_q, L_k)": torch.rand(L_q, L_k, generator=g) > 0.3,
        "1-D (L_k,)": torch.arange(L_k) % 3 != 0,
        "all masked": torch.zeros(L_q, L_k, dtype=torch.bool),
    }


# query blocks (chunked) and query × key tiles with the online softmax: the same function
KERNELS = pytest.mark.parametrize(
    "attend", [chunked_attention, online_softmax_attention], ids=["chunked", "online softmax"]
)


@KERNELS
@pytest.mark.parametrize("block_size", [1, 5, 16, 37, 100, DEFAULT_BLOCK_SIZE])
@pytest.mark.parametrize("mask_name", list(_masks(2, 3, 37, 29)))
def test_blocked_equals_full_attention_for_every_mask(attend, block_size, mask_name):
    q, k, v = _qkv()
    mask = _masks(2, 3, 37, 29)[mask_name]
    out = attend(q, k, v, mask, block_size=block_size)
    ref = scaled_dot_product_attention(q, k, v, mask)[0]
    assert out.shape == (2, 3, 37, 5) and torch.isfinite(out).all()
    assert_close(out, ref, atol=1e-6, rtol=1e-5)


@KERNELS
def test_blocked_matches_torch_sdpa_and_zeroes_fully_masked_rows(attend):
    q, k, v = _qkv((1, 2, 300, 16), L_k=300, d_v=16)
    mask = causal_mask(300)
    out = attend(q, k, v, mask)  # default block size: 2 blocks
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-5, rtol=1e-4)
    dead = torch.ones(300, 300, dtype=torch.bool)
    dead[7] = False
    out = attend(q, k, v, dead, block_size=64)
    assert torch.equal(out[..., 7, :], torch.zeros(1, 2, 16))
    assert not torch.equal(out[..., 8, :], torch.zeros(1, 2, 16))


@KERNELS
def test_blocked_low_precision_and_scale(attend):
    q, k, v = _qkv(dtype=torch.bfloat16)
    out = attend(q, k, v, block_size=8)
    assert out.dtype == torch.bfloat16
    assert_close(out, scaled_dot_product_attention(q, k, v)[0])
    q, k, v = _qkv()
    assert_close(
        attend(q, k, v, block_size=4, scale=0.3),
        scaled_dot_product_attention(q, k, v, scale=0.3)[0],
    )


@KERNELS
def test_blocked_attention_refuses_bad_input(attend):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="block_size must be an int >= 1"):
        attend(q, k, v, block_size=0)
    with pytest.raises(TypeError, match="block_size must be an int"):
        attend(q, k, v, block_size=2.0)
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        attend(q, k, v, torch.ones(37, 29))
    with pytest.raises(ValueError, match="does not broadcast"):
        attend(q, k, v, torch.ones(29, 37, dtype=torch.bool))
    with pytest.raises(ValueError, match="q and k must share d_k"):
        attend(q, k[..., :3], v)
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        attend(q.numpy(), k, v)


def test_sliding_window_mask():
    m = sliding_window_mask(6, 1)
    assert m.dtype == torch.bool and m.shape == (6, 6)
    assert m.sum().item() == 6 + 2 * 5  # the diagonal and one neighbour either side
    assert torch.equal(sliding_window_mask(4, 0), torch.eye(4, dtype=torch.bool))
    assert sliding_window_mask(5, 10).all()
    q, k, v = _qkv((1, 1, 20, 4), L_k=20, d_v=4)
    mask = sliding_window_mask(20, 2)
    assert_close(
        chunked_attention(q, k, v, mask, block_size=3),
        scaled_dot_product_attention(q, k, v, mask)[0],
    )
    with pytest.raises(ValueError, match="window must be an int >= 0"):
        sliding_window_mask(5, -1)
    with pytest.raises(TypeError, match="L must be an int"):
        sliding_window_mask(5.0, 1)


def test_linear_attention_equals_its_quadratic_form():
    q, k, v = _qkv((2, 2, 11, 6), L_k=13, d_v=3, dtype=torch.float64)
    w = elu_feature_map(q) @ elu_feature_map(k).transpose(-2, -1)  # (…, L_q, L_k), all > 0
    ref = (w / w.sum(-1, keepdim=True)) @ v
    assert_close(linear_attention(q, k, v, eps=1e-12), ref)
    keys = torch.ones(2, 2, 13, dtype=torch.bool)
    keys[..., -3:] = False
    wm = w * keys[..., None, :]
    ref = (wm / wm.sum(-1, keepdim=True)) @ v
    assert_close(linear_attention(q, k, v, key_mask=keys, eps=1e-12), ref)
    # a different function from softmax attention: the gap is far from rounding
    gap = (linear_attention(q, k, v) - scaled_dot_product_attention(q, k, v)[0]).abs().max()
    assert gap > 1e-2


def test_linear_attention_refuses_bad_input():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="key_mask must be a bool"):
        linear_attention(q, k, v, key_mask=torch.ones(2, 3, 29))
    with pytest.raises(ValueError, match=r"key_mask must be \(…, L_k\) with L_k = 29"):
        linear_attention(q, k, v, key_mask=torch.ones(2, 3, 7, dtype=torch.bool))
    with pytest.raises(ValueError, match="eps must be a finite float > 0"):
        linear_attention(q, k, v, eps=0.0)
    with pytest.raises(ValueError, match="k and v must share L_k"):
        linear_attention(q, k, v[..., :3, :])


def test_peak_memory_counts_what_a_call_allocates():
    x = torch.randn(256, 256)  # allocated before: not counted

    def two_buffers():
        a = x @ x  # 256 KiB
        b = a.softmax(-1)  # 256 KiB more while a is alive
        return b.sum()

    result, peak = peak_memory(two_buffers)
    assert result.shape == () and peak >= 2 * 256 * 256 * 4
    assert peak < 3 * 256 * 256 * 4
    _, again = peak_memory(two_buffers)
    assert again == peak  # exact and repeatable
    with pytest.raises(TypeError, match="fn must be callable"):
        peak_memory(3)


def test_chunked_peak_memory_is_far_below_naive():
    q, k, v = _qkv((1, 1, 1024, 16), L_k=1024, d_v=16)
    _, naive = peak_memory(lambda: scaled_dot_product_attention(q, k, v)[0])
    _, chunked = peak_memory(chunked_attention, q, k, v, block_size=64)
    assert naive >= 2 * 1024 * 1024 * 4  # scores and weights, L² floats each
    assert chunked * 8 < naive


def test_online_softmax_scratch_memory_does_not_grow_with_length():
    """Beyond its (L, d_v) output, the tiled kernel holds a few (block, block) tiles whatever L."""
    extra = {}
    for L in (512, 2048):
        q, k, v = _qkv((1, 1, L, 16), L_k=L, d_v=16)
        _, peak = peak_memory(online_softmax_attention, q, k, v, block_size=64)
        extra[L] = peak - L * 16 * 4  # minus the output
    assert extra[2048] <= extra[512] * 1.1 and extra[512] < 8 * 64 * 64 * 4


def test_random_features_are_seeded_gaussian_rows():
    from tfx.model.efficient import random_features

    w = random_features(64, 16, seed=3)
    assert w.shape == (64, 16) and torch.equal(w, random_features(64, 16, seed=3))
    block = w[:16]
    gram = block @ block.T  # orthogonal rows within a block
    assert_close(gram - torch.diag(torch.diagonal(gram)), torch.zeros(16, 16), atol=1e-4, rtol=0)
    many = random_features(4096, 16, seed=0, orthogonal=False)
    assert abs(many.pow(2).mean().item() - 1.0) < 0.05  # N(0, I) rows: unit variance
    with pytest.raises(ValueError, match="n_features must be an int >= 1"):
        random_features(0, 16)


def test_performer_attention_converges_to_softmax_attention():
    """Random features estimate softmax attention without bias: the gap shrinks as m grows and
    ends far below elu + 1's, which does not approximate it at all."""
    from tfx.model.efficient import performer_attention

    tfx.set_seed(0)
    q, k, v = (torch.randn(2, 256, 32, dtype=torch.float64) for _ in range(3))  # (H, L, d)
    q, k = 0.6 * q, 0.6 * k
    soft = scaled_dot_product_attention(q, k, v)[0]

    def gap(out):
        return ((out - soft).norm() / soft.norm()).item()

    gaps = [sum(gap(performer_attention(q, k, v, m, seed=s)) for s in range(3)) / 3
            for m in (16, 256, 4096)]  # fmt: skip
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < gaps[0] / 3
    assert gaps[2] < gap(linear_attention(q, k, v))
    out = performer_attention(q[:, :10], k, v[..., :5], 64)
    assert out.shape == (2, 10, 5) and out.isfinite().all()
    assert performer_attention((30 * q).float(), (30 * k).float(), v.float(), 64).isfinite().all()


def test_saved_for_backward_sorts_activations_weights_and_copies():
    from tfx.inspect.memory import saved_for_backward
    from tfx.model.layers import EncoderLayer

    tfx.set_seed(0)
    layer = EncoderLayer(32, 4, 64, dropout=0.0).train()
    x = torch.randn(2, 8, 32)
    fp32 = saved_for_backward(lambda: layer(x), layer)
    assert fp32["parameters"] > 0 and fp32["copies of parameters"] == 0 and fp32["activations"] > 0

    def amp():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return layer(x)

    bf16 = saved_for_backward(amp, layer)
    assert bf16["copies of parameters"] > 0 and bf16["parameters"] < fp32["parameters"] / 10
    assert 0.4 * fp32["activations"] < bf16["activations"] < fp32["activations"]
    with torch.no_grad():  # nothing is saved without a graph
        assert sum(saved_for_backward(lambda: layer(x), layer).values()) == 0
    with pytest.raises(TypeError, match="fn must be callable"):
        saved_for_backward(None, layer)
    with pytest.raises(TypeError, match="module must be"):
        saved_for_backward(lambda: None, "layer")
