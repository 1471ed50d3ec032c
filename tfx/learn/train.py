"""The masked-LM training loop: AdamW, warm-up then decay, clipping, a held-out score, gradient
norms per layer, and a deterministic cache of the trained weights.

Why a cache, and why it cannot change a chapter's output: training on the CPU is seeded and
deterministic, so the weights after n steps are a function of (model config, training config, data
checksum, seed, n). The cache file's name is a hash of exactly those, and it holds the optimizer
state, the random-number state and the log as well as the weights. A chapter that trains in several
cells, and chapters 08 and 10 that only want the trained model, get the same tensors and the same
log whether each segment is computed or read; a checkpoint of any other run has another name.

Progress: in a notebook the bar is drawn in one display slot that the end of the run overwrites with
a fixed summary line, so a stored notebook holds no rate or duration (and holds the same line when
the segment came from the cache). Outside a notebook a tqdm bar goes to stderr, only on a terminal.

Built in chapter 07.
"""

import hashlib
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from tfx.core.checks import check_int, check_positive_float, check_probability
from tfx.inspect.grads import layer_grad_norms
from tfx.inspect.timing import threads
from tfx.learn.mlm import Masking, mask_tokens, masked_accuracy, mlm_forward
from tfx.model.bert import BertConfig, BertForMaskedLM
from tfx.numpy.optim_np import noam_lr


@dataclass
class TrainConfig:
    steps: int = 800
    batch_size: int = 32
    lr: float = 1e-3  # peak learning rate
    warmup: int = 80
    schedule: str = "linear"  # "linear" (BERT: linear warm-up, linear decay to 0) or "noam"
    weight_decay: float = 0.01
    clip: float = 1.0  # max global gradient norm; 0 turns clipping off
    label_smoothing: float = 0.0
    # bf16 autocast for the matmuls (weights and optimizer stay float32). Off by default: at
    # chapter 07's small sizes (d 128, batch 32 × 64) the matrices are too small for AMX to pay, so
    # a step is barely faster; bench/mlm_config.py measures the step time and held-out accuracy
    # against float32 (bench/results/mlm-config-*.md)
    bf16: bool = False
    eval_every: int = 100
    grad_every: int = 40
    seed: int = 0
    masking: Masking = field(default_factory=Masking)

    def __post_init__(self):
        for name in ("steps", "batch_size", "eval_every", "grad_every"):
            check_int(getattr(self, name), name)
        check_int(self.warmup, "warmup", minimum=0)
        check_int(self.seed, "seed", minimum=0)
        check_positive_float(self.lr, "lr")
        check_probability(self.label_smoothing, "label_smoothing")
        if self.weight_decay < 0 or self.clip < 0:
            raise ValueError(
                f"weight_decay and clip must be >= 0, got {self.weight_decay} and {self.clip}"
            )
        if self.schedule not in ("linear", "noam"):
            raise ValueError(f"schedule must be 'linear' or 'noam', got {self.schedule!r}")
        if isinstance(self.masking, dict):
            self.masking = Masking(**self.masking)

    def evaluates_at(self, step: int) -> bool:
        """Whether step `step` is followed by the held-out score: every eval_every steps, and at
        the last step, so that every run ends with one."""
        return step % self.eval_every == 0 or step == self.steps

    def records_grads_at(self, step: int) -> bool:
        """Whether step `step` logs each layer's gradient norm: every grad_every steps, and at
        step 1, where the untrained model's gradients show how the layers start."""
        return step % self.grad_every == 0 or step == 1


def lr_at(step: int, cfg: TrainConfig, d_model: int) -> float:
    """Learning rate for optimizer step `step` (counted from 1).

    linear: rise to cfg.lr over warm-up, then fall linearly to 0 at cfg.steps (BERT's schedule).
    noam: chapter 09's tfx.numpy.optim_np.noam_lr, rescaled so its peak (at the end of warm-up) is
    cfg.lr.
    """
    check_int(step, "step")
    w = max(cfg.warmup, 1)
    if cfg.schedule == "noam":
        return cfg.lr * float(noam_lr(step, d_model, w) / noam_lr(w, d_model, w))
    if step <= w:
        return cfg.lr * step / w
    return cfg.lr * max(0.0, (cfg.steps - step) / max(cfg.steps - w, 1))


