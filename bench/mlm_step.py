"""One masked-LM training step, tfx against Hugging Face's BertForMaskedLM with labels, at a
bert-base-chinese-sized vocabulary (21,128 rows, d 256, 4 layers, batch 32 × 64): fp32 and bf16
autocast, as ratios measured in alternation in one run (tfx.learn.train.step_time_ratios).
Optionally torch.profiler's view of every variant, op category by op category
(tfx.inspect.perf.op_breakdown), and the top operators of each fp32 step. Writes
bench/results/mlm-step-<date>-<N>thread[-cpu].json and .md with the machine, the clock and the load
average named.

  python bench/mlm_step.py                 7 repeats
  python bench/mlm_step.py --repeats 3     quicker
  python bench/mlm_step.py --profile       also where the time goes, op category by category
  python bench/mlm_step.py --threads 1     one thread: steadier when other jobs share the CPU
  python bench/mlm_step.py --threads 1 --cpu-time   and time each step's CPU time, not wall time
  python bench/mlm_step.py --ablation      also tfx with its LayerNorm written out, in alternation
  python bench/mlm_step.py --tiny          tiny sizes, for CI: checks that every path runs
"""

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing tfx

from bench._common import arguments, save  # noqa: E402
from tfx.inspect.perf import format_breakdown, header_md, op_breakdown, quiet_stderr, run_info  # noqa: E402
from tfx.inspect.timing import threads  # noqa: E402
from tfx.learn.train import mlm_step_pair, mlm_train_steps, step_time_ratios  # noqa: E402

FULL = dict(vocab_size=21128, d_model=256, n_layers=4, batch=32, length=64)
TINY = dict(vocab_size=300, d_model=64, n_layers=1, batch=2, length=8)
LABELS = {
    "hf": "HF, default AdamW",
    "hf_fused": "HF, fused AdamW",
    "tfx": "tfx fp32",
    "bf16": "tfx bf16",
}


def profile_steps(sizes: dict, repeats: int = 3, row_limit: int = 15) -> tuple:
    """(op_breakdown of the four steps, {label: top-operator table of the fp32 steps})."""
    from torch.profiler import ProfilerActivity, profile

    hf, inputs, labels = mlm_step_pair(**sizes)
    steps = mlm_train_steps(hf, inputs, labels)
    breakdown = op_breakdown({LABELS[k]: f for k, f in steps.items()}, repeats=repeats)
    tables = {}
    for key in ("hf", "tfx"):
        with quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(repeats):
                steps[key]()
        tables[LABELS[key]] = prof.key_averages().table(
            sort_by="self_cpu_time_total", row_limit=row_limit
        )
    return breakdown, tables


def matmul_gflop(sizes: dict) -> dict:
    """Matmul GFLOP of one training step (forward, and twice that backward) of each model: the
    encoder's projections, attention and FFN on all B·L tokens, then the MLM head (transform and
    tied decoder) on all tokens for Hugging Face, on the N masked rows only for tfx."""
    from tfx.learn.mlm import IGNORE

    _, _, labels = mlm_step_pair(**sizes)
    d, V, n = sizes["d_model"], sizes["vocab_size"], sizes["n_layers"]
    B, L, d_ff = sizes["batch"], sizes["length"], 4 * sizes["d_model"]
    T, N = B * L, int((labels != IGNORE).sum())
    encoder = n * (2 * T * (4 * d * d + 2 * d * d_ff) + 4 * B * L * L * d)
    head = lambda rows: 2 * rows * d * d + 2 * rows * d * V  # noqa: E731
    hf, ours = 3 * (encoder + head(T)) / 1e9, 3 * (encoder + head(N)) / 1e9
    return {"masked_rows": N, "tokens": T, "hf": hf, "tfx": ours, "ratio": ours / hf}


def ablation(sizes: dict, repeats: int, clock) -> dict:
    """Median seconds of Hugging Face's step (default AdamW), tfx's fp32 step, and tfx's step with
    its LayerNorms running the written-out formula (LayerNorm.formula, what tfx ran before it
    called the fused kernel), in alternation: what the kernel alone is worth."""
    from tfx.inspect.perf import alternate
    from tfx.model.layers import LayerNorm

    hf, inputs, labels = mlm_step_pair(**sizes)
    steps = mlm_train_steps(hf, inputs, labels, names=("hf", "tfx"))
    formula_step = mlm_train_steps(hf, inputs, labels, names=("tfx",))["tfx"]

    def with_formula():
        kernel = LayerNorm.forward
        LayerNorm.forward = LayerNorm.formula
        try:
            formula_step()
        finally:
            LayerNorm.forward = kernel

    fns = {"HF, default AdamW": steps["hf"], "tfx fp32": steps["tfx"]}
    fns["tfx fp32, written-out LayerNorm"] = with_formula
    med = alternate(fns, rounds=repeats, warmup=1, clock=clock)
    ref = med["HF, default AdamW"]
    return {k: {"seconds": v, "ratio_to_hf": v / ref} for k, v in med.items()}


