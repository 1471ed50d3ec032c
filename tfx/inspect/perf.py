"""What chapter 08's benchmarks share: the run's context, timing in alternation, results files.

A speed number is only as good as the conditions it was measured under, so every results file
opens with `run_info()`: the machine, date, torch version, thread count and the load average
(other work on a shared machine slows whatever runs beside it). `alternate` times several
variants in turn, round after round, so slow spells of the machine hit all of them alike and
their ratios survive even when absolute times do not; `round_stats` / `format_rounds` report
every round's n, fastest, median and spread, not a bare median.

Which 16-bit and INT8 tricks pay is a property of the CPU's instruction set, not of the model,
so the chapter's advice is chosen by `fast_paths()` from the instruction flags the libraries may
use on the machine at hand, and `fast_path_probe()` checks it with a live matmul. `fp32_peak()`
gives the roof the hardware sets, cores × clock × vector width × FMA units × 2, with its sources.

Built in chapter 08.
"""

import datetime
import json
import os
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from tfx.core.checks import check_int
from tfx.inspect.timing import BF16_FLAGS, CpuCapability, cpu_capability, machine

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


@contextmanager
def quiet_stderr():
    """Send the process's file descriptor 2 to /dev/null for the block.

    torch.profiler's C++ layer (kineto) writes a timestamped line to fd 2 at every start and stop
    of a profile, past Python's sys.stderr, so a notebook would store it in the cell's output and
    the output would change on every run. Python-level warnings still go to sys.stderr as usual
    when it is not fd 2 (Jupyter's case).
    """
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def run_info() -> dict:
    """The context a results file needs: machine line, date, versions, threads, load average."""
    return {
        "machine": machine(),
        "cpu": asdict(cpu_capability()),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_average_1_5_15min": [round(x, 2) for x in os.getloadavg()],
    }


def alternate(
    fns: dict, rounds: int = 5, warmup: int = 1, clock=time.perf_counter, samples=None
) -> dict:
    """Median seconds of each fn in `fns` ({label: zero-argument callable}), called in turn.

    Each round calls every fn once, in order; the median over rounds of each is returned. A
    burst of load on the machine then slows one round of every variant rather than all rounds
    of one variant, which is what would bias a ratio.

    clock: time.perf_counter (wall time, the default) or time.thread_time, the CPU time of the
    calling thread: with torch at one thread every op runs on that thread, so its CPU time leaves
    out the time other processes held the core (cache and memory-bandwidth sharing still count).
    samples: a dict that, if given, receives every round's seconds, {label: [s, ...]} (other jobs
    only ever slow a call down, so the fastest round is worth reporting next to the median).
    """
    check_int(rounds, "rounds")
    check_int(warmup, "warmup", minimum=0)
    if not fns or not all(callable(f) for f in fns.values()):
        raise ValueError(f"fns must be a non-empty dict of callables, got {fns!r}")
    if clock not in (time.perf_counter, time.thread_time):
        raise ValueError(f"clock must be time.perf_counter or time.thread_time, got {clock!r}")
    if clock is time.thread_time and torch.get_num_threads() != 1:
        raise ValueError(
            "clock=time.thread_time counts one thread's CPU time: run torch with one thread "
            f"(tfx.inspect.timing.threads(1)), got {torch.get_num_threads()} threads"
        )
    for _ in range(warmup):
        for f in fns.values():
            f()
    times = {label: [] for label in fns}
    for _ in range(rounds):
        for label, f in fns.items():
            t0 = clock()
            f()
            times[label].append(clock() - t0)
    if samples is not None:
        samples.update(times)
    return {label: statistics.median(ts) for label, ts in times.items()}


