"""tfx.core.shapes: show, trace and check_shape."""

import numpy as np
import pytest
import torch

import tfx
from tfx.core.shapes import check_shape, show, trace
from tfx.model.bert import BertConfig, BertModel


def test_show_aligns_and_reports_grad_norm(capsys):
    x = torch.ones(2, 3, requires_grad=True)
    (x * 2).sum().backward()
    show(x=x, weights=torch.zeros(8, 8, dtype=torch.float64), ids=np.arange(4))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "x",
        "(2,",
        "3)",
        "float32",
        "grad",
        "norm",
        "4.899",
    ]  # ‖2·1‖ over 6 entries
    assert lines[1].split() == ["weights", "(8,", "8)", "float64"]
    assert lines[2].split() == ["ids", "(4,)", "int64"]
    assert lines[0].index("(2, 3)") == lines[1].index("(8, 8)") == lines[2].index("(4,)")
    with pytest.raises(TypeError, match="list"):
        show(bad=[1, 2])


def test_trace_lists_every_module_in_call_order():
    tfx.set_seed(0)
    cfg = BertConfig.tiny()
    model = BertModel(cfg)
    table = trace(
        model, torch.ones(2, 8, dtype=torch.long), attention_mask=torch.ones(2, 8, dtype=torch.long)
    )
    paths = [r.path for r in table]
    assert paths[0] == "BertModel" and paths[1] == "embeddings"
    assert (
        paths.index("layers.0.attn.qkv")
        < paths.index("layers.0.attn.out")
        < paths.index("layers.1")
    )
    row = {r.path: r for r in table}
    assert row["layers.0.attn.qkv"].outputs == "(2, 8, 192)"
    assert row["layers.1"].inputs == "(2, 8, 64), (2, 1, 1, 8)"
    assert row["BertModel"].params == sum(p.numel() for p in model.parameters())
    assert row["embeddings.tok"].params == cfg.vocab_size * cfg.d_model
    text = str(table)
    assert text.splitlines()[0].split()[:3] == ["module", "input", "shapes"]
    assert "layers.0.ff.fc1" in text and f"{row['BertModel'].params:,}" in text
    shallow = trace(model, torch.ones(1, 4, dtype=torch.long), max_depth=1)
    assert {r.path for r in shallow} == {"BertModel", "embeddings", "layers.0", "layers.1"}
    assert not any(h for m in model.modules() for h in (m._forward_hooks, m._forward_pre_hooks))


def test_check_shape():
    check_shape(torch.zeros(2, 8, 768), (None, 8, 768))
    with pytest.raises(ValueError, match=r"q: expected shape \(\*, 8, 768\), got \(2, 8, 512\)"):
        check_shape(torch.zeros(2, 8, 512), (None, 8, 768), name="q")
    with pytest.raises(ValueError, match=r"expected shape \(8, 768\), got \(1, 8, 768\)"):
        check_shape(torch.zeros(1, 8, 768), (8, 768))


def test_import_is_light():
    import subprocess
    import sys

    code = (
        "import sys, tfx; heavy = ('matplotlib', 'ipywidgets', 'transformers'); "
        "print(any(m.startswith(heavy) for m in sys.modules))"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
        == "False"
    )


def test_hooked_takes_the_hooks_off_even_when_the_block_fails():
    from tfx.core.shapes import hooked

    layer, seen = torch.nn.Linear(2, 2), []
    handle = layer.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    with pytest.raises(RuntimeError, match="inside"), hooked([handle]):
        layer(torch.zeros(1, 2))
        raise RuntimeError("inside")
    layer(torch.zeros(1, 2))
    assert seen == [torch.Size([1, 2])]  # fired once, inside the block only
