"""One masked-LM training step, tfx against Hugging Face's BertForMaskedLM with labels, at a
bert-base-chinese-sized vocabulary (21,128 rows, d 256, 4 layers, batch 32 × 64): fp32 and bf16
autocast, as ratios measured in alternation in one run (tfx.train.step_time_ratios). Optionally a
torch.profiler table of the tfx fp32 step. Writes bench/results/mlm-step-<date>.json and .md with
the machine named.

  python bench/mlm_step.py                 7 repeats
  python bench/mlm_step.py --repeats 3     quicker
  python bench/mlm_step.py --profile       also profile one tfx step (the top operators)
"""

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing tfx

from tfx.train import step_time_ratios  # noqa: E402


def profile_tfx_step(vocab_size=21128, d_model=256, n_layers=4, batch=32, length=64) -> str:
    """The top CPU operators of a few tfx fp32 training steps, by self time."""
    from torch.profiler import ProfilerActivity, profile

    from tfx.bert import BertConfig, BertForMaskedLM
    from tfx.mlm import mask_tokens, mlm_forward

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=d_model // 64,
        d_ff=4 * d_model,
        max_len=512,
        attn_impl="sdpa",
    )
    model = BertForMaskedLM(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(5, vocab_size, (batch, length))  # (B, L)
    inputs, labels = mask_tokens(ids, range(5), 4, vocab_size)

    def step():
        opt.zero_grad(set_to_none=True)
        loss, _ = mlm_forward(model, inputs, labels)
        loss.backward()
        opt.step()

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            step()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    result = step_time_ratios(repeats=args.repeats)
    print(result)
    day = datetime.date.today().isoformat()
    record = {
        "date": day,
        "machine": result.machine,
        "load_average": os.getloadavg(),
        "shape": result.shape,
        "seconds": {
            "hf_fp32": result.hf_fp32,
            "tfx_fp32": result.tfx_fp32,
            "tfx_bf16": result.tfx_bf16,
        },
        "ratio_fp32": result.ratio_fp32,
        "ratio_bf16_vs_hf_fp32": result.ratio_bf16,
    }
    text = [f"# masked-LM training step, {day}", "", f"machine: {result.machine}", ""]
    text += [f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}", ""]
    text += ["```", str(result), "```"]
    if args.profile:
        table = profile_tfx_step()
        print(table)
        text += ["", "tfx fp32 step, torch.profiler, top operators by self CPU time:", "", "```"]
        text += [table, "```"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"mlm-step-{day}.json").write_text(json.dumps(record, indent=1) + "\n")
    (args.out / f"mlm-step-{day}.md").write_text("\n".join(text) + "\n")


if __name__ == "__main__":
    main()
