"""tfx.numpy.numpy_ref and tfx.numpy.optim_np against torch autograd, torch's optimiser and loss,
and finite differences."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import tfx
from tfx.model.attention import causal_mask, scaled_dot_product_attention
from tfx.model.layers import EncoderLayer
from tfx.numpy import numpy_ref as nr
from tfx.numpy import optim_np

B, L, D, H, D_FF = 3, 5, 8, 2, 16


def make_mask(kind):
    if kind == "causal":
        return causal_mask(L)  # (L, L)
    if kind == "padding":
        m = torch.ones(B, 1, 1, L, dtype=torch.bool)  # (B, 1, 1, L)
        m[1, ..., 3:] = False  # sequence 1 has two pad tokens
        m[2] = False  # sequence 2 is all padding: every row fully masked
        return m
    return None


def torch_layer(norm_first, activation):
    """A float64 tfx EncoderLayer in eval mode with non-trivial LayerNorm and bias values."""
    tfx.set_seed(0)
    layer = (
        EncoderLayer(D, H, D_FF, dropout=0.0, norm_first=norm_first, activation=activation)
        .double()
        .eval()
    )
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return layer


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["gelu", "relu"])
@pytest.mark.parametrize("mask_kind", [None, "causal", "padding"])
def test_layer_forward_and_every_gradient_match_autograd(norm_first, activation, mask_kind):
    layer = torch_layer(norm_first, activation)
    mask = make_mask(mask_kind)
    x = torch.randn(B, L, D, dtype=torch.float64, requires_grad=True)
    y = layer(x, mask)
    dy = torch.randn_like(y)
    y.backward(dy)

    params = {k: v.numpy() for k, v in layer.state_dict().items()}
    y_np, cache = nr.encoder_layer_forward(
        x.detach().numpy(),
        params,
        H,
        None if mask is None else mask.numpy(),
        norm_first=norm_first,
        activation=activation,
    )
    dx, grads = nr.encoder_layer_backward(dy.numpy(), cache)

    tight = dict(atol=1e-10, rtol=1e-10)
    assert not np.isnan(y_np).any()
    assert_close(torch.from_numpy(y_np), y.detach(), **tight)
    assert_close(torch.from_numpy(dx), x.grad, **tight)
    assert set(grads) == set(params)
    for name, p in layer.named_parameters():
        assert_close(torch.from_numpy(grads[name]), p.grad, **tight, msg=name)


@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_gradients_match_finite_differences(norm_first):
    rng = np.random.default_rng(0)
    params = nr.init_layer_params(D, D_FF, rng)
    x = rng.standard_normal((2, 4, D))
    mask = np.tril(np.ones((4, 4), dtype=bool))
    dy = rng.standard_normal((2, 4, D))

    def loss(x_, p_):
        return float((nr.encoder_layer_forward(x_, p_, H, mask, norm_first)[0] * dy).sum())

    _, cache = nr.encoder_layer_forward(x, params, H, mask, norm_first)
    dx, grads = nr.encoder_layer_backward(dy, cache)
    h = 1e-6
    for name, idx in [
        ("attn.qkv.weight", (3, 5)),
        ("attn.out.bias", (2,)),
        ("ff.fc1.weight", (7, 1)),
        ("norm1.weight", (4,)),
        ("norm2.bias", (0,)),
    ]:
        plus, minus = dict(params), dict(params)
        plus[name], minus[name] = params[name].copy(), params[name].copy()
        plus[name][idx] += h
        minus[name][idx] -= h
        numeric = (loss(x, plus) - loss(x, minus)) / (2 * h)
        assert math.isclose(numeric, grads[name][idx], rel_tol=1e-6, abs_tol=1e-8), name
    xp, xm = x.copy(), x.copy()
    xp[1, 2, 3] += h
    xm[1, 2, 3] -= h
    assert math.isclose(
        (loss(xp, params) - loss(xm, params)) / (2 * h), dx[1, 2, 3], rel_tol=1e-6, abs_tol=1e-8
    )


def test_ops_match_torch():
    tfx.set_seed(0)
    x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(4, 6, dtype=torch.float64)
    x.softmax(-1).backward(dy)
    p, cache = nr.softmax_forward(x.detach().numpy())
    assert_close(torch.from_numpy(nr.softmax_backward(dy.numpy(), cache)), x.grad)

    g, b = torch.randn(6, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    y, _ = nr.layer_norm_forward(x.detach().numpy(), g.numpy(), b.numpy())
    assert_close(torch.from_numpy(y), F.layer_norm(x.detach(), (6,), g, b, 1e-5))

    z = torch.linspace(-6, 6, 101, dtype=torch.float64)
    assert_close(torch.from_numpy(nr.erf(z.numpy())), torch.erf(z), atol=1e-15, rtol=0)
    assert_close(torch.from_numpy(nr.gelu_forward(z.numpy())[0]), F.gelu(z), atol=1e-15, rtol=0)

    q, k, v = (torch.randn(2, 2, 5, 4, dtype=torch.float64) for _ in range(3))
    mask = make_mask("padding")[:2]
    out, w = scaled_dot_product_attention(q, k, v, mask)
    out_np, c = nr.attention_forward(q.numpy(), k.numpy(), v.numpy(), mask.numpy())
    assert_close(torch.from_numpy(out_np), out)
    assert_close(torch.from_numpy(c[4]), w)


def test_fully_masked_rows_give_zeros_and_zero_gradients():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, 3, 2)) for _ in range(3))
    mask = np.zeros((3, 3), dtype=bool)
    out, cache = nr.attention_forward(q, k, v, mask)
    assert np.array_equal(out, np.zeros_like(out))
    for g in nr.attention_backward(np.ones_like(out), cache):
        assert np.array_equal(g, np.zeros_like(g))


def test_split_and_merge_heads_are_inverse():
    t = np.arange(2 * 3 * 8, dtype=float).reshape(2, 3, 8)
    s = nr.split_heads(t, 4)
    assert s.shape == (2, 4, 3, 2)
    assert np.array_equal(s[0, 1, 2], t[0, 2, 2:4])  # head 1 of token 2 owns features 2 and 3
    assert np.array_equal(nr.merge_heads(s), t)


def test_bad_inputs_raise_clear_errors():
    rng = np.random.default_rng(0)
    params = nr.init_layer_params(D, D_FF, rng)
    x = rng.standard_normal((B, L, D))
    with pytest.raises(ValueError, match=r"x: expected shape \(\*, \*, 8\), got \(3, 5, 7\)"):
        nr.encoder_layer_forward(x[..., :7], params, H)
    with pytest.raises(ValueError, match=r"expected shape \(\*, \*, 8\), got \(5, 8\)"):
        nr.encoder_layer_forward(x[0], params, H)
    with pytest.raises(
        ValueError, match=r"mask of shape \(4, 4\) does not broadcast .* \(3, 2, 5, 5\)"
    ):
        nr.encoder_layer_forward(x, params, H, mask=np.ones((4, 4), dtype=bool))
    with pytest.raises(ValueError, match="bool"):
        nr.encoder_layer_forward(x, params, H, mask=np.ones((L, L)))
    with pytest.raises(ValueError, match="divisible"):
        nr.encoder_layer_forward(x, params, 3)
    with pytest.raises(ValueError, match="activation"):
        nr.encoder_layer_forward(x, params, H, activation="swish")
    bad = dict(params, **{"ff.fc2.weight": np.zeros((D, D_FF + 1))})
    with pytest.raises(ValueError, match=r"ff.fc2.weight: expected shape \(8, 16\), got \(8, 17\)"):
        nr.encoder_layer_forward(x, bad, H)
    with pytest.raises(ValueError, match="missing"):
        nr.encoder_layer_forward(x, {k: v for k, v in params.items() if k != "norm1.bias"}, H)
    _, cache = nr.encoder_layer_forward(x, params, H)
    with pytest.raises(ValueError, match=r"dy: expected shape \(3, 5, 8\), got \(3, 4, 8\)"):
        nr.encoder_layer_backward(x[:, :4], cache)


def test_std_eps_layer_norm_differs_only_on_near_constant_rows():
    rng = np.random.default_rng(0)
    one, zero = np.ones(16), np.zeros(16)
    normal = rng.standard_normal((4, 16))
    flat = 1.0 + 1e-4 * rng.standard_normal((4, 16))  # std ≈ 1e-4, comparable to sqrt(eps)
    gap = lambda x: np.abs(
        nr.layer_norm_std_eps(x, one, zero, 1e-5) - nr.layer_norm_forward(x, one, zero, 1e-5)[0]
    ).max()
    assert gap(normal) < 1e-4
    assert gap(flat) > 0.5


def test_char_lm_gradients_match_finite_differences():
    rng = np.random.default_rng(0)
    params = nr.init_char_lm(
        vocab_size=7, max_len=6, d_model=8, n_heads=2, d_ff=16, n_layers=2, rng=rng
    )
    ids = rng.integers(0, 7, size=(2, 5))
    targets = rng.integers(0, 7, size=(2, 5))

    def loss(p_):
        logits, cache = nr.char_lm_forward(ids, p_, n_heads=2, n_layers=2)
        return optim_np.cross_entropy(logits.reshape(-1, 7), targets.ravel(), 0.1), cache

    (value, dlogits), cache = loss(params)
    grads = nr.char_lm_backward(dlogits.reshape(2, 5, 7), cache)
    assert set(grads) == set(params)
    h = 1e-6
    for name, idx in [
        ("tok_emb", (int(ids[0, 1]), 3)),
        ("pos_emb", (4, 0)),
        ("layers.0.attn.qkv.weight", (1, 2)),
        ("layers.1.ff.fc2.bias", (5,)),
        ("head.weight", (2, 6)),
    ]:
        plus, minus = dict(params), dict(params)
        plus[name], minus[name] = params[name].copy(), params[name].copy()
        plus[name][idx] += h
        minus[name][idx] -= h
        numeric = (loss(plus)[0][0] - loss(minus)[0][0]) / (2 * h)
        assert math.isclose(numeric, grads[name][idx], rel_tol=1e-5, abs_tol=1e-9), name
    assert np.array_equal(grads["pos_emb"][5], np.zeros(8))  # position 5 was never used


def test_adam_matches_torch_adam_with_a_per_step_learning_rate():
    """Two parameters, non-default betas, and the lr passed to each step as training does."""
    rng = np.random.default_rng(0)
    ours = {"w": rng.standard_normal((3, 4)), "b": rng.standard_normal(4)}
    refs = {k: torch.tensor(v, requires_grad=True) for k, v in ours.items()}
    opt = optim_np.Adam(ours, betas=(0.8, 0.99))
    torch_opt = torch.optim.Adam(list(refs.values()), betas=(0.8, 0.99))
    for step in range(1, 8):
        lr = float(optim_np.noam_lr(step, 16, warmup_steps=3))
        grads = {k: rng.standard_normal(v.shape) for k, v in ours.items()}
        opt.step(grads, lr=lr)
        for k, ref in refs.items():
            ref.grad = torch.from_numpy(grads[k])
        torch_opt.param_groups[0]["lr"] = lr
        torch_opt.step()
    for k, ref in refs.items():
        assert_close(torch.from_numpy(ours[k]), ref.detach(), atol=1e-12, rtol=1e-12)
    with pytest.raises(ValueError, match=r"grad 'w': expected shape \(3, 4\), got \(4, 3\)"):
        opt.step({"w": grads["w"].T, "b": grads["b"]})


def test_noam_matches_transformers_inverse_sqrt_and_peaks_at_warmup():
    from transformers import get_inverse_sqrt_schedule

    d_model, warmup, steps = 64, 40, 200
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=d_model**-0.5 * warmup**-0.5)  # the Noam peak
    sched = get_inverse_sqrt_schedule(opt, num_warmup_steps=warmup, timescale=warmup)
    hf_lrs = []
    for _ in range(steps + 1):  # steps 0..steps; Noam starts at 1
        hf_lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    ours = optim_np.noam_lr(np.arange(1, steps + 1), d_model, warmup)
    np.testing.assert_allclose(ours, hf_lrs[1:], rtol=1e-12)
    assert int(np.argmax(ours)) + 1 == warmup
    with pytest.raises(ValueError, match="from 1"):
        optim_np.noam_lr(0, d_model, warmup)


@pytest.mark.parametrize("eps", [0.0, 0.1, 1.0])
def test_label_smoothing_matches_torch(eps):
    tfx.set_seed(0)
    logits = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 5, (6,))
    ref = torch.nn.CrossEntropyLoss(label_smoothing=eps)(logits, targets)
    ref.backward()
    loss, dlogits = optim_np.cross_entropy(logits.detach().numpy(), targets.numpy(), eps)
    assert math.isclose(loss, ref.item(), rel_tol=1e-12)
    assert_close(torch.from_numpy(dlogits), logits.grad)
    with pytest.raises(ValueError, match=r"got \(6, 5\) and \(5,\)"):
        optim_np.cross_entropy(logits.detach().numpy(), targets.numpy()[:5])


TENSORS = (*nr.LAYER_KEYS, "x")
ATTENTION = {"attn.qkv.weight", "attn.qkv.bias", "attn.out.weight", "attn.out.bias"}
NORM1, NORM2 = {"norm1.weight", "norm1.bias"}, {"norm2.weight", "norm2.bias"}
FC1 = {"ff.fc1.weight", "ff.fc1.bias"}
# A bug corrupts the gradient it computes and, when that gradient is passed down, everything the
# backward computes after it, never what it computed before: post-LN runs LN2, FFN, LN1, MHA; pre-LN
# runs FFN, LN2, MHA, LN1. W_O's gradient is passed to no one, so its bug stays where it is.
FLAGGED_BY_BUG = {
    "q/k swapped": {
        "post-LN": {"attn.qkv.weight", "attn.qkv.bias", "x"},
        "pre-LN": {"attn.qkv.weight", "attn.qkv.bias", "x"} | NORM1,
    },
    "W_O transposed": {"post-LN": {"attn.out.weight"}, "pre-LN": {"attn.out.weight"}},
    "activation skipped": {
        "post-LN": ATTENTION | NORM1 | FC1 | {"x"},
        "pre-LN": ATTENTION | NORM1 | NORM2 | FC1 | {"x"},
    },
    "residual dropped": {"post-LN": ATTENTION | NORM1 | {"x"}, "pre-LN": ATTENTION | NORM1 | {"x"}},
    "LN mean term dropped": {
        "post-LN": set(TENSORS) - NORM2,
        "pre-LN": ATTENTION | NORM1 | {"x"},
    },
}


def flagged(rows):
    return {
        layout: {
            name
            for (name, lay), e in nr.relative_errors(rows).items()
            if lay == layout and not e < nr.FD_TOL
        }
        for layout in nr.FD_LAYOUTS
    }


def test_gradient_check_covers_every_tensor_in_both_layouts_and_passes():
    rows = nr.gradient_check()
    assert [(name, layout) for name, layout, _, _ in rows] == [
        (name, layout) for layout in nr.FD_LAYOUTS for name in TENSORS
    ]
    assert max(nr.relative_errors(rows).values()) < nr.FD_TOL
    assert min(abs(a) for _, _, a, _ in rows) > 1e-2  # no directional derivative is near zero


@pytest.mark.parametrize("bug", list(nr.BACKWARD_BUGS))
def test_each_injected_bug_is_flagged_where_it_corrupts_the_gradient(bug):
    assert set(FLAGGED_BY_BUG) == set(nr.BACKWARD_BUGS)
    found = flagged(nr.gradient_check(bug=bug))
    assert found == FLAGGED_BY_BUG[bug]
    rel = nr.relative_errors(nr.gradient_check(bug=bug))
    assert min(rel[key] for key in rel if key[0] in found[key[1]]) > 1e-3  # far from the tolerance


def test_bug_none_is_the_correct_backward_and_unknown_bugs_are_refused():
    rng = np.random.default_rng(0)
    params = nr.init_layer_params(D, D_FF, rng)
    x = rng.standard_normal((B, L, D))
    y, cache = nr.encoder_layer_forward(x, params, H, norm_first=True)
    dy = rng.standard_normal(y.shape)
    dx, g = nr.encoder_layer_backward(dy, cache)
    dx_none, g_none = nr.encoder_layer_backward(dy, cache, bug=None)
    assert np.array_equal(dx, dx_none) and all(np.array_equal(g[k], g_none[k]) for k in g)
    with pytest.raises(ValueError, match=r"bug must be None or one of \['q/k swapped'.*got 'typo'"):
        nr.encoder_layer_backward(dy, cache, bug="typo")
    with pytest.raises(ValueError, match="bug must be"):
        nr.gradient_check_report(bug="typo")


@pytest.mark.parametrize("log10_h", [1, 6, 16])
@pytest.mark.parametrize("float32", [False, True])
@pytest.mark.parametrize("bug", ["none", "W_O transposed", "LN mean term dropped"])
def test_gradient_check_report_at_the_slider_extremes(log10_h, float32, bug):
    text = tfx.numpy.numpy_ref.gradient_check_report(log10_h, float32, bug)
    dtype = "float32" if float32 else "float64"
    assert text.startswith(f"h = 1e-{log10_h}, {dtype}, backward bug: {bug}\n")
    assert len(text.splitlines()) == len(TENSORS) + 4
    agrees = text.endswith("agrees to 1e-06 relative: yes")
    # only a middle h in float64 gets six digits, and only without a bug
    assert agrees == (log10_h == 6 and not float32 and bug == "none")


def test_char_lm_gradient_check_covers_every_array_and_passes():
    rows = nr.char_lm_gradient_check()
    params = nr.init_char_lm(7, 6, 8, 2, 16, 2, np.random.default_rng(0))
    assert [name for name, *_ in rows] == list(params)
    assert max(nr.relative_errors(rows).values()) < nr.FD_TOL


def test_float32_gets_no_six_digits_at_any_h():
    """The widget's prose: in float32 no step h gets every tensor within 1e-6 relative."""
    for log10_h in range(1, 17):
        rel = nr.relative_errors(nr.gradient_check(10.0**-log10_h, np.float32))
        assert max(rel.values()) > 100 * nr.FD_TOL, log10_h


