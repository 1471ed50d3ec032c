"""Chapter 03 rerun small: the softmax Jacobian, the sqrt(d_k) measurements, the hand-built heads,
the article's claims A11/A12/N3, and the pure function behind the perturbation widget at its
extremes."""

import math

import pytest
import torch
import torch.nn as nn

import tfx
from tfx.inspect.probes import (
    PATTERNS,
    Perturbation,
    pattern_attention,
    perturb,
    perturbation_effect,
    qk_variance,
    softmax_jacobian,
    softmax_saturation,
)
from tfx.model.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from tfx.model.layers import EncoderLayer


def test_softmax_jacobian_matches_autograd_float64():
    s = torch.randn(2, 5, dtype=torch.float64)
    J = softmax_jacobian(s.softmax(-1))  # (2, 5, 5)
    for b in range(2):
        torch.testing.assert_close(
            J[b], torch.autograd.functional.jacobian(lambda z: z.softmax(-1), s[b])
        )
    torch.testing.assert_close(J.sum(-1), torch.zeros(2, 5, dtype=torch.float64))


def test_softmax_jacobian_matches_finite_differences():
    s, eps = torch.randn(6, dtype=torch.float64), 1e-6
    fd = torch.stack(
        [
            ((s + eps * e).softmax(-1) - (s - eps * e).softmax(-1)) / (2 * eps)
            for e in torch.eye(6, dtype=torch.float64)
        ],
        dim=1,
    )  # column j = d p / d s_j
    torch.testing.assert_close(softmax_jacobian(s.softmax(-1)), fd, atol=1e-8, rtol=1e-6)


def test_qk_variance_is_d_k():
    for d in (2, 32):
        assert abs(qk_variance(d, n=20000) / d - 1) < 0.06


def test_saturation_scaled_flat_unscaled_collapses():
    small, big = softmax_saturation(4, False, n=500), softmax_saturation(512, False, n=500)
    assert big.max_weight > small.max_weight and big.max_weight > 0.9
    assert big.jacobian_norm < 0.3 * softmax_saturation(512, True, n=500).jacobian_norm
    one_hot = softmax_saturation(4096, False, L=2, n=200)
    assert one_hot.max_weight > 0.98  # and the Jacobian of a one-hot row is ≈ 0
    assert one_hot.jacobian_norm < 0.05


@pytest.mark.parametrize("L", [2, 5])
def test_pattern_attention_heads_look_where_built(L):
    patterns = tuple(PATTERNS)
    mha, x = pattern_attention(L, patterns, sharpness=20.0, d_content=L)
    assert x.shape == (1, L, len(patterns) * L) and mha.d_k == L
    _, w = mha(x)  # (1, H, L, L)
    for h, name in enumerate(patterns):
        expected = torch.tensor([PATTERNS[name](i, L) for i in range(L)])
        assert torch.equal(w[0, h].argmax(-1), expected)


def test_pattern_attention_rejects_bad_arguments():
    with pytest.raises(ValueError, match="patterns"):
        pattern_attention(8, ("diagonal",))
    with pytest.raises(ValueError, match="patterns"):
        pattern_attention(8, ())
    with pytest.raises(ValueError, match="L must"):
        pattern_attention(1)
    with pytest.raises(ValueError, match="d_content"):
        pattern_attention(4, ("self",), d_content=1)


@pytest.fixture
def built():
    return pattern_attention(8, sharpness=12.0, d_content=8)


def test_perturb_leaves_original_untouched(built):
    mha, x = built
    before = {k: v.clone() for k, v in mha.state_dict().items()}
    perturb(mha, Perturbation(zero_wo=True, head=1, head_scale=0.0, temperature=0.1, wq_noise=2.0))
    for k, v in mha.state_dict().items():
        assert torch.equal(v, before[k])


def test_identity_perturbation_changes_nothing(built):
    r = perturbation_effect(*built, Perturbation())
    assert r.max_weight_change == 0 and r.cosine == pytest.approx(1.0, abs=1e-6)
    assert "output norm: " in r.report()


