"""BertConfig.position ("learned", "sinusoidal", "rope", "alibi"), MultiHeadAttention's attn_bias
and rotary hook, against chapter 02's reference functions in tfx.model.position;
bench/positions.py."""

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from torch.testing import assert_close

import tfx
from tfx.model.attention import MultiHeadAttention, scaled_dot_product_attention
from tfx.model.bert import BertConfig, BertForMaskedLM, BertModel
from tfx.model.layers import EncoderLayer
from tfx.model.position import (
    POSITION_TYPES,
    SINUSOIDAL_SCALE,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    sinusoidal_encoding,
)

ROOT = Path(__file__).resolve().parents[2]


def _cfg(position, **kw):
    return BertConfig.tiny(
        position=position, max_len=16, dropout=0.0, attn_dropout=0.0, n_layers=2, **kw
    )


def _heads(mha, x):
    """q, k, v of a MultiHeadAttention, (B, H, L, d_k), as its forward computes them."""
    q, k, v = mha.qkv(x).split(mha.d_model, dim=-1)  # 3 × (B, L, d)
    return mha.split_heads(q), mha.split_heads(k), mha.split_heads(v)  # (B, H, L, d_k)


def _padding(B, L):
    am = torch.ones(B, L, dtype=torch.long)
    am[1, L - 3 :] = 0  # (B, L): the second sequence ends in three pads
    return am


# ---- the config -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, message",
    [
        ("relative_key", "position must be one of 'learned', 'sinusoidal', 'rope', 'alibi'"),
        ("RoPE", "got 'RoPE'"),
        (None, "got None"),
        (3, "got 3"),
    ],
)
def test_bad_position_value(bad, message):
    with pytest.raises(ValueError, match=message):
        BertConfig.tiny(position=bad)


def test_rope_needs_an_even_head_size():
    with pytest.raises(
        ValueError, match=r"head size d_model / n_heads must be even, got 12 / 4 = 3"
    ):
        BertConfig.tiny(position="rope", d_model=12, n_heads=4)
    BertConfig.tiny(position="learned", d_model=12, n_heads=4)  # only RoPE pairs dims


@pytest.mark.parametrize("position", ["sinusoidal", "rope", "alibi"])
def test_only_learned_exports_to_hugging_face(position):
    with pytest.raises(ValueError, match=f"position='{position}' has no equivalent"):
        _cfg(position).to_hf_kwargs()


def test_learned_round_trips_through_hugging_face_and_to_dict():
    cfg = _cfg("learned")
    back = BertConfig.from_hf(transformers.BertConfig(**cfg.to_hf_kwargs()))
    assert back == cfg and back.position == "learned"
    assert "position" not in cfg.to_dict()  # the dict (and tfx.learn.train's cache key) of before
    for position in POSITION_TYPES:
        c = _cfg(position)
        assert BertConfig(**c.to_dict()) == c
        assert ("position" in c.to_dict()) == (position != "learned")


def test_parameters_only_learned_has_a_table():
    counts = {}
    for position in POSITION_TYPES:
        tfx.set_seed(0)
        m = BertModel(_cfg(position))
        counts[position] = sum(p.numel() for p in m.parameters())
        assert ("embeddings.pos.weight" in m.state_dict()) == (position == "learned")
    table = 16 * 64  # max_len × d_model
    assert counts["learned"] - table == counts["sinusoidal"] == counts["rope"] == counts["alibi"]


# ---- learned: the old behaviour, bit for bit ------------------------------------------------


def test_learned_is_the_same_function_as_before():
    """The explicit composition the model had before position types existed, compared with
    torch.equal: the default path has no extra operation."""
    cfg = _cfg("learned", attn_impl="sdpa")
    tfx.set_seed(0)
    m = BertModel(cfg).eval()
    ids = torch.randint(5, cfg.vocab_size, (2, 10))
    tt = torch.zeros_like(ids)
    am = _padding(2, 10)
    e = m.embeddings
    with torch.no_grad():
        x = e.norm(e.tok(ids) + e.seg(tt) + e.pos.weight[:10])  # (B, L, d)
        mask = am.bool()[:, None, None, :]  # (B, 1, 1, L)
        for layer in m.layers:
            a, _ = layer.attn(x, mask)
            x = layer.norm1(x + a)
            x = layer.norm2(x + layer.ff(x))
        got = m(ids, tt, am)
    assert torch.equal(got, x)
    assert all(layer.attn.rope_base is None for layer in m.layers)


