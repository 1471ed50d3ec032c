"""Making a trained model cheaper to run: INT8 weights, an ONNX Runtime copy, shared layers.

Each function here returns a *new* model (the trained one stays as it was) and each variant is
judged the same way, by `held_out_accuracy` on chapter 07's fixed held-out masks, so a speed-up is
always reported next to what it cost.

- INT8 dynamic quantization stores every nn.Linear weight as int8 (one scale per output row) and
  quantizes each activation row to int8 at run time: the matmuls run on int8 and only the weights
  need preparing ahead, no calibration data. Whether that is fast depends on the CPU: torch's int8
  matmul uses oneDNN only with AVX-512 VNNI (tfx.inspect.perf.fast_paths says which paths pay here).
  torchao is PyTorch's current home for it; `torch.ao.quantization.quantize_dynamic` still works
  but is deprecated.
- ONNX: the model exported as a graph that ONNX Runtime runs without PyTorch, and
  onnxruntime.quantization.quantize_dynamic's INT8 copy of it (weights stored as int8).
- ALBERT's cross-layer sharing: every encoder layer is the same module, so the encoder's
  parameters shrink n_layers-fold while the compute per token stays the same.

Built in chapter 08.
"""

import contextlib
import copy
import io
import logging
import os
import warnings
from pathlib import Path

import torch
import torch.nn as nn

from tfx.core.checks import check_int


@contextlib.contextmanager
def _quiet():
    """Silence the warnings, log lines and dumps torchao, torch.onnx and onnxruntime print on
    import, export and quantization: several carry a timestamp or a memory address and would
    make a notebook's output change on every run. Errors still raise."""
    os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")  # no CUDA libraries here
    logging.disable(logging.CRITICAL)
    sink = io.StringIO()
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(sink),
            contextlib.redirect_stderr(sink),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


def _check_module(model, name: str = "model") -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module, got {type(model).__name__}")


def quantize_int8(model: nn.Module) -> nn.Module:
    """A copy of `model` whose nn.Linear layers use INT8 dynamic quantization (inference only).

    torchao's Int8DynamicActivationInt8WeightConfig on every nn.Linear, the tied MLM decoder
    included (the copy's decoder gets its own int8 weight; the embedding table stays float32).
    The deprecated torch.ao.quantization.quantize_dynamic is not offered: it swaps each nn.Linear
    for a module whose `weight` is a method, not a tensor, and tfx's layers read their Linear
    layers' `weight.dtype` to check their input, so the swapped model fails (chapter 08 shows it).
    """
    _check_module(model)
    q = copy.deepcopy(model).eval()
    with _quiet():
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

        quantize_(q, Int8DynamicActivationInt8WeightConfig())
    return q


