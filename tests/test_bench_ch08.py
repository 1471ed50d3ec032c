"""Chapter 08's bench scripts run end to end at tiny sizes and write what the chapter reads.
No timing thresholds: CI machines differ; these check that every code path runs and that the
checks built into the scripts (equal outputs, equal gradients) pass."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tfx.inspect.perf import alternate, latest, run_info, write_results
from tfx.inspect.timing import cpu_capability

ROOT = Path(__file__).resolve().parent.parent


def _run(*args, timeout=120):
    proc = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_attention_memory_quick(tmp_path):
    _run("bench/attention_memory.py", "--quick", "--out", str(tmp_path))
    [path] = tmp_path.glob("attention-memory-*-quick.json")
    res = json.loads(path.read_text())
    assert res["info"]["threads"] == 1 and len(res["info"]["load_average_1_5_15min"]) == 3
    assert [r["L"] for r in res["rows"]] == [64, 128]
    for row in res["rows"]:
        assert set(row["peak_bytes"]) == {"naive", "chunked", "torch sdpa", "linear"}
        assert all(t > 0 for t in row["median_s"].values())
        # the naive score and weight matrices are L² floats each: counted exactly
        assert row["peak_bytes"]["naive"] >= 2 * row["L"] ** 2 * 4
    assert (tmp_path / path.name.replace(".json", ".md")).read_text().startswith("# Memory")


def test_ddp_gradients_equal_full_batch_under_torchrun():
    out = _run(
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "bench/ddp.py",
        "--quick",
        timeout=180,
    )
    # rank 0 alone prints, once; the script asserts both gaps itself
    assert out.count("world size 2") == 1
    assert "normalised by the global count" in out and "per-rank mean" in out


def test_perf_helpers(tmp_path):
    info = run_info()
    assert {"machine", "date", "torch", "threads", "load_average_1_5_15min"} <= info.keys()
    calls = []
    med = alternate({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=3)
    assert calls == ["a", "b"] * 4 and set(med) == {"a", "b"}  # warm-up round, then 3 in turn
    with pytest.raises(ValueError, match="fns must be a non-empty dict of callables"):
        alternate({})
    with pytest.raises(ValueError, match="rounds must be an int >= 1"):
        alternate({"a": print}, rounds=0)
    write_results({"x": 1}, "demo-2026-01-01", "# demo\n", tmp_path)
    write_results({"x": 2}, "demo-2026-01-02", "# demo\n", tmp_path)
    write_results({"x": 3}, "demo-2026-01-03-quick", "# demo\n", tmp_path)
    assert latest("demo", tmp_path) == {"x": 2}
    assert latest("nothing", tmp_path) is None


def test_encoder_quick(tmp_path):
    _run("bench/encoder.py", "--quick", "--out", str(tmp_path), timeout=300)
    [path] = tmp_path.glob("encoder-*-quick.json")
    res = json.loads(path.read_text())
    inf = res["layer"]["inference"]
    for name in ("tfx naive", "tfx sdpa", "torch fast path", "HF BertLayer"):
        assert inf[f"{name}, 1 threads"]["median_s"] > 0 and f"{name}, 2 threads" in inf
    assert "torch layer (eager: no fast path in training)" in res["layer"]["train"]
    # graph counts do not depend on the machine: one per length, 2 by default, 1 dynamic
    graphs = res["compile"]["graphs"]
    assert graphs["dynamic=False"] == len(res["config"]["lengths"]) and graphs["dynamic=True"] == 1
    assert graphs["default (dynamic=None)"] == 2 and graphs["padded to buckets, dynamic=False"] == 1
    assert res["qkv"]["max_abs_gap"] < 1e-5 and res["bf16"]["inference_max_abs_error"] < 0.1
    assert set(res["profile"]) == {"tfx sdpa", "torch fast path"}
    share = res["peak_share"]["share_of_fp32_peak"]
    assert len(share) == 4 and all(v > 0 for v in share.values())
    assert share[next(iter(share))] == 1.0  # the square matmul is the peak itself
    assert set(res["breakdown"]) == {"tfx sdpa", "torch fast path"}
    assert all(b["matmul"] > 0 for b in res["breakdown"].values())


def test_quiet_stderr_silences_fd2_and_restores_it(capfd):
    import os

    from tfx.inspect.perf import quiet_stderr

    with quiet_stderr():
        os.write(2, b"hidden\n")
    os.write(2, b"shown\n")
    err = capfd.readouterr().err
    assert "hidden" not in err and "shown" in err


def test_count_graphs_counts_recompiles_and_refuses_bad_input():
    """dynamic=False makes one graph per length, dynamic=True one for all (a counting backend)."""
    from tfx import set_seed
    from tfx.inspect.perf import count_graphs
    from tfx.model.layers import EncoderLayer

    set_seed(0)
    layer = EncoderLayer(16, 2, 32, dropout=0.0, attn_impl="sdpa").eval()
    xs = [torch.randn(1, n, 16) for n in (3, 5, 7)]  # (B, L, d) at three lengths
    assert count_graphs(layer, xs, dynamic=False) == 3
    assert count_graphs(layer, xs, dynamic=True) == 1
    with pytest.raises(TypeError, match="module must be an nn.Module"):
        count_graphs(lambda x: x, xs)
    with pytest.raises(ValueError, match="non-empty sequence of tensors"):
        count_graphs(layer, [])


def test_padding_to_buckets_leaves_few_graphs():
    """pad_to_bucket pads L up to the smallest bucket; graphs_by_setting counts the graphs of the
    four ways chapter 08 compiles inputs of several lengths."""
    from tfx import set_seed
    from tfx.inspect.perf import graphs_by_setting, pad_to_bucket
    from tfx.model.layers import EncoderLayer

    x = torch.randn(2, 5, 4)  # (B, L, d)
    padded = pad_to_bucket(x, buckets=(8, 4))
    assert padded.shape == (2, 8, 4) and torch.equal(padded[:, :5], x) and not padded[:, 5:].any()
    assert pad_to_bucket(x, buckets=(5,)).shape == (2, 5, 4)
    with pytest.raises(ValueError, match="longer than every bucket"):
        pad_to_bucket(x, buckets=(4,))
    with pytest.raises(ValueError, match="x must be a"):
        pad_to_bucket(x[0], buckets=(8,))
    set_seed(0)
    layer = EncoderLayer(16, 2, 32, dropout=0.0, attn_impl="sdpa").eval()
    xs = [torch.randn(1, n, 16) for n in (3, 5, 7)]  # (B, L, d) at three lengths
    graphs = graphs_by_setting(layer, xs, buckets=(4, 8))
    assert graphs["dynamic=False"] == 3 and graphs["dynamic=True"] == 1
    assert graphs["buckets 4/8, dynamic=False"] == 2  # lengths 3 → 4, 5 and 7 → 8


def test_mlm_step_tiny_with_profile(tmp_path):
    """bench/mlm_step.py --tiny: the four steps time and profile; ratios and the op-category
    breakdown land in the results files."""
    _run(
        "bench/mlm_step.py", "--tiny", "--profile", "--ablation", "--threads", "1", "--cpu-time",
        "--out", str(tmp_path), timeout=300,
    )  # fmt: skip
    [path] = tmp_path.glob("mlm-step-*-1thread-cpu-tiny.json")
    res = json.loads(path.read_text())
    assert res["mode"] == "tiny" and len(res["info"]["load_average_1_5_15min"]) == 3
    secs = res["seconds"]
    assert set(secs) == {"hf_fp32", "hf_fp32_fused_adamw", "tfx_fp32", "tfx_bf16"}
    # bf16 is timed only where the CPU has a bf16 fast path (elsewhere the step takes minutes)
    fast_bf16 = cpu_capability().fast_bf16
    assert (secs["tfx_bf16"] is not None) == fast_bf16
    assert all(t > 0 for t in secs.values() if t is not None)
    assert res["ratio_fp32"] == secs["tfx_fp32"] / secs["hf_fp32"]
    breakdown = res["breakdown_ms_per_step"]
    assert set(breakdown) == {"HF, default AdamW", "HF, fused AdamW", "tfx fp32", "tfx bf16"}
    for cats in breakdown.values():
        assert cats["matmul"] > 0 and cats["optimizer"] > 0 and cats["total"] > 0
    assert res["clock"] == "thread CPU time" and res["info"]["threads"] == 1
    abl = res["ablation"]
    assert abl["HF, default AdamW"]["ratio_to_hf"] == 1.0
    assert abl["tfx fp32, written-out LayerNorm"]["seconds"] > 0
    md = path.with_suffix(".md").read_text()
    assert res["machine"] in md and "Where the time goes" in md and "Load average" in md
