"""The warm-up race of chapter 06 over seeds, depths, learning rates and inits
(tfx.learn.warmup.race).

  python bench/warmup.py           full grid, results in bench/results/warmup-<date>.json and .md
  python bench/warmup.py --quick   one seed, one depth, one rate, both inits: checks that it runs
  python bench/warmup.py --out DIR

Counts optimiser steps, not seconds, so the results do not depend on the speed of the machine;
the machine is named in the results all the same. Chapter 06 reads the committed results file.
The init axis: "default" is PyTorch's initialisation (the chapter's live race), "bert" is BERT's
N(0, 0.02²) weights and embeddings with zero biases (tfx.learn.warmup.RaceConfig.init).
"""

import datetime
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing tfx

from bench._common import arguments  # noqa: E402
from tfx.inspect.timing import machine  # noqa: E402
from tfx.learn.warmup import RaceConfig, race  # noqa: E402

FULL = dict(
    seeds=[0, 1, 2, 3, 4],
    depths=[6, 12],
    lrs=[3e-3, 1e-2],
    inits=["default", "bert"],
    warmup=50,
    max_steps=300,
)
QUICK = dict(seeds=[0], depths=[2], lrs=[1e-2], inits=["default", "bert"], warmup=5, max_steps=10)
VARIANTS = [("post", False), ("post", True), ("pre", False), ("pre", True)]


def run(grid: dict) -> list:
    rows = []
    for init in grid["inits"]:
        for depth in grid["depths"]:
            for lr in grid["lrs"]:
                for seed in grid["seeds"]:
                    for norm, warm in VARIANTS:
                        cfg = RaceConfig(
                            norm=norm,
                            warmup=grid["warmup"] if warm else 0,
                            lr=lr,
                            depth=depth,
                            max_steps=grid["max_steps"],
                            seed=seed,
                            init=init,
                        )
                        r = race(cfg)
                        rows.append(
                            dict(
                                init=init,
                                norm=norm,
                                warmup=cfg.warmup,
                                lr=lr,
                                depth=depth,
                                seed=seed,
                                steps=r.steps,
                                final_loss=r.losses[-1],
                                max_grad_norm=max(r.grad_norms),
                            )
                        )
                        print(rows[-1], flush=True)
    return rows


def markdown(results: dict) -> str:
    lines = [
        f"# Warm-up race, {results['date']}",
        "",
        f"Machine: {results['machine']}",
        "",
        f"Command: `{results['command']}`. Steps to cross-entropy < {results['threshold']} "
        f"(max {results['grid']['max_steps']}; '-' = never).",
        "",
        "| init | depth | lr | norm | warm-up | steps per seed |",
        "|---|---|---|---|---|---|",
    ]

    def key(r):  # results written before the init axis existed hold the default init only
        return (r.get("init", "default"), r["depth"], r["lr"], r["norm"], r["warmup"])

    for init, depth, lr, norm, warm in sorted({key(r) for r in results["rows"]}):
        steps = [
            "-" if r["steps"] is None else str(r["steps"])
            for r in results["rows"]
            if key(r) == (init, depth, lr, norm, warm)
        ]
        lines.append(f"| {init} | {depth} | {lr:g} | {norm} | {warm} | {' '.join(steps)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    args = arguments(__doc__.splitlines()[0], "--quick").parse_args(argv)
    torch.set_num_threads(1)  # a small model: one thread is steadier on a shared machine
    grid = QUICK if args.quick else FULL
    results = dict(
        date=datetime.date.today().isoformat(),
        machine=machine(),
        command="python bench/warmup.py" + (" --quick" if args.quick else ""),
        threshold=RaceConfig().threshold,
        grid=grid,
        rows=run(grid),
    )
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    stem = f"warmup-{results['date']}" + ("-quick" if args.quick else "")
    (out / f"{stem}.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / f"{stem}.md").write_text(markdown(results))
    print(f"wrote {out / stem}.json and .md")
    return results


if __name__ == "__main__":
    main()
