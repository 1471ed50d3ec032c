"""tfx.inspect.grads: gradient tables, per-layer norms, activation gradients, missing-gradient
diagnosis."""

import warnings

import pytest
import torch
import torch.nn as nn
from torch.testing import assert_close

import tfx
from tfx.inspect.grads import (
    attention_grad_norms,
    diagnose_missing_grads,
    explain_missing_grads,
    grad_norms,
    layer_grad_norms,
    max_min_report,
    record_activation_grads,
    trace_backward,
    watch_grad_breaks,
)
from tfx.model.bert import BertConfig, BertModel
from tfx.model.layers import EncoderLayer


def _model():
    tfx.set_seed(0)
    return BertModel(BertConfig.tiny(n_layers=3, dropout=0.0, attn_dropout=0.0))


def test_grad_norms_and_layer_norms_agree():
    model = _model()
    ids = torch.randint(5, 1000, (2, 6))
    model(ids).pow(2).mean().backward()
    table = grad_norms(model)
    by_name = {r.name: r.norm for r in table}
    assert_close(
        by_name["layers.1.ff.fc1.weight"], model.layers[1].ff.fc1.weight.grad.norm().item()
    )
    assert by_name["pooler.dense.weight"] is None  # forward() does not run the pooler
    assert "None" in str(table) and "layers.2.norm2.bias" in str(table)
    fc1 = f"{by_name['layers.1.ff.fc1.weight']:.2g}"
    assert fc1 in table.table(digits=2).split("layers.1.ff.fc1.weight", 1)[1].splitlines()[0]
    assert str(table) == table.table(digits=4)
    with pytest.raises(ValueError, match="digits must be an int from 1 to 17, got 0"):
        table.table(digits=0)
    per_layer = layer_grad_norms(model)
    assert list(per_layer) == [0, 1, 2]
    want = torch.cat([p.grad.flatten() for p in model.layers[2].parameters()]).norm().item()
    assert abs(per_layer[2] - want) < 1e-5 * want


def test_record_activation_grads_matches_autograd():
    model = _model()
    ids = torch.randint(5, 1000, (2, 6))
    with record_activation_grads({f"layer{i}": m for i, m in enumerate(model.layers)}) as rec:
        h = model(ids)
    h.pow(2).mean().backward()
    assert set(rec.grads) == {"layer0", "layer1", "layer2"}
    assert_close(rec.grads["layer2"], 2 * h.detach() / h.numel())  # the last layer's output is h
    assert rec.norms()["layer0"] > 0


def test_diagnose_names_each_cause():
    tfx.set_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.frozen, self.nograd, self.cut, self.unused = (
                nn.Linear(3, 3) for _ in range(5)
            )
            self.frozen.requires_grad_(False)

        def forward(self, x):
            with torch.no_grad():
                a = self.nograd(x)
            return self.used(x) + self.frozen(x) + a + self.cut(x).detach()

    net = Net()
    issues = {
        i.name: i.reason for i in diagnose_missing_grads(net, lambda: net(torch.randn(2, 3)).sum())
    }
    assert set(issues) == {
        f"{m}.{p}" for m in ("frozen", "nograd", "cut", "unused") for p in ("weight", "bias")
    }
    assert "requires_grad is False" in issues["frozen.weight"]
    assert "no_grad" in issues["nograd.weight"]
    assert "cut off on its way to the loss by detach()" in issues["cut.bias"]
    assert "never called" in issues["unused.weight"]
    assert net.used.weight.grad is not None
    assert not any(m._forward_hooks for m in net.modules())


def test_diagnose_loss_without_graph():
    net = nn.Linear(2, 1)

    def loss():
        with torch.no_grad():
            return net(torch.ones(1, 2)).sum()

    issues = diagnose_missing_grads(net, loss)
    assert len(issues) == 2 and all("no grad_fn" in i.reason for i in issues)


# ---- chapter 06 additions: each diagnostic fires on the broken case and stays quiet otherwise ----


def _layer():
    tfx.set_seed(0)
    layer = EncoderLayer(16, 2, 32, dropout=0.0)
    return layer, torch.randn(1, 5, 16, requires_grad=True), torch.randn(1, 5, 16)


def test_trace_backward_lists_loss_to_input_and_matches_grads():
    layer, x, R = _layer()
    mods = {"norm2": layer.norm2, "ff": layer.ff, "attn": layer.attn}
    with trace_backward(layer, mods, {"x": x}) as tr:
        (layer(x) * R).sum().backward()
    names = [r.name for r in tr.rows]
    assert names[0] == "norm2" and names[-1] == "x"
    assert names.index("ff") < names.index("attn") < names.index("attn.qkv.weight")
    rows = {r.name: r for r in tr.rows}
    assert rows["x"].kind == "activation" and rows["ff.fc1.bias"].kind == "parameter"
    assert_close(rows["x"].norm, x.grad.norm().item())
    for name, p in layer.named_parameters():
        assert_close(rows[name].norm, p.grad.norm().item())
    text = str(tr.table())
    assert text.splitlines()[0].split() == ["name", "shape", "grad", "norm"]
    assert "activation" in text and "parameter" in text
    # the hooks are gone: a second backward adds no rows
    (layer(x) * R).sum().backward()
    assert len(tr.rows) == len(names)


