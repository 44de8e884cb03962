"""Measuring tools for the mixed-precision topic: what autograd keeps, what the GPU allocates, how fast.

- ``FORMATS``: the floating-point formats the course compares, with their bit layout.
- ``saved_tensor_bytes(fn)``: run ``fn`` (a forward pass) and count the bytes autograd saves for the
  backward pass, split into activations and low-precision copies of parameters (autocast's casts).
- ``cuda_peak_bytes(fn)``: peak CUDA memory allocated while ``fn`` runs, above what was allocated before.
- ``time_per_call(fn)``: median seconds per call after warm-up, synchronising CUDA.

None of these is an exercise answer: the lab asks for the *analytic* count of a training step's memory.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

# name -> (dtype, exponent bits, mantissa bits); the sign takes the remaining bit.
FORMATS: dict[str, tuple[torch.dtype, int, int]] = {
    "fp32": (torch.float32, 8, 23),
    "fp16": (torch.float16, 5, 10),
    "bf16": (torch.bfloat16, 8, 7),
    "fp8 e4m3": (torch.float8_e4m3fn, 4, 3),
    "fp8 e5m2": (torch.float8_e5m2, 5, 2),
}


def _is_parameter_cast(t: torch.Tensor) -> bool:
    """True if ``t`` is (a view of) a dtype conversion of a leaf parameter, as autocast makes them."""
    fn = t.grad_fn
    while fn is not None and type(fn).__name__ != "ToCopyBackward0" and len(fn.next_functions) == 1:
        fn = fn.next_functions[0][0]  # walk back through views and transposes
    if fn is None or type(fn).__name__ != "ToCopyBackward0":
        return False
    source = fn.next_functions[0][0]
    return source is not None and type(source).__name__ == "AccumulateGrad"


def saved_tensor_bytes(fn: Callable[[], object], exclude: list[torch.Tensor] | tuple = ()) -> dict[str, int]:
    """Bytes of the distinct storages that autograd saves while ``fn()`` runs.

    Returns {"activations": ..., "cast_copies": ...}. Storages of the tensors in ``exclude`` (pass the
    model's parameters: they exist anyway) are not counted; each storage is counted once, however many
    operations save it. ``cast_copies`` are saved dtype conversions of parameters that require grad
    (autocast's casts); a cast of a frozen parameter has no autograd history and counts as an activation.
    """
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, tuple[int, bool]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in skip and key not in seen:
            seen[key] = (storage.nbytes(), _is_parameter_cast(t))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return {"activations": sum(n for n, cast in seen.values() if not cast),
            "cast_copies": sum(n for n, cast in seen.values() if cast)}


def cuda_peak_bytes(fn: Callable[[], object], device: torch.device | str = "cuda") -> int:
    """Peak bytes allocated on a CUDA device while ``fn()`` runs, minus what was allocated before it."""
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - base


def time_per_call(fn: Callable[[], object], n: int = 10, warmup: int = 2,
                  device: torch.device | str | None = None) -> float:
    """Median wall-clock seconds of ``fn()`` over ``n`` calls after ``warmup`` calls (CUDA synchronised)."""
    cuda = device is not None and torch.device(device).type == "cuda"
    times = []
    for i in range(warmup + n):
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)
