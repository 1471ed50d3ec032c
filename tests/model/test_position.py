"""tfx.model.position: sinusoidal PE, its rotation property, RoPE and ALiBi."""

import math

import pytest
import torch
from torch.testing import assert_close

import tfx
from tfx.model.position import (
    LearnedPositionalEmbedding,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    sinusoidal_encoding,
    sinusoidal_rotation,
    sinusoidal_wavelengths,
)


def test_sinusoidal_matches_the_formula():
    pe = sinusoidal_encoding(20, 8, dtype=torch.float64)
    p, i = 7, 2  # dims 4 and 5
    w = 10000 ** (-2 * i / 8)
    assert_close(pe[p, 2 * i].item(), math.sin(p * w))
    assert_close(pe[p, 2 * i + 1].item(), math.cos(p * w))
    assert sinusoidal_encoding(5, 8).dtype == torch.float32


@pytest.mark.parametrize("d,base", [(2, 10000.0), (16, 10000.0), (64, 100.0)])
def test_rotation_property(d, base):
    pe = sinusoidal_encoding(100, d, base, dtype=torch.float64)
    for k in (0, 1, 5, 37):
        R = sinusoidal_rotation(k, d, base)
        assert_close(pe[: 100 - k] @ R.T, pe[k:])  # PE(p + k) = R_k PE(p) for every p
        assert_close(R @ R.T, torch.eye(d, dtype=torch.float64))  # a rotation


def test_wavelengths_span_2pi_to_almost_2pi_base():
    wl = sinusoidal_wavelengths(512)
    assert_close(wl[0].item(), 2 * math.pi)
    assert wl[-1].item() < 2 * math.pi * 10000
    assert torch.all(wl[1:] > wl[:-1])


@pytest.mark.parametrize("bad", [0, 3, 7])
def test_odd_d_model_raises(bad):
    with pytest.raises(ValueError, match="even"):
        sinusoidal_encoding(4, bad)
    with pytest.raises(ValueError, match="even"):
        apply_rope(torch.randn(4, bad if bad else 1))


def test_rope_score_depends_only_on_offset():
    tfx.set_seed(0)
    q, k = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    L = 30
    Q = apply_rope(q.expand(L, 16))  # the same q placed at every position
    K = apply_rope(k.expand(L, 16))
    S = Q @ K.T  # (L, L): S[m, n] = score of q at m with k at n
    for off in range(-L + 1, L):
        diag = torch.diagonal(S, offset=off)
        assert_close(diag, diag[0].expand_as(diag))


def test_rope_keeps_norms_and_is_identity_at_zero():
    tfx.set_seed(0)
    x = torch.randn(2, 3, 10, 8)
    y = apply_rope(x)
    assert_close(y.norm(dim=-1), x.norm(dim=-1))
    assert_close(y[..., 0, :], x[..., 0, :])
    assert_close(
        apply_rope(x, positions=torch.arange(10) + 5)[..., 0, :],
        apply_rope(x[..., :1, :].expand(2, 3, 6, 8))[..., 5, :],
    )


def test_rope_bad_positions():
    with pytest.raises(ValueError, match=r"positions: expected shape \(4,\), got \(5,\)"):
        apply_rope(torch.randn(4, 8), positions=torch.arange(5))


def test_alibi_slopes_paper_values():
    assert_close(alibi_slopes(8), torch.tensor([2.0 ** -(h + 1) for h in range(8)]))
    s12 = alibi_slopes(12)
    assert s12.shape == (12,)
    assert_close(s12[:8], alibi_slopes(8))
    assert_close(s12[8:], alibi_slopes(16)[0::2][:4])
    with pytest.raises(ValueError):
        alibi_slopes(0)


def test_alibi_bias_depends_only_on_offset():
    b = alibi_bias(4, 6, 9)
    assert b.shape == (4, 6, 9)
    for i in range(5):
        assert_close(b[:, i + 1, 1:], b[:, i, :-1])
    assert torch.all(b <= 0) and torch.all(torch.diagonal(b, dim1=-2, dim2=-1) == 0)