def write_results(results: dict, stem: str, markdown: str, out: Path = RESULTS) -> Path:
    """Write results as <out>/<stem>.json and the human-readable <stem>.md; return the JSON path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    (out / f"{stem}.md").write_text(markdown)
    return path


def _recorded_date(results: dict) -> str:
    """The date a results file records: `info.date` (CPU benchmarks) or `date` (bench/gpu.py)."""
    info = results.get("info")
    return str((info.get("date") if isinstance(info, dict) else None) or results.get("date", ""))


def latest(prefix: str, out: Path = RESULTS):
    """The most recently recorded full (not --quick) results file <out>/<prefix>-*.json as a dict,
    or None.

    Ordered by the date recorded inside each file, then by name: a name can carry a device tag
    (gpu-h100-..., gpu-a100-...), which would make an older file sort after a newer one.
    """
    paths = [p for p in Path(out).glob(f"{prefix}-*.json") if not p.stem.endswith("quick")]
    if not paths:
        return None
    loaded = [(json.loads(p.read_text()), p.name) for p in paths]
    return max(loaded, key=lambda r: (_recorded_date(r[0]), r[1]))[0]


def header_md(title: str, info: dict) -> str:
    """The opening lines of a results .md: what, where, when, under what load."""
    averages = info["load_average_1_5_15min"]
    load = ", ".join(str(x) for x in averages)
    # the last minute's load is what the first timings meet; under one job the CPU was all ours
    quiet = isinstance(averages[0], (int, float)) and averages[0] < 1
    whose = "the CPU otherwise idle in the last minute" if quiet else "other jobs shared the CPU"
    return (
        f"# {title}\n\nMachine: {info['machine']}  \nDate: {info['date']}  \n"
        f"Load average (1, 5, 15 min) at the start: {load} ({whose})\n\n"
    )


def count_graphs(module, inputs, **compile_kwargs) -> int:
    """How many graphs dynamo captures while `module` runs on each of `inputs` under torch.compile.

    The backend only counts the graphs it is handed and runs them as they are, so no code is
    generated: the count takes seconds, where inductor spends seconds to tens of seconds of C++
    compilation on each graph on a CPU (bench/encoder.py records its time).
    Built in chapter 08.
    """
    import torch._dynamo

    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
    inputs = list(inputs)
    if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise ValueError("inputs must be a non-empty sequence of tensors")
    torch._dynamo.reset()
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(module, backend=counting, **compile_kwargs)
    with torch.inference_mode():
        for t in inputs:
            compiled(t)
    torch._dynamo.reset()
    return len(graphs)


def pad_to_bucket(x: torch.Tensor, buckets=(64, 128)) -> torch.Tensor:
    """x (B, L, d) padded with zeros along L to the smallest bucket length >= L: a handful of
    shapes instead of one per length, so torch.compile compiles a handful of graphs. Built in
    chapter 08."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(f"x must be a (B, L, d) tensor, got {getattr(x, 'shape', type(x))}")
    fits = [b for b in sorted(buckets) if b >= x.size(1)]
    if not fits:
        raise ValueError(f"x has length {x.size(1)}, longer than every bucket {tuple(buckets)}")
    return torch.nn.functional.pad(x, (0, 0, 0, fits[0] - x.size(1)))  # (B, bucket, d)


def graphs_by_setting(module, inputs, buckets=(64, 128)) -> dict:
    """count_graphs for each way of calling torch.compile on inputs of several lengths: static
    shapes, the default (static, then dynamic after a recompile), dynamic=True, and static
    shapes on inputs padded to buckets (pad_to_bucket). Built in chapter 08."""
    inputs = list(inputs)
    return {
        "dynamic=False": count_graphs(module, inputs, dynamic=False),
        "default": count_graphs(module, inputs),
        "dynamic=True": count_graphs(module, inputs, dynamic=True),
        f"buckets {'/'.join(map(str, buckets))}, dynamic=False": count_graphs(
            module, [pad_to_bucket(t, buckets) for t in inputs], dynamic=False
        ),
    }


