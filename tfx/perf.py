"""What chapter 08's benchmarks share: the run's context, timing in alternation, results files.

A speed number is only as good as the conditions it was measured under, so every results file
opens with `run_info()`: the machine, date, torch version, thread count and the load average
(other work on a shared machine slows whatever runs beside it). `alternate` times several
variants in turn, round after round, so slow spells of the machine hit all of them alike and
their ratios survive even when absolute times do not.

Built in chapter 08.
"""

import datetime
import json
import os
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import torch

from tfx.checks import check_int
from tfx.timing import cpu_capability, machine

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results"


@contextmanager
def quiet_stderr():
    """Send the process's file descriptor 2 to /dev/null for the block.

    torch.profiler's C++ layer (kineto) writes a timestamped line to fd 2 at every start and stop
    of a profile, past Python's sys.stderr, so a notebook would store it in the cell's output and
    the output would change on every run. Python-level warnings still go to sys.stderr as usual
    when it is not fd 2 (Jupyter's case).
    """
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def run_info() -> dict:
    """The context a results file needs: machine line, date, versions, threads, load average."""
    return {
        "machine": machine(),
        "cpu": asdict(cpu_capability()),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_average_1_5_15min": [round(x, 2) for x in os.getloadavg()],
    }


def alternate(
    fns: dict, rounds: int = 5, warmup: int = 1, clock=time.perf_counter, samples=None
) -> dict:
    """Median seconds of each fn in `fns` ({label: zero-argument callable}), called in turn.

    Each round calls every fn once, in order; the median over rounds of each is returned. A
    burst of load on the machine then slows one round of every variant rather than all rounds
    of one variant, which is what would bias a ratio.

    clock: time.perf_counter (wall time, the default) or time.thread_time, the CPU time of the
    calling thread: with torch at one thread every op runs on that thread, so its CPU time leaves
    out the time other processes held the core (cache and memory-bandwidth sharing still count).
    samples: a dict that, if given, receives every round's seconds, {label: [s, ...]} (other jobs
    only ever slow a call down, so the fastest round is worth reporting next to the median).
    """
    check_int(rounds, "rounds")
    check_int(warmup, "warmup", minimum=0)
    if not fns or not all(callable(f) for f in fns.values()):
        raise ValueError(f"fns must be a non-empty dict of callables, got {fns!r}")
    if clock not in (time.perf_counter, time.thread_time):
        raise ValueError(f"clock must be time.perf_counter or time.thread_time, got {clock!r}")
    if clock is time.thread_time and torch.get_num_threads() != 1:
        raise ValueError(
            "clock=time.thread_time counts one thread's CPU time: run torch with one thread "
            f"(tfx.timing.threads(1)), got {torch.get_num_threads()} threads"
        )
    for _ in range(warmup):
        for f in fns.values():
            f()
    times = {label: [] for label in fns}
    for _ in range(rounds):
        for label, f in fns.items():
            t0 = clock()
            f()
            times[label].append(clock() - t0)
    if samples is not None:
        samples.update(times)
    return {label: statistics.median(ts) for label, ts in times.items()}