def test_trace_backward_rejects_bad_input():
    layer, x, _ = _layer()
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        with trace_backward("layer"):
            pass
    with pytest.raises(ValueError, match=r"tensors\['x'\] must be a tensor that requires grad"):
        with trace_backward(layer, tensors={"x": x.detach()}):
            pass


def test_attention_grad_norms_splits_the_fused_projection():
    layer, x, R = _layer()
    (layer(x) * R).sum().backward()
    g = attention_grad_norms(layer.attn)
    W = layer.attn.qkv.weight.grad
    assert_close(g["W_Q"], W[:16].norm().item())
    assert_close(g["W_K"], W[16:32].norm().item())
    assert_close(g["W_V"], W[32:].norm().item())
    assert_close(g["W_O"], layer.attn.out.weight.grad.norm().item())
    assert g["b_K"] < 1e-5 * min(g["b_Q"], g["b_V"])  # softmax is shift-invariant in the keys


def test_attention_grad_norms_errors():
    layer, _, _ = _layer()
    with pytest.raises(ValueError, match="run a backward pass first"):
        attention_grad_norms(layer.attn)
    with pytest.raises(TypeError, match="tfx MultiHeadAttention"):
        attention_grad_norms(nn.Linear(2, 2))


def test_watch_grad_breaks_tells_detach_from_no_grad():
    x = torch.randn(3, requires_grad=True)
    with watch_grad_breaks() as breaks:
        a = x.detach()
        with torch.no_grad():
            b = x * 2
        c = x.data
        ok = x * 3  # still tracked: not a break
    assert "detach()" in breaks.cause(a)
    assert "no_grad" in breaks.cause(b) and "mul" in breaks.cause(b)
    assert breaks.cause(c) == ".data"
    assert breaks.cause(ok) is None and ok.requires_grad
    assert len(breaks.events) == 3


def test_explain_missing_grads_fires_on_each_cause_and_not_on_a_leaf_with_grad():
    leaf = torch.randn(3, requires_grad=True)
    unused = torch.randn(3, requires_grad=True)
    frozen = torch.randn(3)
    with watch_grad_breaks() as breaks:
        doubled = leaf * 2  # non-leaf
        cut = leaf.detach()
    (doubled.sum() + leaf.sum()).backward()
    tensors = {"leaf": leaf, "doubled": doubled, "unused": unused, "frozen": frozen, "cut": cut}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reading a non-leaf's .grad would warn: it must not
        issues = {i.name: i.reason for i in explain_missing_grads(tensors, breaks)}
    assert set(issues) == {"doubled", "unused", "frozen", "cut"}
    assert "non-leaf" in issues["doubled"] and "MulBackward0" in issues["doubled"]
    assert "never reached the loss" in issues["unused"]
    assert "indistinguishable" in issues["frozen"]  # not watched: the cause cannot be told
    assert "detach()" in issues["cut"]
    retained = leaf * 4
    retained.retain_grad()
    retained.sum().backward()
    assert explain_missing_grads({"retained": retained}) == []
    with pytest.raises(TypeError, match="dict"):
        explain_missing_grads([leaf])
    with pytest.raises(TypeError, match=r"tensors\['a'\] must be a tensor"):
        explain_missing_grads({"a": 1.0})


def test_diagnose_is_quiet_on_a_working_model_and_names_no_grad_and_detach():
    layer, x, R = _layer()
    assert diagnose_missing_grads(layer, lambda: (layer(x) * R).sum()) == []

    def cut_forward():
        a = layer.attn(x)[0].detach()  # (1, 5, 16)
        with torch.no_grad():
            f = layer.ff(x)
        return ((x + a + f) * R).sum()

    issues = {i.name: i.reason for i in diagnose_missing_grads(layer, cut_forward)}
    assert set(issues) == {
        f"{m}.{p}"
        for m in ("attn.qkv", "attn.out", "ff.fc1", "ff.fc2", "norm1", "norm2")
        for p in ("weight", "bias")
    }
    assert "detach()" in issues["attn.qkv.weight"] and "detach()" in issues["attn.out.bias"]
    assert "no_grad" in issues["ff.fc1.weight"]
    assert "never called" in issues["norm1.weight"]


def test_max_min_report_is_the_articles_printout():
    net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    net[1].bias.requires_grad_(False)
    net(torch.ones(1, 2)).sum().backward()
    lines = max_min_report(net).splitlines()
    assert lines[-1] == "No gradient for 1.bias"
    g = net[0].weight.grad
    assert lines[0] == f"0.weight: max={g.max().item():.4f}, min={g.min().item():.4f}"