# Operator name → category for op_breakdown; the first pattern that matches wins.
OP_CATEGORIES = (
    ("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation",
                "aten::matmul", "mkldnn")),
    ("attention kernel", ("scaled_dot_product", "aten::_softmax", "aten::_safe_softmax",
                          "_transform_bias_rescale_qkv", "aten::_masked_softmax")),
    ("dropout draws", ("aten::bernoulli", "aten::native_dropout")),
    ("LayerNorm kernel", ("layer_norm",)),
    ("loss (log-softmax, NLL)", ("log_softmax", "nll_loss", "cross_entropy")),
    ("GELU", ("gelu",)),
    ("copies, indexing, cat", ("aten::copy_", "aten::index", "aten::cat", "aten::_index_put",
                               "aten::index_put", "aten::clone", "aten::contiguous",
                               "embedding", "aten::masked_select", "aten::nonzero")),
)  # fmt: skip


def _category(name: str) -> str:
    for category, patterns in OP_CATEGORIES:
        if any(p in name for p in patterns):
            return category
    return "other element-wise and reductions"


def op_breakdown(steps: dict, repeats: int = 3) -> dict:
    """Where each step's time goes: {label: {category: ms per call}} from torch.profiler.

    steps: {label: zero-argument callable}, each run once to warm up, then `repeats` times under
    the profiler. Every operator's *self* CPU time is put in one category (OP_CATEGORIES, by
    name); everything run inside the optimizer's step counts as "optimizer", whatever its name,
    so a foreach AdamW's lerp_/addcdiv_/sqrt land there and not among the model's element-wise
    ops. "total" is the sum of the categories; the profiler's own cost makes it somewhat larger
    than the step's untraced time. Built in chapter 08.
    """
    from torch.profiler import ProfilerActivity, profile

    check_int(repeats, "repeats")
    if not steps or not all(callable(f) for f in steps.values()):
        raise ValueError(f"steps must be a non-empty dict of callables, got {steps!r}")
    out = {}
    for label, fn in steps.items():
        fn()
        with quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(repeats):
                fn()
        cats = {}
        for ev in prof.events():
            if ev.device_type != torch.autograd.DeviceType.CPU or ev.self_cpu_time_total <= 0:
                continue
            parent, in_opt = ev, False
            while parent is not None:
                if parent.name.startswith("Optimizer.step") or "_fused_adam" in parent.name:
                    in_opt = True
                    break
                parent = parent.cpu_parent
            cat = "optimizer" if in_opt else _category(ev.name)
            cats[cat] = cats.get(cat, 0.0) + ev.self_cpu_time_total / 1e3 / repeats  # µs → ms
        cats["total"] = sum(cats.values())
        out[label] = cats
    return out


def format_breakdown(breakdown: dict) -> str:
    """op_breakdown's result as a text table: one row per category, one column per step."""
    labels = list(breakdown)
    cats = [c for c, _ in OP_CATEGORIES] + ["other element-wise and reductions", "optimizer"]
    cats = [c for c in cats if any(c in b for b in breakdown.values())] + ["total"]
    width = max(12, *(len(x) for x in labels))
    lines = [f"{'ms per step':<34}" + "".join(f"{x:>{width + 2}}" for x in labels)]
    for c in cats:
        lines.append(
            f"{c:<34}" + "".join(f"{breakdown[x].get(c, 0.0):>{width + 2}.1f}" for x in labels)
        )
    return "\n".join(lines)


# ---- reporting rounds ----------------------------------------------------------------------------

MIN_ROUNDS = 5  # fewer rounds than this are a glimpse, not a result: format_rounds says so


def round_stats(samples: dict) -> dict:
    """{label: {"n", "min_s", "median_s", "max_s", "iqr_s"}} from alternate's `samples`.

    The fastest round is reported next to the median because other jobs only ever slow a call
    down: when the two tell different stories, the run could not resolve the difference. The
    spread is the interquartile range (0 for fewer than 2 rounds).
    """
    if not isinstance(samples, dict) or not samples:
        raise ValueError(
            f"samples must be a non-empty dict {{label: [seconds, ...]}}, got {samples!r}"
        )
    out = {}
    for label, ts in samples.items():
        ts = [float(t) for t in ts]
        if not ts:
            raise ValueError(f"samples[{label!r}] must hold at least one time, got none")
        q = statistics.quantiles(ts, n=4, method="inclusive") if len(ts) > 1 else [ts[0]] * 3
        out[label] = {
            "n": len(ts),
            "min_s": min(ts),
            "median_s": statistics.median(ts),
            "max_s": max(ts),
            "iqr_s": q[2] - q[0],
        }
    return out


