"""tfx.inspect.diagnose: every diagnostic fires on its bug and stays quiet on healthy models, tfx's
and Hugging Face's (no false alarms); bad input gets a clear error."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tfx
from tfx.inspect import diagnose as D
from tfx.learn.book_model import FOLDER, _quiet_transformers
from tfx.learn.mlm import mask_tokens
from tfx.model.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from tfx.model.bert import BertConfig, BertForMaskedLM, BertModel
from tfx.model.layers import EncoderLayer
from tfx.zoo import bugs, bugzoo

torch.set_num_threads(1)


def _tiny(cls=BertForMaskedLM, **kw):
    tfx.set_seed(0)
    cfg = BertConfig.tiny(vocab_size=100, n_layers=2, dropout=0.0, attn_dropout=0.0, **kw)
    return cls(cfg).eval()


@pytest.fixture(scope="module")
def hf_small():
    """A freshly initialised small Hugging Face BERT (the review's N28 setting: d 128, 4 layers)."""
    tfx.set_seed(0)
    return bugzoo.hf_small_bert()


@pytest.fixture(scope="module")
def hf_book():
    """The book's trained model, as the Hugging Face folder it is committed as."""
    import transformers

    with _quiet_transformers():
        return transformers.BertForMaskedLM.from_pretrained(str(FOLDER), local_files_only=True)


def _ids(V=100, B=2, L=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, V, (B, L), generator=g)


def test_finding_prints_its_verdict():
    assert str(D.Finding("x", True, "why")) == "FIRED x: why"
    assert str(D.Finding("x", False, "fine")) == "quiet x: fine"
    with pytest.raises(AttributeError):
        D.Finding("x", True, "why").fired = False  # frozen


# ---- attention_kernel ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn", [scaled_dot_product_attention, F.scaled_dot_product_attention, bugs.attention]
)
def test_attention_kernel_quiet_on_correct_kernels(fn):
    f = D.attention_kernel(fn)
    assert not f.fired, f


@pytest.mark.parametrize(
    "fn, words",
    [
        (bugs.attention_unscaled, "not divided by √d_k"),
        (bugs.attention_softmax_queries, "query dimension"),
        (bugs.attention_inf_mask, "fully masked row gives nan"),
        (lambda q, k, v, mask=None: bugs.attention(q, k, v), "mask is ignored"),
        (
            lambda q, k, v, mask=None: bugs.attention(
                q, k, v, None if mask is None or mask.dim() != 2 else mask | mask.roll(-1, 0)
            ),
            "off by one",
        ),
        (
            lambda q, k, v, mask=None: bugs.attention(q, k, v, None if mask is None else ~mask),
            "other way round",
        ),
        (lambda q, k, v, mask=None: bugs.attention(q, k, v, mask) * 1.01, "matches no known"),
    ],
)
def test_attention_kernel_names_each_bug(fn, words):
    f = D.attention_kernel(fn)
    assert f.fired and words in f.detail, f


def test_attention_kernel_bad_input():
    with pytest.raises(TypeError, match="fn must be a callable"):
        D.attention_kernel("softmax")
    with pytest.raises(ValueError, match="L must be an int >= 2"):
        D.attention_kernel(bugs.attention, L=1)
    with pytest.raises(ValueError, match="fn returned shape"):
        D.attention_kernel(lambda q, k, v, mask=None: q[..., :1])


# ---- permutation, positions, the future ----------------------------------------------------------


def test_permutation_test():
    tfx.set_seed(0)
    x = torch.randn(2, 6, 32)
    ok = MultiHeadAttention(32, 4)
    bad = bugs.ViewHeadsAttention(32, 4)
    bad.load_state_dict(ok.state_dict())
    assert not D.permutation_test(ok, x).fired
    assert not D.permutation_test(EncoderLayer(32, 4, 64), x).fired  # dropout off in the test
    f = D.permutation_test(bad, x)
    assert f.fired and "transpose" in f.detail
    with pytest.raises(ValueError, match="x must be \\(B, L, d\\)"):
        D.permutation_test(ok, torch.randn(6, 32))
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        D.permutation_test(ok, np.zeros((2, 6, 32)))


