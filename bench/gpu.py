"""Every GPU measurement of chapter 08 in one script, a few minutes on one GPU. torch + stdlib only.

  python bench/gpu.py      on a CUDA machine: writes bench/results/gpu-<name>-<date>.json and .md
  python bench/gpu.py      without CUDA: prints one line saying it skipped, writes nothing
  python bench/gpu.py --quick --device cpu --out DIR   tiny sizes on the CPU: the CI check that
                                              every code path runs (its numbers mean nothing)

It imports neither tfx nor transformers, because a GPU machine's Python, torch and transformers
may differ from the book's pins. Measured, each with warm-up and torch.cuda.synchronize() around
the timed region (kernels run asynchronously; without it we would time their launch):
  matmul    square matmul throughput in fp32, TF32, bf16 and fp16, against the datasheet peak
  sdpa      F.scaled_dot_product_attention with each backend forced (flash, efficient, math)
  bert      a BERT-base encoder (12 layers, d 768) + MLM head: inference in fp32, TF32, bf16 and
            fp16 autocast; a training step (forward + backward + AdamW) in bf16 autocast, eager and
            torch.compile'd; model FLOP utilisation (MFU) against the datasheet dense peak
"""

import argparse
import datetime
import json
import math
import os
import platform
import re
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent

# Dense (no sparsity) datasheet peaks in TFLOP/s: (fp32, tf32, bf16/fp16). Substring of the name.
DATASHEET = {
    "H200": (67.0, 494.7, 989.4),
    "H100 SXM": (67.0, 494.7, 989.4),
    "H100 PCIe": (51.2, 378.0, 756.0),
    "H100": (67.0, 494.7, 989.4),
    "A100": (19.5, 156.0, 312.0),
    "L40S": (91.6, 183.0, 362.0),
    "L4": (30.3, 60.0, 121.0),
    "A10": (31.2, 62.5, 125.0),
    "V100": (15.7, 0.0, 125.0),
    "T4": (8.1, 0.0, 65.0),
}

FULL = dict(matmul_n=8192, sdpa=(8, 16, 4096, 64), batch=32, L=512, layers=12, d=768, heads=12,
            d_ff=3072, vocab=30522, reps=20)  # fmt: skip
QUICK = dict(matmul_n=64, sdpa=(1, 2, 32, 16), batch=2, L=16, layers=1, d=32, heads=2,
             d_ff=64, vocab=100, reps=2)  # fmt: skip


def datasheet_peak(name: str):
    for key, peaks in DATASHEET.items():
        if key in name:
            return dict(zip(("fp32", "tf32", "bf16"), peaks))
    return None


