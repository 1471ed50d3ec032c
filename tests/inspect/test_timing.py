"""tfx.inspect.timing: the median-of-repeats timer, its printing, the machine line and the log-log
slope; and tfx.book.viz.plot_curves on the log-log axes the timing cells draw."""

import math
import os

import matplotlib
import pytest
import torch

import tfx.inspect.timing
from tfx.inspect.timing import Timing, fmt_seconds, loglog_slope, machine, timeit

matplotlib.use("Agg")


def test_timeit_calls_warmup_then_repeats():
    calls = []
    t = timeit(lambda a, b=0: calls.append((a, b)), 1, b=2, repeats=4, warmup=3, label="append")
    assert len(calls) == 7 and calls[0] == (1, 2)
    assert len(t.times) == 4 and all(s >= 0 for s in t.times)
    assert t.label == "append"


@pytest.mark.parametrize("repeats,warmup", [(0, 1), (3, -1)])
def test_timeit_refuses_bad_counts(repeats, warmup):
    with pytest.raises(ValueError, match="repeats"):
        timeit(lambda: None, repeats=repeats, warmup=warmup)


def test_timing_statistics_and_ratio():
    t, ref = Timing("x", [0.003, 0.001, 0.002]), Timing("ref", [0.004, 0.004, 0.004])
    assert t.median == 0.002 and t.best == 0.001
    assert t.ratio(ref) == pytest.approx(0.5)
    assert str(t) == "x: median 2 ms (min 1 ms, max 3 ms, n=3)"


@pytest.mark.parametrize(
    "s,text",
    [
        (512e-6, "512 µs"),
        (0.0123, "12.3 ms"),
        (1.25, "1.25 s"),
        (3e-9, "0.003 µs"),
        (125.0, "125 s"),
    ],
)
def test_fmt_seconds_picks_the_unit(s, text):
    assert fmt_seconds(s) == text


def test_machine_names_cpu_threads_torch_and_device():
    line = machine()
    assert f"torch {torch.__version__}" in line
    assert f"{torch.get_num_threads()} threads" in line
    assert line.endswith("device cpu")


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_loglog_slope_recovers_a_power_law(k):
    xs = [16, 64, 256, 1024]
    assert loglog_slope(xs, [3.0 * x**k for x in xs]) == pytest.approx(k)


def test_loglog_slope_refuses_short_or_uneven_input():
    with pytest.raises(ValueError, match="at least 2"):
        loglog_slope([1], [1])
    with pytest.raises(ValueError, match="equal-length"):
        loglog_slope([1, 2], [1, 2, 3])


def test_loglog_plot_draws_one_marked_line_per_series():
    from tfx.book.viz import plot_curves

    fig = plot_curves(
        [1, 10, 100],
        {"a": [1, 2, 3], "b": [3, 2, 1]},
        "L",
        "ms",
        title="t",
        logx=True,
        logy=True,
        marker="o",
    )
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["a", "b"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "10", "100"]
    assert (
        ax.get_xscale() == "log"
        and ax.get_yscale() == "log"
        and ax.get_lines()[0].get_marker() == "o"
    )
    fig = plot_curves([1, 2], {"a": [1, 2]}, "d", "norm")
    assert fig.axes[0].get_xscale() == "linear" and not math.isnan(
        fig.axes[0].get_lines()[0].get_ydata()[0]
    )


def test_threads_sets_and_restores_torch_and_blas():
    import numpy as np  # noqa: F401  (loads the BLAS library that threadpoolctl acts on)

    from tfx.inspect.timing import blas_threads, threads

    before, blas_before = torch.get_num_threads(), blas_threads()
    with threads(1):
        assert torch.get_num_threads() == 1 and "1 threads" in machine()
        assert blas_threads() == 1
    assert torch.get_num_threads() == before and blas_threads() == blas_before
    with pytest.raises(RuntimeError), threads(1):
        raise RuntimeError("restored even on error")
    assert torch.get_num_threads() == before
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="n must be an int >= 1"), threads(bad):
            pass


