"""Position encodings past the training length: learned, sinusoidal, RoPE and ALiBi (chapter 07).

  python bench/positions.py            full run (about 10 min on one thread), results in
                                       bench/results/positions-<date>.json and .md
  python bench/positions.py --tiny     a few steps, checks that it runs (writes ...-quick.json)
  python bench/positions.py --out DIR

The task. A masked-LM probe on a synthetic "language" with purely local structure: token x_(i+1)
is f(x_i) with probability p (f a fixed random permutation of V tokens, no fixed point) and a
uniform draw otherwise. 15% of the tokens are replaced by [MASK]; the model predicts them. Why this
task and not Tatoeba:
- Position is necessary: the only evidence about a masked token is its nearest unmasked neighbours,
  and which side each one sits on matters (the left one predicts f(a), the right one f⁻¹(b)). A
  model that ignores position has only the bag of tokens to go on.
- The chain is stationary, so the best possible accuracy is the same at every length (the script
  computes it exactly, by Bayes' rule on the chain, for every evaluation set). Any drop past the
  training length is the position scheme failing, not the task getting harder. On packed real
  sentences the masked character also depends on how many sentences share the row.
- It is small: one model per scheme trains in two to three minutes on one thread, so all four
  schemes, trained at one length and evaluated at 1×, 2×, 4× and 8× of it, fit in about ten minutes.
Every model is the same tfx.model.bert.BertForMaskedLM but for BertConfig.position; max_len is 8×
the training length for all, so a learned table has rows for every evaluated position, of which only
the first training-length rows ever receive a gradient.

Seeded and deterministic on the CPU for a given thread count (the results name it).
"""

import os
import sys
from collections import namedtuple
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing tfx

from bench._common import arguments, save  # noqa: E402
from tfx.inspect.perf import header_md, run_info  # noqa: E402
from tfx.learn.mlm import IGNORE, Masking, mask_tokens, masked_accuracy, mlm_forward  # noqa: E402
from tfx.learn.train import TrainConfig, lr_at  # noqa: E402
from tfx.model.bert import BertConfig, BertForMaskedLM  # noqa: E402
from tfx.model.position import POSITION_TYPES  # noqa: E402

PAD, MASK, FIRST = 0, 1, 2  # ids: [PAD], [MASK], then the V content tokens
MASKING = Masking(select=0.15, mask=1.0, random=0.0)  # every selected token becomes [MASK]


# The probe's settings at full size: the chain (n_tokens content tokens, V; follow, p: the
# probability that x_(i+1) = f(x_i)), the length trained at and its multiples evaluated, the model's
# sizes, the training run, tokens per evaluated length (eval_tokens / L sequences) and the seeds.
PROBE = dict(n_tokens=16, follow=0.75, train_len=32, multiples=[1, 2, 4, 8],
             d_model=64, n_layers=2, n_heads=4, d_ff=256,
             steps=1500, batch_size=64, lr=1e-3, warmup=100,
             eval_tokens=16384, seed=0, data_seed=1234)  # fmt: skip
ProbeConfig = namedtuple("ProbeConfig", PROBE, defaults=PROBE.values())

FULL = ProbeConfig()
TINY = ProbeConfig(train_len=8, multiples=[1, 2], d_model=16, n_layers=1, n_heads=2, d_ff=32,
                   steps=5, warmup=2, eval_tokens=256)  # fmt: skip
# every probe model is this BertConfig but for its sizes and position: no dropout, one segment type
MODEL = dict(type_vocab_size=1, dropout=0.0, attn_dropout=0.0, attn_impl="sdpa", pad_token_id=PAD)


def chain(cfg: ProbeConfig, seed: int):
    """f as a permutation without fixed points, and the (V, V) transition matrix T[a, b] =
    P(x_(i+1) = b | x_i = a) = p·[b = f(a)] + (1 − p)/V."""
    V = cfg.n_tokens
    g = torch.Generator().manual_seed(seed)
    shift = int(torch.randint(1, V, (1,), generator=g))
    order = torch.randperm(V, generator=g)  # f maps order[j] to order[j + shift]: no fixed point
    f = torch.empty(V, dtype=torch.long)
    f[order] = order.roll(-shift)
    T = np.full((V, V), (1 - cfg.follow) / V)
    T[np.arange(V), f.numpy()] += cfg.follow
    return f, T