def test_learned_positions_refuse_past_max_len():
    pe = LearnedPositionalEmbedding(16, 4)
    assert pe(16).shape == (16, 4)
    with pytest.raises(ValueError, match="17 exceeds the 16"):
        pe(17)


def test_rope_matches_hugging_face_llama():
    """tfx rotates interleaved pairs (2i, 2i+1); Llama rotates (i, i + d/2). Reordering the dims
    maps one onto the other, and then the two must agree (HF builds its frequencies in float32,
    hence the tolerance)."""
    import transformers
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    cfg = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, head_dim=16)
    tfx.set_seed(0)
    x = torch.randn(2, 4, 10, 16, dtype=torch.float64)  # (B, H, L, d_k)
    cos, sin = LlamaRotaryEmbedding(cfg)(x, torch.arange(10)[None])  # (1, L, d_k) each
    half = torch.cat(
        [torch.arange(0, 16, 2), torch.arange(1, 16, 2)]
    )  # interleaved → halves layout
    ref, _ = apply_rotary_pos_emb(x[..., half], x[..., half], cos, sin)  # (B, H, L, d_k)
    assert_close(apply_rope(x)[..., half], ref, rtol=0, atol=1e-6)


@pytest.mark.parametrize("n_heads", [1, 5, 8, 12, 16])
def test_alibi_matches_hugging_face_bloom(n_heads):
    """BLOOM adds slope_h·j to the scores of key j; within a row that differs from tfx's
    −slope_h·|i − j| only by a constant on the causal part j ≤ i, which softmax ignores."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    L = 7
    bloom = build_alibi_tensor(torch.ones(1, L), n_heads, torch.float32).view(
        n_heads, L
    )  # (H, L): slope_h·j
    assert_close(bloom[:, 1], alibi_slopes(n_heads))
    causal = torch.ones(L, L).tril().bool()  # (L, L)
    ours = alibi_bias(n_heads, L).masked_fill(~causal, float("-inf"))  # (H, L, L)
    theirs = (
        bloom[:, None, :].expand(n_heads, L, L).masked_fill(~causal, float("-inf"))
    )  # (H, L, L)
    assert_close(ours.softmax(-1), theirs.softmax(-1))


def test_rope_refuses_a_vector_without_a_length_axis():
    with pytest.raises(ValueError, match=r"x must be \(…, L, d\), got \(8,\)"):
        apply_rope(torch.randn(8))


def test_sinusoidal_rotation_takes_negative_offsets():
    """k is an offset, not a position: R_(−k) moves PE(p) back to PE(p − k), and is R_kᵀ."""
    pe = sinusoidal_encoding(40, 16, dtype=torch.float64)  # (40, 16)
    R_back = sinusoidal_rotation(-7, 16)  # (16, 16)
    assert_close(pe[10:] @ R_back.T, pe[3:33])  # rows: PE(p) R_(−7)ᵀ = PE(p − 7)
    assert_close(R_back, sinusoidal_rotation(7, 16).T)


@pytest.mark.parametrize("d", [2, 8, 512])
def test_sinusoidal_matches_the_numpy_articles_exp_log_construction(d):
    """Claim N12's construction: frequencies exp(2i·(−ln 10000 / d)), sin on even, cos on odd."""
    import numpy as np

    pos = np.arange(50)[:, None]  # (50, 1)
    freq = np.exp(np.arange(0, d, 2) * (-np.log(10000.0) / d))  # (d/2,)
    table = np.zeros((50, d))
    table[:, 0::2], table[:, 1::2] = np.sin(pos * freq), np.cos(pos * freq)
    ours = sinusoidal_encoding(50, d, dtype=torch.float64).numpy()
    assert np.abs(ours - table).max() < 1e-12