def timed(fn, device, reps: int, warmup: int = 3) -> float:
    """Median seconds of fn() over reps, after warm-up, synchronised on CUDA."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def tf32(on: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def bench_matmul(cfg, device) -> dict:
    n, rows = cfg["matmul_n"], {}
    for label, dtype, use_tf32 in (
        ("fp32", torch.float32, False),
        ("tf32", torch.float32, True),
        ("bf16", torch.bfloat16, False),
        ("fp16", torch.float16, False),
    ):
        tf32(use_tf32)
        a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
        s = timed(lambda a=a, b=b: a @ b, device, cfg["reps"])
        rows[label] = {"seconds": s, "tflops": 2 * n**3 / s / 1e12}
    tf32(False)
    return {"n": n, "rows": rows}


def bench_sdpa(cfg, device) -> dict:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, H, L, d = cfg["sdpa"]
    rows = {}
    for dtype in (torch.float16, torch.bfloat16):
        q, k, v = (torch.randn(B, H, L, d, device=device, dtype=dtype) for _ in range(3))
        flops = 4 * B * H * L * L * d  # two matmuls of L × L × d, 2 FLOPs per multiply-add
        for backend in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH"):
            key = f"{backend.lower()} {str(dtype).removeprefix('torch.')}"
            try:
                with sdpa_kernel(getattr(SDPBackend, backend)):
                    s = timed(
                        lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v),
                        device,
                        cfg["reps"],
                    )
                rows[key] = {"seconds": s, "tflops": flops / s / 1e12}
            except RuntimeError as e:  # a backend this device or dtype lacks
                rows[key] = {"error": str(e).splitlines()[0][:200]}
    return {"shape": [B, H, L, d], "rows": rows}


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

    def forward(self, ids, positions=None):
        L = ids.size(1)
        h = self.norm(self.tok(ids) + self.pos.weight[:L])  # (B, L, d)
        h = self.encoder(h)  # (B, L, d)
        if positions is not None:
            h = h[positions]  # (N, d): score only the masked tokens
        h = self.head_norm(F.gelu(self.dense(h)))
        return h @ self.tok.weight.T + self.bias  # (…, vocab)


def bert_flops(cfg, training: bool, masked_fraction: float) -> float:
    """Matmul FLOPs of one forward (× 3 with the backward): 2 per multiply-add."""
    B, L, d, f, n = cfg["batch"], cfg["L"], cfg["d"], cfg["d_ff"], cfg["layers"]
    per_layer = 2 * B * L * (4 * d * d + 2 * d * f) + 2 * 2 * B * L * L * d
    head_rows = B * L * (masked_fraction if training else 1.0)
    total = n * per_layer + 2 * head_rows * (d * d + d * cfg["vocab"])
    return total * (3 if training else 1)


def bench_bert(cfg, device, compile_backend: str) -> dict:
    torch.manual_seed(0)
    model = Bert(cfg).to(device)
    B, L = cfg["batch"], cfg["L"]
    ids = torch.randint(0, cfg["vocab"], (B, L), device=device)
    positions = torch.rand(B, L, device=device) < 0.15  # (B, L)
    labels = ids[positions]
    rows = {}
    model.eval()
    for label, dtype, use_tf32 in (
        ("fp32", None, False),
        ("tf32", None, True),
        ("bf16 autocast", torch.bfloat16, False),
        ("fp16 autocast", torch.float16, False),
    ):
        tf32(use_tf32)

        @torch.inference_mode()
        def infer(dtype=dtype):
            with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=bool(dtype)):
                return model(ids)

        try:
            s = timed(infer, device, cfg["reps"])
            rows[f"inference {label}"] = {"seconds": s, "flops": bert_flops(cfg, False, 0)}
        except RuntimeError as e:
            rows[f"inference {label}"] = {"error": str(e).splitlines()[0][:200]}
    tf32(False)

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(m):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(m(ids, positions).float(), labels)
        loss.backward()
        opt.step()

    frac = positions.float().mean().item()
    rows["train step bf16 autocast"] = {
        "seconds": timed(lambda: step(model), device, cfg["reps"]),
        "flops": bert_flops(cfg, True, frac),
    }
    t0 = time.perf_counter()
    compiled = torch.compile(model, backend=compile_backend)
    step(compiled)  # the first call compiles
    compile_s = time.perf_counter() - t0
    rows[f"train step bf16 autocast, torch.compile ({compile_backend})"] = {
        "seconds": timed(lambda: step(compiled), device, cfg["reps"]),
        "flops": bert_flops(cfg, True, frac),
        "compile_seconds": compile_s,
    }
    params = sum(p.numel() for p in model.parameters())
    return {"params": params, "batch": B, "L": L, "masked_fraction": frac, "rows": rows}


def to_markdown(res: dict) -> str:
    lines = [
        f"# GPU measurements, {res['device_name']}",
        "",
        f"Date: {res['date']}; torch {res['torch']}, CUDA {res['cuda']}, Python {res['python']}",
        f"Datasheet dense peaks (TFLOP/s): {res['datasheet_peak']}",
        "",
        "| measurement | time | TFLOP/s | % of datasheet peak |",
        "|---|---|---|---|",
    ]
    for section in ("matmul", "sdpa", "bert"):
        for name, row in res[section]["rows"].items():
            if "error" in row:
                lines.append(f"| {section}: {name} | unsupported: {row['error']} | | |")
                continue
            tflops = row.get("tflops") or row["flops"] / row["seconds"] / 1e12
            pct = row.get("pct_of_peak")
            pct = f"{pct:.1f}" if pct is not None else ""
            lines.append(
                f"| {section}: {name} | {row['seconds'] * 1e3:.3g} ms | {tflops:.1f} | {pct} |"
            )
    return "\n".join(lines) + "\n"


def add_peaks(res: dict) -> None:
    """% of the datasheet peak for the precision each row runs its matmuls in."""
    peak = res["datasheet_peak"]
    if not peak:
        return
    for section in ("matmul", "sdpa", "bert"):
        for name, row in res[section]["rows"].items():
            if "error" in row:
                continue
            kind = next((k for k in ("tf32", "bf16", "fp16") if k in name), "fp32")
            ref = peak["bf16" if kind == "fp16" else kind]
            tflops = row.get("tflops") or row["flops"] / row["seconds"] / 1e12
            row["pct_of_peak"] = 100 * tflops / ref if ref else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the code runs")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (with --quick)")
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu: skipped, no CUDA device (torch.cuda.is_available() is False); nothing written")
        return None
    if device.type != "cuda" and not (args.quick and args.out):
        parser.error("a non-CUDA device is a code check only: give --quick and --out")
    cfg = QUICK if args.quick else FULL
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    res = {
        "device_name": name or "cpu",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "mode": "quick" if args.quick else "full",
        "datasheet_peak": datasheet_peak(name) if device.type == "cuda" else None,
        "config": cfg,
    }
    res["matmul"] = bench_matmul(cfg, device)
    print("matmul", json.dumps(res["matmul"]["rows"]))
    res["sdpa"] = bench_sdpa(cfg, device)
    print("sdpa", json.dumps(res["sdpa"]["rows"]))
    res["bert"] = bench_bert(cfg, device, "inductor" if device.type == "cuda" else "eager")
    print("bert", json.dumps(res["bert"]["rows"]))
    add_peaks(res)
    out = args.out or ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    tag = re.sub(r"[^a-z0-9]+", "-", res["device_name"].lower()).strip("-")
    stem = f"gpu-{tag}-{res['date'][:10]}" + ("-quick" if args.quick else "")
    (out / f"{stem}.json").write_text(json.dumps(res, indent=2) + "\n")
    (out / f"{stem}.md").write_text(to_markdown(res))
    print(f"wrote {out / stem}.json")
    assert all(math.isfinite(r.get("seconds", 0.0)) for r in res["bert"]["rows"].values())
    return out / f"{stem}.json"


if __name__ == "__main__":
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    main()
