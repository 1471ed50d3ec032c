"""The encoder layer at BERT-base shapes on the CPU: implementations, precision, compile, threads.

  python bench/encoder.py            batch 8 × 128, d 768, 12 heads, d_ff 3072; bench/results/
  python bench/encoder.py --quick    tiny sizes, for CI: checks that every path runs

Timings use torch.utils.benchmark (Timer.blocked_autorange: blocks of calls until a minimum run
time, median and IQR; Compare for the tables). Measured:
  layer     tfx EncoderLayer naive / sdpa, nn.TransformerEncoderLayer (its fused fast path, eval
            and no grad only) and Hugging Face's BertLayer: inference at 1 and 2 threads, and a
            training step (forward + backward) where the fast path does not exist
  bf16      bf16 autocast against fp32 (tfx sdpa): time and largest error
  compile   graphs compiled as the length varies (a counting backend: dynamo alone) for
            dynamic=False / default / True and for padding to buckets; inductor once for speed
  roofline  fp32 and bf16 matmul peaks, memory bandwidth, each variant's achieved GFLOP/s
  qkv       one fused (d, 3d) projection against three (d, d) ones (equal outputs, time)
  peak      the layers' GFLOP/s as a share of the fp32 matmul peak, timed in alternation with a
            square matmul and a matmul at the FFN's own shape
  breakdown inference time by op category (tfx.inspect.perf.op_breakdown), tfx sdpa against the fast
  path profile   torch.profiler's top ops of tfx sdpa and the fast path
"""

import sys
import time
from pathlib import Path

import torch
import torch._dynamo
import torch.nn as nn
import torch.utils.benchmark as benchmark

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing tfx

import tfx  # noqa: E402
from bench._common import arguments, save  # noqa: E402
from tfx.inspect.flops import layer_flops  # noqa: E402
from tfx.inspect.perf import (  # noqa: E402
    alternate,
    count_graphs,
    format_breakdown,
    header_md,
    op_breakdown,
    quiet_stderr,
    run_info,
)
from tfx.inspect.timing import threads  # noqa: E402
from tfx.model.layers import EncoderLayer  # noqa: E402

FULL = dict(batch=8, L=128, d=768, heads=12, d_ff=3072, min_run=1.0, rounds=7, matmul_n=2048,
            lengths=[32, 48, 64, 96, 128], buckets=[64, 128], pad_short=32, pad_long=512,
            inductor=True)  # fmt: skip
QUICK = dict(batch=2, L=16, d=32, heads=2, d_ff=64, min_run=0.01, rounds=1, matmul_n=64,
             lengths=[8, 12, 16], buckets=[16], pad_short=8, pad_long=32,
             inductor=False)  # fmt: skip


def layers(cfg: dict) -> dict:
    """Equal-weight tfx layers and nn.TransformerEncoderLayer, and a Hugging Face BertLayer with
    the same wiring (weights of its own: its output is checked against a tfx copy of it)."""
    from transformers import BertConfig as HFConfig
    from transformers import BertModel as HFBert

    from tfx.model.bert import from_huggingface

    tfx.set_seed(0)
    ref = nn.TransformerEncoderLayer(
        cfg["d"], cfg["heads"], cfg["d_ff"], dropout=0.0, activation="gelu", batch_first=True
    ).eval()
    hf_cfg = HFConfig(
        vocab_size=32,
        hidden_size=cfg["d"],
        num_hidden_layers=1,
        num_attention_heads=cfg["heads"],
        intermediate_size=cfg["d_ff"],
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=cfg["pad_long"],
        attn_implementation="sdpa",
    )
    hf = HFBert(hf_cfg).eval()
    return {
        "tfx naive": EncoderLayer.from_torch(ref, attn_impl="naive").eval(),
        "tfx sdpa": EncoderLayer.from_torch(ref, attn_impl="sdpa").eval(),
        "torch fast path": ref,
        "HF BertLayer": hf.encoder.layer[0],
        "_tfx copy of HF": from_huggingface(hf).layers[0].eval(),
    }