def test_gradient_check_report_marks_the_flagged_rows():
    text = nr.gradient_check_report(bug="W_O transposed")
    marked = [line.split()[0] for line in text.splitlines() if line.endswith("  flagged")]
    assert marked == ["attn.out.weight"]
    assert "flagged (relative error 1e-06 or more): post-LN 1 of 13, pre-LN 1 of 13" in text


def test_gradient_check_widget_reprints_on_change(capsys):
    w = tfx.book.widgets.gradient_check_widget()
    bugs, (slider, box), out = w.children[0], w.children[1].children, w.children[2]
    assert (bugs.description, slider.description, box.description) == (
        "backward bug",
        "-log10 h",
        "float32",
    )
    box.value = True
    printed = capsys.readouterr().out + "".join(o.get("text", "") for o in out.outputs)
    assert "h = 1e-6, float32, backward bug: none" in printed
    assert "agrees to 1e-06 relative: no" in printed
    box.value = False
    bugs.value = "W_O transposed"
    printed = capsys.readouterr().out + "".join(o.get("text", "") for o in out.outputs)
    assert "backward bug: W_O transposed" in printed and "post-LN 1 of 13" in printed


def test_grad_norms_by_part_groups_layers_and_matches_total():
    grads = {
        "tok_emb": np.full((2, 2), 1.0),
        "layers.0.norm1.weight": np.array([3.0]),
        "layers.0.ff.fc1.bias": np.array([4.0]),
        "layers.1.norm1.bias": np.zeros(3),
        "head.bias": np.array([-2.0]),
    }
    parts = optim_np.grad_norms_by_part(grads)
    assert parts == {"tok_emb": 2.0, "layers.0": 5.0, "layers.1": 0.0, "head": 2.0}
    total = math.sqrt(sum(float(np.square(g).sum()) for g in grads.values()))
    assert math.isclose(math.sqrt(sum(v**2 for v in parts.values())), total)


