"""The speed-ups of chapters 07 and 08 against what they replace.

tfx's LayerNorm runs PyTorch's fused kernel and must equal its written-out formula; the sdpa
attention skips an all-True mask and must give the same numbers, and zeros for fully masked rows;
bert_adamw groups BERT's parameters and uses the fused kernel; op_breakdown accounts for a step's
time."""

import pytest
import torch
import torch.nn as nn
from torch.testing import assert_close

import tfx
from tfx.attention import MultiHeadAttention
from tfx.bert import BertConfig, BertForMaskedLM
from tfx.layers import LayerNorm
from tfx.perf import format_breakdown, op_breakdown
from tfx.train import bert_adamw

TOL = {torch.float32: {}, torch.float16: dict(atol=2e-3, rtol=2e-3),
       torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}  # fmt: skip


def _ln(d, eps, dtype=torch.float32):
    tfx.set_seed(0)
    ln = LayerNorm(d, eps)
    with torch.no_grad():
        ln.weight.normal_(1.0, 0.3)
        ln.bias.normal_(0.0, 0.3)
    return ln.to(dtype)


@pytest.mark.parametrize("eps", [1e-5, 1e-12])
@pytest.mark.parametrize("shape", [(1, 1, 8), (2, 5, 16), (3, 7, 256)])
def test_layernorm_kernel_equals_formula_outputs_and_gradients(shape, eps):
    ln = _ln(shape[-1], eps)
    x = (torch.randn(shape) * 3 + 1).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    y_kernel, y_formula = ln(x), ln.formula(x2)
    assert_close(y_kernel, y_formula, atol=1e-5, rtol=1e-5)
    g = torch.randn(shape)
    grads_k = torch.autograd.grad(y_kernel, (x, ln.weight, ln.bias), g)
    grads_f = torch.autograd.grad(y_formula, (x2, ln.weight, ln.bias), g)
    for a, b in zip(grads_k, grads_f, strict=True):
        assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layernorm_kernel_equals_formula_in_half_precision(dtype):
    """Rows with std ~250 (their squares overflow float16) and a constant row with BERT's
    eps = 1e-12: both paths compute the statistics in float32 and return the input dtype."""
    ln = _ln(64, 1e-12, dtype)
    x = (torch.randn(4, 6, 64) * 250).to(dtype)
    x[0, 0] = 3.0
    got, want = ln(x), ln.formula(x)
    assert got.dtype == want.dtype == dtype and got.isfinite().all()
    assert_close(got, want, **TOL[dtype])
    assert (got[0, 0] == ln.bias).all()  # a constant row normalises to 0: only β is left


@pytest.mark.parametrize(
    "x_dtype, p_dtype",
    [
        (torch.bfloat16, torch.float32),  # autocast: bf16 activations, float32 parameters
        (torch.float16, torch.float32),
        (torch.float32, torch.bfloat16),
        (torch.float64, torch.float32),
        (torch.bfloat16, torch.float16),
    ],
)
def test_layernorm_mixed_dtypes_follow_the_formula(x_dtype, p_dtype):
    ln = _ln(32, 1e-5, p_dtype)
    x = (torch.randn(3, 4, 32) * 5).to(x_dtype)
    got, want = ln(x), ln.formula(x)
    assert got.dtype == x_dtype
    assert_close(got.float(), want.float(), **TOL.get(x_dtype, {}))


def test_layernorm_under_autocast_matches_nn_layernorm():
    ln = _ln(48, 1e-12)
    ref = nn.LayerNorm(48, eps=1e-12)
    ref.load_state_dict(ln.state_dict())
    x = torch.randn(2, 5, 48)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for inp in (x, x.bfloat16()):
            got, want = ln(inp), ref(inp)
            assert got.dtype == want.dtype
            assert_close(got, want)


def test_layernorm_refuses_bad_input_in_both_paths():
    ln = LayerNorm(8)
    for f in (ln, ln.formula):
        with pytest.raises(ValueError, match=r"expected last dim 8, got shape \(2, 3, 4\)"):
            f(torch.randn(2, 3, 4))
        with pytest.raises((TypeError, ValueError), match="x"):
            f(torch.ones(2, 8, dtype=torch.long))


def _mha(train: bool):
    tfx.set_seed(0)
    m = MultiHeadAttention(32, 4, attn_impl="sdpa", dropout=0.2)
    return m.train(train)


