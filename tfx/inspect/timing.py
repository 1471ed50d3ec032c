"""Small timing helpers: the median of repeats after a warm-up, and the machine it ran on.

A timing means nothing without the machine, so every result carries `machine()`; and one run of a
fast function is noise, so we take the median of several and report the spread too.
"""

import math
import os
import platform
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import torch


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (Linux), else whatever platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# The /proc/cpuinfo flags that decide which fast paths PyTorch can take on the CPU: AVX2 and
# AVX-512 for fp32; avx512_bf16 / amx_bf16 for bf16 matmuls, avx512_fp16 / amx_fp16 for fp16,
# avx512_vnni / avx_vnni / amx_int8 for int8 (amx_tile: the AMX tile registers all AMX needs).
CPU_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_fp16",
    "amx_int8",
)
BF16_FLAGS = {"avx512_bf16", "amx_bf16"}  # bf16 dot-product instructions: a fast bf16 matmul

# oneDNN's instruction-set caps (ONEDNN_MAX_CPU_ISA, which `make nbval-avx2` sets to AVX2) and the
# flags of CPU_FLAGS each leaves the libraries: a capped process reads as a CPU without the rest.
# The names are oneDNN's (its docs, "CPU Dispatcher Control"), the older spelling beside the newer.
_AVX512 = ("avx2", "avx512f")
_FP16 = (*_AVX512, "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni")
_AMX = (*_FP16, "amx_tile", "amx_bf16", "amx_int8")
ISA_CAPS = {
    "SSE41": (),
    "AVX": (),
    "AVX2": ("avx2",),
    "AVX2_VNNI": ("avx2", "avx_vnni"),
    "AVX2_VNNI_2": ("avx2", "avx_vnni"),
    "AVX512_CORE": _AVX512,
    "AVX512_CORE_VNNI": (*_AVX512, "avx512_vnni"),
    "AVX512_CORE_BF16": (*_AVX512, "avx512_vnni", "avx512_bf16"),
    "AVX512_CORE_FP16": _FP16,
    "AVX10_1_512": _FP16,
    "AVX512_CORE_AMX": _AMX,
    "AVX10_1_512_AMX": _AMX,
    "AVX512_CORE_AMX_FP16": (*_AMX, "amx_fp16"),
    "AVX10_1_512_AMX_FP16": (*_AMX, "amx_fp16"),
}


def isa_cap() -> str:
    """The instruction-set cap ONEDNN_MAX_CPU_ISA puts on this process ("AVX2", ...), or "" for
    none (unset, ALL or DEFAULT)."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    if cap in ("", "ALL", "DEFAULT"):
        return ""
    if cap not in ISA_CAPS:
        raise ValueError(
            f"ONEDNN_MAX_CPU_ISA must be one of {sorted(ISA_CAPS)}, ALL or DEFAULT, got {cap!r}"
        )
    return cap


@dataclass(frozen=True)
class CpuCapability:
    """What the CPU lets PyTorch do fast, as the libraries themselves report it.

    Why not the CPU's name: "AMD EPYC, 2 cores" covers a Zen 4 with AVX-512 bf16 and a Zen 3 with
    AVX2 only, and bf16 matmuls run faster than fp32 on the first and tens of times slower on the
    second. aten is the instruction set of PyTorch's own kernels (ATEN_CPU_CAPABILITY
    can hold it back). fast_bf16 is whether bf16 matmuls have fast kernels here: oneDNN runs bf16
    (its own answer) *and* the CPU has bf16 instructions (avx512_bf16 or amx_bf16) that the cap
    leaves it. oneDNN's answer alone is "can", not "fast": on AVX-512 without bf16 instructions
    (Skylake-SP to Ice Lake) it emulates bf16 through conversions, slower than fp32. flags are the
    relevant /proc/cpuinfo flags of the CPU itself, isa_cap the ONEDNN_MAX_CPU_ISA cap on this
    process ("" for none; `usable_flags` applies it), family and model the CPU's own numbers."""

    aten: str
    fast_bf16: bool
    flags: tuple = ()
    family: str = "?"
    model: str = "?"
    isa_cap: str = ""

    def usable_flags(self) -> tuple:
        """The flags the libraries may use: the CPU's, less those isa_cap holds back."""
        if not self.isa_cap:
            return self.flags
        if self.isa_cap not in ISA_CAPS:
            raise ValueError(
                f"isa_cap must be one of {sorted(ISA_CAPS)} or '', got {self.isa_cap!r}"
            )
        return tuple(f for f in self.flags if f in ISA_CAPS[self.isa_cap])

    def __str__(self) -> str:
        return f"{self.aten}, {'bf16 fast path' if self.fast_bf16 else 'no bf16 fast path'}"