def format_rounds(samples: dict, reference: str = None) -> str:
    """A text table of alternate's `samples`: n, fastest, median and spread (IQR) per variant,
    and, given a `reference` label, each variant's time divided by the reference's, by median and
    by fastest round (both < 1: faster; the two disagreeing: not resolved by this run). Variants
    timed fewer than MIN_ROUNDS times are flagged as not a result."""
    stats = round_stats(samples)
    if reference is not None and reference not in stats:
        raise ValueError(f"reference must be one of {list(stats)}, got {reference!r}")
    width = max(8, *(len(k) for k in stats))
    head = f"{'':{width}s}  {'n':>2s}  {'fastest':>9s}  {'median':>9s}  {'IQR':>8s}"
    if reference is not None:
        head += f"  {'÷ ' + reference + ' (median, fastest)'}"
    lines = [head]
    for label, s in stats.items():
        line = (
            f"{label:{width}s}  {s['n']:2d}  {s['min_s'] * 1e3:6.1f} ms  "
            f"{s['median_s'] * 1e3:6.1f} ms  {s['iqr_s'] * 1e3:5.1f} ms"
        )
        if reference is not None:
            r = stats[reference]
            line += f"  {s['median_s'] / r['median_s']:5.2f}, {s['min_s'] / r['min_s']:5.2f}"
        if s["n"] < MIN_ROUNDS:
            line += f"  (n < {MIN_ROUNDS}: not a result)"
        lines.append(line)
    return "\n".join(lines)


# ---- which fast paths this CPU has -------------------------------------------------------------

# Measured on an AVX2-only CPU (AMD EPYC, Zen 3, family 25 model 1: no AVX-512, no VNNI, no bf16
# instructions), torch 2.13, one thread, thread CPU time, 3 rounds in alternation; reported in the
# performance review of chapter 08 (issue 25). Each value is a variant's time divided by fp32's.
AVX2_ONLY_MEASURED = {
    "bf16 matmul 1024×768×3072": 56.0,
    "bf16 autocast, EncoderLayer(128, 4, 512), batch 64 × 64": 7.7,
    "INT8 torchao, FFN 128→512→128": 17.0,
    "INT8 torchao, Linear 768→3072": 29.0,
    "INT8 ONNX Runtime (quantize_dynamic), FFN 768→3072→768": 1 / 1.76,
}


@dataclass(frozen=True)
class FastPaths:
    """Which low-precision paths run on fast kernels on a CPU, and why (one line each).

    Each is decided by the instruction flags the libraries may use (`CpuCapability.usable_flags`:
    the CPU's own, less what an ONEDNN_MAX_CPU_ISA cap such as `make nbval-avx2`'s holds back), not
    by the CPU's name, and not by whether a library *can* run the precision:
    - bf16 (autocast or bf16 tensors): bf16 dot-product instructions, avx512_bf16 or amx_bf16, and
      oneDNN present. oneDNN runs bf16 on any AVX-512 CPU, but without those instructions
      (Skylake-SP, Cascade Lake, Ice Lake) it emulates them through fp32 conversions, slower than
      fp32; on AVX2 alone a bf16 matmul runs through a reference kernel, tens of times slower.
    - fp16: the bf16 condition, and the fp16 instructions themselves (avx512_fp16 or amx_fp16).
    - INT8 in torchao: torch's CPU int8 matmul (aten::_int_mm) calls oneDNN only when the CPU
      reports avx512_vnni; otherwise it runs a scalar triple loop. torch reads that flag from CPUID,
      which a cap cannot hide, so under a cap the prediction is for the CPU the cap stands for.
    - INT8 in ONNX Runtime: its own MLAS kernels, chosen by CPUID, have u8·s8 paths for AVX2 and
      for VNNI, so they run at full speed on any x86-64 CPU with AVX2; whether that beats fp32
      depends on the CPU's integer throughput (1.76x on a Zen 3 AVX2 CPU, none on a family-23
      EPYC for the book model), so `int8_onnxruntime` says it runs, not that it wins.
    """

    bf16: bool
    fp16: bool
    int8_torchao: bool
    int8_onnxruntime: bool
    why: dict