def test_position_test_tfx_models():
    ids = _ids()
    for cls in (BertModel, BertForMaskedLM):
        model = _tiny(cls)
        assert not D.position_test(model, ids).fired
        emb = model.embeddings if cls is BertModel else model.bert.embeddings
        with torch.no_grad():
            emb.pos.weight.zero_()
        f = D.position_test(model, ids)
        assert f.fired and "blind to order" in f.detail
    model = _tiny(BertModel)
    assert D.position_test(bugs.bert_without_positions(model), ids).fired
    for position in ("rope", "alibi", "sinusoidal"):
        assert not D.position_test(_tiny(BertModel, position=position), ids).fired


def test_position_test_hugging_face(hf_small, hf_book):
    for hf in (hf_small, hf_book):
        ids, mask = _ids(), torch.ones(2, 12, dtype=torch.long)
        mask[1, -3:] = 0
        assert not D.position_test(hf, ids, attention_mask=mask).fired
        pos = hf.bert.embeddings.position_embeddings.weight
        saved = pos.detach().clone()
        with torch.no_grad():
            pos.zero_()
        try:
            assert D.position_test(hf, ids, attention_mask=mask).fired
        finally:
            with torch.no_grad():
                pos.copy_(saved)


def test_position_test_bad_input():
    model = _tiny(BertModel)
    with pytest.raises(ValueError, match="input_ids must be \\(B, L\\) with L >= 3"):
        D.position_test(model, torch.tensor([5, 6, 7]))
    with pytest.raises(ValueError, match="two of them different"):
        D.position_test(model, torch.full((1, 6), 7))


def test_future_leak():
    tfx.set_seed(0)
    ok = bugs.TinyCausalLM()
    bad = bugs.TinyCausalLM(mask_fn=bugs.causal_mask_off_by_one)
    bad.load_state_dict(ok.state_dict())
    ids = torch.randint(0, 16, (2, 8))
    assert not D.future_leak(ok, ids).fired
    f = D.future_leak(bad, ids)
    assert f.fired and "output 0 moves when token 1 changes" in f.detail
    layer = EncoderLayer(16, 2, 32, dropout=0.0)
    x = torch.randn(2, 5, 16)
    assert not D.future_leak(lambda t: layer(t, causal_mask(5)), x).fired  # vectors, a lambda
    assert D.future_leak(lambda t: layer(t), x).fired  # no mask at all
    with pytest.raises(ValueError, match="two different ids"):
        D.future_leak(ok, torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="model_or_fn must be callable"):
        D.future_leak(None, ids)


# ---- non-finite values and errors --------------------------------------------------------------


def test_first_nonfinite_names_the_module():
    tfx.set_seed(0)
    layer = EncoderLayer(16, 2, 32, dropout=0.0)
    layer.attn = bugs.KernelAttention(16, 2, bugs.attention_inf_mask)
    x, mask = torch.randn(2, 4, 16), torch.ones(2, 1, 1, 4, dtype=torch.bool)
    assert not D.first_nonfinite(layer, x, mask).fired
    mask[1] = False
    f = D.first_nonfinite(layer, x, mask)
    assert f.fired and f.detail.startswith("attn (KernelAttention) produced nan first")
    layer.attn.kernel = bugs.attention
    assert not D.first_nonfinite(layer, x, mask).fired
    # float16 overflow: an FFN whose activations pass 65 504
    ff = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)).half()
    with torch.no_grad():
        ff[0].weight.fill_(1.0)
        ff[1].weight.fill_(300.0)
    f = D.first_nonfinite(ff, torch.full((1, 4), 100.0).half())  # 400, then 480 000: inf
    assert f.fired and f.detail.startswith("1 (Linear) produced inf first")
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        D.first_nonfinite(lambda x: x, x)


def test_first_nonfinite_quiet_on_hugging_face(hf_small, hf_book):
    ids, mask = _ids(), torch.ones(2, 12, dtype=torch.long)
    mask[1, 4:] = 0
    for hf in (hf_small, hf_book):
        assert not D.first_nonfinite(hf, ids, attention_mask=mask).fired
    assert not D.first_nonfinite(_tiny(), ids, attention_mask=mask).fired


