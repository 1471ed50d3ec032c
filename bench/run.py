"""Benchmarks of the book, run by `make bench`: every time is reported as a ratio against a
reference measured in the same run, on the machine named in the results, because absolute times do
not travel.

  python bench/run.py            full sizes (a BERT-base-shaped layer), results in bench/results/
  python bench/run.py --quick    tiny sizes, for CI: checks that every benchmark runs, not how fast
  python bench/run.py --threads 1  one torch CPU thread (recorded in the machine line)

Suites:
  recurrence  an LSTM as a step loop and as nn.LSTM, against one self-attention layer, across
  lengths
              (reference: nn.LSTM)
  attention   tfx naive vs tfx sdpa vs torch on one attention block and one encoder layer
              (reference: tfx naive)
  gpu         the encoder layer in fp32, under AMP (bf16 autocast) and under torch.compile, with
  CUDA
              synchronisation around every timed call (reference: fp32 eager); skipped without CUDA
"""

import datetime
import os
import re
import sys
from functools import partial
from pathlib import Path

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing tfx

import tfx  # noqa: E402
from bench._common import arguments, save  # noqa: E402
from tfx.inspect.timing import machine, timeit  # noqa: E402
from tfx.learn.rnn import cell_from_lstm, lstm_step_loop  # noqa: E402
from tfx.model.attention import MultiHeadAttention  # noqa: E402
from tfx.model.layers import EncoderLayer  # noqa: E402

FULL = dict(lengths=[16, 64, 256, 1024], rnn_batch=8, rnn_d=64, rnn_heads=4, batch=8, L=128,
            d_model=768, n_heads=12, d_ff=3072, repeats=7)  # fmt: skip
QUICK = dict(lengths=[8, 16], rnn_batch=2, rnn_d=16, rnn_heads=2, batch=2, L=16, d_model=64,
             n_heads=4, d_ff=128, repeats=2)  # fmt: skip


def measured(label: str, fn, *args, reference=None, repeats: int, device=None) -> dict:
    """Time fn(*args) and return a result row, with its ratio to the reference row if one is
    given."""
    t = timeit(fn, *args, repeats=repeats, warmup=2, label=label, device=device)
    print(f"  {t}")
    row = {"label": label, "median_s": t.median, "min_s": t.best, "repeats": repeats}
    if reference is not None:  # the minimum is the steadier of the two on a busy machine
        row["ratio_to_reference"] = t.median / reference["median_s"]
        row["min_ratio_to_reference"] = t.best / reference["min_s"]
    return row


def compared(title: str, fns: dict, *args, repeats: int, device=None) -> list:
    """Print the title, then time each of fns ({label: fn}) on args: the first is the reference
    of the others. Returns their rows, the reference's first."""
    print(title)
    rows = []
    for label, fn in fns.items():
        ref = rows[0] if rows else None
        rows.append(measured(label, fn, *args, reference=ref, repeats=repeats, device=device))
    return rows


@torch.inference_mode()
def bench_recurrence(cfg: dict) -> list:
    """Wall time against sequence length: the recurrence is L dependent steps, attention one wide
    step."""
    rows = []
    for L in cfg["lengths"]:
        tfx.set_seed(0)
        d = cfg["rnn_d"]
        lstm = nn.LSTM(d, d, batch_first=True).eval()
        cell = cell_from_lstm(lstm)
        attn = MultiHeadAttention(d, cfg["rnn_heads"]).eval()
        x = torch.randn(cfg["rnn_batch"], L, d)  # (B, L, d)
        torch.testing.assert_close(lstm_step_loop(cell, x)[0], lstm(x)[0], atol=1e-5, rtol=1e-4)
        fns = {
            "nn.LSTM": lstm,
            "LSTMCell step loop": partial(lstm_step_loop, cell),
            "tfx self-attention": attn,
        }
        results = compared(f"recurrence, L={L}", fns, x, repeats=cfg["repeats"])
        rows.append({"L": L, "reference": "nn.LSTM", "results": results})
    return rows


def encoder_layers(cfg: dict, device) -> dict:
    """The same weights in a torch TransformerEncoderLayer and in tfx layers (naive and sdpa
    attention)."""
    tfx.set_seed(0)
    ref = (
        nn.TransformerEncoderLayer(
            cfg["d_model"],
            cfg["n_heads"],
            cfg["d_ff"],
            dropout=0.0,
            activation="gelu",
            batch_first=True,
        )
        .to(device)
        .eval()
    )
    return {
        "torch": ref,
        "naive": EncoderLayer.from_torch(ref, attn_impl="naive").eval(),
        "sdpa": EncoderLayer.from_torch(ref, attn_impl="sdpa").eval(),
    }


@torch.inference_mode()
def bench_attention(cfg: dict) -> dict:
    """A BERT-base-shaped attention block and encoder layer, four ways, inference in fp32."""
    layers = encoder_layers(cfg, "cpu")
    x = torch.randn(cfg["batch"], cfg["L"], cfg["d_model"])  # (B, L, d_model)
    mha = layers["torch"].self_attn
    blocks = {"tfx naive": layers["naive"].attn, "tfx sdpa": layers["sdpa"].attn}
    for m in blocks.values():  # the same function, or the ratios would compare different work
        torch.testing.assert_close(
            m(x)[0], mha(x, x, x, need_weights=False)[0], atol=1e-4, rtol=1e-4
        )
    for name in ("naive", "sdpa"):
        torch.testing.assert_close(layers[name](x), layers["torch"](x), atol=1e-4, rtol=1e-4)
    shape = {k: cfg[k] for k in ("batch", "L", "d_model", "n_heads", "d_ff")}
    r = cfg["repeats"]
    blocks["nn.MultiheadAttention"] = lambda t: mha(t, t, t, need_weights=False)
    block_rows = compared(f"attention block {shape}", blocks, x, repeats=r)
    whole = {
        "tfx naive": layers["naive"],
        "tfx sdpa": layers["sdpa"],
        "nn.TransformerEncoderLayer (fast path)": layers["torch"],
    }
    layer_rows = compared(f"encoder layer {shape}", whole, x, repeats=r)
    return {"shape": shape, "reference": "tfx naive", "block": block_rows, "layer": layer_rows}