def fast_paths(cap: CpuCapability = None) -> FastPaths:
    """FastPaths of `cap` (default: this CPU, `tfx.inspect.timing.cpu_capability()`).

    Built in chapter 08.
    """
    if cap is None:
        cap = cpu_capability()
    if not isinstance(cap, CpuCapability):
        raise TypeError(f"cap must be a tfx.inspect.timing.CpuCapability, got {type(cap).__name__}")
    flags = set(cap.usable_flags())
    held = f" (held back by ONEDNN_MAX_CPU_ISA={cap.isa_cap})" if cap.isa_cap else ""
    bf16_isa = sorted(flags & BF16_FLAGS)
    fp16_isa = sorted(flags & {"avx512_fp16", "amx_fp16"})
    bf16 = bool(cap.fast_bf16) and bool(bf16_isa)
    fp16 = bf16 and bool(fp16_isa)
    torchao = "avx512_vnni" in flags
    ort = "avx2" in flags
    if bf16:
        why_bf16 = f"bf16 instructions ({', '.join(bf16_isa)}) that oneDNN's kernels use"
    elif "avx512f" in flags:
        why_bf16 = (
            f"AVX-512 without bf16 instructions (avx512_bf16 / amx_bf16){held}: oneDNN emulates "
            "bf16 through fp32 conversions, slower than fp32"
        )
    else:
        why_bf16 = (
            f"no bf16 instructions and no AVX-512{held} (PyTorch's kernels use {cap.aten}): bf16 "
            "matmuls fall back to a reference kernel, tens of times slower than fp32"
        )
    why = {
        "bf16": why_bf16,
        "fp16": f"fp16 matmul instructions ({', '.join(fp16_isa)})"
        if fp16
        else f"no fp16 matmul instructions (avx512_fp16 / amx_fp16) that oneDNN can use here{held}:"
        " fp16 runs through conversions, slower than fp32",
        "int8 torchao": "avx512_vnni: torch's int8 matmul (aten::_int_mm) runs on oneDNN"
        if torchao
        else f"no avx512_vnni{held}: torch's int8 matmul (aten::_int_mm) falls back to a scalar "
        "loop",
        "int8 onnxruntime": "AVX2: ONNX Runtime's own int8 kernels (MLAS) run here"
        if ort
        else f"no AVX2 flag read here{held}: ONNX Runtime's int8 speed is not predicted",
    }
    return FastPaths(bf16=bf16, fp16=fp16, int8_torchao=torchao, int8_onnxruntime=ort, why=why)


_PATHS = {"bf16": "bf16", "fp16": "fp16", "int8 torchao": "int8_torchao",
          "int8 onnxruntime": "int8_onnxruntime"}  # fmt: skip


def skip_reason(path: str, cap: CpuCapability = None) -> str:
    """'' when `path` ("bf16", "fp16", "int8 torchao" or "int8 onnxruntime") is fast on `cap`,
    else the one line a live cell prints when it skips that variant (its timing would take many
    times fp32's, for nothing the recorded results do not already show)."""
    if path not in _PATHS:
        raise ValueError(f"path must be one of {list(_PATHS)}, got {path!r}")
    fp = fast_paths(cap)
    return "" if getattr(fp, _PATHS[path]) else f"{path} skipped: {fp.why[path]}"


