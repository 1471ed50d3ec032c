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
from tfx.inspect.perf import format_breakdown, op_breakdown
from tfx.learn.train import bert_adamw
from tfx.model.attention import MultiHeadAttention
from tfx.model.bert import BertConfig, BertForMaskedLM
from tfx.model.layers import LayerNorm

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

    from tfx.inspect.perf import alternate
    from tfx.inspect.timing import threads

    with threads(1):
        med = alternate({"a": lambda: sum(range(1000))}, rounds=2, clock=time.thread_time)
    assert med["a"] >= 0
    with threads(2), pytest.raises(ValueError, match="one thread"):
        alternate({"a": print}, clock=time.thread_time)
    with pytest.raises(ValueError, match="clock must be"):
        alternate({"a": print}, clock=time.time)


# ---- chapter 08: reporting rounds, which fast paths a CPU has ----------------------------------

# The four classes of CPU the chapter must read true on, as cpu_capability reports them (fast_bf16:
# oneDNN runs bf16 and bf16 instructions are there): AVX2 only (a Zen 3 EPYC); AVX-512 without bf16
# instructions (Skylake-SP; Cascade Lake adds VNNI); AVX-512 with bf16 and VNNI, no AMX (a Zen 4
# EPYC, the recording CPU's class); AMX (Sapphire Rapids).
AVX512_BF16 = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni")
ZEN3 = dict(aten="AVX2", fast_bf16=False, flags=("avx2",), family="25", model="1")
SKYLAKE = dict(aten="AVX512", fast_bf16=False, flags=("avx2", "avx512f"), family="6", model="85")
CASCADE = {**SKYLAKE, "flags": ("avx2", "avx512f", "avx512_vnni")}
ZEN4 = dict(aten="AVX512", fast_bf16=True, flags=AVX512_BF16, family="25", model="17")
AMX = ("avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
SAPPHIRE = dict(aten="AVX512", fast_bf16=True, flags=AVX512_BF16 + AMX, family="6", model="143")


def _cap(**kw):
    from tfx.inspect.timing import CpuCapability

    return CpuCapability(**kw)


def _paths(**kw):
    from tfx.inspect.perf import fast_paths

    fp = fast_paths(_cap(**kw))
    return fp, (fp.bf16, fp.fp16, fp.int8_torchao, fp.int8_onnxruntime)


def test_fast_paths_on_the_four_classes_of_cpu():
    from tfx.inspect.perf import fast_paths

    zen3, got = _paths(**ZEN3)
    assert got == (False, False, False, True)
    assert "tens of times slower" in zen3.why["bf16"] and "AVX2" in zen3.why["bf16"]
    assert "scalar loop" in zen3.why["int8 torchao"]
    # AVX-512 without bf16: oneDNN *can* run bf16 there (its old answer, fast_bf16=True, is not
    # trusted), but emulates it, slower than fp32
    for kw in (SKYLAKE, CASCADE, {**SKYLAKE, "fast_bf16": True}):
        fp, got = _paths(**kw)
        assert got[:2] == (False, False) and got[3]
        assert "emulates bf16" in fp.why["bf16"] and "held back" not in fp.why["bf16"]
    assert not _paths(**SKYLAKE)[0].int8_torchao and _paths(**CASCADE)[0].int8_torchao
    zen4, got = _paths(**ZEN4)
    assert got == (True, False, True, True)
    assert zen4.why["bf16"] == "bf16 instructions (avx512_bf16) that oneDNN's kernels use"
    spr, got = _paths(**SAPPHIRE)
    assert got == (True, True, True, True) and "amx_bf16, avx512_bf16" in spr.why["bf16"]
    # bf16 instructions, but torch built without oneDNN: no fast path
    assert _paths(**{**ZEN4, "fast_bf16": False})[1][:2] == (False, False)
    with pytest.raises(TypeError, match="CpuCapability"):
        fast_paths("AVX2")


def test_fast_paths_follow_the_isa_cap():
    """`make nbval-avx2` caps oneDNN at AVX2: every AVX-512 and AMX path, INT8 included, must then
    read as on an AVX2-only CPU, though torch's int8 matmul reads the CPU's own flags."""
    for kw in (SKYLAKE, CASCADE, ZEN4, SAPPHIRE):
        fp, got = _paths(**{**kw, "aten": "AVX2", "isa_cap": "AVX2"})
        assert got == (False, False, False, True)
        assert all("held back by ONEDNN_MAX_CPU_ISA=AVX2" in fp.why[k] for k in ("bf16", "fp16"))
        assert "held back" in fp.why["int8 torchao"] and "tens of times" in fp.why["bf16"]
    # the review's emulation of Skylake-SP and Cascade Lake on a Zen 4
    assert _paths(**{**ZEN4, "isa_cap": "AVX512_CORE"})[1] == (False, False, False, True)
    assert _paths(**{**ZEN4, "isa_cap": "AVX512_CORE_VNNI"})[1] == (False, False, True, True)
    assert _paths(**{**SAPPHIRE, "isa_cap": "AVX512_CORE_BF16"})[1] == (True, False, True, True)
    assert _paths(**{**SAPPHIRE, "isa_cap": "AVX512_CORE_AMX"})[1] == (True, True, True, True)
    with pytest.raises(ValueError, match="isa_cap must be one of"):
        _paths(**{**ZEN4, "isa_cap": "AVX3"})


def test_precision_advice_and_skip_reasons_follow_the_flags():
    from tfx.inspect.perf import AVX2_ONLY_MEASURED, precision_advice, skip_reason

    fast, slow = precision_advice(_cap(**ZEN4)), precision_advice(_cap(**ZEN3))
    assert "bf16: fast path" in fast and "tens of times slower" not in fast
    assert "bf16: no fast path" in slow and "56×" in slow and "7.7×" in slow
    assert "so torchao pays" in fast and "so not torchao" in slow and "17-29×" in slow
    assert "1.76× fp32's speed" in slow and "pays too" in fast
    sky = precision_advice(_cap(**SKYLAKE))
    assert "bf16: no fast path, AVX-512 without bf16" in sky and "stay in fp32" in sky
    assert "56×" not in sky.splitlines()[1]
    assert len(slow.splitlines()) == len(fast.splitlines()) == 4
    assert AVX2_ONLY_MEASURED["bf16 matmul 1024×768×3072"] > 10
    for path in ("bf16", "int8 torchao"):
        assert skip_reason(path, _cap(**ZEN4)) == ""
        assert skip_reason(path, _cap(**ZEN3)).startswith(f"{path} skipped: ")
    assert skip_reason("int8 onnxruntime", _cap(**ZEN3)) == ""
    assert skip_reason("fp16", _cap(**ZEN4)).startswith("fp16 skipped")
    with pytest.raises(ValueError, match="path must be one of"):
        skip_reason("int4", _cap(**ZEN4))


def test_fp32_peak_on_each_class_of_cpu():
    """cores × clock × fp32 lanes per FMA × FMA units × 2, the lanes narrowed to AMD's datapaths."""
    from tfx.inspect.perf import fp32_peak

    zen1 = dict(ZEN3, family="23", model="1")  # this book's AVX2 EPYC: 128-bit FMA pipes
    zen2 = dict(ZEN3, family="23", model="49")
    zen5 = dict(ZEN4, family="26", model="2")  # the recording CPU
    per_cycle = {
        "zen1": (zen1, 16),
        "zen2": (zen2, 32),
        "zen3": (ZEN3, 32),
        "zen4": (ZEN4, 32),  # AVX-512 in two 256-bit halves
        "zen5": (zen5, 64),
        "skylake": (SKYLAKE, 64),
        "sapphire": (SAPPHIRE, 64),
        "sapphire, make nbval-avx2": ({**SAPPHIRE, "isa_cap": "AVX2"}, 32),
        "unknown family, no flags": (dict(aten="DEFAULT", fast_bf16=False), 16),  # SSE
    }
    for name, (kw, flop) in per_cycle.items():
        assert fp32_peak(_cap(**kw), ghz=3.0).flop_per_cycle == flop, name
    peak = fp32_peak(_cap(**zen1), cores=2, ghz=2.0)
    assert peak.gflop_per_s == 2 * 2.0 * 4 * 2 * 2 == 64.0
    assert "128-bit FMA pipes" in peak.assumed[1] and "given" in peak.assumed[0]
    assert "as wide as the flags" in fp32_peak(_cap(**SAPPHIRE), ghz=2.0).assumed[1]
    with pytest.raises(ValueError, match="ghz must be a positive number"):
        fp32_peak(_cap(**ZEN4), ghz=0)
    with pytest.raises(ValueError, match="cores must be an int >= 1"):
        fp32_peak(_cap(**ZEN4), cores=0, ghz=2.0)
    with pytest.raises(TypeError, match="CpuCapability"):
        fp32_peak("zen4")


def test_cpu_ghz_prefers_the_highest_clock_to_the_shown_one(tmp_path):
    from tfx.inspect.perf import cpu_ghz

    cpuinfo, cpufreq = tmp_path / "cpuinfo", tmp_path / "cpuinfo_max_freq"
    cpuinfo.write_text("processor\t: 0\ncpu MHz\t\t: 1996.249\n")
    ghz, source = cpu_ghz(str(cpuinfo), str(cpufreq))  # a VM: no cpufreq
    assert ghz == pytest.approx(1.996249) and "nominal in a VM" in source
    cpufreq.write_text("3700000\n")  # kHz
    assert cpu_ghz(str(cpuinfo), str(cpufreq)) == (3.7, f"{cpufreq} (the highest clock)")
    with pytest.raises(RuntimeError, match="no clock found"):
        cpu_ghz(str(tmp_path / "none"), str(tmp_path / "none"))


def test_this_cpu_agrees_with_its_probe():
    """On the machine running the tests: where fast_paths says a path is fast, the probe's matmul
    is faster than fp32; where it says slow, slower (the chapter asserts the same). torch picks
    its int8 kernel from CPUID, which an ISA cap cannot hide: under a cap int8 is not checked."""
    from tfx.inspect.perf import fast_path_probe, fast_paths, round_stats
    from tfx.inspect.timing import cpu_capability

    st = round_stats(fast_path_probe(n=256, rounds=3))
    ratio = {k: st[k]["median_s"] / st["fp32"]["median_s"] for k in ("bf16", "int8")}
    fp = fast_paths()
    assert (ratio["bf16"] < 1.0) if fp.bf16 else (ratio["bf16"] > 1.0)
    if not cpu_capability().isa_cap:
        assert (ratio["int8"] < 1.0) if fp.int8_torchao else (ratio["int8"] > 2.0)
    with pytest.raises(ValueError, match="n must be an int >= 16"):
        fast_path_probe(n=8)


def test_round_stats_and_format_rounds():
    from tfx.inspect.perf import format_rounds, round_stats

    samples = {"ref": [2.0, 1.0, 3.0, 4.0, 5.0], "fast": [0.5, 1.5, 1.0, 2.0, 2.5], "few": [1.0]}
    st = round_stats(samples)
    assert st["ref"] == {"n": 5, "min_s": 1.0, "median_s": 3.0, "max_s": 5.0, "iqr_s": 2.0}
    assert st["few"]["iqr_s"] == 0.0
    table = format_rounds(samples, reference="ref").splitlines()
    assert table[0].split()[:4] == ["n", "fastest", "median", "IQR"]
    assert table[2].rstrip().endswith("0.50,  0.50")  # fast / ref by median and by fastest
    assert table[3].endswith("(n < 5: not a result)") and "not a result" not in table[1]
    with pytest.raises(ValueError, match="reference must be one of"):
        format_rounds(samples, reference="missing")
    with pytest.raises(ValueError, match="non-empty dict"):
        round_stats({})
    with pytest.raises(ValueError, match="at least one time"):
        round_stats({"a": []})


def test_latest_orders_by_recorded_date_not_by_name(tmp_path):
    import json

    from tfx.inspect.perf import latest

    files = {
        "gpu-h100-2026-12-01": {"date": "2026-12-01 10:00 UTC", "device_name": "old"},
        "gpu-a100-2026-12-05": {"date": "2026-12-05 10:00 UTC", "device_name": "new"},
        "gpu-z-2026-12-09-quick": {"date": "2026-12-09 10:00 UTC", "device_name": "quick"},
        "encoder-2026-11-30": {"info": {"date": "2026-11-30 21:51 UTC"}},
    }
    for stem, content in files.items():
        (tmp_path / f"{stem}.json").write_text(json.dumps(content))
    assert latest("gpu", tmp_path)["device_name"] == "new"  # "gpu-h100" sorts later by name
    assert latest("encoder", tmp_path)["info"]["date"].startswith("2026-11-30")
    assert latest("int8", tmp_path) is None


def test_results_header_says_whether_other_jobs_shared_the_cpu():
    """The .md header reads the last minute's load: under one core busy, the CPU was the run's."""
    from tfx.inspect.perf import header_md

    info = {"machine": "m", "date": "d"}
    quiet = header_md("T", {**info, "load_average_1_5_15min": [0.46, 2.9, 2.94]})
    busy = header_md("T", {**info, "load_average_1_5_15min": [5.07, 5.03, 4.95]})
    assert "0.46, 2.9, 2.94 (the CPU otherwise idle in the last minute)" in quiet
    assert "5.07, 5.03, 4.95 (other jobs shared the CPU)" in busy