# ---- what chapter 09 shows and asserts -----------------------------------------------------------

SHOWN_IN_CHAPTER_09 = [
    nr.linear_forward,
    nr.linear_backward,
    nr.softmax_forward,
    nr.softmax_backward,
    nr.attention_forward,
    nr.attention_backward,
    nr.layer_norm_forward,
    nr.layer_norm_backward,
    nr.gelu_forward,
    nr.gelu_backward,
    nr.embedding_forward,
    nr.embedding_backward,
    nr.mha_forward,
    nr.mha_backward,
    nr.ffn_forward,
    nr.ffn_backward,
    nr.encoder_layer_forward,
    nr.encoder_layer_backward,
    nr.gradient_check,
    nr.layer_directional_checks,
    nr.directional_checks,
    nr.char_lm_forward,
    nr.char_lm_backward,
    optim_np.log_softmax,
    optim_np.cross_entropy,
    optim_np.noam_lr,
    optim_np.Adam,
]


@pytest.mark.parametrize("fn", SHOWN_IN_CHAPTER_09, ids=lambda f: f.__name__)
def test_functions_shown_in_chapter_09_name_it_and_render(fn):
    assert fn.__doc__.rstrip().endswith("Built in chapter 09."), fn.__name__
    text = repr(tfx.book.source.Source(fn))
    keyword = "class" if isinstance(fn, type) else "def"
    assert text.startswith(f"# {fn.__module__}.{fn.__name__}\n{keyword} {fn.__name__}")


