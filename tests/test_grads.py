"""tfx.grads: gradient tables, per-layer norms, activation gradients and missing-gradient diagnosis."""

import torch
import torch.nn as nn
from torch.testing import assert_close

import tfx
from tfx.bert import BertConfig, BertModel
from tfx.grads import diagnose_missing_grads, grad_norms, layer_grad_norms, record_activation_grads


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
    per_layer = layer_grad_norms(model)
    assert list(per_layer) == [0, 1, 2]
    want = torch.cat([p.grad.flatten() for p in model.layers[2].parameters()]).norm().item()
    assert abs(per_layer[2] - want) < 1e-5 * want


def test_record_activation_grads_matches_autograd():
    model = _model()
    ids = torch.randint(5, 1000, (2, 6))
    with record_activation_grads({f"layer{i}": l for i, l in enumerate(model.layers)}) as rec:
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
    assert "never reached the loss" in issues["cut.bias"]
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