def precision_advice(cap: CpuCapability = None) -> str:
    """Which 16-bit and INT8 paths pay on `cap` (default: this CPU), one line each, the sentence
    chosen by its flags; the AVX2-only lines quote AVX2_ONLY_MEASURED. Built in chapter 08."""
    if cap is None:
        cap = cpu_capability()
    fp = fast_paths(cap)
    m = AVX2_ONLY_MEASURED
    lines = [f"CPU: {cap}; flags read: {', '.join(cap.flags) or 'none'}"]
    if fp.bf16:
        lines.append(
            f"bf16: fast path, {fp.why['bf16']}; bf16 autocast can beat fp32 on matmul-heavy layers"
        )
    elif "avx512f" in cap.usable_flags():
        lines.append(f"bf16: no fast path, {fp.why['bf16']}: stay in fp32")
    else:
        lines.append(
            f"bf16: no fast path, {fp.why['bf16']}; on an AVX2-only CPU a bf16 matmul took "
            f"{m['bf16 matmul 1024×768×3072']:.0f}× fp32's time and bf16 autocast on a small layer "
            f"{m['bf16 autocast, EncoderLayer(128, 4, 512), batch 64 × 64']:.1f}×: stay in fp32"
        )
    lines.append(
        f"fp16: fast path, {fp.why['fp16']}" if fp.fp16 else f"fp16: no fast path, {fp.why['fp16']}"
    )
    if fp.int8_torchao:
        lines.append(
            f"INT8: {fp.why['int8 torchao']}, so torchao pays where int8 matmuls outweigh "
            "quantizing the activations; ONNX Runtime's INT8 pays too"
        )
    else:
        lo, hi = m["INT8 torchao, FFN 128→512→128"], m["INT8 torchao, Linear 768→3072"]
        ort = 1 / m["INT8 ONNX Runtime (quantize_dynamic), FFN 768→3072→768"]
        lines.append(
            f"INT8: {fp.why['int8 torchao']} ({lo:.0f}-{hi:.0f}× fp32's time on an AVX2-only "
            "CPU), so not torchao; ONNX Runtime's INT8 "
            + (
                f"runs; whether it pays depends on the CPU ({ort:.2f}× fp32's speed on a 768-wide "
                "FFN there, no gain on another AVX2 CPU): time it"
                if fp.int8_onnxruntime
                else "is not predicted"
            )
        )
    return "\n".join(lines)


# ---- the fp32 peak from the hardware -----------------------------------------------------------

# fp32 FMA datapath width of a core (bits), by AMD CPU family (/proc/cpuinfo's "cpu family": 23 =
# 17h, 25 = 19h, 26 = 1Ah) and first model, from AMD's Software Optimization Guides: Zen and Zen+
# have two 128-bit FMA pipes and split each 256-bit AVX instruction in two; Zen 2 (17h from model
# 30h), Zen 3 and Zen 4 have two 256-bit FMA pipes (Zen 4 runs AVX-512 in two 256-bit halves);
# Zen 5 has 512-bit pipes (its server and desktop parts; the table does not tell apart the mobile
# ones, which run 512-bit in halves). Other CPUs (Intel's family 6): as wide as the widest flag.
AMD_FMA_BITS = {23: ((0x00, 128), (0x30, 256)), 25: ((0x00, 256),), 26: ((0x00, 512),)}
FMA_UNITS = 2  # per core: AMD's guides for Zen 1-5; Intel Xeon Gold/Platinum (Silver/Bronze: 1)


@dataclass(frozen=True)
class Peak:
    """A CPU's fp32 peak, cores × clock × fp32 lanes per FMA × FMA units × 2 (an FMA is a multiply
    and an add), with each factor and where it came from (`assumed`, one line each)."""

    cores: int
    ghz: float
    lanes: int
    fma_units: int
    assumed: tuple

    @property
    def flop_per_cycle(self) -> int:
        return self.lanes * self.fma_units * 2

    @property
    def gflop_per_s(self) -> float:
        return self.cores * self.ghz * self.flop_per_cycle