def deprecation_message() -> str:
    """The first line of the warning torch.ao.quantization.quantize_dynamic gives, or ''."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.ao.quantization.quantize_dynamic(nn.Sequential(nn.Linear(2, 2)), {nn.Linear})
    for w in caught:
        if "deprecated" in str(w.message):
            return str(w.message).strip().splitlines()[0]
    return ""


def stored_bytes(model: nn.Module) -> int:
    """Bytes of the model's state_dict as torch.save writes it: int8 weights count one byte per
    value, whatever the tensor class that holds them (parameter counts cannot tell)."""
    _check_module(model)
    buf = io.BytesIO()
    with _quiet():
        torch.save(model.state_dict(), buf)
    return buf.getbuffer().nbytes


def held_out_accuracy(predict, batches, exclude=()) -> float:
    """Masked-token accuracy of `predict(input_ids, attention_mask) -> (B, L, V) logits` over
    (inputs, labels) batches (labels -100 where not scored), never predicting an `exclude` id.

    One function for every variant (a tfx model, its INT8 copy, an ONNX Runtime session), so
    they are scored on exactly the same positions; for a tfx model it equals
    tfx.learn.mlm.masked_accuracy.
    """
    if not callable(predict):
        raise TypeError(f"predict must be callable, got {type(predict).__name__}")
    right = total = 0
    exclude = list(exclude)
    with torch.inference_mode():
        for inputs, labels in batches:
            positions = labels != -100  # (B, L)
            logits = torch.as_tensor(predict(inputs, (inputs != 0).long())).float()  # (B, L, V)
            scored = logits[positions]  # (N, V)
            if exclude:
                scored[:, exclude] = -float("inf")
            right += int((scored.argmax(-1) == labels[positions]).sum())
            total += int(positions.sum())
    if total == 0:
        raise ValueError("held_out_accuracy: no position is scored in these batches")
    return right / total


def tfx_predict(model: nn.Module, bf16: bool = False):
    """predict(input_ids, attention_mask) for a tfx BertForMaskedLM, optionally under bf16
    autocast (the weights stay float32; the matmuls run in bf16: fast on CPUs with bf16
    instructions, AVX-512 bf16 or AMX, and many times slower than fp32 without them)."""
    _check_module(model)

    def predict(ids, mask):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return model(ids, attention_mask=mask)  # (B, L, V)

    return predict


class ThreeProjections(nn.Module):
    """Q, K and V from three (d, d) Linear layers, concatenated to stand in for a fused (d, 3d)
    one: the unfused starting point of the article's speed-up chain, with the trained weights.

    The concatenation writes one (B, L, 3d) tensor that the fused layer writes too, so the two
    differ by the matmul calls alone (three of (d, d) against one of (d, 3d)) plus that copy.
    """

    def __init__(self, fused: nn.Linear):
        super().__init__()
        if not isinstance(fused, nn.Linear) or fused.out_features != 3 * fused.in_features:
            raise ValueError("fused must be an nn.Linear(d, 3d)")
        d, bias = fused.in_features, fused.bias is not None
        self.q, self.k, self.v = (nn.Linear(d, d, bias=bias) for _ in range(3))
        with torch.no_grad():
            for i, lin in enumerate((self.q, self.k, self.v)):
                lin.weight.copy_(fused.weight[i * d : (i + 1) * d])  # rows of [W_Q; W_K; W_V]
                if bias:
                    lin.bias.copy_(fused.bias[i * d : (i + 1) * d])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.q(x), self.k(x), self.v(x)], dim=-1)  # (B, L, 3d)


def unfuse_qkv(model: nn.Module) -> nn.Module:
    """A copy of a tfx model whose attention layers compute Q, K, V with three matmuls."""
    _check_module(model)
    m = copy.deepcopy(model)
    found = 0
    for mod in m.modules():
        if hasattr(mod, "qkv") and isinstance(mod.qkv, nn.Linear):
            mod.qkv = ThreeProjections(mod.qkv)
            found += 1
    if not found:
        raise ValueError("model has no attention layer with a fused qkv projection")
    return m


class OnnxMLM(nn.Module):
    """The forward pass of a tfx BertForMaskedLM (learned positions), without its input checks.

    Why a wrapper: torch.onnx.export traces the model with symbolic shapes, and two of tfx's
    input checks look at the *values* of the inputs (every id inside the vocabulary, every
    attention-mask entry 0 or 1); a trace cannot branch on values it does not know, so export
    fails there ("Could not guard on data-dependent expression"). This module runs the same
    submodules in the same order, minus those checks; `export_onnx` compares its output with
    the model's.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        bert = getattr(model, "bert", None)
        emb = getattr(bert, "embeddings", None)
        if emb is None or not hasattr(model, "head"):
            raise TypeError(f"model must be a tfx BertForMaskedLM, got {type(model).__name__}")
        if getattr(model.cfg, "position", "learned") != "learned":
            raise ValueError(f"OnnxMLM supports learned positions, got {model.cfg.position!r}")
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        emb = self.model.bert.embeddings
        L = input_ids.size(1)
        x = emb.tok(input_ids) + emb.seg(torch.zeros_like(input_ids))  # (B, L, d)
        x = emb.drop(emb.norm(x + emb.pos.weight[:L]))  # (B, L, d) + (L, d)
        mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, L)
        for layer in self.model.bert.layers:
            x = layer(x, mask)  # (B, L, d)
        return self.model.head(x)  # (B, L, V)


def export_onnx(model: nn.Module, path, example_ids: torch.Tensor) -> tuple:
    """Export a tfx BertForMaskedLM to `path` (inputs input_ids and attention_mask, output
    logits; batch and length dynamic) and return (path, the exporter that succeeded).

    torch.onnx.export's default exporter (torch.export) is tried first. It refuses a Python `if`
    on a tensor's values, and tfx's sdpa attention has two (it skips the mask when nothing is
    masked, and zeroes rows with no key only when there are some): then the older TorchScript
    tracer is used, which records the branch the example takes. The example should therefore
    hold padding (a masked batch), so the traced graph applies the mask; both branches give the
    same numbers whenever the mask has no empty row. The wrapper is checked against the model
    on the example before export.
    """
    _check_module(model)
    if not isinstance(example_ids, torch.Tensor) or example_ids.dim() != 2:
        raise ValueError("example_ids must be a (B, L) tensor of token ids")
    if bool((example_ids != 0).all()):  # a traced graph would then drop the mask altogether
        raise ValueError("example_ids must hold padding (id 0) in at least one sequence")
    path = Path(path)
    wrapper = OnnxMLM(model).eval()
    mask = (example_ids != 0).long()  # (B, L)
    with torch.inference_mode():
        if not torch.allclose(
            wrapper(example_ids, mask), model(example_ids, attention_mask=mask), atol=1e-5
        ):
            raise RuntimeError("OnnxMLM no longer matches the model's forward pass")
    names = dict(input_names=["input_ids", "attention_mask"], output_names=["logits"])
    axes = {0: "batch", 1: "length"}
    with _quiet():
        try:
            torch.onnx.export(
                wrapper,
                (example_ids, mask),
                str(path),
                dynamo=True,
                external_data=False,  # one file, its size the model's
                dynamic_shapes=(axes, axes),
                **names,
            )
            return path, "torch.export"
        except Exception as e:  # torch.onnx wraps the guard error in its own exception class
            if "data-dependent" not in str(e):
                raise
        torch.onnx.export(
            wrapper,
            (example_ids, mask),
            str(path),
            dynamo=False,
            dynamic_axes={"input_ids": axes, "attention_mask": axes, "logits": axes},
            **names,
        )
    return path, "TorchScript tracer"