def cache_dir() -> Path:
    return Path(__file__).resolve().parents[2] / ".cache" / "tfx-models"


# Training always runs with this many torch (and BLAS) threads, whatever the caller uses: a float
# sum split over another number of threads may round differently, so the weights would depend on
# the caller. Two is the CI machine's core count; on one core it is only slower, not different.
TRAIN_THREADS = 2


# The modules whose code decides a run's weights: the model, the masking, this loop.
_WEIGHT_MODULES = (
    "model/attention",
    "model/bert",
    "model/layers",
    "model/position",
    "learn/mlm",
    "learn/train",
)


def code_digest(modules: tuple = _WEIGHT_MODULES) -> str:
    """A hash of the source files of tfx's `modules`, paths below tfx/ without .py (any edit,
    even a comment, trains anew)."""
    here = Path(__file__).resolve().parent.parent  # tfx/
    h = hashlib.sha256()
    for name in modules:
        h.update((here / f"{name}.py").read_bytes())
    return h.hexdigest()[:16]


def run_key(
    model_cfg: BertConfig, train_cfg: TrainConfig, data_checksum: str, n_threads: int = None
) -> str:
    """A name for one training run: a hash of everything that decides its weights (the torch
    version, the training thread count and the CPU's instruction set included, since each may
    change the last bits of a sum: a cache copied to another kind of CPU trains anew). The
    caller's own thread count is not in it: training runs under n_threads, by default
    TRAIN_THREADS. The source of the modules the run executes is in it too: a change to how a
    LayerNorm or the optimizer computes changes the weights, so it must not reuse an old file."""
    blob = json.dumps(
        {
            "model": model_cfg.to_dict(),
            "train": asdict(train_cfg),
            "data": data_checksum,
            "torch": torch.__version__.split("+")[0],
            "threads": n_threads or TRAIN_THREADS,
            "cpu": torch.backends.cpu.get_cpu_capability(),
            "code": code_digest(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


class _Progress:
    """A tqdm bar without rates: live in a notebook display slot or on a terminal, then replaced
    by a summary line that does not depend on timing or on whether the cache was used."""

    def __init__(self, start: int, total: int, enabled: bool):
        from tqdm.std import tqdm

        self.fmt = "{l_bar}{bar}| {n_fmt}/{total_fmt}"
        self.start, self.total, self.n = start, total, start
        self.handle, self.bar, self.tqdm = None, None, tqdm
        if enabled and _in_notebook():
            from IPython.display import Pretty, display

            self.handle = display(Pretty(self._text()), display_id=True)
        elif enabled and sys.stderr.isatty():
            self.bar = tqdm(
                total=total, initial=start, bar_format=self.fmt, leave=False, desc="train"
            )

    def _text(self) -> str:
        return self.tqdm.format_meter(
            self.n, self.total, 0, ncols=70, prefix="train", bar_format=self.fmt
        )

    def update(self, n: int) -> None:
        self.n = n
        if self.handle is not None and (n % 10 == 0 or n == self.total):
            self.handle.update(self._pretty(self._text()))
        if self.bar is not None:
            self.bar.update(1)

    @staticmethod
    def _pretty(text: str):
        from IPython.display import Pretty

        return Pretty(text)  # text/plain without the quotes a str's repr would add

    def close(self, summary: str) -> None:
        """Replace the bar by the summary line (the same output whether trained or cached)."""
        if self.bar is not None:
            self.bar.close()
        if self.handle is not None:
            self.handle.update(self._pretty(summary))
        elif _in_notebook():
            from IPython.display import display

            display(self._pretty(summary))
        else:
            print(summary)


def _check_run(model_cfg: BertConfig, train_cfg: TrainConfig, data) -> None:
    """Refuse, before any weights are built, a run that could not train: configs of the wrong
    type, a vocabulary the model's embedding does not match, rows longer than its positions."""
    if not isinstance(model_cfg, BertConfig):
        raise TypeError(f"model_cfg must be a tfx.model.bert.BertConfig, got {type(model_cfg)}")
    if not isinstance(train_cfg, TrainConfig):
        raise TypeError(f"train_cfg must be a tfx.learn.train.TrainConfig, got {type(train_cfg)}")
    if model_cfg.vocab_size != len(data.vocab):
        raise ValueError(
            f"model_cfg.vocab_size ({model_cfg.vocab_size}) must equal the data's vocabulary "
            f"size ({len(data.vocab)})"
        )
    if data.train.size(1) > model_cfg.max_len:
        raise ValueError(
            f"sequences of length {data.train.size(1)} exceed model_cfg.max_len "
            f"({model_cfg.max_len})"
        )


# ---- one step -------------------------------------------------------------------------------
def optimizer_step(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    cfg: TrainConfig,
    lr: float,
    grad_norms: bool = False,
) -> tuple:
    """One AdamW step on one masked batch: (training loss, per-layer gradient norms or None).

    The forward runs in train mode (dropout on) and, with cfg.bf16, under bf16 autocast. The
    gradient norms (grad_norms=True) are taken before clipping: they show what the loss gave each
    layer, not what the clip let through. Clipping the global norm to cfg.clip keeps one bad batch
    from throwing the weights far while the learning rate is high. The order of these operations
    decides the weights' last bits, so a cached run depends on it (see run_key).
    """
    for group in opt.param_groups:
        group["lr"] = lr
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
        loss, _ = mlm_forward(model, inputs, labels, None, cfg.label_smoothing)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    norms = None
    if grad_norms:
        by_layer = layer_grad_norms(model, r"bert\.layers\.(\d+)\.")
        norms = [by_layer[i] for i in sorted(by_layer)]
    if cfg.clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip, foreach=True)
    opt.step()
    return loss.item(), norms


# ---- the evaluation -------------------------------------------------------------------------
HELD_OUT_SEED = 12345


def mask_held_out(data, masking: Masking, rows: int = 64) -> list:
    """data.held_out masked once, with a seed of its own: [(inputs, labels)] batches of `rows`.

    One masking for the whole run, so that every evaluation scores the same positions and the
    accuracies in the log differ only by the weights; its own seed, so that the positions are the
    same for every training seed and configuration (tfx.learn.book_model.held_out relies on it).
    """
    check_int(rows, "rows")
    v = data.vocab
    held = torch.Generator().manual_seed(HELD_OUT_SEED)
    inputs, labels = mask_tokens(data.held_out, v.special_ids, v["[MASK]"], len(v), masking, held)
    return list(zip(inputs.split(rows), labels.split(rows)))


# ---- the cache ------------------------------------------------------------------------------
def checkpoint_path(key: str, step: int) -> Path:
    """Where the state of run `key` (run_key) after `step` steps is cached."""
    return cache_dir() / f"mlm-{key}-step{step:06d}.pt"


def read_checkpoint(path: Path) -> dict | None:
    """The state saved at `path`, or None when there is none or it cannot be read: a damaged
    file is recomputed (and overwritten), never trusted."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        return torch.load(path, weights_only=True)
    except Exception:
        return None


def write_checkpoint(state: dict, path: Path) -> None:
    """Save `state` at `path` so that a reader never sees half a file and two writers never mix.

    The state goes to a temporary file of this writer's own (tempfile), in the same folder so that
    os.replace is a rename on one file system, which is atomic: two processes that train the same
    run at once each write their own file and the last rename wins, whole (their states are equal:
    the run is deterministic).
    """
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict, got {type(state).__name__}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class MLMTrainer:
    """Masked-LM pre-training of tfx.model.bert.BertForMaskedLM, run in segments: run(until=n).

    data: a tfx.learn.corpus.MLMData. The held-out set is masked once, with its own seed, so every
    evaluation scores the same positions. The log holds the training loss of every step, the
    held-out masked-token accuracy every eval_every steps, and each layer's gradient norm (before
    clipping) every grad_every steps. n_threads: the torch (and BLAS) threads training runs with,
    whatever the caller's; part of the cache key.

    The parts, each below: the schedule (lr_at, TrainConfig.evaluates_at and records_grads_at),
    one step (optimizer_step), the evaluation (mask_held_out, evaluate) and the cache
    (checkpoint_path, read_checkpoint, write_checkpoint); run() is the loop over them.
    """

    def __init__(
        self,
        model_cfg: BertConfig,
        train_cfg: TrainConfig,
        data,
        cache: bool = True,
        n_threads: int = TRAIN_THREADS,
    ):
        _check_run(model_cfg, train_cfg, data)
        self.model_cfg, self.cfg, self.data, self.cache = model_cfg, train_cfg, data, cache
        check_int(n_threads, "n_threads")
        self.n_threads = n_threads  # training's own thread count, whatever the caller's
        self.key = run_key(model_cfg, train_cfg, data.checksum, n_threads)
        v = data.vocab
        self.special, self.mask_id, self.V = v.special_ids, v["[MASK]"], len(v)
        with torch.random.fork_rng(devices=[]):  # the initial weights, without touching the
            torch.manual_seed(train_cfg.seed)  # caller's random state
            self.model = BertForMaskedLM(model_cfg)
        self.opt = bert_adamw(self.model, train_cfg.lr, train_cfg.weight_decay)
        self.gen = torch.Generator().manual_seed(train_cfg.seed)  # batches and masking
        self.dropout_rng = torch.Generator().manual_seed(train_cfg.seed + 1).get_state()
        self.held_out = mask_held_out(data, train_cfg.masking)
        self.step = 0
        self.log = {"loss": [], "lr": [], "eval_step": [], "accuracy": [], "grad": {}}

    # ---- the loop ---------------------------------------------------------------------------
    def run(self, until: int, progress: bool = True) -> "MLMTrainer":
        """Train up to step `until` (or read that state from the cache). Returns self."""
        check_int(until, "until")
        if until > self.cfg.steps:
            raise ValueError(f"until ({until}) is past the run's last step ({self.cfg.steps})")
        if until < self.step:
            raise ValueError(f"the trainer is already at step {self.step}, past until={until}")
        start = self.step
        if until == start or self._load(until):
            self._summary(start, until, None)
            return self
        bar = _Progress(start, until, progress)
        self._train_until(until, bar)
        if self.cache:
            self._save()
        self._summary(start, until, bar)
        return self

    def _train_until(self, until: int, bar: _Progress) -> None:
        """The steps up to `until`, each followed by the held-out score when the schedule asks.

        Dropout draws from the run's own random state (saved with the weights, so a segment read
        from the cache continues as if it had been trained), and the threads are the run's, not
        the caller's: both are put back afterwards.
        """
        with torch.random.fork_rng(devices=[]), threads(self.n_threads):
            torch.set_rng_state(self.dropout_rng)
            while self.step < until:
                self.train_step()
                if self.cfg.evaluates_at(self.step):
                    self.log["eval_step"].append(self.step)
                    self.log["accuracy"].append(self.evaluate())
                bar.update(self.step)
            self.dropout_rng = torch.get_rng_state()

    # ---- one step ---------------------------------------------------------------------------
    def _batch(self):
        """The next training batch: rows drawn and masked with the run's generator, so the n-th
        batch is the same whether the steps before it ran in this process or came from the cache."""
        idx = torch.randint(len(self.data.train), (self.cfg.batch_size,), generator=self.gen)
        ids = self.data.train[idx]  # (B, L)
        return mask_tokens(ids, self.special, self.mask_id, self.V, self.cfg.masking, self.gen)

    def train_step(self) -> float:
        """One step at the schedule's rate; its loss, rate and gradient norms go to the log."""
        self.step += 1
        lr = lr_at(self.step, self.cfg, self.model_cfg.d_model)
        inputs, labels = self._batch()
        grads = self.cfg.records_grads_at(self.step)
        loss, norms = optimizer_step(self.model, self.opt, inputs, labels, self.cfg, lr, grads)
        if norms is not None:
            self.log["grad"][self.step] = norms
        self.log["loss"].append(loss)
        self.log["lr"].append(lr)
        return loss

    # ---- the evaluation ---------------------------------------------------------------------
    def evaluate(self) -> float:
        """Masked-token accuracy on the held-out positions (a subclass may record more)."""
        return masked_accuracy(self.model, self.held_out, exclude=self.special)

    def summary(self, start: int, until: int) -> str:
        """One line for steps start→until: the mean training loss and the last held-out accuracy.

        It depends only on the log: the same whether the steps ran or came from the cache.
        """
        check_int(start, "start", minimum=0)
        check_int(until, "until", minimum=0)
        if not start <= until <= self.step:
            raise ValueError(
                f"need 0 <= start <= until <= {self.step} (the step), got {start}, {until}"
            )
        loss = sum(self.log["loss"][start:until]) / max(until - start, 1)
        line = f"steps {start}→{until} of {self.cfg.steps}: mean training loss {loss:.3f}"
        evals = [(s, a) for s, a in zip(self.log["eval_step"], self.log["accuracy"]) if s <= until]
        if evals:
            line += f", held-out masked-token accuracy {evals[-1][1]:.3f} (step {evals[-1][0]})"
        return line

    def _summary(self, start: int, until: int, bar) -> None:
        line = self.summary(start, until)
        if bar is not None:
            bar.close(line)
        else:
            _Progress(start, until, False).close(line)

    # ---- the cache --------------------------------------------------------------------------
    def _path(self, step: int) -> Path:
        return checkpoint_path(self.key, step)

    def _state(self) -> dict:
        """Everything the next step depends on, not only the weights: the optimizer's moments,
        the generator of batches and masks, dropout's random state, and the log."""
        return {
            "model": self.model.state_dict(),
            "opt": self.opt.state_dict(),
            "gen": self.gen.get_state(),
            "dropout_rng": self.dropout_rng,
            "step": self.step,
            "log": self.log,
        }

    def _load(self, step: int) -> bool:
        """Take the state saved at `step`, if the cache is on and holds it; False otherwise."""
        state = read_checkpoint(self._path(step)) if self.cache else None
        if state is None:
            return False
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.gen.set_state(state["gen"])
        self.dropout_rng = state["dropout_rng"]
        self.step, self.log = state["step"], state["log"]
        self.log["grad"] = {int(k): v for k, v in self.log["grad"].items()}
        return True

    def _save(self) -> None:
        write_checkpoint(self._state(), self._path(self.step))