def test_forward_error():
    x = torch.randn(2, 6, 32)
    f = D.forward_error(bugs.ViewMergeAttention(32, 4), x)
    assert f.fired and "RuntimeError: view size is not compatible" in f.detail
    assert not D.forward_error(bugs.ContiguousMergeAttention(32, 4), x).fired
    layer = EncoderLayer(32, 4, 64)
    layer.attn = bugs.KernelAttention(32, 4, bugs.attention_fill_1e9)
    mask = torch.zeros(2, 1, 1, 6, dtype=torch.bool)
    f = D.forward_error(layer.half(), x.half(), mask)
    assert f.fired and f.detail.startswith("attn (KernelAttention) raised RuntimeError")
    out = layer(x.half(), None)  # the hooks are gone, and the module's output is its own
    assert isinstance(out, torch.Tensor)


# ---- parameters, gradients -------------------------------------------------------------------


def test_frozen_parameters():
    model = _tiny()
    assert not D.frozen_parameters(model).fired
    f = D.frozen_parameters(bugs.freeze_norms(model))
    assert f.fired and "only the LayerNorms are frozen" in f.detail
    model = bugs.freeze_bottom(_tiny(), 1)  # whole blocks: consistent
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad])
    f = D.frozen_parameters(model, opt)
    assert not f.fired and "LayerNorm" in f.detail, f
    opt = torch.optim.Adam(model.parameters())  # PEFT's examples do this: the step skips them
    f = D.frozen_parameters(model, opt)
    assert not f.fired and "frozen tensors in the optimizer, without gradients" in f.detail, f
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # a gradient left from before the freeze: the step moves it
    f = D.frozen_parameters(model, opt)
    assert f.fired and "still hold a gradient" in f.detail, f
    model = _tiny()
    opt = torch.optim.Adam(model.bert.layers.parameters())
    f = D.frozen_parameters(model, opt)
    assert f.fired and "not in the optimizer" in f.detail
    with pytest.raises(TypeError, match="optimizer must be a torch.optim.Optimizer"):
        D.frozen_parameters(model, [1])


def test_frozen_parameters_hugging_face(hf_small):
    assert not D.frozen_parameters(hf_small).fired
    try:
        for name, p in hf_small.named_parameters():
            if "LayerNorm" in name:
                p.requires_grad_(False)
        assert D.frozen_parameters(hf_small).fired
        for p in hf_small.bert.encoder.layer[0].parameters():  # layer 0 wholly: still the trap
            p.requires_grad_(False)  # in the other layers
        assert D.frozen_parameters(hf_small).fired
        hf_small.requires_grad_(False)  # BitFit: every bias trains, the LayerNorms' β included
        for name, p in hf_small.named_parameters():
            p.requires_grad_(name.endswith("bias"))
        assert not D.frozen_parameters(hf_small).fired
        hf_small.requires_grad_(True)
        hf_small.bert.embeddings.requires_grad_(False)
        hf_small.bert.encoder.layer[0].requires_grad_(False)
        assert not D.frozen_parameters(hf_small).fired
    finally:
        hf_small.requires_grad_(True)


def test_missing_grads():
    net, x = bugs.GradCutNet(), torch.randn(4, 8, requires_grad=True)
    f = D.missing_grads(net, lambda: net(x).sum())
    assert f.fired
    for words in ("frozen", "no_grad", "detach()"):
        assert words in f.detail
    net.b.requires_grad_(False)  # only frozen parameters left without a gradient: listed, quiet
    net.c.requires_grad_(False)
    f = D.missing_grads(net, lambda: net.a(x).sum() + net.d(x).sum())
    assert not f.fired and "6 frozen" in f.detail, f
    net = bugs.GradNet()
    assert not D.missing_grads(net, lambda: net(x).sum(), {"x": x}).fired
    y = torch.randn(4, 8, dtype=torch.float64, requires_grad=True).float()  # not a leaf
    f = D.missing_grads(net, lambda: net(y).sum(), {"y": y})
    assert f.fired and "non-leaf" in f.detail
    with pytest.raises(TypeError, match="loss_fn must be a callable"):
        D.missing_grads(net, 3.0)
    with pytest.raises(TypeError, match="tensors must be a dict"):
        D.missing_grads(net, lambda: net(x).sum(), [x])


def test_missing_grads_quiet_on_hugging_face(hf_small):
    ids = _ids()
    hf_small.zero_grad(set_to_none=True)
    f = D.missing_grads(hf_small, lambda: hf_small(ids, labels=ids).loss)
    assert not f.fired, f