def sample(cfg: ProbeConfig, f: torch.Tensor, n: int, L: int, g: torch.Generator):
    """(n, L) token ids (content ids start at FIRST) drawn from the chain."""
    V = cfg.n_tokens
    x = torch.empty(n, L, dtype=torch.long)
    x[:, 0] = torch.randint(V, (n,), generator=g)
    follow = torch.rand(n, L, generator=g) < cfg.follow  # (n, L)
    fresh = torch.randint(V, (n, L), generator=g)  # (n, L)
    for i in range(1, L):
        x[:, i] = torch.where(follow[:, i], f[x[:, i - 1]], fresh[:, i])  # (n,)
    return x + FIRST  # (n, L)


def bayes_accuracy(
    T: np.ndarray, ids: torch.Tensor, inputs: torch.Tensor, blind: bool = False
) -> float:
    """Accuracy of the best possible guess: for a masked x_i with nearest visible neighbours a
    (distance dl, to the left) and b (dr, to the right), P(x_i = x) ∝ T^dl[a, x] · T^dr[x, b]
    (the chain is Markov: farther tokens add nothing).

    blind=True: the best guess of an observer who sees the two neighbours and their distances but
    not which side each is on, so it adds the mirrored reading, b at dr on the left and a at dl on
    the right (T is doubly stochastic: every token is equally likely a priori).
    """
    V = T.shape[0]
    powers = [np.eye(V)]

    def power(n):
        while len(powers) <= n:
            powers.append(powers[-1] @ T)
        return powers[n]

    right = total = 0
    for row_ids, row_in in zip(ids.numpy() - FIRST, inputs.numpy()):
        visible = np.flatnonzero(row_in != MASK)
        for i in np.flatnonzero(row_in == MASK):
            k = np.searchsorted(visible, i)
            sides = [(visible[k - 1], "left")] if k > 0 else []
            sides += [(visible[k], "right")] if k < len(visible) else []
            post, mirrored = np.ones(V), np.ones(V)
            for j, side in sides:
                Tn, t = power(abs(i - j)), row_ids[j]
                post = post * (Tn[t] if side == "left" else Tn[:, t])
                mirrored = mirrored * (Tn[:, t] if side == "left" else Tn[t])
            if blind:
                post = post + mirrored
            right += int(post.argmax() == row_ids[i])
            total += 1
    return right / total


def model_config(cfg: ProbeConfig, position: str) -> BertConfig:
    return BertConfig(
        vocab_size=cfg.n_tokens + FIRST,
        **{k: getattr(cfg, k) for k in ("d_model", "n_layers", "n_heads", "d_ff")},
        max_len=cfg.train_len * max(cfg.multiples),  # learned: rows exist, most never trained
        position=position,
        **MODEL,
    )


