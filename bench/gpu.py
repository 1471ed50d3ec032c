"""Every GPU measurement of chapter 08 in one script, for one short run on one GPU. torch + stdlib.

  python bench/gpu.py --out bench/results
      on CUDA device 0: writes gpu-<date>.json and gpu-<date>.md into --out, and rewrites both after
      every row, so a crash, an out-of-memory error or a killed process loses at most the row it was
      in. Planned for about 5 minutes on an H200 (not yet measured: ~30 rows of 0.5 s warm-up and
      >= 1 s of timed calls, about 1 min, plus one cold inductor compile of a 12-layer training
      step, estimated at 1-2.5 min on 16 CPU cores); give it 8 before killing it.
  python bench/gpu.py
      without CUDA: prints one line saying it skipped, writes nothing.
  python bench/gpu.py --quick --device cpu --out DIR
      toy sizes on the CPU in seconds: the CI check that every code path runs
      (tests/test_bench_gpu.py); its numbers mean nothing. --quick on CUDA: the same on the GPU.

It imports neither tfx nor transformers, because a GPU machine's Python, torch and transformers may
differ from the book's pins. Sections, in order (the riskiest, torch.compile, last):
  matmul     square 8192 matmuls in fp32, TF32, bf16, fp16, and BERT's FFN GEMM (16384 x 768 x 3072)
  bandwidth  a 2 GiB device-to-device copy: the memory roof of a roofline
  sdpa       F.scaled_dot_product_attention forward, bf16 and fp16: torch's default choice, then
             each backend forced (flash, memory-efficient, cuDNN, math; math computes in fp32)
  qkv        three Q/K/V projections against one fused one, at 1 x 32 and 32 x 512 tokens (A65)
  bert       a BERT-base encoder (12 layers, d 768) + MLM head: inference in fp32, TF32, bf16 and
             fp16 autocast and with bf16 weights, at 32 x 512 and (A64) 8 x 32; a training step
             (forward + backward + fused AdamW) in bf16 autocast, eager and torch.compile'd
Each row has its precision, the number of timed calls n, their min / median / max seconds, the rate
(TFLOP/s or TB/s) at the median and at the fastest call, the % of the datasheet peak for that
precision (when the device is in PEAKS), and on CUDA the peak memory allocated during the row.
Timing: a time-based warm-up (clocks ramp up, autotuners and caches settle), then calls timed one
by one with torch.cuda.synchronize() around each (kernels run asynchronously; without it we would
time their launch) until both `reps` calls and `min_time_s` seconds are done: a sustained rate over
>= 1 s, not a burst of a few calls. A row that fails keeps its error text and the run goes on.
"""

import argparse
import copy
import datetime
import importlib
import json
import math
import platform
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent

# Dense (no sparsity) datasheet peaks: TFLOP/s per precision (fp32 on CUDA cores, the others on
# tensor cores; None where the part has none) and TB/s of memory bandwidth. Keyed on the exact name
# torch reports and the SM count, because names alone mislead: "NVIDIA H200 NVL" and "NVIDIA H100
# NVL" run lower clocks than their SXM namesakes, "NVIDIA L40" is not an L4, "NVIDIA A10G" is not an
# A10, and a MIG slice has a fraction of the SMs (see datasheet_peak).
# Compute peaks that several parts share (one die at the same clocks) are typed once.
_H100_SXM = dict(fp32=67.0, tf32=494.7, bf16=989.4, fp16=989.4)  # H200 and H100 SXM
_H100_NVL = dict(fp32=60.0, tf32=417.5, bf16=835.5, fp16=835.5)  # H200 NVL and H100 NVL
_A100 = dict(fp32=19.5, tf32=156.0, bf16=312.0, fp16=312.0)
_V100 = dict(fp32=15.7, tf32=None, bf16=None, fp16=125.0)
PEAKS = {
    ("NVIDIA H200", 132): {**_H100_SXM, "tb_s": 4.8},
    ("NVIDIA H200 NVL", 132): {**_H100_NVL, "tb_s": 4.8},
    ("NVIDIA H100 80GB HBM3", 132): {**_H100_SXM, "tb_s": 3.35},
    ("NVIDIA H100 NVL", 132): {**_H100_NVL, "tb_s": 3.9},
    ("NVIDIA H100 PCIe", 114): dict(fp32=51.2, tf32=378.0, bf16=756.0, fp16=756.0, tb_s=2.0),
    ("NVIDIA A100-SXM4-80GB", 108): {**_A100, "tb_s": 2.039},
    ("NVIDIA A100-SXM4-40GB", 108): {**_A100, "tb_s": 1.555},
    ("NVIDIA A100 80GB PCIe", 108): {**_A100, "tb_s": 1.935},
    ("NVIDIA A100-PCIE-40GB", 108): {**_A100, "tb_s": 1.555},
    ("NVIDIA L40S", 142): dict(fp32=91.6, tf32=183.0, bf16=362.0, fp16=362.0, tb_s=0.864),
    ("NVIDIA L4", 58): dict(fp32=30.3, tf32=60.0, bf16=121.0, fp16=121.0, tb_s=0.3),
    ("NVIDIA A10", 72): dict(fp32=31.2, tf32=62.5, bf16=125.0, fp16=125.0, tb_s=0.6),
    ("Tesla V100-SXM2-16GB", 80): {**_V100, "tb_s": 0.9},
    ("Tesla V100-SXM2-32GB", 80): {**_V100, "tb_s": 0.9},
    ("Tesla T4", 40): dict(fp32=8.1, tf32=None, bf16=None, fp16=65.0, tb_s=0.32),
}

FULL = dict(matmul_n=8192, ffn=(16384, 768, 3072), copy_mib=2048, sdpa=(8, 16, 4096, 64),
            qkv_tokens=((1, 32), (32, 512)), batch=32, L=512, small=(8, 32), layers=12, d=768,
            heads=12, d_ff=3072, vocab=30522, warmup_s=0.5, min_time_s=1.0, reps=10,
            max_reps=1000)  # fmt: skip
QUICK = dict(matmul_n=64, ffn=(64, 32, 64), copy_mib=1, sdpa=(1, 2, 32, 16),
             qkv_tokens=((1, 4), (2, 16)), batch=2, L=16, small=(1, 8), layers=1, d=32, heads=2,
             d_ff=64, vocab=100, warmup_s=0.0, min_time_s=0.0, reps=3,
             max_reps=3)  # fmt: skip

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SMI_FIELDS = ("name", "driver_version", "pci.bus_id", "memory.total", "clocks.sm", "clocks.max.sm",
              "clocks.mem", "clocks.max.mem", "power.draw", "power.limit", "temperature.gpu",
              "mig.mode.current", "persistence_mode")  # fmt: skip


def _try(fn):
    """fn()'s value, or the reason it has none: device details are optional, the run is not."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 (any failure just means "not available here")
        return f"unavailable: {type(e).__name__}: {e}"[:300]


def datasheet_peak(name: str, sms: int) -> dict:
    """The PEAKS row for this device and where it came from, or None with the reason.

    A MIG slice ("<name> MIG 3g.40gb") gets the full chip's compute peaks scaled by its share of the
    SMs, and no bandwidth peak (that follows its memory slices, not its SMs)."""
    if (name, sms) in PEAKS:
        return {"peaks": PEAKS[name, sms], "source": f"datasheet: {name}, {sms} SMs"}
    base, mig, _ = name.partition(" MIG ")
    full = [(n, s) for n, s in PEAKS if n == base.strip()]
    if not full:
        return {"peaks": None, "source": f"no datasheet entry for {name!r}: no % of peak"}
    full_sms = full[0][1]
    if not mig:
        return {
            "peaks": None,
            "source": f"{name} has {sms} SMs, the datasheet's has {full_sms}: no % of peak",
        }
    scaled = {
        k: v * sms / full_sms if v and k != "tb_s" else None for k, v in PEAKS[full[0]].items()
    }
    return {"peaks": scaled, "source": f"MIG slice: {sms}/{full_sms} SMs of the {base} datasheet"}


def nvidia_smi():
    """nvidia-smi's view of each GPU (clocks, power limit, MIG mode, driver...), or why none.

    One query for all fields; if it fails (a field this driver does not know fails all of them),
    one query per field."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "unavailable: nvidia-smi not found"

    def query(fields):
        out = subprocess.run(
            [exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        return [[v.strip() for v in line.split(",")] for line in out.strip().splitlines()]

    try:
        return [dict(zip(SMI_FIELDS, values)) for values in query(SMI_FIELDS)]
    except (OSError, subprocess.SubprocessError):
        cols = {f: _try(lambda f=f: [v[0] for v in query((f,))]) for f in SMI_FIELDS}
        n = max((len(c) for c in cols.values() if isinstance(c, list)), default=0)
        return [{f: c[i] if isinstance(c, list) else c for f, c in cols.items()} for i in range(n)]


def host_cpu() -> str:
    with open("/proc/cpuinfo") as f:
        return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))


