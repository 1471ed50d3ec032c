"""Data-parallel training on the CPU: DDP with the gloo backend, two processes, one batch split.

  torchrun --standalone --nproc_per_node=2 bench/ddp.py           chapter 07's model shape
  torchrun --standalone --nproc_per_node=2 bench/ddp.py --quick   tiny, for CI (no results file)

Each rank takes half of one global batch of masked-LM examples whose halves hold different numbers
of masked tokens. DDP averages the ranks' gradients, so the loss each rank must backpropagate is
its masked tokens' summed cross-entropy divided by the GLOBAL count, times the world size: then the
average is exactly the full batch's mean-loss gradient. The per-rank mean (each rank divides by its
own count) weights the tokens of the rank with fewer of them more, and its gradient differs. Rank 0
computes the single-process full-batch gradient, compares, times the steps and prints everything,
so the output comes in one piece and in order. Dropout is 0: the check needs equal forward passes.
"""

import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing tfx

import tfx  # noqa: E402
from bench._common import arguments, save  # noqa: E402
from tfx.inspect.perf import header_md, run_info  # noqa: E402
from tfx.model.bert import BertConfig, BertForMaskedLM  # noqa: E402

FULL = dict(vocab=4000, d_model=128, n_layers=4, n_heads=4, d_ff=512, batch=16, L=64, steps=10)
QUICK = dict(vocab=50, d_model=16, n_layers=1, n_heads=2, d_ff=32, batch=4, L=8, steps=2)


def model_for(cfg: dict) -> BertForMaskedLM:
    """Chapter 07's architecture (tfx.learn.train.default_configs) at cfg's sizes, seeded, dropout
    0."""
    tfx.set_seed(0)
    bert_cfg = BertConfig(
        vocab_size=cfg["vocab"],
        d_model=cfg["d_model"],
        n_layers=cfg["n_layers"],
        n_heads=cfg["n_heads"],
        d_ff=cfg["d_ff"],
        max_len=cfg["L"],
        dropout=0.0,
        attn_dropout=0.0,
        attn_impl="sdpa",
    )
    return BertForMaskedLM(bert_cfg)


def global_batch(cfg: dict) -> tuple:
    """(ids, positions): random ids and a masked-position pattern whose two halves hold very
    different numbers of masked tokens (15% of the first half's positions, 40% of the second's)."""
    g = torch.Generator().manual_seed(1)
    B, L = cfg["batch"], cfg["L"]
    ids = torch.randint(5, cfg["vocab"], (B, L), generator=g)  # (B, L)
    rate = torch.tensor([0.15] * (B // 2) + [0.4] * (B - B // 2))[:, None]  # (B, 1)
    positions = torch.rand(B, L, generator=g) < rate  # (B, L)
    positions[:, 0] = True  # at least one masked token per row
    return ids, positions


def summed_ce(model, ids, positions, labels) -> torch.Tensor:
    """Cross-entropy summed (not averaged) over the masked tokens of this batch."""
    logits = model(ids, positions=positions)  # (N, V)
    return F.cross_entropy(logits, labels[positions], reduction="sum")


def grads_of(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def main(argv=None) -> None:
    parser = arguments(
        __doc__.split("\n\n")[0], "--quick", help="tiny sizes, for CI; no results file"
    )
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ids, positions = global_batch(cfg)
    labels = ids.clone()  # the inputs stand in for the masked tokens' originals
    inputs = ids.masked_fill(positions, 4)  # (B, L): 4 plays [MASK]
    shard = slice(rank * cfg["batch"] // world, (rank + 1) * cfg["batch"] // world)
    n_global = int(positions.sum())
    n_local = int(positions[shard].sum())

    results = {}
    for norm in ("global count", "per-rank mean"):
        model = DDP(model_for(cfg))
        ce = summed_ce(model, inputs[shard], positions[shard], labels[shard])
        # DDP averages over ranks: × world undoes that average for the global-count loss
        loss = ce * world / n_global if norm == "global count" else ce / n_local
        loss.backward()
        results[norm] = grads_of(model.module)

    # one timed run of DDP steps (forward, backward with all-reduce, SGD update)
    model = DDP(model_for(cfg))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(cfg["steps"]):
        opt.zero_grad()
        (
            summed_ce(model, inputs[shard], positions[shard], labels[shard]) * world / n_global
        ).backward()
        opt.step()
    ddp_step = (time.perf_counter() - t0) / cfg["steps"]
    counts = [None] * world
    dist.all_gather_object(counts, n_local)

    if rank == 0:
        single = model_for(cfg)
        (summed_ce(single, inputs, positions, labels) / n_global).backward()  # full batch
        ref = grads_of(single)
        gaps = {norm: (g - ref).abs().max().item() for norm, g in results.items()}
        opt = torch.optim.SGD(single.parameters(), lr=1e-3)
        t0 = time.perf_counter()
        for _ in range(cfg["steps"]):
            opt.zero_grad()
            (summed_ce(single, inputs, positions, labels) / n_global).backward()
            opt.step()
        single_step = (time.perf_counter() - t0) / cfg["steps"]
        scale = ref.abs().max().item()
        print(f"world size {world}, masked tokens per rank {counts} (global {n_global})")
        print(f"largest |gradient| of the full batch: {scale:.3e}")
        for norm, gap in gaps.items():
            print(f"loss normalised by the {norm}: max |DDP grad - full-batch grad| = {gap:.3e}")
        print(
            f"step time: DDP {world} processes {ddp_step * 1e3:.1f} ms, "
            f"one process on the full batch {single_step * 1e3:.1f} ms"
        )
        assert gaps["global count"] <= 1e-5 * scale, gaps
        assert gaps["per-rank mean"] >= 1e-3 * scale, gaps
        if not args.quick:
            info = run_info()
            info["threads_per_process"] = torch.get_num_threads()
            out = {
                "info": info,
                "config": cfg,
                "world_size": world,
                "masked_per_rank": counts,
                "max_grad": scale,
                "max_gap": gaps,
                "ddp_step_s": ddp_step,
                "single_process_step_s": single_step,
            }
            md = header_md("DDP (gloo) on the CPU", info) + (
                f"Config: {cfg}\n\nMasked tokens per rank: {counts}\n\n"
                "| loss normalisation | max abs gap to the full-batch gradient |\n|---|---|\n"
                + "".join(f"| {k} | {v:.3e} |\n" for k, v in gaps.items())
                + f"\nStep: DDP {ddp_step * 1e3:.1f} ms, "
                f"single process {single_step * 1e3:.1f} ms\n"
            )
            print(f"wrote {save(out, 'ddp', md, args.out)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