@pytest.mark.parametrize("train", [False, True])
def test_sdpa_all_true_mask_gives_the_same_numbers_as_no_mask(train):
    """An all-True mask is dropped before F.scaled_dot_product_attention (its mask-free path
    skips passes over the scores); outputs, dropout draws and gradients stay bit for bit."""
    m = _mha(train)
    x = torch.randn(3, 6, 32, requires_grad=True)
    outs = []
    for kpm in (None, torch.ones(3, 6, dtype=torch.long)):
        tfx.set_seed(1)
        y, _ = m(x, key_padding_mask=kpm)
        (gx,) = torch.autograd.grad(y.square().sum(), x)
        outs.append((y, gx))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


@pytest.mark.parametrize("train", [False, True])
def test_sdpa_fully_masked_rows_stay_zero(train):
    """A sequence that is all padding (every key masked) and a causal mask with a masked first
    row: zeros from the attention, no NaN, in eval and training (dropout) mode, with and without
    an additive bias."""
    m = _mha(train)
    x = torch.randn(2, 5, 32, requires_grad=True)
    kpm = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]])
    for bias in (None, torch.randn(4, 5, 5)):
        y, _ = m(x, key_padding_mask=kpm, attn_bias=bias)
        # the context is zero, so the output of the all-padding sequence is W_O's bias alone
        assert_close(y[1], m.out.bias.expand(5, 32))
        (g,) = torch.autograd.grad(y.sum(), x)
        assert y.isfinite().all() and g.isfinite().all()
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    mask[0, 0] = False  # query 0 may attend to nothing
    y, _ = m(x, mask)
    assert_close(y[:, 0], m.out.bias.expand(2, 32)) and y.isfinite().all()


def test_bert_adamw_groups_and_fused_kernel():
    model = BertForMaskedLM(BertConfig.tiny())
    opt = bert_adamw(model, 1e-3, weight_decay=0.05)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(
        p.dim() < 2 for p in no_decay["params"]
    )
    params = [p for g in opt.param_groups for p in g["params"]]
    assert len(params) == len({id(p) for p in params}) == len(list(model.parameters()))
    assert model.head.decoder.weight is model.bert.embeddings.tok.weight  # tied: counted once
    assert opt.defaults["fused"] is True and opt.defaults["lr"] == 1e-3
    # one step moves the weights as torch's default (foreach) AdamW with the same groups does
    twin = BertForMaskedLM(BertConfig.tiny())
    twin.load_state_dict(model.state_dict())
    ref = torch.optim.AdamW(
        [
            {"params": [p for p in twin.parameters() if p.dim() >= 2], "weight_decay": 0.05},
            {"params": [p for p in twin.parameters() if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=1e-3,
        foreach=True,
    )
    ids = torch.randint(5, 1000, (2, 6))
    for m, o in ((model.eval(), opt), (twin.eval(), ref)):  # eval: no dropout draws
        m(ids).square().mean().backward()
        o.step()
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_bert_adamw_refuses_bad_input():
    model = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        bert_adamw("model", 1e-3)
    with pytest.raises(ValueError, match="lr"):
        bert_adamw(model, -1.0)
    with pytest.raises(ValueError, match="weight_decay must be >= 0, got -0.1"):
        bert_adamw(model, 1e-3, weight_decay=-0.1)
    with pytest.raises(ValueError, match="no parameters that require grad"):
        bert_adamw(model.requires_grad_(False), 1e-3)


def test_op_breakdown_counts_matmuls_and_optimizer():
    tfx.set_seed(0)
    lin = nn.Linear(64, 64)
    opt = torch.optim.AdamW(lin.parameters(), lr=1e-3)
    x = torch.randn(128, 64)

    def step():
        opt.zero_grad()
        lin(x).sum().backward()
        opt.step()

    res = op_breakdown({"linear": step, "add": lambda: x + x}, repeats=2)
    lin_ms, add_ms = res["linear"], res["add"]
    assert lin_ms["matmul"] > 0 and lin_ms["optimizer"] > 0
    assert "matmul" not in add_ms and add_ms["other element-wise and reductions"] > 0
    assert lin_ms["total"] == pytest.approx(sum(v for k, v in lin_ms.items() if k != "total"))
    table = format_breakdown(res)
    assert table.splitlines()[0].split()[-2:] == ["linear", "add"] and "optimizer" in table
    with pytest.raises(ValueError, match="non-empty dict of callables"):
        op_breakdown({})


def test_alternate_cpu_clock_needs_one_thread():
    import time

    from tfx.perf import alternate
    from tfx.timing import threads

    with threads(1):
        med = alternate({"a": lambda: sum(range(1000))}, rounds=2, clock=time.thread_time)
    assert med["a"] >= 0
    with threads(2), pytest.raises(ValueError, match="one thread"):
        alternate({"a": print}, clock=time.thread_time)
    with pytest.raises(ValueError, match="clock must be"):
        alternate({"a": print}, clock=time.time)