def test_zero_wo_widget_line(built):
    r = perturbation_effect(*built, Perturbation(zero_wo=True))
    assert r.output_norm == 0 and r.max_weight_change == 0
    assert r.cosine is None  # the cosine of a zero vector is undefined ...
    assert "output norm: 0.0000 | cosine to unperturbed: n/a |" in r.report()  # ... and says so


@pytest.mark.parametrize(
    "p",
    [
        Perturbation(zero_wo=True, head=3, head_scale=2.0, temperature=10**-1.3, wq_noise=2.0),
        Perturbation(head=0, head_scale=0.0, temperature=10**1.3, wq_noise=0.0),
        Perturbation(temperature=1e-4),
        Perturbation(temperature=1e4, wq_noise=100.0),
    ],
)
def test_widget_extremes_stay_finite(built, p):
    r = perturbation_effect(*built, p)
    assert torch.isfinite(r.out).all() and torch.isfinite(r.weights).all()
    torch.testing.assert_close(r.weights.sum(-1), torch.ones(1, 4, 8))
    assert math.isfinite(r.output_norm) and (r.cosine is None) == p.zero_wo
    assert r.cosine is None or math.isfinite(r.cosine)


def test_temperature_limits(built):
    cold = perturbation_effect(*built, Perturbation(temperature=1e-3))
    hot = perturbation_effect(*built, Perturbation(temperature=1e3))
    assert cold.weights.max(-1).values.min() > 0.999
    torch.testing.assert_close(hot.weights, torch.full_like(hot.weights, 1 / 8), atol=1e-3, rtol=0)


def test_temperature_equals_dividing_scores(built):
    mha, x = built
    q, k, _ = mha.qkv(x).split(mha.d_model, dim=-1)  # 3 × (1, 8, d_model)
    q, k = mha.split_heads(q), mha.split_heads(k)  # (1, H, 8, d_k)
    by_hand = (q @ k.mT / math.sqrt(mha.d_k) / 0.5).softmax(-1)
    got = perturbation_effect(mha, x, Perturbation(temperature=0.5)).weights
    torch.testing.assert_close(got, by_hand.detach())


def test_head_ablation_zeroes_that_heads_features(built):
    mha, x = built
    r = perturbation_effect(mha, x, Perturbation(head=2, head_scale=0.0))
    assert (r.out[..., 16:24] == 0).all()  # W_O is the identity: head 2 owns features 16..23
    assert r.max_weight_change == 0


def test_perturb_rejects_bad_settings(built):
    mha, x = built
    bad = (
        (Perturbation(temperature=0.0), "temperature"),
        (Perturbation(temperature=float("inf")), "temperature"),
        (Perturbation(wq_noise=-1.0), "wq_noise"),
        (Perturbation(head=4), "head"),
    )
    for p, msg in bad:
        with pytest.raises(ValueError, match=msg):
            perturbation_effect(mha, x, p)
    with pytest.raises(ValueError, match="naive"):
        perturbation_effect(
            MultiHeadAttention(8, 2, attn_impl="sdpa"), torch.randn(1, 3, 8), Perturbation()
        )
    with pytest.raises(ValueError, match=r"expected shape \(\*, \*, 32\), got \(1, 8, 5\)"):
        perturbation_effect(
            mha, torch.randn(1, 8, 5), Perturbation()
        )  # d_model 5 for a layer of 32
    with pytest.raises(ValueError, match=r"\(3, 3\) does not broadcast"):
        perturbation_effect(mha, x, Perturbation(), mask=torch.ones(3, 3, dtype=torch.bool))


def test_perturb_with_bias_folds_temperature_into_bias():
    tfx.set_seed(0)
    mha, x = MultiHeadAttention(8, 2).eval(), torch.randn(1, 5, 8)
    with torch.no_grad():
        mha.qkv.bias.normal_()
    q, k, _ = mha.qkv(x).split(8, dim=-1)
    q, k = mha.split_heads(q), mha.split_heads(k)
    by_hand = (q @ k.mT / math.sqrt(4) / 3.0).softmax(-1)
    got = perturbation_effect(mha, x, Perturbation(temperature=3.0)).weights
    torch.testing.assert_close(got, by_hand.detach())
    r = perturbation_effect(mha, x, Perturbation(zero_wo=True))
    torch.testing.assert_close(
        r.out, mha.out.bias.expand_as(r.out)
    )  # A11 with a bias: the output is b_O