def device_info(device) -> dict:
    """What the run was measured on, so that a "% of datasheet peak" can be audited later."""
    info = {
        "type": device.type,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cuda_runtime": torch.version.cuda,
        "cudnn": _try(torch.backends.cudnn.version),
        "triton": _try(lambda: importlib.import_module("triton").__version__),
        "host_cpu": _try(host_cpu),
        "host_cpu_capability": _try(torch.backends.cpu.get_cpu_capability),
    }
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        info.update(
            name=p.name,
            sm_count=p.multi_processor_count,
            total_memory_bytes=p.total_memory,
            compute_capability=f"{p.major}.{p.minor}",
            uuid=_try(lambda: str(p.uuid)),
            sm_clock_mhz_pynvml=_try(lambda: torch.cuda.clock_rate(device)),
            power_draw_mw_pynvml=_try(lambda: torch.cuda.power_draw(device)),
            nvidia_smi=nvidia_smi(),
        )
    return info


@contextmanager
def tf32(on: bool):
    """TF32 tensor cores for fp32 matmuls inside the block only (legacy flag: torch maps it onto
    torch.backends.cuda.matmul.fp32_precision, and mixing the two APIs can raise)."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def measure(fn, device, cfg) -> dict:
    """n, min, median and max seconds of fn() after a time-based warm-up; on CUDA, the peak memory
    allocated during the row (counter reset first) and what was allocated before it."""
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    out = {}
    if cuda:
        sync()
        torch.cuda.reset_peak_memory_stats(device)
        out["memory_before_bytes"] = torch.cuda.memory_allocated(device)
    warm_until = time.perf_counter() + cfg["warmup_s"]
    fn()
    sync()
    while time.perf_counter() < warm_until:
        fn()
        sync()
    times, time_until = [], time.perf_counter() + cfg["min_time_s"]
    while len(times) < cfg["reps"] or (
        time.perf_counter() < time_until and len(times) < cfg["max_reps"]
    ):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    out.update(n=len(times), min_s=min(times), median_s=statistics.median(times), max_s=max(times))
    if cuda:
        out["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device)
    return out


def rates(stats: dict, precision: str, peaks, flops=None, nbytes=None) -> dict:
    """The row: precision, timing stats, rate at the median and at the fastest call, and % of the
    peak of that precision (TFLOP/s for flops, TB/s of memory traffic for nbytes)."""
    row = {"precision": precision, **stats}
    work, unit, key = (flops, "TFLOP/s", precision) if flops else (nbytes, "TB/s", "tb_s")
    rate = work / stats["median_s"] / 1e12
    row.update(unit=unit, rate=rate, rate_at_min=work / stats["min_s"] / 1e12)
    peak = (peaks or {}).get(key)
    row["pct_of_peak"] = 100 * rate / peak if peak else None
    return row


class Run:
    """The results of one run, written to <out>/<stem>.json and .md after every row."""

    def __init__(self, out: Path, stem: str, res: dict):
        self.json, self.md, self.res = out / f"{stem}.json", out / f"{stem}.md", res
        self.t0 = time.perf_counter()
        out.mkdir(parents=True, exist_ok=True)

    def save(self):
        self.res["elapsed_s"] = round(time.perf_counter() - self.t0, 1)
        self.json.write_text(json.dumps(self.res, indent=2) + "\n")
        self.md.write_text(to_markdown(self.res))

    @contextmanager
    def section(self, name: str):
        """Rows added in the block land in res[name]["rows"]; an exception ends the section, with
        its text saved, and the run goes on with the next one."""
        sec = self.res[name]
        sec["status"] = "running"
        self.save()
        t0 = time.perf_counter()
        try:
            yield sec
            sec["status"] = "done"
        except Exception as e:  # noqa: BLE001 (one failure must not lose the other sections)
            sec.update(status="failed", error=error_text(e))
            print(f"{name}: FAILED {sec['error'].splitlines()[0]}")
        sec["seconds"] = round(time.perf_counter() - t0, 1)
        self.save()

    def row(self, section: str, key: str, make_row) -> None:
        """res[section]["rows"][key] = make_row(), or the error it raised; then save."""
        try:
            row = make_row()
        except Exception as e:  # noqa: BLE001 (a backend a device lacks, an out-of-memory...)
            row = {"error": error_text(e)}
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        self.res[section]["rows"][key] = row
        print(f"{section}: {key}: {summarise(row)}")
        self.save()


def error_text(e: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(e), e)).strip()[:2000]


def summarise(row: dict) -> str:
    if "error" in row:
        return "error: " + row["error"].splitlines()[0][:200]
    pct = f", {row['pct_of_peak']:.1f}% of peak" if row.get("pct_of_peak") else ""
    return (
        f"{row['median_s'] * 1e3:.3g} ms, {row['rate']:.3g} {row['unit']}{pct} ({row['precision']})"
    )


def bench_matmul(run: Run, cfg, device, peaks) -> None:
    """Square matmuls per precision, then BERT's FFN GEMM ((B·L) x d by d x d_ff), which is too
    thin to reach the square rate. 2 FLOPs per multiply-add."""
    n = cfg["matmul_n"]
    shapes = [(f"{n}^3 {p}", p, (n, n, n)) for p in ("fp32", "tf32", "bf16", "fp16")]
    shapes += [
        (f"ffn {'x'.join(map(str, cfg['ffn']))} {p}", p, cfg["ffn"]) for p in ("fp32", "bf16")
    ]
    for key, precision, (m, k, n_) in shapes:

        def make_row(precision=precision, m=m, k=k, n_=n_):
            dtype = DTYPES.get(precision, torch.float32)
            a = torch.randn(m, k, device=device, dtype=dtype)
            b = torch.randn(k, n_, device=device, dtype=dtype)
            with tf32(precision == "tf32"):
                stats = measure(lambda: a @ b, device, cfg)
            return rates(stats, precision, peaks, flops=2 * m * k * n_)

        run.row("matmul", key, make_row)


def bench_bandwidth(run: Run, cfg, device, peaks) -> None:
    """dst.copy_(src) over a large buffer: each byte is read once and written once."""
    nbytes = cfg["copy_mib"] * 2**20

    def make_row():
        src = torch.ones(nbytes // 4, device=device)
        dst = torch.empty_like(src)
        row = rates(measure(lambda: dst.copy_(src), device, cfg), "fp32", peaks, nbytes=2 * nbytes)
        row["note"] = "device-to-device copy; traffic counted as read + write"
        return row

    key = f"copy {cfg['copy_mib']} MiB"
    run.row("bandwidth", key, make_row)


def bench_sdpa(run: Run, cfg, device, peaks) -> None:
    """Attention forward, non-causal, no mask: torch's own choice, then each backend forced. A
    backend the device or dtype lacks raises RuntimeError, kept as the row's error."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, H, L, d = cfg["sdpa"]
    flops = 4 * B * H * L * L * d  # two matmuls of L x L x d per head, 2 FLOPs per multiply-add
    # unless this is switched on, the math backend computes 16-bit inputs in fp32
    upcast = _try(torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed) is not True
    for label in ("bf16", "fp16"):
        q, k, v = (torch.randn(B, H, L, d, device=device, dtype=DTYPES[label]) for _ in range(3))

        @torch.inference_mode()
        def attend(q=q, k=k, v=v):
            return F.scaled_dot_product_attention(q, k, v)

        for backend in ("default", "flash", "efficient", "math", "cudnn"):  # the newest last

            def make_row(backend=backend, label=label, q=q, k=k, v=v, attend=attend):
                precision = "fp32" if backend == "math" and upcast else label
                if backend == "default":
                    row = rates(measure(attend, device, cfg), precision, peaks, flops=flops)
                    choice = _try(lambda: torch._fused_sdp_choice(q, k, v))
                    row["backend_chosen"] = _try(lambda: SDPBackend(choice).name)
                    return row
                enum = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                        "cudnn": "CUDNN_ATTENTION", "math": "MATH"}[backend]  # fmt: skip
                with sdpa_kernel(getattr(SDPBackend, enum)):
                    row = rates(measure(attend, device, cfg), precision, peaks, flops=flops)
                if precision != label:
                    row["note"] = f"{label} inputs; the math backend computes in fp32"
                return row

            key = f"{backend} {label}"
            run.row("sdpa", key, make_row)
        del q, k, v