def default_configs(vocab_size: int, max_len: int = 64) -> tuple:
    """The book's small BERT and its training run (chapter 07), shared by chapters 08 and 10."""
    model_cfg = BertConfig(
        vocab_size=vocab_size,
        d_model=128,
        n_layers=4,
        n_heads=4,
        d_ff=512,
        max_len=max_len,
        dropout=0.0,  # a short run underfits: dropout would only slow it down
        attn_dropout=0.0,
        attn_impl="sdpa",
    )
    return model_cfg, TrainConfig()


def pretrained_mlm(progress: bool = False):
    """Chapter 07's trained model (eval mode) and its data: read from the cache, or trained to the
    same weights when the cache is missing. Returns (model, data, trainer)."""
    from tfx.learn.corpus import load_mlm_data

    data = load_mlm_data()
    model_cfg, train_cfg = default_configs(len(data.vocab))
    trainer = MLMTrainer(model_cfg, train_cfg, data).run(train_cfg.steps, progress=progress)
    return trainer.model.eval(), data, trainer


def bert_adamw(model: torch.nn.Module, lr: float, weight_decay: float = 0.01):
    """AdamW as BERT is trained: weight decay on the weight matrices and embeddings, none on
    biases and LayerNorm (parameters with fewer than 2 dims), in PyTorch's fused kernel.

    Fused: one kernel updates every parameter in one pass over its memory, where torch's default
    on the CPU (a Python loop over the parameters) and foreach=True both run about ten element-wise
    ops per parameter, each a separate pass over parameters, gradients and moments; with a
    21,128-row tied embedding that is a visible part of a CPU training step
    (bench/results/mlm-step-*.md). Both the trainer and step_time_ratios build their
    optimizer here, so the benchmark times the step the chapter trains with. A tied weight is one
    parameter and is counted once (named_parameters skips repeats). Built in chapter 07.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    check_positive_float(lr, "lr")
    if isinstance(weight_decay, bool) or not isinstance(weight_decay, (int, float)):
        raise TypeError(f"weight_decay must be a float >= 0, got {weight_decay!r}")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no parameters that require grad")
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]  # biases and LayerNorm, as BERT
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    # the fused kernel exists for CPU and CUDA floating-point tensors; elsewhere torch's default
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    return torch.optim.AdamW(groups, lr=lr, fused=fused or None)


BF16_SKIPPED = (
    "this CPU has no bf16 fast path (no AVX-512 bf16 or AMX for oneDNN), where bf16 matmuls run "
    "tens of times slower than fp32"
)


@dataclass
class StepTimes:
    """Median seconds of one training step, tfx against Hugging Face, measured in alternation.

    hf_fp32 uses torch's default AdamW (on the CPU a loop over the parameters), the reference of
    chapter 07's targets; hf_fp32_fused the fused AdamW that Hugging Face's Trainer picks by
    default with torch >= 2.8, so that ratio_fp32_same_optimizer shows what tfx's model code alone
    gains. fastest holds each step's fastest round (other jobs only ever slow a step down).
    """

    shape: str
    hf_fp32: float
    tfx_fp32: float
    tfx_bf16: float | None  # None: skipped, the CPU has no bf16 fast path
    machine: str
    hf_fp32_fused: float = None
    fastest: dict = None  # {"hf", "hf_fused", "tfx", "bf16"}: the fastest round's seconds

    @property
    def ratio_fp32(self) -> float:
        return self.tfx_fp32 / self.hf_fp32

    @property
    def ratio_bf16(self) -> float | None:
        return None if self.tfx_bf16 is None else self.tfx_bf16 / self.hf_fp32

    @property
    def ratio_fp32_same_optimizer(self):
        return None if self.hf_fp32_fused is None else self.tfx_fp32 / self.hf_fp32_fused

    def __str__(self) -> str:
        lines = [
            f"one training step (forward, loss, backward, AdamW), {self.shape}",
            f"  Hugging Face BertForMaskedLM, fp32, logits everywhere, torch's default AdamW: "
            f"{self.hf_fp32 * 1e3:.0f} ms",
        ]
        if self.hf_fp32_fused is not None:
            lines.append(
                f"  the same with fused AdamW (Hugging Face Trainer's default): "
                f"{self.hf_fp32_fused * 1e3:.0f} ms"
            )
        lines.append(
            f"  tfx, fp32, masked rows only, fused AdamW:  {self.tfx_fp32 * 1e3:.0f} ms "
            f"= {self.ratio_fp32:.2f}× Hugging Face's"
        )
        lines.append(
            f"  tfx, bf16 autocast: skipped, {BF16_SKIPPED}"
            if self.tfx_bf16 is None
            else f"  tfx, bf16 autocast, masked rows only: {self.tfx_bf16 * 1e3:.0f} ms "
            f"= {self.ratio_bf16:.2f}× Hugging Face's fp32 step"
        )
        if self.hf_fp32_fused is not None:
            lines.append(
                f"  tfx fp32 against Hugging Face with the same fused AdamW: "
                f"{self.ratio_fp32_same_optimizer:.2f}×"
            )
        if self.fastest:
            f = self.fastest
            bf16 = "" if "bf16" not in f else f", tfx bf16 {f['bf16'] / f['hf']:.2f}×"
            lines.append(
                f"  fastest rounds: tfx fp32 {f['tfx'] / f['hf']:.2f}×{bf16} Hugging Face's "
                f"(same AdamW: {f['tfx'] / f['hf_fused']:.2f}×)"
            )
        return "\n".join(lines + [f"  on {self.machine}"])


def mlm_step_pair(
    vocab_size: int = 21128,
    d_model: int = 256,
    n_layers: int = 4,
    batch: int = 32,
    length: int = 64,
    seed: int = 0,
) -> tuple:
    """Hugging Face's BertForMaskedLM (train mode) and a batch for it, at the bench's sizes:
    (hf_model, inputs, labels). tfx twins come from tfx.model.bert.from_huggingface(hf_model)."""
    import transformers

    torch.manual_seed(seed)
    hf_cfg = transformers.BertConfig(
        vocab_size=vocab_size,
        hidden_size=d_model,
        num_hidden_layers=n_layers,
        num_attention_heads=max(d_model // 64, 1),
        intermediate_size=4 * d_model,
        max_position_embeddings=max(512, length),
    )
    hf = transformers.BertForMaskedLM(hf_cfg).train()
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab_size, (batch, length), generator=g)  # (B, L)
    inputs, labels = mask_tokens(ids, list(range(5)), 4, vocab_size, generator=g)
    return hf, inputs, labels


def mlm_train_steps(hf, inputs, labels, names=("hf", "hf_fused", "tfx", "bf16")) -> dict:
    """{name: zero-argument training step} for Hugging Face (default and fused AdamW) and its tfx
    twin (sdpa attention, masked rows only, bert_adamw) in fp32 and under bf16 autocast; `names`
    picks some of them. Each has a model of its own, copied from `hf`."""
    if not names or not set(names) <= {"hf", "hf_fused", "tfx", "bf16"}:
        raise ValueError(f"names must be some of 'hf', 'hf_fused', 'tfx', 'bf16', got {names!r}")
    import copy

    from tfx.model.bert import from_huggingface

    ours = from_huggingface(hf).train()
    ours_bf16 = from_huggingface(hf).train()
    hf_fused = copy.deepcopy(hf).train()
    for m in (ours, ours_bf16):
        for layer in m.bert.layers:
            layer.attn.attn_impl = "sdpa"
    opts = {
        "hf": torch.optim.AdamW(hf.parameters(), lr=1e-4),  # torch's default: a per-tensor loop
        "hf_fused": torch.optim.AdamW(hf_fused.parameters(), lr=1e-4, fused=True),
        "tfx": bert_adamw(ours, 1e-4),
        "bf16": bert_adamw(ours_bf16, 1e-4),
    }
    models = {"hf": hf, "hf_fused": hf_fused, "tfx": ours, "bf16": ours_bf16}

    def make(name):
        model, opt = models[name], opts[name]

        def step():
            opt.zero_grad(set_to_none=True)
            if name.startswith("hf"):
                loss = model(input_ids=inputs, labels=labels).loss
            else:
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=name == "bf16"):
                    loss, _ = mlm_forward(model, inputs, labels)
            loss.backward()
            opt.step()

        return step

    return {name: make(name) for name in names}


def step_time_ratios(
    *, repeats: int = 5, seed: int = 0, cpu_time: bool = False, bf16: bool | None = None, **sizes
) -> StepTimes:
    """Time one training step of Hugging Face's BertForMaskedLM (labels, logits at every position,
    torch's default AdamW, and again with fused AdamW) and of its tfx twin (same weights;
    positions= decodes the masked rows only; bert_adamw's fused AdamW), in float32 and with bf16
    autocast. Steps alternate so that a change in machine load hits all of them alike; the medians
    of `repeats` steps after one warm-up each. cpu_time=True times the thread's CPU time instead
    of wall time (torch must run one thread; see tfx.inspect.perf.alternate). bf16=None times the
    bf16 step only where the CPU has a bf16 fast path (tfx.inspect.timing.cpu_capability): elsewhere
    bf16 matmuls run tens of times slower than fp32 and the step would take minutes. sizes:
    mlm_step_pair's vocab_size, d_model, n_layers, batch and length, its defaults (the bench's
    full sizes) where not given; they are written once, there."""
    import inspect
    import time

    from tfx.inspect.perf import alternate
    from tfx.inspect.timing import cpu_capability, machine

    check_int(repeats, "repeats")
    if bf16 is None:
        bf16 = cpu_capability().fast_bf16
    if not isinstance(bf16, bool):
        raise TypeError(f"bf16 must be True, False or None (decide from the CPU), got {bf16!r}")
    pair = inspect.signature(mlm_step_pair).bind(**sizes, seed=seed)  # a misspelt size: TypeError
    pair.apply_defaults()
    size = pair.arguments
    hf, inputs, labels = mlm_step_pair(**size)
    clock = time.thread_time if cpu_time else time.perf_counter
    samples = {}
    names = ("hf", "hf_fused", "tfx") + (("bf16",) if bf16 else ())
    steps = mlm_train_steps(hf, inputs, labels, names=names)
    med = alternate(steps, rounds=repeats, warmup=1, clock=clock, samples=samples)
    fastest = {name: min(ts) for name, ts in samples.items()}
    shape = (
        f"vocab {size['vocab_size']:,}, d {size['d_model']}, {size['n_layers']} layers, "
        f"batch {size['batch']} × {size['length']}, "
        f"median of {repeats}" + (", CPU time of one thread" if cpu_time else "")
    )
    return StepTimes(
        shape, med["hf"], med["tfx"], med.get("bf16"), machine(), med["hf_fused"], fastest
    )
