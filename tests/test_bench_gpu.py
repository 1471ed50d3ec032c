"""bench/gpu.py, the one GPU run, kept working on a CPU: every section runs at toy sizes, each row
says what it measured, one failure loses nothing else, and the % of peak uses the right peak.
No timing thresholds: the numbers of a CPU quick run mean nothing."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "bench" / "gpu.py")
gpu = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu)

QUICK = ["--quick", "--device", "cpu", "--out"]
STATS = ("n", "min_s", "median_s", "max_s")


def _results(out: Path) -> dict:
    [path] = out.glob("gpu-*-quick.json")
    assert path.with_suffix(".md").exists()
    return json.loads(path.read_text())


def test_quick_cpu_run_writes_every_section(tmp_path):
    gpu.main([*QUICK, str(tmp_path)])
    res = _results(tmp_path)
    assert res["sections"] == list(gpu.SECTIONS)
    assert res["device"]["type"] == "cpu" and res["device"]["torch"] == torch.__version__
    assert {"cudnn", "triton", "cuda_runtime", "host_cpu_capability"} <= res["device"].keys()
    for section in gpu.SECTIONS:
        assert res[section]["status"] == "done" and res[section]["rows"], section
        for key, row in res[section]["rows"].items():
            if "error" in row:  # only attention backends the CPU lacks
                assert section == "sdpa" and key.split()[0] in {"efficient", "cudnn"}, key
                continue
            assert row["precision"] in {"fp32", "tf32", "bf16", "fp16"}, key
            assert set(STATS) <= row.keys() and row["n"] >= 3, key
            assert 0 < row["min_s"] <= row["median_s"] <= row["max_s"], key
    sdpa, bert = res["sdpa"]["rows"], res["bert"]["rows"]
    assert {"default bf16", "flash bf16", "efficient bf16", "cudnn bf16", "math bf16"} <= set(sdpa)
    assert sdpa["math bf16"]["precision"] == "fp32"  # the math backend upcasts 16-bit inputs
    assert sdpa["flash fp16"]["precision"] == "fp16"
    assert bert["inference bf16 weights"]["fused_fast_path"] is True
    [compiled] = [row for key, row in bert.items() if "torch.compile" in key]
    # the masked rows are picked by index_select, not a boolean mask: one graph, no break
    assert compiled["graphs"] == 1 and compiled["graph_breaks"] == 0
    assert "train step bf16 autocast, fused AdamW" in bert


def test_a_failing_section_or_compile_loses_nothing_else(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("forced failure")

    monkeypatch.setattr(gpu, "bench_sdpa", broken)
    monkeypatch.setattr(torch, "compile", broken)
    gpu.main([*QUICK, str(tmp_path)])
    res = _results(tmp_path)
    assert res["sdpa"]["status"] == "failed" and "forced failure" in res["sdpa"]["error"]
    assert all(res[s]["status"] == "done" for s in gpu.SECTIONS if s != "sdpa")
    bert = res["bert"]["rows"]
    [compiled] = [row for key, row in bert.items() if "torch.compile" in key]
    assert "forced failure" in compiled["error"]
    assert bert["train step bf16 autocast, fused AdamW"]["median_s"] > 0
    assert "FAILED" in (tmp_path / next(tmp_path.glob("*.md")).name).read_text()


def test_results_are_on_disk_before_the_run_ends(tmp_path, monkeypatch):
    """What a killed run leaves: every finished section, and the one it was in marked running."""

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(gpu, "bench_qkv", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gpu.main([*QUICK, str(tmp_path)])
    res = _results(tmp_path)
    assert [res[s]["status"] for s in gpu.SECTIONS] == [
        "done",
        "done",
        "done",
        "running",
        "not run",
    ]
    assert res["matmul"]["rows"]["64^3 bf16"]["median_s"] > 0


def test_without_cuda_it_skips_and_a_cpu_run_needs_quick_and_out(tmp_path):
    if not torch.cuda.is_available():
        proc = subprocess.run(
            [sys.executable, "bench/gpu.py", "--out", str(tmp_path)],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert proc.returncode == 0 and proc.stdout.strip().splitlines() == [
            "gpu: skipped, no CUDA device (torch.cuda.is_available() is False); nothing written"
        ]
        assert not list(tmp_path.iterdir())
    for args in (["--device", "cpu"], ["--device", "cpu", "--quick"]):
        with pytest.raises(SystemExit):
            gpu.main(args)


def test_datasheet_peak_matches_the_exact_device_and_scales_mig_slices():
    h200 = gpu.datasheet_peak("NVIDIA H200", 132)
    assert h200["peaks"]["bf16"] == 989.4 and h200["peaks"]["tb_s"] == 4.8
    assert gpu.datasheet_peak("NVIDIA H200 NVL", 132)["peaks"]["bf16"] == 835.5
    # names that a substring match would have given another part's peaks
    for name, sms in (("NVIDIA L40", 142), ("NVIDIA A10G", 80), ("NVIDIA H200", 114)):
        assert gpu.datasheet_peak(name, sms)["peaks"] is None, name
    mig = gpu.datasheet_peak("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 60)
    assert mig["peaks"]["bf16"] == pytest.approx(989.4 * 60 / 132)
    assert mig["peaks"]["tb_s"] is None and "MIG" in mig["source"]


def test_rates_divide_by_the_peak_of_the_rows_precision():
    """A 500 TFLOP/s bf16 attention row on an H200 is about half the bf16 peak (the old name-parsing
    lookup divided it by the fp32 peak: 746%)."""
    peaks = gpu.datasheet_peak("NVIDIA H200", 132)["peaks"]
    stats = dict(n=5, min_s=0.9, median_s=1.0, max_s=1.2)
    row = gpu.rates(stats, "bf16", peaks, flops=500e12)
    assert row["rate"] == pytest.approx(500) and row["pct_of_peak"] == pytest.approx(50.5, abs=0.1)
    assert row["rate_at_min"] == pytest.approx(500 / 0.9)
    copy = gpu.rates(stats, "fp32", peaks, nbytes=4.8e12)
    assert copy["unit"] == "TB/s" and copy["pct_of_peak"] == pytest.approx(100)
    assert gpu.rates(stats, "bf16", None, flops=1e12)["pct_of_peak"] is None
