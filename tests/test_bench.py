"""bench/run.py --quick runs end to end and writes results with the expected keys and positive
ratios. No timing thresholds: CI machines differ, and this only checks that every benchmark runs."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _check_rows(rows, reference):
    assert rows[0]["label"] == reference and "ratio_to_reference" not in rows[0]
    for row in rows:
        assert row["median_s"] > 0 and row["min_s"] > 0 and row["repeats"] >= 1
    for row in rows[1:]:
        assert row["ratio_to_reference"] > 0 and row["min_ratio_to_reference"] > 0


def test_bench_quick_writes_results(tmp_path):
    command = [sys.executable, "bench/run.py", "--quick", "--threads", "1", "--out", str(tmp_path)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    [path] = tmp_path.glob("*-quick.json")
    results = json.loads(path.read_text())
    assert {
        "mode",
        "date",
        "machine",
        "load_average_1min",
        "config",
        "recurrence",
        "attention",
        "gpu",
    } <= results.keys()
    assert (
        results["mode"] == "quick"
        and "1 threads" in results["machine"]
        and results["load_average_1min"] >= 0
    )
    assert path.name.startswith(("cpu-", "cuda-")) and results["date"] in path.name
    assert [e["L"] for e in results["recurrence"]] == results["config"]["lengths"]
    for entry in results["recurrence"]:
        assert [r["label"] for r in entry["results"]] == [
            "nn.LSTM",
            "LSTMCell step loop",
            "tfx self-attention",
        ]
        _check_rows(entry["results"], entry["reference"])
    att = results["attention"]
    assert att["shape"]["d_model"] == results["config"]["d_model"]
    _check_rows(att["block"], att["reference"])
    _check_rows(att["layer"], att["reference"])
    assert [r["label"] for r in att["layer"]][-1] == "nn.TransformerEncoderLayer (fast path)"
    gpu = results["gpu"]
    if "skipped" in gpu:
        assert "no CUDA" in gpu["skipped"] and "skipped" in proc.stdout
    else:
        _check_rows(gpu["layer"], gpu["reference"])
    md = path.with_suffix(".md").read_text()
    assert results["machine"] in md and "ratio to reference" in md


def test_amp_compile_suite_runs_on_cpu_without_compile():
    # the GPU suite's code path, minus CUDA and compile: autocast, the output check and the ratio
    # rows
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    out = run.bench_amp_compile(run.QUICK, run.torch.device("cpu"), compile=False)
    assert [r["label"] for r in out["layer"]] == ["tfx sdpa fp32", "tfx sdpa AMP bf16"]
    _check_rows(out["layer"], out["reference"])
    assert out["machine"].endswith("device cpu")
