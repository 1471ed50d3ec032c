"""How chapter 07's training configuration was chosen: variants of the small BERT and of its run,
each trained on Tatoeba's Chinese sentences and scored by held-out masked-token accuracy.

The budget is time, not steps: a variant whose step is faster gets more steps. Each variant's step
time is measured as a ratio to the reference's (the configuration the chapter used first: d 128,
4 layers, fp32, lr 1e-3, 800 steps), in alternation in one process, and the variant then trains for
reference steps / ratio steps (rounded to 10), the same wall-clock time on the same machine. A
variant marked "same steps" keeps its step count instead (fp32 against bf16 at equal steps).
Training runs under tfx.learn.train.TRAIN_THREADS threads, as in the chapter, unless --threads says
otherwise.

  python bench/mlm_config.py                 every variant (long: minutes per variant)
  python bench/mlm_config.py --only 1,3      some variants, merged into the day's results file
  python bench/mlm_config.py --tiny          a tiny model, a few steps: seconds (what tests run)

Writes bench/results/mlm-config-<date>.json and .md (-tiny for --tiny), machine and load named.
"""

import argparse
import dataclasses
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing tfx

import torch  # noqa: E402

from tfx.inspect.timing import machine, threads  # noqa: E402
from tfx.learn.corpus import load_mlm_data  # noqa: E402
from tfx.learn.mlm import top_k  # noqa: E402
from tfx.learn.train import TRAIN_THREADS, MLMTrainer, default_configs  # noqa: E402

# name → (model overrides, training overrides, budget). The reference is the first. budget:
# "steps" keeps the configured steps, "time" gives the reference's wall-clock time, and the name of
# another variant takes that variant's steps and warm-up (it must have run first).
VARIANTS = {
    "reference: d 128, 4 layers, fp32, lr 1e-3": ({}, {}, "steps"),
    "bf16 autocast, same steps": ({}, {"bf16": True}, "steps"),
    "lr 2e-3": ({}, {"lr": 2e-3}, "steps"),
    "bf16 autocast": ({}, {"bf16": True}, "time"),
    "bf16, lr 2e-3": ({}, {"bf16": True, "lr": 2e-3}, "time"),
    "fp32, lr 2e-3, steps of bf16, lr 2e-3": ({}, {"lr": 2e-3}, "bf16, lr 2e-3"),
    "2 layers, bf16, lr 2e-3": ({"n_layers": 2}, {"bf16": True, "lr": 2e-3}, "time"),
    "batch 64, bf16, lr 2e-3": ({}, {"bf16": True, "lr": 2e-3, "batch_size": 64}, "time"),
    "2 layers, fp32, lr 2e-3, steps of 2 layers, bf16": (
        {"n_layers": 2},
        {"lr": 2e-3},
        "2 layers, bf16, lr 2e-3",
    ),
}
PROBE = ("我喜欢吃[MASK]果", "苹")