@pytest.mark.parametrize("position", POSITION_TYPES)
def test_lengths_past_max_len(position):
    cfg = _cfg(position)
    tfx.set_seed(0)
    m = BertModel(cfg).eval()
    ids = torch.randint(5, cfg.vocab_size, (1, 3 * cfg.max_len))
    if position == "learned":
        with pytest.raises(ValueError, match="sequence length 48 exceeds the 16 learned positions"):
            m(ids)
    else:
        with torch.no_grad():
            out = m(ids)
        assert out.shape == (1, 48, 64) and torch.isfinite(out).all()


# ---- sinusoidal ------------------------------------------------------------------------------


def test_sinusoidal_adds_chapter_02s_table_at_any_length():
    cfg = _cfg("sinusoidal")
    tfx.set_seed(0)
    e = BertModel(cfg).embeddings
    ids = torch.randint(5, cfg.vocab_size, (2, 40))  # L = 40 > max_len = 16
    tt = torch.zeros_like(ids)
    pe = sinusoidal_encoding(40, 64) * SINUSOIDAL_SCALE  # (L, d): chapter 02's table
    with torch.no_grad():
        assert_close(e(ids, tt), e.norm(e.tok(ids) + e.seg(tt) + pe))
    # scaled to BERT's init: RMS 0.02 per entry, the size of a learned row at initialisation
    assert_close(pe.pow(2).mean().sqrt().item(), 0.02, atol=2e-4, rtol=0)
    assert list(e.pos.parameters()) == []


# ---- RoPE inside attention -------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["naive", "sdpa"])
@pytest.mark.parametrize("padded", [False, True])
def test_rope_attention_equals_the_reference(impl, padded):
    tfx.set_seed(0)
    mha = MultiHeadAttention(32, 4, attn_impl=impl, rope_base=10000.0).eval()
    x = torch.randn(2, 9, 32)
    am = _padding(2, 9) if padded else None
    q, k, v = _heads(mha, x)
    ref, _ = scaled_dot_product_attention(
        apply_rope(q), apply_rope(k), v, None if am is None else am.bool()[:, None, None, :]
    )  # (B, H, L, d_k): chapter 02's rotation on the heads
    with torch.no_grad():
        got, _ = mha(x, key_padding_mask=am)
        want = mha.out(mha.merge_heads(ref))
    assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_rope_scores_depend_only_on_the_offset():
    """The same vector at every position: the module's own attention weights then satisfy
    log w[m, n] − log w[m, m] = s(n − m) − s(0), a function of the offset alone."""
    tfx.set_seed(0)
    mha = MultiHeadAttention(32, 4, rope_base=10000.0).double().eval()
    L = 12
    x = torch.randn(1, 1, 32, dtype=torch.float64).expand(1, L, 32)  # (1, L, d)
    with torch.no_grad():
        _, w = mha(x)  # (1, H, L, L)
    logw = w.log()
    rel = logw - torch.diagonal(logw, dim1=-2, dim2=-1)[..., :, None]  # (1, H, L, L)
    for off in range(-L + 1, L):
        diag = torch.diagonal(rel, off, dim1=-2, dim2=-1)  # (1, H, L − |off|)
        assert_close(diag, diag[..., :1].expand_as(diag))
    assert rel.abs().max() > 0.01  # and the offset does change the score
    # without RoPE the same input gives the same score everywhere: uniform weights
    plain = MultiHeadAttention(32, 4).double().eval()
    with torch.no_grad():
        _, w0 = plain(x)
    assert_close(w0, torch.full_like(w0, 1 / L))


def test_rope_model_layers_rotate():
    m = BertModel(_cfg("rope"))
    assert all(layer.attn.rope_base == 10000.0 for layer in m.layers)
    assert m.embeddings.pos is None


@pytest.mark.parametrize(
    "kwargs, err, message",
    [
        (dict(rope_base=1.0), ValueError, "rope_base must be > 1, got 1.0"),
        (dict(rope_base=-3.0), ValueError, "rope_base must be a finite float > 0"),
        (dict(rope_base="10k"), TypeError, "rope_base must be a positive float"),
        (dict(d_model=12, n_heads=4, rope_base=10.0), ValueError, "12 / 4 = 3"),
    ],
)
def test_bad_rope_base(kwargs, err, message):
    with pytest.raises(err, match=message):
        MultiHeadAttention(**{"d_model": 32, "n_heads": 4, **kwargs})


# ---- ALiBi: an additive bias -----------------------------------------------------------------