def test_claim_a11_post_ln_layer():
    tfx.set_seed(0)
    layer, x = EncoderLayer(8, 2, 16, dropout=0.0).eval(), torch.randn(1, 5, 8)
    with torch.no_grad():
        layer.attn.out.weight.zero_()
        layer.attn.out.bias.zero_()
        h = layer.norm1(x)
        torch.testing.assert_close(layer(x), layer.norm2(h + layer.ff(h)))


def test_claim_a12_swap_q_k():
    tfx.set_seed(0)
    q, k = torch.randn(6, 4), torch.randn(6, 4)
    torch.testing.assert_close(k @ q.T, (q @ k.T).T)
    assert not torch.allclose((k @ q.T).softmax(-1), (q @ k.T).softmax(-1).T, atol=1e-3)


def test_claim_n3_fully_masked_row():
    tfx.set_seed(0)
    scores, mask = torch.randn(4, 4), causal_mask(4)
    mask[2] = False
    assert scores.masked_fill(~mask, float("-inf")).softmax(-1)[2].isnan().all()
    torch.testing.assert_close(
        scores.masked_fill(~mask, -1e9).softmax(-1)[2], torch.full((4,), 0.25)
    )
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        q = torch.randn(1, 4, 3, dtype=dtype)
        ctx, w = scaled_dot_product_attention(q, q, q, mask=mask)
        assert not ctx.isnan().any() and (w[0, 2] == 0).all()


def test_tfx_matches_torch_mha_with_inverted_masks():
    tfx.set_seed(0)
    ref = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    ours, x, m = MultiHeadAttention.from_torch(ref).eval(), torch.randn(2, 5, 8), causal_mask(5)
    with torch.no_grad():
        r_out, r_w = ref(x, x, x, attn_mask=~m, average_attn_weights=False)  # torch: True = blocked
        o_out, o_w = ours(x, m)  # tfx: True = may attend
    torch.testing.assert_close(o_out, r_out)
    torch.testing.assert_close(o_w, r_w)


def _default_font() -> str:
    from matplotlib import font_manager

    return font_manager.findfont(font_manager.FontProperties())  # matplotlib's DejaVu Sans