def _backward(model, ids):
    model.zero_grad(set_to_none=True)
    out = model(ids, labels=ids) if hasattr(model, "config") else None
    loss = out.loss if out is not None else F.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
    loss.backward()


def test_grad_health_and_dead_layers_quiet_on_healthy_models(hf_small, hf_book):
    for model, V in ((_tiny(), 100), (hf_small, 100), (hf_book, hf_book.config.vocab_size)):
        _backward(model, _ids(V))
        f, g = D.grad_health(model), D.dead_layers(model)
        assert not f.fired and not g.fired, (f, g)
    # the healthy HF model's max/min printout reads max=0.0000 on its query and key rows
    from tfx.inspect.grads import max_min_report

    _backward(hf_small, _ids())
    zero = [line for line in max_min_report(hf_small).splitlines() if "max=0.0000" in line]
    assert zero and all(".query." in line or ".key." in line for line in zero)
    assert not D.dead_layers(hf_small).fired


def test_dead_layers_fires_on_a_dead_ffn(hf_small):
    model = _tiny()
    with torch.no_grad():
        model.bert.layers[1].ff.fc1.bias.fill_(-100.0)
    _backward(model, _ids())
    f = D.dead_layers(model)
    assert f.fired and f.detail.startswith("bert.layers.1.ff.fc1: gradient exactly 0"), f
    bias = hf_small.bert.encoder.layer[2].intermediate.dense.bias
    saved = bias.detach().clone()
    with torch.no_grad():
        bias.fill_(-100.0)
    try:
        _backward(hf_small, _ids())
        f = D.dead_layers(hf_small)
        assert f.fired and "layer.2.intermediate.dense" in f.detail
    finally:
        with torch.no_grad():
            bias.copy_(saved)
    model = _tiny()  # gelu at -6: a slope of ~-4e-8, not 0, that 4 decimals print as 0
    with torch.no_grad():
        model.bert.layers[0].ff.fc1.bias.fill_(-6.0)
    _backward(model, _ids())
    f = D.dead_layers(model)
    assert f.fired and f.detail.startswith("bert.layers.0.ff.fc1: gradient below 1e-04"), f
    with pytest.raises(ValueError, match="no weight-matrix gradients"):
        D.dead_layers(nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"threshold must be a number in \(0, 1\)"):
        D.dead_layers(model, threshold=0)


def test_grad_health_fires_on_float16():
    demo = bugzoo.demo("fp16-no-loss-scaling")  # autocast, float32 weights, no scaler
    assert demo.finding.fired and "underflowed" in demo.finding.detail
    assert not bugzoo.demo("fp16-no-loss-scaling", injected=False).finding.fired  # GradScaler
    lin = nn.Linear(4, 4).half()
    (lin(torch.ones(1, 4).half()).float().sum() * 1e6).backward()  # 1e6 > 65 504: inf
    f = D.grad_health(lin)
    assert f.fired and "non-finite" in f.detail
    scaler = torch.amp.GradScaler("cpu")  # an inf under a scaler: its step is skipped, quiet
    assert not D.grad_health(lin, scaler).fired
    scaler._scale = torch.tensor(0.5)  # skipped step after step: the scale fell below 1
    assert D.grad_health(lin, scaler).fired
    with pytest.raises(TypeError, match="scaler must be a torch.amp.GradScaler"):
        D.grad_health(lin, scaler=2.0)
    with pytest.raises(ValueError, match="no gradients"):
        D.grad_health(nn.Linear(2, 2))


# ---- losses and labels -----------------------------------------------------------------------