def test_embedding_backward_adds_repeated_ids_like_torch():
    rng = np.random.default_rng(0)
    ids = np.array([[2, 5, 2, 0], [5, 5, 1, 0]])  # 2, 5 and 0 repeat
    table = rng.standard_normal((7, 3))
    out, cache = nr.embedding_forward(ids, table)
    dy = rng.standard_normal(out.shape)
    emb = torch.nn.Embedding.from_pretrained(torch.from_numpy(table), freeze=False)
    emb(torch.from_numpy(ids)).backward(torch.from_numpy(dy))
    dtable = nr.embedding_backward(dy, cache)
    assert_close(torch.from_numpy(dtable), emb.weight.grad, atol=1e-15, rtol=0)
    naive = np.zeros_like(table)
    naive[ids] += dy  # the bug the chapter shows: one write per repeated id survives
    wrong = np.flatnonzero(np.abs(naive - dtable).max(axis=1) > 1e-12)
    assert wrong.tolist() == [0, 2, 5]
    assert not dtable[[3, 4, 6]].any()  # unused rows get no gradient


@pytest.mark.parametrize("dtype, noise", [(np.float64, 1e-12), (np.float32, 1e-5)])
def test_key_bias_gets_only_rounding_noise(dtype, noise):
    """Softmax is shift-invariant, so b_K's gradient is zero in exact arithmetic."""
    rng = np.random.default_rng(1)
    p = {k: v.astype(dtype) for k, v in nr.init_layer_params(8, 16, rng).items()}
    x = rng.standard_normal((2, 5, 8)).astype(dtype)
    y, cache = nr.encoder_layer_forward(x, p, 2, np.tril(np.ones((5, 5), dtype=bool)))
    _, g = nr.encoder_layer_backward(rng.standard_normal(y.shape).astype(dtype), cache)
    b_q, b_k, b_v = (np.linalg.norm(b) for b in np.split(g["attn.qkv.bias"], 3))
    assert g["attn.qkv.bias"].dtype == dtype
    assert min(b_q, b_v) > 1e-2
    assert b_k < noise * min(b_q, b_v)


@pytest.mark.parametrize("form", ["std + 1e-6", "sqrt(var + 1e-12)"])
def test_std_eps_and_bert_eps_share_a_floor(form):
    """std + 1e-6 and sqrt(var + 1e-12) both stop shrinking the denominator near std = 1e-6."""
    z = np.random.default_rng(0).standard_normal(16)
    z = (z - z.mean()) / z.std()
    ones, zeros = np.ones(16), np.zeros(16)

    def norm(row):
        if form == "std + 1e-6":
            return nr.layer_norm_std_eps(row, ones, zeros, eps=1e-6)
        return nr.layer_norm_forward(row, ones, zeros, eps=1e-12)[0]

    row = 1.0 + 1e-4 * z  # spread 1e-4, far above the floor 1e-6
    assert np.abs(norm(row)).max() > 1.0  # blown up to unit scale
    torch_default = nr.layer_norm_forward(row, ones, zeros, eps=1e-5)[0]
    assert np.abs(torch_default).max() < 0.1  # sqrt(1e-5) ≈ 3e-3 is a floor far above 1e-4
    assert np.abs(norm(1.0 + 1e-8 * z)).max() < 0.1  # far below the floor: left nearly flat
