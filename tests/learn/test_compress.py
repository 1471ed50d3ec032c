"""tfx.learn.compress: INT8 copies, the unfused QKV starting point, the ONNX export and its INT8
copy, shared layers, the accuracy every variant is scored with, the chapter-08 widget's report, and
bench/int8.py at its tiny size (no timing is checked)."""

import json
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import tfx
from tfx.inspect.flops import n_params
from tfx.learn import compress
from tfx.learn.mlm import masked_accuracy
from tfx.model.bert import BertConfig, BertForMaskedLM


def tiny_model(**overrides):
    tfx.set_seed(0)
    cfg = BertConfig.tiny(
        vocab_size=50, max_len=16, dropout=0.0, attn_dropout=0.0, attn_impl="sdpa", **overrides
    )
    return BertForMaskedLM(cfg).eval()


def batches():
    tfx.set_seed(1)
    ids = torch.randint(5, 50, (6, 12))  # (N, L)
    ids[1, 9:] = 0  # padding
    labels = torch.where((torch.rand(6, 12) < 0.4) & (ids != 0), ids, torch.full_like(ids, -100))
    inputs = torch.where(labels != -100, torch.full_like(ids, 4), ids)
    return list(zip(inputs.split(3), labels.split(3)))


def test_int8_copy_is_close_smaller_and_leaves_the_model_alone():
    m = tiny_model()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    q = compress.quantize_int8(m)
    ids = batches()[0][0]
    with torch.inference_mode():
        ref, out = m(ids), q(ids)
    gap = (out - ref).abs().max().item()
    assert 0 < gap < 0.05 * ref.abs().max().item()  # quantized (not identical), but close
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    assert type(m.bert.layers[0].ff.fc1.weight) is nn.Parameter  # the original keeps float32
    assert compress.stored_bytes(q) < 0.75 * compress.stored_bytes(m)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        compress.quantize_int8("model")


def test_torch_ao_is_deprecated():
    assert "deprecated" in compress.deprecation_message()


def test_unfused_qkv_computes_the_same_function():
    m = tiny_model()
    u = compress.unfuse_qkv(m)
    assert isinstance(u.bert.layers[0].attn.qkv, compress.ThreeProjections)
    ids = batches()[0][0]
    with torch.inference_mode():
        assert torch.allclose(u(ids), m(ids), atol=1e-5)
    with pytest.raises(ValueError, match="no attention layer"):
        compress.unfuse_qkv(nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"nn.Linear\(d, 3d\)"):
        compress.ThreeProjections(nn.Linear(4, 4))


def test_held_out_accuracy_equals_masked_accuracy_and_bf16_runs():
    m, b = tiny_model(), batches()
    exclude = (0, 1, 2, 3, 4)
    acc = compress.held_out_accuracy(compress.tfx_predict(m), b, exclude)
    assert acc == masked_accuracy(m, b, exclude)
    assert 0 <= compress.held_out_accuracy(compress.tfx_predict(m, bf16=True), b, exclude) <= 1
    empty = [(b[0][0], torch.full_like(b[0][1], -100))]
    with pytest.raises(ValueError, match="no position is scored"):
        compress.held_out_accuracy(compress.tfx_predict(m), empty)
    with pytest.raises(TypeError, match="predict must be callable"):
        compress.held_out_accuracy(None, b)


def test_onnx_export_matches_tfx_and_its_int8_copy_runs(tmp_path):
    m, b = tiny_model(), batches()
    ids = torch.cat([b[0][0], b[1][0]])  # (6, 12), sequence 1 padded
    path, exporter = compress.export_onnx(m, tmp_path / "m.onnx", ids[:3])
    assert exporter in ("torch.export", "TorchScript tracer")
    predict = compress.ort_predict(compress.ort_session(path))
    mask = (ids != 0).long()
    with torch.inference_mode():
        ref = m(ids, attention_mask=mask)
    assert torch.allclose(predict(ids, mask), ref, atol=1e-4)  # another batch size, too
    q = compress.quantize_onnx(path, tmp_path / "q.onnx")
    assert q.stat().st_size < 0.6 * path.stat().st_size
    qout = compress.ort_predict(compress.ort_session(q))(ids, mask)
    assert 0 < (qout - ref).abs().max() < 0.1 * ref.abs().max()
    with pytest.raises(ValueError, match="must hold padding"):
        compress.export_onnx(m, tmp_path / "x.onnx", torch.full((2, 4), 7))
    with pytest.raises(ValueError, match="learned positions"):
        compress.OnnxMLM(tiny_model(position="sinusoidal"))


def test_onnx_quantize_static_is_a_function_not_a_module():
    import onnxruntime.quantization as oq

    assert callable(oq.quantize_static)
    run = subprocess.run(
        [sys.executable, "-m", "onnxruntime.quantization.quantize_static", "--help"],
        capture_output=True,
        text=True,
    )
    assert run.returncode != 0 and "No module named" in run.stderr


def test_shared_layers_count_once():
    m = tiny_model()
    n_layer = n_params(m.bert.layers[0])
    before = n_params(m)
    compress.share_layers(m)
    assert all(layer is m.bert.layers[0] for layer in m.bert.layers)
    assert n_params(m) == before - (len(m.bert.layers) - 1) * n_layer
    with pytest.raises(TypeError, match="encoder layers"):
        compress.share_layers(nn.Linear(2, 2))


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory, run_bench):
    out = tmp_path_factory.mktemp("int8")
    path = run_bench("int8.py", out, "--tiny")
    assert (out / path.name.replace(".json", ".md")).exists()
    return json.loads(path.read_text())


def test_bench_tiny_records_every_variant(tiny_results):
    r = tiny_results
    assert set(r["chain"]["accuracy"]) == set(r["chain"]["median_s"])
    assert r["chain"]["max_abs_logit_gap"]["fused QKV, fp32"] == 0
    assert r["chain"]["max_abs_logit_gap"]["ONNX Runtime fp32"] < 1e-4
    assert r["info"]["load_average_1_5_15min"] and r["torchao"] and r["onnxruntime"]
    assert r["sharing"]["params"]["shared"] < r["sharing"]["params"]["unshared"]


def test_precision_report_covers_every_setting(tiny_results):
    lengths = [int(L) for L in tiny_results["base"]["rows"]]
    for p in compress.PRECISIONS:
        for L in [*lengths, 7]:
            text = compress.precision_report(tiny_results, p, L)
            assert text.startswith(p) and "recorded by bench/int8.py" in text
    assert "length not recorded" in compress.precision_report(tiny_results, "fp32", 7)
    assert "no fast path" in compress.precision_report(tiny_results, "fp16 autocast", lengths[-1])
    assert "× the speed of fp32" in compress.precision_report(tiny_results, "INT8 torchao", 8)
    with pytest.raises(ValueError, match="precision must be one of"):
        compress.precision_report(tiny_results, "int4")
    with pytest.raises(TypeError, match="results must be"):
        compress.precision_report({}, "fp32")


def test_precision_widget_is_a_thin_shell(tiny_results, capsys):
    from tfx.book.widgets import precision_widget

    w = precision_widget(tiny_results)

    def printed():
        return capsys.readouterr().out + "".join(o.get("text", "") for o in w.children[-1].outputs)

    assert "fp32\nBERT-base" in printed()
    precision, length = w.children[:2]
    precision.value = "INT8 ONNX Runtime"
    assert "INT8 ONNX Runtime" in printed()
    length.value = length.options[0][1]  # not the default (the middle length)
    assert "masked tokens" in printed()