def configs(name: str, data, tiny: bool) -> tuple:
    model_over, train_over, _ = VARIANTS[name]
    model_cfg, train_cfg = default_configs(len(data.vocab), data.train.size(1))
    model_cfg = dataclasses.replace(model_cfg, **model_over)
    train_cfg = dataclasses.replace(train_cfg, **train_over)
    if tiny:  # the same variants at a size that trains in a second: half the layers, d 32
        model_cfg = dataclasses.replace(
            model_cfg, d_model=32, n_heads=2, d_ff=64, n_layers=max(1, model_cfg.n_layers // 2)
        )
        train_cfg = dataclasses.replace(train_cfg, steps=20, warmup=4, eval_every=10)
    return model_cfg, train_cfg


def step_ratio(ref: MLMTrainer, var: MLMTrainer, rounds: int, k: int, n_threads: int) -> tuple:
    """Median over rounds of (time of k variant steps) / (time of k reference steps), alternating,
    after one untimed round; also the two median step times in seconds."""
    t_ref, t_var = [], []
    with threads(n_threads), torch.random.fork_rng(devices=[]):
        for r in range(rounds + 1):
            for trainer, out in ((ref, t_ref), (var, t_var)):
                t0 = time.perf_counter()
                for _ in range(k):
                    trainer.train_step()
                if r:
                    out.append((time.perf_counter() - t0) / k)
    ratios = [v / r for v, r in zip(t_var, t_ref)]
    return statistics.median(ratios), statistics.median(t_ref), statistics.median(t_var)


def run_variant(
    name: str, data, tiny: bool, rounds: int, k: int, done: dict, n_threads: int
) -> dict:
    model_cfg, train_cfg = configs(name, data, tiny)
    ref_model, ref_train = configs(next(iter(VARIANTS)), data, tiny)
    budget = VARIANTS[name][2]
    if name == next(iter(VARIANTS)):
        ratio, t_ref, t_var = 1.0, None, None
    else:  # fresh trainers, only for timing (nothing is cached)
        ratio, t_ref, t_var = step_ratio(
            MLMTrainer(ref_model, ref_train, data, cache=False),
            MLMTrainer(model_cfg, train_cfg, data, cache=False),
            rounds,
            k,
            n_threads,
        )
    if budget == "time":
        steps = max(10, int(round(ref_train.steps / ratio / 10)) * 10)
        scale = steps / train_cfg.steps
        train_cfg = dataclasses.replace(
            train_cfg, steps=steps, warmup=max(1, round(train_cfg.warmup * scale))
        )
    elif budget != "steps":
        if budget not in done:
            raise ValueError(f"variant {name!r} needs {budget!r} to have run first")
        twin = done[budget]["train"]
        train_cfg = dataclasses.replace(train_cfg, steps=twin["steps"], warmup=twin["warmup"])
    trainer = MLMTrainer(model_cfg, train_cfg, data, cache=not tiny, n_threads=n_threads)
    t0 = time.perf_counter()
    trainer.run(train_cfg.steps, progress=False)
    wall = time.perf_counter() - t0
    text, answer = PROBE
    vocab = data.vocab
    seq = torch.tensor([[vocab["[CLS]"], *vocab.encode(text), vocab["[SEP]"]]])  # (1, L)
    top = top_k(trainer.model, seq, seq[0].tolist().index(vocab["[MASK]"]), 3, vocab.special_ids)
    return {
        "name": name,
        "model": {k: getattr(model_cfg, k) for k in ("d_model", "n_layers", "n_heads", "d_ff")},
        "train": {k: getattr(train_cfg, k) for k in ("steps", "warmup", "lr", "batch_size")}
        | {"bf16": train_cfg.bf16},
        "budget": {"steps": "same steps", "time": "same time"}.get(budget, f"steps of {budget}"),
        "threads": n_threads,
        "step_time_ratio": ratio,
        "ref_step_s": t_ref,
        "variant_step_s": t_var,
        "held_out_accuracy": trainer.log["accuracy"][-1],
        "accuracy_log": list(zip(trainer.log["eval_step"], trainer.log["accuracy"])),
        "final_loss_mean_50": statistics.mean(trainer.log["loss"][-50:]),
        "train_wall_s": wall,
        "probe": text,
        "probe_top3": [vocab.itos[i] for i, _ in top],
        "run_key": trainer.key,
    }


def markdown(record: dict) -> str:
    lines = [f"# masked-LM configurations, {record['date']}", ""]
    lines += [f"machine: {record['machine']}", ""]
    lines += [f"load average at the end: {record['load_average']}", ""]
    lines += ["commands: " + "; ".join(f"`{c}`" for c in record["commands"]), ""]
    lines += [
        "| variant | layers | d | batch | lr | bf16 | budget | threads | step time ratio | steps "
        "| held-out accuracy | training wall time | top 3 for 我喜欢吃[MASK]果 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in record["variants"].values():
        m, t = r["model"], r["train"]
        lines.append(
            f"| {r['name']} | {m['n_layers']} | {m['d_model']} | {t['batch_size']} | {t['lr']:g} "
            f"| {t['bf16']} | {r['budget']} | {r['threads']} | {r['step_time_ratio']:.2f} "
            f"| {t['steps']} "
            f"| {r['held_out_accuracy']:.4f} | {r['train_wall_s']:.0f} s "
            f"| {' '.join(r['probe_top3'])} |"
        )
    lines += [
        "",
        "Step time ratio: median over rounds of a variant's step time over the reference's, "
        "measured in alternation. A wall time near 0 s means the run was read from the cache of "
        "trained weights (the same run, computed earlier).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="variant numbers, 1-based, comma-separated (default: all)")
    parser.add_argument("--tiny", action="store_true", help="tiny model, 20 steps")
    parser.add_argument("--rounds", type=int, default=6, help="timing rounds per variant")
    parser.add_argument(
        "--threads",
        type=int,
        default=TRAIN_THREADS,
        help=f"threads for timing and training (default {TRAIN_THREADS}, the chapter's; 1 is "
        "steadier and faster on a machine that other jobs share; another count than the "
        "chapter's leaves no cache the chapter can read)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    listed = list(VARIANTS)
    picks = [int(i) for i in args.only.split(",")] if args.only else range(1, len(listed) + 1)
    if any(not 1 <= i <= len(listed) for i in picks):
        parser.error(
            f"--only takes numbers from 1 to {len(listed)}: "
            + "; ".join(f"{i} = {n}" for i, n in enumerate(listed, 1))
        )
    names = [listed[i - 1] for i in picks]
    data = load_mlm_data()
    day = datetime.date.today().isoformat()
    stem = f"mlm-config-{day}" + ("-tiny" if args.tiny else "")
    path = args.out / f"{stem}.json"
    old = json.loads(path.read_text()) if path.exists() and args.only else {"variants": {}}
    variants = old["variants"]
    command = "python bench/mlm_config.py " + " ".join(sys.argv[1:])
    for name in names:
        rounds, k = (2, 1) if args.tiny else (args.rounds, 3)
        variants[name] = run_variant(name, data, args.tiny, rounds, k, variants, args.threads)
        r = variants[name]
        print(
            f"{name}: ratio {r['step_time_ratio']:.2f}, {r['train']['steps']} steps, "
            f"accuracy {r['held_out_accuracy']:.4f}, {r['train_wall_s']:.0f} s, "
            f"top 3 {' '.join(r['probe_top3'])}",
            flush=True,
        )
        if path.exists() and args.only:  # another run may have written meanwhile: keep its
            variants = {**json.loads(path.read_text())["variants"], **variants}
        record = {
            "date": day,
            "machine": machine(),
            "commands": old.get("commands", []) + [command],
            "train_threads": args.threads,
            "load_average": ", ".join(f"{x:.1f}" for x in os.getloadavg()),
            "data_checksum": data.checksum,
            # in VARIANTS order, whatever order they were run in
            "variants": {n: variants[n] for n in VARIANTS if n in variants},
        }
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        (args.out / f"{stem}.md").write_text(markdown(record))


if __name__ == "__main__":
    main()