def test_loss_support():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 8, generator=g)
    targets = torch.tensor([[3, 4, 5, 2, 0], [1, 2, 0, 0, 0]])
    f = D.loss_support(bugs.loss_counting_pad, logits, targets, pad_id=0)
    assert f.fired and "padded positions get gradient" in f.detail
    assert not D.loss_support(bugs.loss_ignoring_pad, logits, targets, pad_id=0).fired
    f = D.loss_support(bugs.smoothing_onto_pad, logits, targets, pad_id=0)
    assert f.fired and "target gives <pad> 0.0125" in f.detail and "padded" not in f.detail
    assert not D.loss_support(bugs.smoothing_without_pad, logits, targets, pad_id=0).fired

    def torch_smoothing(lg, t):  # torch spreads ε over every class, the ignored one too
        return F.cross_entropy(lg.flatten(0, 1), t.flatten(), ignore_index=0, label_smoothing=0.1)

    f = D.loss_support(torch_smoothing, logits, targets, pad_id=0)  # V = 8: 0.0125 on <pad>
    assert f.fired and "<pad> 0.0125" in f.detail, f
    assert not D.loss_support(bugs.loss_counting_pad, logits, targets).fired  # no pad given
    with pytest.raises(ValueError, match="pad_id must be an int in \\[0, 8\\)"):
        D.loss_support(bugs.loss_ignoring_pad, logits, targets, pad_id=8)
    with pytest.raises(ValueError, match="logits .* must be \\(…, V\\)"):
        D.loss_support(bugs.loss_ignoring_pad, logits, targets[:, :3])


def test_mlm_labels():
    ids = _ids(B=8, L=32)
    g = torch.Generator().manual_seed(1)
    inputs, labels = mask_tokens(ids, range(5), 4, 100, generator=g)
    f = D.mlm_labels(inputs, labels, range(5))
    assert not f.fired, f
    f = D.mlm_labels(inputs, ids.clone(), range(5))
    assert f.fired and "over all positions" in f.detail
    padded = ids.clone()
    padded[:, -4:] = 0
    f = D.mlm_labels(padded, padded.clone(), range(5))
    assert f.fired and "special-token positions are scored" in f.detail
    with pytest.raises(ValueError, match="must match"):
        D.mlm_labels(inputs, labels[:, :3])


def test_warmup_check(hf_small):
    post = nn.ModuleList(EncoderLayer(16, 2, 32) for _ in range(2))
    pre = nn.ModuleList(EncoderLayer(16, 2, 32, norm_first=True) for _ in range(2))
    flat, ramp = [1e-2] * 10, [1e-2 * min(1, (t + 1) / 5) for t in range(10)]  # the race's rate
    f = D.warmup_check(flat, post)
    assert f.fired and "post-LN (2 EncoderLayer)" in f.detail
    assert not D.warmup_check(ramp, post).fired
    f = D.warmup_check(flat, pre)
    assert not f.fired and "tolerates no warm-up" in f.detail
    torch_post = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    assert D.warmup_check(flat, torch_post).fired
    f = D.warmup_check(flat, hf_small)
    assert f.fired and "BertLayer" in f.detail
    assert not D.warmup_check(ramp, hf_small).fired
    fine_tune = [5e-5 * (1 - t / 1000) for t in range(1000)]  # Trainer's default: no warm-up
    f = D.warmup_check(fine_tune, hf_small)  # 5e-5 is 0.25% of BERT's 0.02-sized weights
    assert not f.fired and "0.25% of the typical weight" in f.detail, f
    f = D.warmup_check(ramp, hf_small)
    assert "starts at 20.0% of its peak and peaks at step 5" in f.detail, f
    with pytest.raises(ValueError, match="lrs must be a non-empty"):
        D.warmup_check([], post)
    with pytest.raises(TypeError, match="lrs must be a sequence of numbers"):
        D.warmup_check(3e-4, post)


def test_dtype_census():
    rng = np.random.default_rng(0)
    params = {n: rng.standard_normal((4, 4)) for n in "abc"}  # float64, as the numpy article's
    f = D.dtype_census(bugs.to_half_precision(params), expected="float16")
    assert f.fired and f.detail == "no float16 array: float64: 3 arrays (48 values)"
    f32 = {n: p.astype(np.float32) for n, p in params.items()}
    assert not D.dtype_census(bugs.to_half_precision(f32), expected=np.float16).fired
    model = nn.Linear(3, 2)
    assert not D.dtype_census(model, expected=torch.float32).fired
    assert D.dtype_census(model, expected=torch.float16).fired
    assert D.dtype_census(model).detail == "float32: 2 arrays (8 values)"
    with pytest.raises(TypeError, match="obj must be an nn.Module, dict or list"):
        D.dtype_census(3)
    with pytest.raises(TypeError, match="expected must be a dtype"):
        D.dtype_census(model, expected=object())


def test_lazy_submodules():
    assert (
        tfx.inspect.diagnose is D and tfx.zoo.bugzoo is bugzoo
    )  # the confirm calls read tfx.inspect.diagnose.…