def main(argv=None) -> Path:
    parser = arguments(__doc__.splitlines()[0], "--tiny", help="tiny sizes, for CI")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--ablation", action="store_true", help="also time tfx with the written-out LayerNorm"
    )
    parser.add_argument(
        "--cpu-time", action="store_true", help="time CPU time of the one thread (--threads 1)"
    )
    parser.add_argument(
        "--threads", type=int, default=2, help="torch threads (default 2: the CI machine's cores)"
    )
    args = parser.parse_args(argv)
    sizes = TINY if args.tiny else FULL
    repeats = 1 if args.tiny else args.repeats
    with threads(args.threads):
        info = run_info()  # threads and the load average at the start
        result = step_time_ratios(**sizes, repeats=repeats, cpu_time=args.cpu_time)
    print(result)
    record = {
        "info": info,
        "mode": "tiny" if args.tiny else "full",
        "command": "python bench/mlm_step.py " + " ".join(argv or sys.argv[1:]),
        "sizes": sizes,
        "repeats": repeats,
        "clock": "thread CPU time" if args.cpu_time else "wall time",
        "machine": result.machine,
        "shape": result.shape,
        "seconds": {
            "hf_fp32": result.hf_fp32,
            "hf_fp32_fused_adamw": result.hf_fp32_fused,
            "tfx_fp32": result.tfx_fp32,
            "tfx_bf16": result.tfx_bf16,
        },
        "ratio_fp32": result.ratio_fp32,
        "ratio_bf16_vs_hf_fp32": result.ratio_bf16,
        "ratio_fp32_same_fused_adamw": result.ratio_fp32_same_optimizer,
        "fastest_round_seconds": result.fastest,
        "targets": {"ratio_fp32": 0.45, "ratio_bf16_vs_hf_fp32": 0.30},
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    text = [header_md("Masked-LM training step, tfx against Hugging Face", info)]
    text += [f"Command: `{record['command'].strip()}`  ", f"torch threads: {info['threads']}  "]
    text += [f"Clock: {record['clock']}\n"]
    text += ["```", str(result), "```", ""]
    end = ", ".join(str(x) for x in record["load_average_at_end"])
    text += [f"Load average (1, 5, 15 min) at the end of the timed steps: {end}", ""]
    flops = record["matmul_gflop_per_step"] = matmul_gflop(sizes)
    text += [
        f"Matmul work per step: Hugging Face {flops['hf']:.1f} GFLOP (decoder on all "
        f"{flops['tokens']} tokens), tfx {flops['tfx']:.1f} GFLOP (decoder on the "
        f"{flops['masked_rows']} masked rows): {flops['ratio']:.2f}×, the step-time ratio that "
        "equal matmul speed and nothing else would give.",
        "",
    ]
    if args.profile:
        with threads(args.threads):
            breakdown, tables = profile_steps(sizes, repeats=1 if args.tiny else 3)
        record["breakdown_ms_per_step"] = breakdown
        table = format_breakdown(breakdown)
        print(table)
        text += ["## Where the time goes (torch.profiler, self CPU time per step)", ""]
        text += ["```", table, "```", ""]
        hf_b, t_b = breakdown[LABELS["hf"]], breakdown[LABELS["tfx"]]
        mm = t_b["matmul"] / hf_b["matmul"]
        rest = (t_b["total"] - t_b["matmul"]) / (hf_b["total"] - hf_b["matmul"])
        text += [
            f"tfx fp32 / HF (default AdamW) under the profiler: matmul time {mm:.2f}× (the FLOP "
            f"ratio is {flops['ratio']:.2f}), everything else {rest:.2f}×, whole step "
            f"{t_b['total'] / hf_b['total']:.2f}×. Profiled with wall-clock operator times, so "
            "other jobs on the machine inflate them; the ratios above are the measurement.",
            "",
        ]
        for label, t in tables.items():
            text += [f"## {label}: top operators by self CPU time", "", "```", t, "```", ""]
    if args.ablation:
        clock = time.thread_time if args.cpu_time else time.perf_counter
        with threads(args.threads):
            abl = ablation(sizes, repeats, clock)
        record["ablation"] = abl
        rows = [
            f"{k:<34} {v['seconds'] * 1e3:7.0f} ms  {v['ratio_to_hf']:.2f}×" for k, v in abl.items()
        ]
        print("\n".join(rows))
        text += ["## What the LayerNorm kernel is worth (a second run in alternation)", ""]
        text += ["```", *rows, "```", ""]
    tags = f"{args.threads}thread", "cpu" if args.cpu_time else "", "tiny" if args.tiny else ""
    path = save(record, "mlm-step", "\n".join(text) + "\n", args.out, *tags)
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    main()