def _mkldnn_bf16() -> bool:
    """oneDNN's own answer to "are there bf16 kernels here?"; False where torch was built without
    oneDNN (the op is then missing, which raises instead of answering)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def cpu_capability(cpuinfo: str = "/proc/cpuinfo") -> CpuCapability:
    """This CPU's CpuCapability, read from PyTorch, oneDNN, `cpuinfo` (Linux; elsewhere no flags)
    and the ISA cap in the environment."""
    info = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                key, _, value = line.partition(":")
                info[key.strip()] = value.strip()
    except OSError:
        pass
    flags = tuple(f for f in CPU_FLAGS if f in info.get("flags", "").split())
    cap = CpuCapability(
        aten=torch.backends.cpu.get_cpu_capability(),
        fast_bf16=False,
        flags=flags,
        family=info.get("cpu family", "?"),
        model=info.get("model", "?"),
        isa_cap=isa_cap(),
    )
    return replace(cap, fast_bf16=_mkldnn_bf16() and bool(BF16_FLAGS & set(cap.usable_flags())))


def machine(device=None) -> str:
    """One line naming what a timing ran on: CPU and its fast paths, cores, torch threads, torch
    version and device."""
    device = torch.device(device or "cpu")
    parts = [
        f"{cpu_model()} ({cpu_capability()})",
        f"{os.cpu_count()} cores",
        f"torch {torch.__version__}",
        f"{torch.get_num_threads()} threads",
    ]
    if device.type == "cuda":
        parts.append(f"cuda {torch.cuda.get_device_name(device)}")
    else:
        parts.append("device cpu")
    return ", ".join(parts)


@dataclass
class Timing:
    """Seconds of each repeat of one measured call; prints as its median and spread."""

    label: str
    times: list = field(repr=False)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def best(self) -> float:
        return min(self.times)

    def ratio(self, reference: "Timing") -> float:
        """How many times slower than reference (> 1) or faster (< 1), by median."""
        return self.median / reference.median

    def __str__(self) -> str:
        return (
            f"{self.label}: median {fmt_seconds(self.median)} "
            f"(min {fmt_seconds(self.best)}, max {fmt_seconds(max(self.times))}, "
            f"n={len(self.times)})"
        )


def fmt_seconds(s: float) -> str:
    """3 significant digits in the unit that suits: 512 µs, 12.3 ms, 1.25 s."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale or unit == "µs":
            return f"{s / scale:.3g} {unit}"


def timeit(
    fn, *args, repeats: int = 5, warmup: int = 1, label: str = None, device=None, **kwargs
) -> Timing:
    """Call fn(*args, **kwargs) warmup times untimed, then time repeats calls one by one.

    On a CUDA device each call is bracketed by torch.cuda.synchronize(): kernels run asynchronously,
    so without it we would time the launch, not the work.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(
            f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}"
        )
    sync = (
        torch.cuda.synchronize
        if device is not None and torch.device(device).type == "cuda"
        else None
    )
    for _ in range(warmup):
        fn(*args, **kwargs)
    times = []
    for _ in range(repeats):
        if sync:
            sync()
        t0 = time.perf_counter()
        fn(*args, **kwargs)
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return Timing(label or getattr(fn, "__name__", "fn"), times)


def loglog_slope(xs, ys) -> float:
    """Least-squares slope of log y against log x: 1 means y grows linearly in x, 2
    quadratically."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError(
            f"need two equal-length sequences of at least 2 points, got {len(xs)} and {len(ys)}"
        )
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


@contextmanager
def threads(n: int):
    """Run the block with n threads for torch and for numpy's BLAS, then restore both.

    The book's one way to set threads: a chapter never changes them globally, a timing cell wraps
    its measurement in `with threads(n):`. On a busy or shared machine one thread gives steadier
    timings: a multi-threaded op waits for its slowest thread, however it was delayed. BLAS threads
    are set through threadpoolctl, which acts on the loaded library itself (an environment variable
    is read only once, when numpy is first imported, so printing one says nothing about the real
    setting).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1 (threads), got {n!r}")
    from threadpoolctl import threadpool_limits

    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        with threadpool_limits(limits=n, user_api="blas"):
            yield
    finally:
        torch.set_num_threads(old)


def blas_threads() -> int:
    """The number of threads numpy's BLAS really uses now (threadpoolctl asks the library)."""
    from threadpoolctl import threadpool_info

    infos = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    if not infos:
        raise RuntimeError("no BLAS library is loaded (import numpy first)")
    return infos[0]["num_threads"]
