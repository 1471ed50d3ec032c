"""What a computation holds in memory: the peak it allocates (from the profiler's allocation
events) and what autograd keeps for the backward pass, by kind.

Measured, not estimated: chapter 08 uses both to show what chunked attention and autocast save.
"""

import torch

from tfx.inspect.perf import quiet_stderr


def saved_for_backward(fn, module: torch.nn.Module) -> dict:
    """Bytes autograd keeps for the backward pass while fn() runs, by kind: {"activations",
    "parameters", "copies of parameters"}.

    Each tensor is counted once (by storage). "parameters" are `module`'s own parameters, saved
    by reference (no new memory); "copies of parameters" are other tensors of a parameter's shape
    in another dtype: the 16-bit weight copies that autocast casts and keeps for the backward
    pass; everything else is an activation. This is the memory that grows with batch × length in
    training, which a peak over the whole step mixes with gradients and temporary buffers.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    params = list(module.parameters())
    param_ptrs = {p.untyped_storage().data_ptr() for p in params}
    param_shapes = {(tuple(p.shape), p.dtype) for p in params}
    seen, out = set(), {"activations": 0, "parameters": 0, "copies of parameters": 0}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in seen:
            seen.add(ptr)
            nbytes = t.untyped_storage().nbytes()
            if ptr in param_ptrs:
                out["parameters"] += nbytes
            elif any(tuple(t.shape) == s and t.dtype != dt for s, dt in param_shapes):
                out["copies of parameters"] += nbytes
            else:
                out["activations"] += nbytes
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return out


def peak_memory(fn, *args, **kwargs) -> tuple:
    """Call fn(*args, **kwargs) under torch.profiler and return (result, peak bytes it allocated).

    The profiler records every CPU allocation (+bytes) and free (-bytes) as a '[memory]' event;
    the running sum over time, from 0 at the call, peaks at the most the call held at once. So
    the inputs, allocated before, do not count, and the result, alive at the end, does. The count
    is exact and repeatable, unlike the process's resident size (tens of MiB of allocator noise).
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    from torch.profiler import ProfilerActivity, profile

    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn(*args, **kwargs)
    # the kineto trace holds every '[memory]' event; prof.events() keeps only those outside an op
    trace = prof.profiler.kineto_results.events()
    events = sorted((e.start_ns(), e.nbytes()) for e in trace if e.name() == "[memory]")
    running = peak = 0
    for _, nbytes in events:
        running += nbytes
        peak = max(peak, running)
    return result, peak