def bench_gpu(cfg: dict) -> dict:
    """The gpu suite: bench_amp_compile on CUDA, or a note saying why it was skipped."""
    if not torch.cuda.is_available():
        msg = "skipped: no CUDA device (torch.cuda.is_available() is False), so no GPU numbers"
        print(f"gpu: {msg}")
        return {"skipped": msg}
    return bench_amp_compile(cfg, torch.device("cuda"))


def bench_amp_compile(cfg: dict, device: torch.device, compile: bool = True) -> dict:
    """The encoder layer in fp32 eager, under AMP (bf16 autocast) and, if asked, under
    torch.compile.

    Written for CUDA, where timeit synchronises around each call; it runs on any device, which is
    how the tests check it on a CPU (without compile, which would take longer than a unit test
    should).
    """
    layer = encoder_layers(cfg, device)["sdpa"]
    x = torch.randn(cfg["batch"], cfg["L"], cfg["d_model"], device=device)  # (B, L, d_model)
    r = cfg["repeats"]

    @torch.inference_mode()
    def fp32(t):
        return layer(t)

    @torch.inference_mode()
    def amp(t):
        with torch.autocast(device.type, dtype=torch.bfloat16):
            return layer(t)

    torch.testing.assert_close(amp(x).float(), fp32(x), atol=0.1, rtol=0.1)  # bf16 keeps ~3 digits
    fns = {"tfx sdpa fp32": fp32, "tfx sdpa AMP bf16": amp}
    if compile:
        compiled = torch.compile(layer)  # compiles at its first call, the check below

        @torch.inference_mode()
        def comp(t):
            return compiled(t)

        torch.testing.assert_close(comp(x), fp32(x), atol=1e-4, rtol=1e-4)
        fns["tfx sdpa torch.compile"] = comp
    title = f"{device.type} encoder layer, {machine(device)}"
    rows = compared(title, fns, x, repeats=r, device=device)
    return {"machine": machine(device), "reference": "tfx sdpa fp32", "layer": rows}


def host_kind() -> str:
    """A short file-name-safe tag for the kind of machine: cuda-<gpu> or cpu-<n>core."""
    if torch.cuda.is_available():
        return "cuda-" + re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(0).lower()).strip(
            "-"
        )
    return f"cpu-{torch.get_num_threads()}thread"


def to_markdown(results: dict) -> str:
    """The results as tables: one row per implementation, median time and ratio to the reference."""
    lines = [
        f"# Benchmarks ({results['mode']}), {results['date']}",
        "",
        f"Machine: {results['machine']}",
        f"(load average over the minute before the run: {results['load_average_1min']:.2f}; "
        "other work on the machine shows up as noise)",
        "",
    ]

    def table(title, rows):
        lines.extend(
            [
                f"## {title}",
                "",
                "| implementation | median | min | ratio to reference (median) | (min) |",
                "|---|---|---|---|---|",
            ]
        )
        for row in rows:
            ratio, min_ratio = (
                row.get("ratio_to_reference", 1.0),
                row.get("min_ratio_to_reference", 1.0),
            )
            lines.append(
                f"| {row['label']} | {row['median_s'] * 1e3:.3g} ms | {row['min_s'] * 1e3:.3g} ms "
                f"| {ratio:.3g} | {min_ratio:.3g} |"
            )
        lines.append("")

    for entry in results["recurrence"]:
        table(f"recurrence, L = {entry['L']} (reference: {entry['reference']})", entry["results"])
    att = results["attention"]
    table(f"attention block {att['shape']} (reference: {att['reference']})", att["block"])
    table(f"encoder layer {att['shape']} (reference: {att['reference']})", att["layer"])
    if "skipped" in results["gpu"]:
        lines.append(f"GPU suite {results['gpu']['skipped']}.")
    else:
        table(
            f"GPU encoder layer, {results['gpu']['machine']} "
            f"(reference: {results['gpu']['reference']})",
            results["gpu"]["layer"],
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> Path:
    parser = arguments(__doc__.split("\n\n")[0], "--quick", help="tiny sizes, for CI")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's choice); one is steadier on a busy machine",
    )
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    cfg = QUICK if args.quick else FULL
    print(machine())
    results = {
        "mode": "quick" if args.quick else "full",
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "load_average_1min": os.getloadavg()[0],
        "config": cfg,
        "recurrence": bench_recurrence(cfg),
        "attention": bench_attention(cfg),
        "gpu": bench_gpu(cfg),
    }
    tag = "quick" if args.quick else ""
    path = save(results, host_kind(), to_markdown(results), args.out, tag, day=results["date"])
    print(f"wrote {path} and {path.stem}.md")
    return path


if __name__ == "__main__":
    main()