def cpu_ghz(
    cpuinfo: str = "/proc/cpuinfo",
    cpufreq: str = "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq",
) -> tuple:
    """(GHz, where it was read): the highest clock cpufreq reports where the kernel has it (bare
    metal), else /proc/cpuinfo's "cpu MHz", which inside a virtual machine is the nominal clock the
    hypervisor shows: a core that boosts above it beats a peak computed from it."""
    try:
        return int(Path(cpufreq).read_text()) / 1e6, f"{cpufreq} (the highest clock)"
    except (OSError, ValueError):
        pass
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("cpu MHz"):
                    mhz = float(line.split(":", 1)[1])
                    return mhz / 1e3, f'{cpuinfo} "cpu MHz" (the clock shown now; nominal in a VM)'
    except (OSError, ValueError):
        pass
    raise RuntimeError(f"no clock found in {cpufreq} or {cpuinfo}")


def fp32_peak(cap: CpuCapability = None, cores: int = 1, ghz: float = None) -> Peak:
    """The fp32 Peak of `cores` cores of `cap` (default: this CPU) at `ghz` (default: `cpu_ghz()`).

    The vector width comes from the flags the libraries may use (`CpuCapability.usable_flags`,
    so an ISA cap narrows it), narrowed to the FMA datapath of AMD's cores (AMD_FMA_BITS); FMA_UNITS
    per core. Built in chapter 08."""
    if cap is None:
        cap = cpu_capability()
    if not isinstance(cap, CpuCapability):
        raise TypeError(f"cap must be a tfx.inspect.timing.CpuCapability, got {type(cap).__name__}")
    cores = check_int(cores, "cores", minimum=1)
    if ghz is None:
        ghz, clock_from = cpu_ghz()
    elif isinstance(ghz, bool) or not isinstance(ghz, int | float) or not ghz > 0:
        raise ValueError(f"ghz must be a positive number (GHz), got {ghz!r}")
    else:
        clock_from = "given"
    flags = set(cap.usable_flags())
    isa_bits, isa = next(
        ((b, f) for f, b in (("avx512f", 512), ("avx2", 256)) if f in flags), (128, "SSE")
    )
    family = int(cap.family) if cap.family.isdigit() else None
    model = int(cap.model) if cap.model.isdigit() else 0
    amd_bits = [b for first, b in AMD_FMA_BITS.get(family, ()) if model >= first]
    bits = min(isa_bits, amd_bits[-1]) if amd_bits else isa_bits
    datapath = (
        f"AMD family {family:X}h model {model:X}h: {amd_bits[-1]}-bit FMA pipes (AMD's guide)"
        if amd_bits
        else "assumed as wide as the flags"
    )
    assumed = (
        f"clock {ghz:.2f} GHz: {clock_from}",
        f"vector width {isa_bits} bits from the flags ({isa}); {datapath}: {bits // 32} fp32 "
        "lanes per FMA",
        f"{FMA_UNITS} FMA units per core (AMD's guides for Zen; Intel Gold/Platinum), 2 FLOPs each",
    )
    return Peak(cores=cores, ghz=ghz, lanes=bits // 32, fma_units=FMA_UNITS, assumed=assumed)


def fast_path_probe(n: int = 512, rounds: int = MIN_ROUNDS) -> dict:
    """Every round's thread CPU time of an (n, n) @ (n, n) matmul in fp32, in bf16 and in int8
    (aten::_int_mm, what torchao's INT8 runs), alternated on one thread: {label: [s, ...]}.

    The live check of fast_paths(): on a CPU with the fast path the 16-bit or 8-bit matmul is
    faster than fp32; without it, many times slower. n = 512 keeps the slow paths under a second
    a call. Built in chapter 08.
    """
    from tfx.inspect.timing import threads

    n = check_int(n, "n", minimum=16)
    gen = torch.Generator().manual_seed(0)
    a32, b32 = (torch.randn(n, n, generator=gen) for _ in range(2))
    a16, b16 = a32.bfloat16(), b32.bfloat16()
    a8, b8 = ((t * 32).clamp(-127, 127).to(torch.int8) for t in (a32, b32))
    samples = {}
    with torch.inference_mode(), threads(1):
        alternate(
            {
                "fp32": lambda: a32 @ b32,
                "bf16": lambda: a16 @ b16,
                "int8": lambda: torch._int_mm(a8, b8),
            },
            rounds=rounds,
            clock=time.thread_time,
            samples=samples,
        )
    return samples