def bench_qkv(run: Run, cfg, device, peaks) -> None:
    """A65: three d x d projections against one d x 3d, in bf16. At few tokens the three launches
    could matter; at many the FLOPs are the same and the fused GEMM is just wider."""
    d = cfg["d"]
    w = torch.randn(3 * d, d, device=device, dtype=torch.bfloat16) / math.sqrt(d)
    ws = w.chunk(3)
    for B, L in cfg["qkv_tokens"]:
        x = torch.randn(B * L, d, device=device, dtype=torch.bfloat16)
        for kind in ("three", "fused"):

            @torch.inference_mode()
            def project(x=x, kind=kind):
                return F.linear(x, w) if kind == "fused" else [F.linear(x, wi) for wi in ws]

            def make_row(project=project, B=B, L=L):
                return rates(measure(project, device, cfg), "bf16", peaks, flops=6 * B * L * d * d)

            key = f"{kind} projections, {B}x{L} tokens"
            run.row("qkv", key, make_row)


class Bert(nn.Module):
    """BERT-base's encoder from torch modules: embeddings, post-LN layers, MLM head (tied)."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg["d"]
        self.tok = nn.Embedding(cfg["vocab"], d)
        self.pos = nn.Embedding(cfg["L"], d)
        self.norm = nn.LayerNorm(d, eps=1e-12)
        layer = nn.TransformerEncoderLayer(
            d, cfg["heads"], cfg["d_ff"], dropout=0.1, activation="gelu", batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, cfg["layers"], enable_nested_tensor=False)
        self.dense, self.head_norm = nn.Linear(d, d), nn.LayerNorm(d, eps=1e-12)
        self.bias = nn.Parameter(torch.zeros(cfg["vocab"]))

    def forward(self, ids, idx=None):
        L = ids.size(1)
        h = self.norm(self.tok(ids) + self.pos.weight[:L])  # (B, L, d)
        h = self.encoder(h)  # (B, L, d)
        if idx is not None:
            # (N, d): score only the masked tokens. Fixed indices, not a boolean mask: h[mask]
            # would sync with the host every step and break the compiled graph in two.
            h = h.flatten(0, 1).index_select(0, idx)
        h = self.head_norm(F.gelu(self.dense(h)))
        return h @ self.tok.weight.T + self.bias  # (…, vocab)


def bert_flops(cfg, B: int, L: int, head_rows: int, training: bool) -> float:
    """Matmul FLOPs of one forward (x 3 with the backward), 2 per multiply-add: the usual MFU
    convention, so embeddings, LayerNorm, GELU, softmax and the optimizer are not counted. The head
    runs over head_rows rows: all B·L tokens in inference (30,522-wide logits for each), the
    masked ones in training."""
    d, f, layers = cfg["d"], cfg["d_ff"], cfg["layers"]
    per_layer = 2 * B * L * (4 * d * d + 2 * d * f) + 2 * 2 * B * L * L * d
    total = layers * per_layer + 2 * head_rows * (d * d + d * cfg["vocab"])
    return total * (3 if training else 1)


def fast_path_calls(fn) -> int:
    """How many times fn() ran nn.TransformerEncoderLayer's fused inference kernel: the layer falls
    back to its ordinary path without saying so (under autocast, for one), which changes what a
    precision comparison measures."""
    real, calls = torch._transformer_encoder_layer_fwd, []

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    torch._transformer_encoder_layer_fwd = counting
    try:
        fn()
    finally:
        torch._transformer_encoder_layer_fwd = real
    return len(calls)


def bench_bert(run: Run, cfg, device, peaks) -> None:
    torch.manual_seed(0)
    model = Bert(cfg).to(device).eval()
    run.res["bert"]["params"] = sum(p.numel() for p in model.parameters())
    B, L = cfg["batch"], cfg["L"]
    ids = torch.randint(0, cfg["vocab"], (B, L), device=device)
    sb, sl = cfg["small"]
    rows = [  # key, precision, autocast dtype, bf16 weights, batch
        ("fp32", "fp32", None, False, (B, L)),
        ("tf32", "tf32", None, False, (B, L)),
        ("bf16 autocast", "bf16", torch.bfloat16, False, (B, L)),
        ("fp16 autocast", "fp16", torch.float16, False, (B, L)),
        ("bf16 weights", "bf16", None, True, (B, L)),
        (f"fp32, batch {sb}x{sl}", "fp32", None, False, (sb, sl)),
        (f"fp16 autocast, batch {sb}x{sl}", "fp16", torch.float16, False, (sb, sl)),
    ]
    for label, precision, autocast, bf16_weights, (b, n) in rows:

        def make_row(precision=precision, autocast=autocast, bf16_weights=bf16_weights, b=b, n=n):
            m = copy.deepcopy(model).to(torch.bfloat16) if bf16_weights else model
            x = ids[:b, :n]

            @torch.inference_mode()
            def infer():
                amp = torch.autocast(device.type, dtype=autocast) if autocast else nullcontext()
                with amp:
                    return m(x)

            with tf32(precision == "tf32"):
                stats = measure(infer, device, cfg)
                fast = _try(lambda: fast_path_calls(infer) == cfg["layers"])
            row = rates(stats, precision, peaks, flops=bert_flops(cfg, b, n, b * n, False))
            row.update(batch=[b, n], fused_fast_path=fast)
            return row

        key = f"inference {label}"
        run.row("bert", key, make_row)

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    masked = torch.rand(B, L, device=device) < 0.15  # (B, L)
    idx = masked.flatten().nonzero().squeeze(1)  # (N,) once, outside the timed step
    labels = ids.flatten().index_select(0, idx)
    flops = bert_flops(cfg, B, L, idx.numel(), True)
    run.res["bert"]["masked_tokens"] = idx.numel()

    def step(m):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(m(ids, idx).float(), labels)
        loss.backward()
        opt.step()

    def train_row(m):
        row = rates(measure(lambda: step(m), device, cfg), "bf16", peaks, flops=flops)
        row["batch"] = [B, L]
        return row

    run.row("bert", "train step bf16 autocast, fused AdamW", lambda: train_row(model))
    backend = "inductor" if device.type == "cuda" else "eager"  # eager: no C++ build in CI

    def compiled_row():
        import torch._dynamo

        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        t0 = time.perf_counter()
        compiled = torch.compile(model, backend=backend)
        step(compiled)  # the first call compiles
        sync()
        first = time.perf_counter() - t0
        row = train_row(compiled)
        counters = torch._dynamo.utils.counters
        row.update(
            first_call_s=first,
            graphs=_try(lambda: counters["stats"]["unique_graphs"]),
            graph_breaks=_try(lambda: sum(counters["graph_break"].values())),
            fx_graph_cache=_try(
                lambda: {k: v for k, v in counters["inductor"].items() if "cache" in k}
            ),
        )
        return row

    key = f"train step bf16 autocast, fused AdamW, torch.compile ({backend})"
    run.row("bert", key, compiled_row)


SECTIONS = ("matmul", "bandwidth", "sdpa", "qkv", "bert")


def to_markdown(res: dict) -> str:
    dev, sheet = res["device"], res["datasheet"]
    lines = [
        f"# GPU measurements, {res['device_name']}",
        "",
        f"Date: {res['date']}; torch {res['torch']}, CUDA {res['cuda']}, cuDNN {dev['cudnn']}, "
        f"Triton {dev['triton']}, Python {res['python']}; {res['mode']} run, {res['elapsed_s']} s",
        f"Device: {json.dumps({k: v for k, v in dev.items() if k != 'nvidia_smi'})}",
        f"nvidia-smi at the start: {json.dumps(dev.get('nvidia_smi'))}",
        f"Peaks: {sheet['source']} {json.dumps(sheet['peaks'])}",
        "",
        "| section | row | precision | n | median | min | max | rate (median) | % of peak "
        "| peak memory |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for section in SECTIONS:
        sec = res.get(section)
        if sec is None:
            continue
        if "error" in sec:
            lines.append(f"| {section} | FAILED: {sec['error'].splitlines()[-1][:200]} ||||||||")
        for key, row in sec["rows"].items():
            if "error" in row:
                lines.append(
                    f"| {section} | {key} | error: {row['error'].splitlines()[-1][:200]} ||||||||"
                )
                continue
            pct = f"{row['pct_of_peak']:.1f}" if row.get("pct_of_peak") else ""
            mem = row.get("peak_memory_bytes")
            mem = f"{mem / 2**30:.2f} GiB" if mem is not None else ""
            ms = [f"{row[k] * 1e3:.3g} ms" for k in ("median_s", "min_s", "max_s")]
            lines.append(
                f"| {section} | {key} | {row['precision']} | {row['n']} | {' | '.join(ms)} "
                f"| {row['rate']:.3g} {row['unit']} | {pct} | {mem} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="toy sizes: checks the code runs")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (with --quick)")
    parser.add_argument("--out", type=Path, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu: skipped, no CUDA device (torch.cuda.is_available() is False); nothing written")
        return None
    if device.type != "cuda" and not (args.quick and args.out):
        parser.error("a non-CUDA device is a code check only: give --quick and --out")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)
    cfg = QUICK if args.quick else FULL
    info = device_info(device)
    name = info.get("name", "cpu")
    date = datetime.datetime.now(datetime.timezone.utc)
    sheet = datasheet_peak(name, info["sm_count"]) if device.type == "cuda" else {
        "peaks": None, "source": "not a GPU: no % of peak"}  # fmt: skip
    res = {
        "device_name": name,
        "date": date.strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "mode": "quick" if args.quick else "full",
        "command": " ".join(
            ["python", "bench/gpu.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "device": info,
        "datasheet": sheet,
        "config": cfg,
        "sections": list(SECTIONS),
        # every section from the start, so that even a run killed half-way leaves a complete file
        **{s: {"status": "not run", "rows": {}} for s in SECTIONS},
    }
    stem = f"gpu-{date:%Y-%m-%d}" + ("-quick" if args.quick else "")
    run = Run(args.out or ROOT / "bench" / "results", stem, res)
    print(f"gpu: {name}, {sheet['source']}; writing {run.json}")
    benches = {"matmul": bench_matmul, "bandwidth": bench_bandwidth, "sdpa": bench_sdpa,
               "qkv": bench_qkv, "bert": bench_bert}  # fmt: skip
    for section in SECTIONS:
        with run.section(section):
            benches[section](run, cfg, device, sheet["peaks"])
    if device.type == "cuda":
        res["nvidia_smi_after"] = nvidia_smi()
    run.save()
    failed = [s for s in SECTIONS if res[s]["status"] != "done"]
    failed += [f"{s}: {k}" for s in SECTIONS for k, r in res[s]["rows"].items() if "error" in r]
    print(f"wrote {run.json} and .md in {res['elapsed_s']} s; errors: {failed or 'none'}")
    return run.json


if __name__ == "__main__":
    main()