def ort_session(path, threads: int = 1):
    """An ONNX Runtime CPU session for the model at `path`, with `threads` intra-op threads."""
    import onnxruntime as ort

    check_int(threads, "threads")
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.log_severity_level = 3  # errors only: its warnings carry timestamps
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def ort_predict(session):
    """predict(input_ids, attention_mask) -> logits for an ONNX Runtime session."""

    def predict(ids, mask):
        feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
        return torch.from_numpy(session.run(["logits"], feeds)[0])  # (B, L, V)

    return predict


def quantize_onnx(path_in, path_out) -> Path:
    """onnxruntime.quantization.quantize_dynamic: int8 weights stored in the file, activations
    quantized at run time (no calibration data, unlike quantize_static)."""
    with _quiet():
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(path_in), str(path_out), weight_type=QuantType.QInt8)
    return Path(path_out)


def share_layers(model: nn.Module) -> nn.Module:
    """ALBERT's cross-layer sharing, in place: every encoder layer becomes the first one (one
    set of weights applied n_layers times). Returns the model."""
    _check_module(model)
    layers = getattr(getattr(model, "bert", model), "layers", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise TypeError("model must be a tfx BertModel or BertForMaskedLM with encoder layers")
    for i in range(1, len(layers)):
        layers[i] = layers[0]
    return model


# What the chapter's widget offers: label -> (key in the chain results, key in the base results)
PRECISIONS = {
    "fp32": ("fused QKV, fp32", "fp32"),
    "bf16 autocast": ("fused QKV, bf16 autocast", "bf16 autocast"),
    "fp16 autocast": (None, "fp16 autocast"),
    "INT8 torchao": ("INT8 torchao, eager", "INT8 torchao, eager"),
    "INT8 torchao + compile": ("INT8 torchao, torch.compile", "INT8 torchao, torch.compile"),
    "INT8 ONNX Runtime": ("ONNX Runtime INT8 (quantize_dynamic)", None),
}


def precision_report(results: dict, precision: str = "fp32", length: int = 128) -> str:
    """What bench/int8.py recorded for one precision: the BERT-base-sized encoder's time per
    batch at `length` (and its ratio to fp32), and the trained model's held-out accuracy and
    speed at that precision (the book model; chapter 07's in files recorded before it).
    Recorded numbers only, so the text is the same on every run and on the static site; the
    machine and date are named."""
    if not isinstance(results, dict) or "base" not in results or "chain" not in results:
        raise TypeError(
            "results must be a bench/int8.py results dict (tfx.inspect.perf.latest('int8'))"
        )
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
    chain_key, base_key = PRECISIONS[precision]
    base, chain, info = results["base"], results["chain"], results["info"]
    lines = [f"{precision}"]
    row = base["rows"].get(str(length))
    head = f"BERT-base-sized encoder ({base['layers']} layers), batch {base['batch']} × {length}:"
    if row is None:
        lines.append(f"{head} length not recorded (recorded: {', '.join(base['rows'])})")
    elif base_key not in row["median_s"]:
        why = " (no fast path on the recording CPU: recorded at the shortest length only)"
        lines.append(f"{head} not recorded{why if base_key == 'fp16 autocast' else ''}")
    else:
        t, t32 = row["median_s"][base_key], row["median_s"]["fp32"]
        lines.append(
            f"{head} {t:.3f} s per batch, {t32 / t:.2f}× the speed of fp32 "
            f"({t32:.3f} s); largest output change {row['max_abs_gap'][base_key]:.3f}"
        )
    b, L = chain["batch"]
    name = chain.get("model", "chapter 07's model")  # files from before the book model
    head = f"{name}, batch {b} × {L}:"
    if chain_key not in chain["median_s"]:
        lines.append(f"{head} not recorded")
    else:
        ref = "fused QKV, fp32"
        acc, acc32 = chain["accuracy"][chain_key], chain["accuracy"][ref]
        n = chain["scored_positions"]
        lines.append(
            f"{head} {chain['median_s'][ref] / chain['median_s'][chain_key]:.2f}× the speed "
            f"of fp32; held-out accuracy {acc:.4f} (fp32 {acc32:.4f}: "
            f"{round((acc - acc32) * n):+d} of {n} masked tokens)"
        )
    lines.append(
        f"recorded by bench/int8.py on {info['machine']}, {info['date']}, "
        f"load {info['load_average_1_5_15min'][0]}"
    )
    return "\n".join(lines)