@pytest.mark.parametrize("font_found", [True, False], ids=["font-present", "font-absent"])
def test_attention_grid_shapes_and_errors(font_found, monkeypatch):
    """Both branches on any machine: Greek tokens, which matplotlib's own DejaVu Sans draws, stand
    for tokens a font was found for; the running example with DejaVu Sans as the only font file
    stands for a machine without a CJK font. Either way the tick labels stay at 7 pt."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    monkeypatch.setattr(tfx.book.viz, "font_files", lambda: [_default_font()])
    tokens = (
        ["[CLS]", "α", "β", "γ", "δ", "ε", "ζ", "[SEP]"]
        if font_found
        else tfx.core.example.RUNNING_EXAMPLE
    )
    labels, font = tfx.book.viz.token_labels(tokens)
    assert (font is not None) == font_found
    assert labels == (
        tokens if font_found else ["[CLS]"] + [f"#{i}" for i in range(1, 7)] + ["[SEP]"]
    )
    fig = tfx.book.viz.attention_grid(torch.rand(2, 3, 8, 8), tokens)
    assert len(fig.axes) == 2 * 3 + 1  # panels and the colour bar
    ticks = fig.axes[0].get_xticklabels() + fig.axes[0].get_yticklabels()
    assert [t.get_text() for t in ticks] == labels * 2
    assert {t.get_fontsize() for t in ticks} == {9}  # no font, or one found: the size stays 9 pt
    rotations = [t.get_rotation() for t in fig.axes[0].get_xticklabels()]
    assert rotations[:2] == [90, 0 if font_found else 90]  # one glyph reads upright, "#1" does not
    plt.close(fig)
    fig = tfx.book.viz.attention_grid(torch.rand(1, 8, 8), tokens, col_names=["only"])
    assert len(fig.axes) == 1 + 1 and fig.axes[0].get_title() == "only"
    plt.close(fig)
    with pytest.raises(ValueError, match="L = 8"):
        tfx.book.viz.attention_grid(torch.rand(2, 5, 5), tokens)


def test_perturbation_widget_reprints_on_zero_wo(built, capsys):
    pytest.importorskip("ipywidgets")
    import matplotlib

    matplotlib.use("Agg")
    mha, x = built
    w = tfx.book.widgets.attention_perturbation_widget(
        mha, x, tfx.core.example.RUNNING_EXAMPLE, list(PATTERNS)
    )
    first = capsys.readouterr().out + "".join(o.get("text", "") for o in w.children[2].outputs)
    assert "output norm: 5.1436" in first  # the initial output is shown when the cell runs
    zero_wo = w.children[0].children[0]
    assert zero_wo.description == "zero W_O"
    zero_wo.value = True  # with no frontend, the Output context lets the print reach stdout
    after = capsys.readouterr().out + "".join(o.get("text", "") for o in w.children[2].outputs)
    assert "output norm: 0.0000" in after
    zero_wo.value = False
    w.children[0].children[1].value = 2  # scale the "self" head ...
    w.children[0].children[2].value = 0.0  # ... by 0
    ablated = capsys.readouterr().out + "".join(o.get("text", "") for o in w.children[2].outputs)
    assert perturbation_effect(mha, x, Perturbation(head=2, head_scale=0.0)).report() in ablated


def test_attention_grid_labels_rows_query_and_columns_key():
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    fig = tfx.book.viz.attention_grid(torch.rand(2, 3, 8, 8), tfx.core.example.RUNNING_EXAMPLE)
    panels = fig.axes[:6]  # (2, 3) panels, then the colour bar
    assert [ax.get_ylabel() for ax in panels] == ["query", "", "", "query", "", ""]
    assert [ax.get_xlabel() for ax in panels] == ["", "", "", "key", "key", "key"]
    plt.close(fig)
    fig = tfx.book.viz.attention_grid(
        torch.rand(1, 2, 8, 8), tfx.core.example.RUNNING_EXAMPLE, row_names=["layer 0"]
    )
    assert fig.axes[0].get_ylabel() == "layer 0\nquery" and fig.axes[1].get_xlabel() == "key"
    plt.close(fig)


@pytest.mark.parametrize("d,H,L", [(768, 12, 8), (64, 4, 5), (8, 1, 1)])
def test_plot_head_split_shapes_come_from_the_module(d, H, L):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    mha = MultiHeadAttention(d, H)
    fig = tfx.book.viz.plot_head_split(mha, L=L, B=2)
    stages = fig.axes
    assert len(stages) == 8
    shapes = [t.get_text() for ax in stages for t in ax.texts]
    d_k = d // H
    assert shapes == [
        str((2, L, d)),
        str((2, L, d)),
        str((2, L, H, d_k)),
        str((2, H, L, d_k)),
        str((2, H, L, L)),
        str((2, H, L, d_k)),
        str((2, L, d)),
        str((2, L, d)),
    ]
    assert f"{H} heads" in fig._suptitle.get_text()
    coloured = {p.get_facecolor() for p in stages[1].patches}  # one band per head
    assert len(stages[1].patches) == H and len(coloured) == min(H, 20)
    assert len(stages[4].patches) == H  # one (L, L) panel per head
    # legible when the page shrinks it to the column: no label under 9 pt (site review F6)
    texts = [t for ax in stages for t in (ax.title, *ax.texts)]
    assert min(t.get_fontsize() for t in texts) >= 9
    assert [ax.get_title().split(". ", 1)[0] for ax in stages] == [str(i) for i in range(1, 9)]
    plt.close(fig)


def test_plot_head_split_rejects_bad_input():
    pytest.importorskip("matplotlib")
    with pytest.raises(TypeError, match="MultiHeadAttention"):
        tfx.book.viz.plot_head_split(nn.Linear(4, 4))
    for bad in ({"L": 0}, {"B": 0}, {"L": 2.5}):
        with pytest.raises(ValueError, match="L and B"):
            tfx.book.viz.plot_head_split(MultiHeadAttention(8, 2), **bad)