def write_results(results: dict, stem: str, markdown: str, out: Path = RESULTS) -> Path:
    """Write results as <out>/<stem>.json and the human-readable <stem>.md; return the JSON path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    (out / f"{stem}.md").write_text(markdown)
    return path


def latest(prefix: str, out: Path = RESULTS):
    """The newest full (not --quick) results file <out>/<prefix>-*.json as a dict, or None."""
    paths = sorted(p for p in Path(out).glob(f"{prefix}-*.json") if not p.stem.endswith("quick"))
    return json.loads(paths[-1].read_text()) if paths else None


def header_md(title: str, info: dict) -> str:
    """The opening lines of a results .md: what, where, when, under what load."""
    load = ", ".join(str(x) for x in info["load_average_1_5_15min"])
    return (
        f"# {title}\n\nMachine: {info['machine']}  \nDate: {info['date']}  \n"
        f"Load average (1, 5, 15 min) at the start: {load} (other jobs shared the CPU)\n\n"
    )


def count_graphs(module, inputs, **compile_kwargs) -> int:
    """How many graphs dynamo captures while `module` runs on each of `inputs` under torch.compile.

    The backend only counts the graphs it is handed and runs them as they are, so no code is
    generated: the count takes seconds where an inductor compile takes 15-35 s per graph on a CPU.
    Built in chapter 08.
    """
    import torch._dynamo

    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
    inputs = list(inputs)
    if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise ValueError("inputs must be a non-empty sequence of tensors")
    torch._dynamo.reset()
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(module, backend=counting, **compile_kwargs)
    with torch.inference_mode():
        for t in inputs:
            compiled(t)
    torch._dynamo.reset()
    return len(graphs)


# Operator name → category for op_breakdown; the first pattern that matches wins.
OP_CATEGORIES = (
    ("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation",
                "aten::matmul", "mkldnn")),
    ("attention kernel", ("scaled_dot_product", "aten::_softmax", "aten::_safe_softmax",
                          "_transform_bias_rescale_qkv", "aten::_masked_softmax")),
    ("dropout draws", ("aten::bernoulli", "aten::native_dropout")),
    ("LayerNorm kernel", ("layer_norm",)),
    ("loss (log-softmax, NLL)", ("log_softmax", "nll_loss", "cross_entropy")),
    ("GELU", ("gelu",)),
    ("copies, indexing, cat", ("aten::copy_", "aten::index", "aten::cat", "aten::_index_put",
                               "aten::index_put", "aten::clone", "aten::contiguous",
                               "embedding", "aten::masked_select", "aten::nonzero")),
)  # fmt: skip


def _category(name: str) -> str:
    for category, patterns in OP_CATEGORIES:
        if any(p in name for p in patterns):
            return category
    return "other element-wise and reductions"


def op_breakdown(steps: dict, repeats: int = 3) -> dict:
    """Where each step's time goes: {label: {category: ms per call}} from torch.profiler.

    steps: {label: zero-argument callable}, each run once to warm up, then `repeats` times under
    the profiler. Every operator's *self* CPU time is put in one category (OP_CATEGORIES, by
    name); everything run inside the optimizer's step counts as "optimizer", whatever its name,
    so a foreach AdamW's lerp_/addcdiv_/sqrt land there and not among the model's element-wise
    ops. "total" is the sum of the categories; the profiler's own cost makes it somewhat larger
    than the step's untraced time. Built in chapter 08.
    """
    from torch.profiler import ProfilerActivity, profile

    check_int(repeats, "repeats")
    if not steps or not all(callable(f) for f in steps.values()):
        raise ValueError(f"steps must be a non-empty dict of callables, got {steps!r}")
    out = {}
    for label, fn in steps.items():
        fn()
        with quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(repeats):
                fn()
        cats = {}
        for ev in prof.events():
            if ev.device_type != torch.autograd.DeviceType.CPU or ev.self_cpu_time_total <= 0:
                continue
            parent, in_opt = ev, False
            while parent is not None:
                if parent.name.startswith("Optimizer.step") or "_fused_adam" in parent.name:
                    in_opt = True
                    break
                parent = parent.cpu_parent
            cat = "optimizer" if in_opt else _category(ev.name)
            cats[cat] = cats.get(cat, 0.0) + ev.self_cpu_time_total / 1e3 / repeats  # µs → ms
        cats["total"] = sum(cats.values())
        out[label] = cats
    return out


def format_breakdown(breakdown: dict) -> str:
    """op_breakdown's result as a text table: one row per category, one column per step."""
    labels = list(breakdown)
    cats = [c for c, _ in OP_CATEGORIES] + ["other element-wise and reductions", "optimizer"]
    cats = [c for c in cats if any(c in b for b in breakdown.values())] + ["total"]
    width = max(12, *(len(x) for x in labels))
    lines = [f"{'ms per step':<34}" + "".join(f"{x:>{width + 2}}" for x in labels)]
    for c in cats:
        lines.append(
            f"{c:<34}" + "".join(f"{breakdown[x].get(c, 0.0):>{width + 2}.1f}" for x in labels)
        )
    return "\n".join(lines)