def test_cpu_capability_reads_the_libraries_and_names_the_fast_paths():
    cap = tfx.inspect.timing.cpu_capability()
    assert cap.aten == torch.backends.cpu.get_cpu_capability()
    bf16_isa = {"avx512_bf16", "amx_bf16"} & set(cap.usable_flags())
    assert cap.fast_bf16 == (torch.ops.mkldnn._is_mkldnn_bf16_supported() and bool(bf16_isa))
    assert set(cap.flags) <= set(tfx.inspect.timing.CPU_FLAGS)
    assert f"({cap})" in machine()
    assert str(tfx.inspect.timing.CpuCapability("AVX2", False)) == "AVX2, no bf16 fast path"
    assert str(tfx.inspect.timing.CpuCapability("AVX512", True)) == "AVX512, bf16 fast path"


def test_cpu_capability_follows_the_instruction_set_held_back():
    """What `make nbval-avx2` relies on: the environment holds PyTorch and oneDNN back to AVX2."""
    import subprocess
    import sys

    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    code = "import tfx.inspect.timing as t; c = t.cpu_capability(); print(c.aten, c.fast_bf16)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() in (["AVX2", "False"], ["DEFAULT", "False"])


def test_cpu_capability_keeps_only_the_listed_flags_with_family_and_model(tmp_path):
    """The first processor's block of /proc/cpuinfo is read; flags outside CPU_FLAGS are dropped."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\ncpu family\t: 25\nmodel\t\t: 17\n"
        "flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile amx_bf16 made_up\n\n"
        "processor\t: 1\nflags\t\t: avx512_vnni\n"
    )
    cap = tfx.inspect.timing.cpu_capability(str(cpuinfo))
    assert cap.flags == ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")
    assert (cap.family, cap.model) == ("25", "17")
    missing = tfx.inspect.timing.cpu_capability(str(tmp_path / "absent"))
    assert (missing.flags, missing.family, missing.model) == ((), "?", "?")


@pytest.mark.parametrize(
    "flags, cap, fast",
    [
        ("avx2", "", False),  # AVX2 only
        ("avx2 avx512f avx512_vnni", "", False),  # AVX-512 without bf16: oneDNN "can", not fast
        ("avx2 avx512f avx512_bf16 avx512_vnni", "", True),  # AVX-512 bf16
        ("avx2 avx512f avx512_bf16 amx_tile amx_bf16", "", True),  # AMX
        ("avx2 avx512f avx512_bf16 amx_tile amx_bf16", "AVX2", False),  # make nbval-avx2
        ("avx2 avx512f avx512_bf16 avx512_vnni", "avx512_core_vnni", False),  # lower-case too
    ],
)
def test_cpu_capability_decides_bf16_by_the_flags_under_the_cap(
    tmp_path, monkeypatch, flags, cap, fast
):
    """fast_bf16 needs oneDNN *and* bf16 instructions that ONEDNN_MAX_CPU_ISA leaves it (oneDNN's
    answer is mocked True: on any AVX-512 CPU it says it can run bf16, bf16 instructions or not)."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: fpu {flags}\n")
    monkeypatch.setattr(tfx.inspect.timing, "_mkldnn_bf16", lambda: True)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    got = tfx.inspect.timing.cpu_capability(str(cpuinfo))
    assert got.fast_bf16 is fast and got.flags == tuple(flags.split())  # the CPU's own flags
    assert got.isa_cap == cap.upper()
    if cap == "AVX2":
        assert got.usable_flags() == ("avx2",)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx3")
    with pytest.raises(ValueError, match="ONEDNN_MAX_CPU_ISA must be one of"):
        tfx.inspect.timing.cpu_capability(str(cpuinfo))


def test_cpu_capability_without_onednn_says_no_bf16_fast_path(monkeypatch):
    """A torch built without oneDNN has no _is_mkldnn_bf16_supported op: no fast path, no crash."""

    class NoOps:
        def __getattr__(self, name):
            raise AttributeError(name)

    monkeypatch.setattr(torch.ops, "mkldnn", NoOps())
    assert tfx.inspect.timing.cpu_capability().fast_bf16 is False
    assert "no bf16 fast path" in machine()


def test_run_info_records_the_cpu_capability():
    from tfx.inspect.perf import run_info

    cpu = run_info()["cpu"]
    assert set(cpu) == {"aten", "fast_bf16", "flags", "family", "model", "isa_cap"}
    assert cpu["aten"] == torch.backends.cpu.get_cpu_capability()