@pytest.mark.parametrize("impl", ["naive", "sdpa"])
@pytest.mark.parametrize("padded", [False, True])
def test_alibi_bias_adds_to_the_scores(impl, padded):
    tfx.set_seed(0)
    mha = MultiHeadAttention(32, 4, attn_impl=impl).eval()
    x = torch.randn(2, 9, 32)
    am = _padding(2, 9) if padded else None
    bias = alibi_bias(4, 9)  # (H, L, L): chapter 02's −m_h |i − j|
    q, k, v = _heads(mha, x)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8) + bias  # (B, H, L, L): naive scores + bias
    if am is not None:
        scores = scores.masked_fill(~am.bool()[:, None, None, :], -math.inf)
    w_ref = scores.softmax(-1)  # (B, H, L, L)
    with torch.no_grad():
        got, w = mha(x, key_padding_mask=am, attn_bias=bias)
        want = mha.out(mha.merge_heads(w_ref @ v))
        plain, _ = mha(x, key_padding_mask=am)
    assert_close(got, want, atol=1e-5, rtol=1e-5)
    if impl == "naive":
        assert_close(w, w_ref, atol=1e-6, rtol=1e-5)
    assert (got - plain).abs().max() > 1e-3  # the bias changed something


def test_alibi_model_weights_are_the_distance_penalty():
    """All tokens the same and no position vectors: layer 0's scores are equal everywhere but for
    the bias, so log w[m, n] − log w[m, m] = −m_h |n − m| with chapter 02's slopes."""
    cfg = _cfg("alibi")
    tfx.set_seed(0)
    m = BertModel(cfg).double().eval()
    ids = torch.full((1, 10), 7)
    with torch.no_grad():
        _, att = m(ids, output_attentions=True)
    logw = att[0].log()  # (1, H, L, L)
    rel = logw - torch.diagonal(logw, dim1=-2, dim2=-1)[..., :, None]
    assert_close(rel[0], alibi_bias(cfg.n_heads, 10).double())
    assert_close(alibi_bias(4, 3)[:, 0, 2], -2 * alibi_slopes(4))


def test_bert_model_hands_the_alibi_bias_to_every_layer():
    cfg = _cfg("alibi", attn_impl="sdpa")
    tfx.set_seed(0)
    m = BertModel(cfg).eval()
    ids = torch.randint(5, cfg.vocab_size, (2, 10))
    am = _padding(2, 10)
    bias = alibi_bias(cfg.n_heads, 10)  # (H, L, L)
    with torch.no_grad():
        x = m.embeddings(ids, torch.zeros_like(ids))
        for layer in m.layers:
            x = layer(x, key_padding_mask=am, attn_bias=bias)
        assert_close(m(ids, attention_mask=am), x)
        assert m.embeddings.pos is None