def call(m):
    """Every variant as f(x) -> tensor (HF layers return a tuple in some versions)."""

    def f(x):
        out = m(x)
        return out[0] if isinstance(out, tuple) else out

    return f


def timer(fn, x, label, sub, desc, n_threads, min_run):
    with threads(n_threads):
        t = benchmark.Timer(
            stmt="fn(x)",
            globals={"fn": fn, "x": x},
            num_threads=n_threads,
            label=label,
            sub_label=sub,
            description=desc,
        )
        return t.blocked_autorange(min_run_time=min_run)


def summary(m) -> dict:
    return {"median_s": m.median, "min_s": min(m.times), "iqr_s": m.iqr, "runs": len(m.times)}


def clock(cfg):
    """The clock of the runs in alternation: wall time, or the thread's CPU time (one thread)."""
    return time.thread_time if cfg["clock"] == "thread CPU time" else time.perf_counter


def bench_layer(cfg, mods, x) -> tuple:
    """Inference (1 and 2 threads) and training step, every variant; returns (results, Compare)."""
    out, measurements = {"inference": {}, "train": {}}, []
    ref = call(mods["torch fast path"])(x)
    for name in ("tfx naive", "tfx sdpa"):
        torch.testing.assert_close(call(mods[name])(x), ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(
        call(mods["HF BertLayer"])(x), mods["_tfx copy of HF"](x), atol=1e-4, rtol=1e-4
    )
    names = ["tfx naive", "tfx sdpa", "torch fast path", "HF BertLayer"]
    with torch.inference_mode():
        for n_threads in (1, 2):
            for name in names:
                m = timer(call(mods[name]), x, "inference", name, f"{n_threads} thr", n_threads,
                          cfg["min_run"])  # fmt: skip
                measurements.append(m)
                out["inference"][f"{name}, {n_threads} threads"] = summary(m)
    for name in names:
        mod = mods[name].train()  # dropout is 0: train mode only turns the fast path off

        def step(t, mod=mod):
            mod.zero_grad(set_to_none=True)
            call(mod)(t).sum().backward()

        label = "torch layer (eager: no fast path in training)" if "fast" in name else name
        m = timer(
            step, x, "train step", label, f"{cfg['threads']} thr", cfg["threads"], cfg["min_run"]
        )
        measurements.append(m)
        out["train"][label] = summary(m)
        mod.eval()
    return out, benchmark.Compare(measurements)


def bench_bf16(cfg, mods, x) -> dict:
    mod = mods["tfx sdpa"]
    res = {}
    with torch.inference_mode():
        fp32 = mod(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = mod(x)
        res["inference_max_abs_error"] = (bf16.float() - fp32).abs().max().item()
        res["output_dtype"] = str(bf16.dtype)

        def amp(t):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return mod(t)

        for label, fn in (("fp32", mod), ("bf16 autocast", amp)):
            m = timer(fn, x, "bf16", label, "", cfg["threads"], cfg["min_run"])
            res[f"inference {label}"] = summary(m)
    mod.train()

    def step(t, amp_on):
        mod.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp_on):
            y = mod(t)
        y.float().sum().backward()

    for label, on in (("fp32", False), ("bf16 autocast", True)):
        fn = lambda t, on=on: step(t, on)  # noqa: E731
        res[f"train {label}"] = summary(
            timer(fn, x, "bf16", label, f"{cfg['threads']} thr", cfg["threads"], cfg["min_run"])
        )
    mod.eval()
    return res


def with_formula_ln(mod, x):
    """mod(x) with tfx's LayerNorms running their written-out formula (LayerNorm.formula), as
    tfx did before it called F.layer_norm: what the fused kernel is worth."""
    from tfx.model.layers import LayerNorm

    kernel = LayerNorm.forward
    LayerNorm.forward = LayerNorm.formula
    try:
        return mod(x)
    finally:
        LayerNorm.forward = kernel


def bench_compile(cfg, mods, x) -> dict:
    mod, (B, d) = mods["tfx sdpa"], (cfg["batch"], cfg["d"])
    tfx.set_seed(0)
    xs = [torch.randn(B, L, d) for L in cfg["lengths"]]  # (B, L, d) at several lengths

    def bucketed(t):  # pad the length up to the next bucket
        L = next(b for b in cfg["buckets"] if b >= t.size(1))
        return torch.cat([t, t.new_zeros(B, L - t.size(1), d)], dim=1)  # (B, bucket, d)

    res = {
        "lengths": cfg["lengths"],
        "buckets": cfg["buckets"],
        "graphs": {
            "dynamic=False": count_graphs(mod, xs, dynamic=False),
            "default (dynamic=None)": count_graphs(mod, xs),
            "dynamic=True": count_graphs(mod, xs, dynamic=True),
            "padded to buckets, dynamic=False": count_graphs(
                mod, [bucketed(t) for t in xs], dynamic=False
            ),
        },
    }
    with torch.inference_mode():
        short, long = torch.randn(B, cfg["pad_short"], d), torch.randn(B, cfg["pad_long"], d)
        t_short = timer(
            mod,
            short,
            "padding",
            f"L={cfg['pad_short']}",
            f"{cfg['threads']} thr",
            cfg["threads"],
            cfg["min_run"],
        )
        t_long = timer(
            mod,
            long,
            "padding",
            f"L={cfg['pad_long']}",
            f"{cfg['threads']} thr",
            cfg["threads"],
            cfg["min_run"],
        )
        res["padding"] = {"short": summary(t_short), "long": summary(t_long)}
        if cfg["inductor"]:
            torch._dynamo.reset()
            compiled = torch.compile(mod, dynamic=False)
            t0 = time.perf_counter()
            y = compiled(x)
            res["inductor_compile_s"] = time.perf_counter() - t0
            res["inductor_max_abs_error"] = (y - mod(x)).abs().max().item()
            torch.backends.mha.set_fastpath_enabled(True)
            samples = {}
            # in alternation, round after round: load bursts then hit all three alike
            with threads(cfg["threads"]):
                secs = alternate(
                    {
                        "tfx sdpa eager": lambda: mod(x),
                        "tfx sdpa inductor": lambda: compiled(x),
                        "torch fast path": lambda: mods["torch fast path"](x),
                        "tfx sdpa eager, written-out LayerNorm": lambda: with_formula_ln(mod, x),
                    },
                    rounds=cfg["rounds"],
                    clock=clock(cfg),
                    samples=samples,
                )
            res["alternating_median_s"] = secs
            res["alternating_min_s"] = {k: min(v) for k, v in samples.items()}
    return res


def bench_roofline(cfg) -> dict:
    """Matmul peaks (fp32, bf16) and the bandwidth of a large copy, at cfg["threads"]."""
    n, res = cfg["matmul_n"], {}
    tfx.set_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        m = timer(
            lambda t, b=b: t @ b,
            a,
            "matmul",
            str(dtype),
            f"{cfg['threads']} thr",
            cfg["threads"],
            cfg["min_run"],
        )
        # the fastest block, not the median: a peak is what the machine reaches when not disturbed
        res[f"matmul {str(dtype).removeprefix('torch.')} GFLOP/s"] = 2 * n**3 / min(m.times) / 1e9
    big = torch.randn(64 * 2**20 if cfg["inductor"] else 2**16)  # 256 MiB of fp32 (full)
    dst = torch.empty_like(big)
    m = timer(
        lambda t: dst.copy_(t),
        big,
        "copy",
        "",
        f"{cfg['threads']} thr",
        cfg["threads"],
        cfg["min_run"],
    )
    res["copy GB/s (read + write)"] = 2 * big.numel() * 4 / min(m.times) / 1e9
    return res


def bench_qkv(cfg, x) -> dict:
    """A65: one x @ W_qkv then a split against three projections with the same rows."""
    tfx.set_seed(0)
    d = cfg["d"]
    fused = nn.Linear(d, 3 * d)
    three = [nn.Linear(d, d) for _ in range(3)]
    with torch.no_grad():
        for i, lin in enumerate(three):
            lin.weight.copy_(fused.weight[i * d : (i + 1) * d])
            lin.bias.copy_(fused.bias[i * d : (i + 1) * d])
    with torch.inference_mode():
        gap = max(
            (a - lin(x)).abs().max().item()
            for a, lin in zip(fused(x).split(d, dim=-1), three, strict=True)
        )
        f_fused = lambda t: fused(t).split(d, dim=-1)  # noqa: E731
        f_three = lambda t: [lin(t) for lin in three]  # noqa: E731
        res = {"max_abs_gap": gap}
        for label, fn in (("fused", f_fused), ("three", f_three)):
            res[label] = summary(
                timer(fn, x, "qkv", label, f"{cfg['threads']} thr", cfg["threads"], cfg["min_run"])
            )
    return res


def bench_profile(cfg, mods, x, row_limit: int = 8) -> dict:
    from torch.profiler import ProfilerActivity, profile

    tables = {}
    with torch.inference_mode(), threads(cfg["threads"]):
        for name in ("tfx sdpa", "torch fast path"):
            mods[name](x)
            with quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(3):
                    mods[name](x)
            tables[name] = prof.key_averages().table(
                sort_by="self_cpu_time_total", row_limit=row_limit
            )
    return tables


def bench_peak_share(cfg, mods, x) -> dict:
    """The layers' achieved GFLOP/s as a share of the fp32 matmul peak, all timed in alternation
    (rounds of: a square matmul, a matmul at the layer's own FFN shape, tfx sdpa, the fast path),
    so that a slow spell of the shared machine lowers the peak and the layers alike."""
    n, (B, L, d, d_ff) = cfg["matmul_n"], (cfg["batch"], cfg["L"], cfg["d"], cfg["d_ff"])
    tfx.set_seed(0)
    a, b = torch.randn(n, n), torch.randn(n, n)
    x2, w1 = torch.randn(B * L, d), torch.randn(d, d_ff)  # the FFN's first matmul
    flops = {
        f"matmul {n}x{n}x{n}": 2 * n**3,
        f"matmul {B * L}x{d}x{d_ff} (the FFN's shape)": 2 * B * L * d * d_ff,
        "tfx sdpa": flops_per_call(cfg),
        "torch fast path": flops_per_call(cfg),
    }
    fns = dict(zip(flops, (lambda: a @ b, lambda: x2 @ w1, lambda: mods["tfx sdpa"](x),
                           lambda: mods["torch fast path"](x))))  # fmt: skip
    with torch.inference_mode(), threads(cfg["threads"]):
        secs = alternate(fns, rounds=max(cfg["rounds"], 3) * 2, clock=clock(cfg))
    gflops = {k: flops[k] / secs[k] / 1e9 for k in flops}
    peak = gflops[f"matmul {n}x{n}x{n}"]
    return {
        "median_s": secs,
        "gflop_per_s": gflops,
        "share_of_fp32_peak": {k: g / peak for k, g in gflops.items()},
        "threads": cfg["threads"],
    }


def bench_breakdown(cfg, mods, x) -> dict:
    """Inference time by op category (tfx.inspect.perf.op_breakdown) of tfx sdpa and the fast
    path."""
    with torch.inference_mode(), threads(cfg["threads"]):
        return op_breakdown(
            {name: (lambda m=mods[name]: m(x)) for name in ("tfx sdpa", "torch fast path")},
            repeats=3,
        )


def flops_per_call(cfg) -> float:
    return cfg["batch"] * sum(layer_flops(cfg["d"], cfg["d_ff"], cfg["L"]).values())


def to_markdown(res: dict) -> str:
    lines = [header_md("The encoder layer at BERT-base shapes on the CPU", res["info"])]
    lines.append(f"Config: {res['config']}\n\nForward FLOPs per call: {res['flops']:.3g}\n")
    lines.append("```\n" + res["compare"] + "\n```\n")
    for key in ("bf16", "compile", "roofline", "qkv"):
        lines.append(f"## {key}\n\n```\n{res[key]}\n```\n")
    alt = res["compile"].get("alternating_median_s")
    if alt:  # the full run only: the targets, from the runs in alternation
        fast, fastest = alt["torch fast path"], res["compile"]["alternating_min_s"]
        rows = [
            f"{k:<40} {v / fast:.3f}× (median)  {fastest[k] / fastest['torch fast path']:.3f}× "
            "(fastest rounds)"
            for k, v in alt.items()
        ]
        lines.append(
            f"## against the fast path, fp32 inference ({res['config']['clock']}, "
            f"{res['info']['threads']} thread(s), {res['config']['rounds']} rounds in alternation)"
            "\n\nTargets: tfx sdpa eager <= 1.05×, compiled <= 1.00×.\n\n```\n"
            + "\n".join(rows)
            + "\n```\n"
        )
    share = res["peak_share"]
    rows = [
        f"{k:<40} {share['median_s'][k] * 1e3:8.1f} ms {share['gflop_per_s'][k]:7.1f} GFLOP/s "
        f"{share['share_of_fp32_peak'][k]:6.0%}"
        for k in share["median_s"]
    ]
    lines.append(
        f"## share of the fp32 matmul peak (in alternation, {share['threads']} thread(s), "
        f"{res['config']['clock']}; target >= 85%)\n\n"
        "```\n" + "\n".join(rows) + "\n```\n"
    )
    lines.append(
        "## inference time by op category (torch.profiler, self CPU ms per call)\n\n```\n"
        + format_breakdown(res["breakdown"])
        + "\n```\n"
    )
    for name, table in res["profile"].items():
        lines.append(f"## profile: {name}\n\n```\n{table}\n```\n")
    return "\n".join(lines)


def main(argv=None) -> Path:
    parser = arguments(__doc__.split("\n\n")[0], "--quick", help="tiny sizes, for CI")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads for all but the 1-vs-2 comparison (default 1: steadier on a shared CPU)",
    )
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="the runs in alternation time the thread's CPU time (needs --threads 1)",
    )
    args = parser.parse_args(argv)
    if args.cpu_time and args.threads != 1:
        parser.error("--cpu-time needs --threads 1")
    cfg = {**(QUICK if args.quick else FULL), "threads": args.threads}
    cfg["clock"] = "thread CPU time" if args.cpu_time else "wall time"  # of the alternations
    mods = layers(cfg)
    tfx.set_seed(0)
    x = torch.randn(cfg["batch"], cfg["L"], cfg["d"])  # (B, L, d)
    info = {**run_info(), "threads": args.threads}  # what the timings use, except 1 vs 2
    res = {"info": info, "mode": "quick" if args.quick else "full", "config": cfg}
    res["flops"] = flops_per_call(cfg)
    res["layer"], compare = bench_layer(cfg, mods, x)
    res["compare"] = str(compare)
    print(compare)
    for key, fn in (
        ("bf16", lambda: bench_bf16(cfg, mods, x)),
        ("roofline", lambda: bench_roofline(cfg)),
        ("qkv", lambda: bench_qkv(cfg, x)),
        ("compile", lambda: bench_compile(cfg, mods, x)),
        ("peak_share", lambda: bench_peak_share(cfg, mods, x)),
        ("breakdown", lambda: bench_breakdown(cfg, mods, x)),
        ("profile", lambda: bench_profile(cfg, mods, x)),
    ):
        res[key] = fn()
        print(key, res[key] if key != "profile" else "")
    path = save(res, "encoder", to_markdown(res), args.out, "quick" if args.quick else "")
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    main()
