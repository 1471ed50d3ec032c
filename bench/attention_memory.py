"""Memory-efficient attention: peak memory and time against L, batch 1, one head, d_k 64.

  python bench/attention_memory.py            L = 512 … 8192, results in bench/results/
  python bench/attention_memory.py --quick    tiny sizes, for CI: checks that it runs

Variants: naive (tfx.model.attention.scaled_dot_product_attention: the whole score matrix), chunked
(tfx.model.efficient.chunked_attention, default block size), torch (F.scaled_dot_product_attention)
and linear attention (tfx.model.efficient.linear_attention: a different function, timed for N29).
Peak memory is what the call allocates (inputs excluded), from the profiler's allocation events
(tfx.inspect.memory.peak_memory); times are medians of calls in alternation
(tfx.inspect.perf.alternate).
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing tfx

import tfx  # noqa: E402
from bench._common import arguments, save  # noqa: E402
from tfx.inspect.memory import peak_memory  # noqa: E402
from tfx.inspect.perf import alternate, header_md, run_info  # noqa: E402
from tfx.inspect.timing import threads  # noqa: E402
from tfx.model.attention import scaled_dot_product_attention  # noqa: E402
from tfx.model.efficient import DEFAULT_BLOCK_SIZE, chunked_attention, linear_attention  # noqa: E402

FULL = dict(lengths=[512, 1024, 2048, 4096, 8192], d_k=64, rounds=3)
QUICK = dict(lengths=[64, 128], d_k=8, rounds=1)


def variants(q, k, v) -> dict:
    return {
        "naive": lambda: scaled_dot_product_attention(q, k, v)[0],
        "chunked": lambda: chunked_attention(q, k, v),
        "torch sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
        "linear": lambda: linear_attention(q, k, v),
    }


@torch.inference_mode()
def measure(cfg: dict) -> list:
    rows = []
    for L in cfg["lengths"]:
        tfx.set_seed(0)
        q, k, v = (torch.randn(1, 1, L, cfg["d_k"]) for _ in range(3))  # (B, H, L, d_k)
        fns = variants(q, k, v)
        ref = fns["naive"]()
        torch.testing.assert_close(fns["chunked"](), ref, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(fns["torch sdpa"](), ref, atol=1e-5, rtol=1e-4)
        gap = (fns["linear"]() - ref).abs().max().item()
        mem = {name: peak_memory(f)[1] for name, f in fns.items()}
        secs = alternate(fns, rounds=cfg["rounds"])
        row = {"L": L, "peak_bytes": mem, "median_s": secs, "linear_max_abs_gap": gap}
        print(
            f"L={L:5d} "
            + " ".join(f"{n}: {mem[n] / 2**20:8.2f} MiB {secs[n] * 1e3:8.1f} ms" for n in fns)
        )
        rows.append(row)
    return rows


def to_markdown(results: dict) -> str:
    lines = [header_md("Memory-efficient attention (batch 1, one head)", results["info"])]
    lines.append(
        f"d_k = {results['d_k']}, chunked block size {results['block_size']}, "
        f"{results['info']['threads']} thread(s). "
        "Peak = bytes the call allocates, inputs excluded.\n"
    )
    names = list(results["rows"][0]["peak_bytes"])
    lines.append(
        "| L | "
        + " | ".join(f"{n} MiB" for n in names)
        + " | "
        + " | ".join(f"{n} ms" for n in names)
        + " |"
    )
    lines.append("|---" * (1 + 2 * len(names)) + "|")
    for r in results["rows"]:
        mem = " | ".join(f"{r['peak_bytes'][n] / 2**20:.2f}" for n in names)
        sec = " | ".join(f"{r['median_s'][n] * 1e3:.1f}" for n in names)
        lines.append(f"| {r['L']} | {mem} | {sec} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> Path:
    parser = arguments(__doc__.split("\n\n")[0], "--quick", help="tiny sizes, for CI")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    with threads(args.threads):
        results = {
            "info": run_info(),
            "mode": "quick" if args.quick else "full",
            "d_k": cfg["d_k"],
            "block_size": DEFAULT_BLOCK_SIZE,
            "rows": measure(cfg),
        }
    tag = "quick" if args.quick else ""
    path = save(results, "attention-memory", to_markdown(results), args.out, tag)
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    main()