@pytest.mark.parametrize("position", ["rope", "alibi"])
@pytest.mark.parametrize("padded", [False, True])
def test_naive_and_sdpa_models_agree(position, padded):
    tfx.set_seed(0)
    naive = BertForMaskedLM(_cfg(position)).eval()
    sdpa = BertForMaskedLM(_cfg(position, attn_impl="sdpa")).eval()
    sdpa.load_state_dict(naive.state_dict())
    ids = torch.randint(5, 1000, (2, 24))  # past max_len = 16
    am = _padding(2, 24) if padded else None
    with torch.no_grad():
        a, b = naive(ids, attention_mask=am), sdpa(ids, attention_mask=am)
    keep = torch.ones(2, 24, dtype=torch.bool) if am is None else am.bool()
    assert_close(a[keep], b[keep], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("impl", ["naive", "sdpa"])
def test_fully_masked_rows_stay_zero_with_a_bias(impl):
    tfx.set_seed(0)
    mha = MultiHeadAttention(16, 2, attn_impl=impl, rope_base=100.0)
    x = torch.randn(1, 5, 16, requires_grad=True)
    mask = torch.ones(5, 5, dtype=torch.bool)
    mask[2] = False  # query 2 may attend to nothing
    out, _ = mha(x, mask=mask, attn_bias=alibi_bias(2, 5))
    ctx_row = out[0, 2] - mha.out.bias  # W_O applied to a zero context leaves the bias only
    assert_close(ctx_row, torch.zeros_like(ctx_row))
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()


def test_encoder_layer_passes_the_bias_through():
    tfx.set_seed(0)
    layer = EncoderLayer(16, 2, 32, dropout=0.0).eval()
    x = torch.randn(2, 6, 16)
    bias = alibi_bias(2, 6)
    with torch.no_grad():
        a, _ = layer.attn(x, attn_bias=bias)
        want = layer.norm2(layer.norm1(x + a) + layer.ff(layer.norm1(x + a)))
        assert_close(layer(x, attn_bias=bias), want)
        assert (layer(x) - want).abs().max() > 1e-4


@pytest.mark.parametrize(
    "bias, err, message",
    [
        (np.zeros((4, 5, 5)), TypeError, "attn_bias must be a torch.Tensor"),
        (torch.zeros(4, 5, 5, dtype=torch.long), ValueError, "attn_bias must be a floating"),
        (torch.zeros(5, 5, dtype=torch.bool), ValueError, r"a bool tensor .* goes in mask="),
        (torch.zeros(3, 5, 5), ValueError, r"attn_bias of shape \(3, 5, 5\) does not broadcast"),
        (torch.zeros(4, 5, 6), ValueError, r"to the scores of shape \(2, 4, 5, 5\)"),
        (torch.full((5, 5), -math.inf), ValueError, "attn_bias must be finite"),
        (torch.full((5, 5), math.nan), ValueError, "attn_bias must be finite"),
    ],
)
@pytest.mark.parametrize("impl", ["naive", "sdpa"])
def test_bad_attn_bias(bias, err, message, impl):
    mha = MultiHeadAttention(16, 4, attn_impl=impl)
    with pytest.raises(err, match=message):
        mha(torch.randn(2, 5, 16), attn_bias=bias)


def test_function_takes_the_bias_too():
    tfx.set_seed(0)
    q, k, v = torch.randn(3, 2, 4, 8).unbind(0)  # (H, L, d_k) = (2, 4, 8) each
    bias = alibi_bias(2, 4)  # (H, L, L)
    out, w = scaled_dot_product_attention(q, k, v, attn_bias=bias)
    assert_close(w, (q @ k.transpose(-2, -1) / math.sqrt(8) + bias).softmax(-1))
    with pytest.raises(ValueError, match="does not broadcast"):
        scaled_dot_product_attention(q, k, v, attn_bias=torch.zeros(3, 4, 4))


@pytest.mark.parametrize("position", POSITION_TYPES)
def test_training_step_reaches_every_parameter(position):
    tfx.set_seed(0)
    m = BertForMaskedLM(_cfg(position, attn_impl="sdpa"))
    ids = torch.randint(5, 1000, (2, 12))
    m(ids).logsumexp(-1).mean().backward()
    missing = [n for n, p in m.named_parameters() if p.grad is None or not p.grad.abs().sum()]
    assert missing == []
    if position == "learned":  # the rows past the sequence never receive a gradient
        assert not m.bert.embeddings.pos.weight.grad[12:].any()


# ---- the experiment --------------------------------------------------------------------------


def _bench():
    spec = importlib.util.spec_from_file_location(
        "bench_positions", ROOT / "bench" / "positions.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bayes_accuracy_of_a_deterministic_chain_is_one():
    P = _bench()
    cfg = P.ProbeConfig(n_tokens=5, follow=1.0)
    f, T = P.chain(cfg, 0)
    assert (f != torch.arange(5)).all() and sorted(f.tolist()) == list(range(5))  # no fixed point
    g = torch.Generator().manual_seed(0)
    ids = P.sample(cfg, f, 20, 12, g)  # (20, 12)
    assert (ids[:, 1:] - P.FIRST == f[ids[:, :-1] - P.FIRST]).all()
    inputs, _ = P.mask_tokens(ids, [P.PAD, P.MASK], P.MASK, 5 + P.FIRST, P.MASKING, g)
    assert P.bayes_accuracy(T, ids, inputs) == 1.0
    uniform = P.ProbeConfig(n_tokens=5, follow=0.0)
    _, T0 = P.chain(uniform, 0)
    assert_close(T0, np.full((5, 5), 0.2))


def test_bench_tiny_writes_results(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "positions.py"), "--tiny", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    (path,) = tmp_path.glob("positions-*-quick.json")
    r = json.loads(path.read_text())
    assert r["command"] == "python bench/positions.py --tiny"
    assert {"machine", "torch", "load_average_1_5_15min", "date"} <= r["info"].keys()
    assert [row["position"] for row in r["rows"]][:: len(r["config"]["multiples"])] == list(
        POSITION_TYPES
    )
    for row in r["rows"]:
        assert 0 <= row["accuracy"] <= 1 and 0 < row["ideal"] <= 1 and row["n_scored"] > 0
        assert (row["accuracy_past_train_len"] is None) == (row["multiple"] == 1)
    assert r["info"]["machine"] in path.with_suffix(".md").read_text()