def train(cfg: ProbeConfig, position: str, f: torch.Tensor) -> tuple:
    """One model trained at cfg.train_len: AdamW, linear warm-up and decay (tfx.learn.train.lr_at),
    weight decay on matrices only, clipping at 1. Returns (model, losses)."""
    torch.manual_seed(cfg.seed)
    model = BertForMaskedLM(model_config(cfg, position))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        foreach=True,
    )
    schedule = TrainConfig(steps=cfg.steps, lr=cfg.lr, warmup=cfg.warmup)
    g = torch.Generator().manual_seed(cfg.seed)  # the same batches for every position type
    special = [PAD, MASK]
    losses = []
    model.train()
    for step in range(1, cfg.steps + 1):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, schedule, cfg.d_model)
        ids = sample(cfg, f, cfg.batch_size, cfg.train_len, g)  # (B, L)
        inputs, labels = mask_tokens(ids, special, MASK, cfg.n_tokens + FIRST, MASKING, g)
        loss, _ = mlm_forward(model, inputs, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        losses.append(loss.item())
    return model.eval(), losses


def eval_sets(cfg: ProbeConfig, f: torch.Tensor, T: np.ndarray) -> dict:
    """{L: (inputs, labels, ideal accuracy)} for L = multiple × train_len, one fixed seed."""
    g = torch.Generator().manual_seed(cfg.data_seed)
    sets = {}
    for m in cfg.multiples:
        L = m * cfg.train_len
        ids = sample(cfg, f, max(cfg.eval_tokens // L, 1), L, g)  # (N, L)
        inputs, labels = mask_tokens(ids, [PAD, MASK], MASK, cfg.n_tokens + FIRST, MASKING, g)
        ideal = (bayes_accuracy(T, ids, inputs), bayes_accuracy(T, ids, inputs, blind=True))
        sets[L] = (inputs, labels, ideal)
    return sets


def beyond(labels: torch.Tensor, start: int) -> torch.Tensor:
    """The labels with every position before `start` unscored: accuracy past the training
    length only."""
    out = labels.clone()
    out[:, :start] = IGNORE
    return out


def run(cfg: ProbeConfig, positions=POSITION_TYPES) -> dict:
    f, T = chain(cfg, cfg.data_seed)
    sets = eval_sets(cfg, f, T)
    chance = 1 / cfg.n_tokens
    rows = []
    for position in positions:
        model, losses = train(cfg, position, f)
        exclude = [PAD, MASK]
        for L, (inputs, labels, (ideal, ideal_blind)) in sets.items():
            batches = list(zip(inputs.split(64), labels.split(64)))
            acc = masked_accuracy(model, batches, exclude=exclude)
            acc_beyond = None
            if L > cfg.train_len:
                far = list(zip(inputs.split(64), beyond(labels, cfg.train_len).split(64)))
                acc_beyond = masked_accuracy(model, far, exclude=exclude)
            rows.append(
                dict(
                    position=position,
                    L=L,
                    multiple=L // cfg.train_len,
                    accuracy=acc,
                    accuracy_past_train_len=acc_beyond,
                    ideal=ideal,
                    ideal_direction_blind=ideal_blind,
                    n_scored=int((labels != IGNORE).sum()),
                )
            )
            print(rows[-1], flush=True)
        rows[-1]["final_train_loss"] = sum(losses[-50:]) / len(losses[-50:])
        for r in rows[-len(sets) :]:
            r["final_train_loss"] = rows[-1]["final_train_loss"]
    return dict(chance=chance, rows=rows)


def markdown(results: dict) -> str:
    cfg = results["config"]
    lines = [
        header_md("Position encodings past the training length", results["info"]).rstrip("\n"),
        "",
        f"Command: `{results['command']}`  ",
        f"Task: masked-LM probe on a Markov chain over {cfg['n_tokens']} tokens "
        f"(p = {cfg['follow']}), trained at L = {cfg['train_len']} for {cfg['steps']} steps; "
        f"d_model {cfg['d_model']}, {cfg['n_layers']} layers, {cfg['n_heads']} heads. "
        f"Chance {results['chance']:.3f}.",
        "",
        "Held-out masked-token accuracy (in brackets: positions past the training length only):",
        "",
    ]
    Ls = sorted({r["L"] for r in results["rows"]})
    lines.append("| position | " + " | ".join(f"L = {L}" for L in Ls) + " |")
    lines.append("|---|" + "---|" * len(Ls))
    by = {(r["position"], r["L"]): r for r in results["rows"]}
    for position in dict.fromkeys(r["position"] for r in results["rows"]):
        cells = []
        for L in Ls:
            r = by[(position, L)]
            far = r["accuracy_past_train_len"]
            cells.append(f"{r['accuracy']:.3f}" + ("" if far is None else f" ({far:.3f})"))
        lines.append(f"| {position} | " + " | ".join(cells) + " |")
    ideal = [f"{by[(results['rows'][0]['position'], L)]['ideal']:.3f}" for L in Ls]
    lines.append("| best possible (Bayes) | " + " | ".join(ideal) + " |")
    blind = [f"{by[(results['rows'][0]['position'], L)]['ideal_direction_blind']:.3f}" for L in Ls]
    lines.append("| best possible without left/right | " + " | ".join(blind) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = arguments(__doc__.splitlines()[0], "--tiny", "--quick", help="a few steps, for CI")
    # one thread: on a 2-core machine shared with other jobs, two threads made each step of this
    # small model several times slower (contention), and the result depends on the thread count
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = TINY if args.tiny else FULL
    command = "python bench/positions.py" + (" --tiny" if args.tiny else "")
    if args.threads != 1:
        command += f" --threads {args.threads}"
    info = run_info()
    results = dict(info=info, command=command, config=cfg._asdict(), **run(cfg))
    info_end = [round(x, 2) for x in os.getloadavg()]
    results["load_average_at_end"] = info_end
    tag = "quick" if args.tiny else ""
    path = save(results, "positions", markdown(results), args.out, tag, day=info["date"][:10])
    print(markdown(results))
    print(f"wrote {path} and .md")
    return results


if __name__ == "__main__":
    main()
