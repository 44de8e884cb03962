"""Measuring tools for the mixed-precision topic: what autograd keeps, what the GPU allocates, how fast.

- ``FORMATS``: the floating-point formats the course compares, with their bit layout.
- ``saved_tensors(fn, params)``: run ``fn`` (a forward pass) and list what autograd saves for the backward
  pass: activations, parameters, and low-precision copies of parameters (autocast's casts).
- ``saved_tensor_bytes(fn, exclude=params)``: the same, added up into activations and cast copies.
- ``cuda_peak_bytes(fn)``: peak CUDA memory allocated while ``fn`` runs, above what was allocated before.
- ``time_per_call(fn)``: median seconds per call after warm-up, synchronising CUDA.
- ``use_tf32()`` / ``fp32_matmul_precision(device)``: turn TF32 on for CUDA's fp32 matmuls and convolutions, and say
  how a device's fp32 matmuls compute ("tf32" or "ieee"), through torch's current per-backend settings only.

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


def _cast_source(t: torch.Tensor, params: dict[str, torch.Tensor]) -> str | None:
    """The name of the parameter that the saved tensor ``t`` is a low-precision copy of, or None.

    Two ways to recognise one: its autograd history is a dtype conversion of a leaf (autocast's cast of a
    parameter that requires grad), or its storage holds exactly a parameter's values converted to its
    dtype (a cast of a frozen parameter has no autograd history).
    """
    by_ptr = {p.untyped_storage().data_ptr(): name for name, p in params.items()}
    fn = t.grad_fn
    while fn is not None and type(fn).__name__ != "ToCopyBackward0" and len(fn.next_functions) == 1:
        fn = fn.next_functions[0][0]  # walk back through views and transposes
    if fn is not None and type(fn).__name__ == "ToCopyBackward0":
        source = fn.next_functions[0][0]
        if source is not None and type(source).__name__ == "AccumulateGrad":
            return by_ptr.get(source.variable.untyped_storage().data_ptr())  # None: a cast of an input
    storage = t.untyped_storage()
    for name, p in params.items():
        if p.dtype != t.dtype and p.is_floating_point() and p.numel() * t.element_size() == storage.nbytes():
            flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(storage)
            if torch.equal(flat, p.detach().to(t.dtype).flatten()):
                return name
    return None


def saved_tensors(fn: Callable[[], object], params: dict[str, torch.Tensor] | None = None) -> list[dict]:
    """What autograd saves for the backward pass while ``fn()`` runs, one record per distinct storage.

    ``params``: the model's named parameters (``dict(model.named_parameters())``). Each record has
    ``shape``, ``dtype``, ``bytes`` (of the whole storage) and ``kind``: ``"parameter"`` (a parameter
    itself, which exists anyway), ``"cast copy"`` (a low-precision copy of a parameter, such as autocast
    makes for a matmul) or ``"activation"``; ``param`` names the parameter for the first two kinds.
    """
    params = dict(params or {})
    own = {p.untyped_storage().data_ptr(): name for name, p in params.items()}
    seen: dict[int, torch.Tensor] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen.setdefault(t.untyped_storage().data_ptr(), t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    records = []
    for ptr, t in seen.items():
        if ptr in own:
            kind, param = "parameter", own[ptr]
        else:
            param = _cast_source(t, params)
            kind = "activation" if param is None else "cast copy"
        records.append({"shape": tuple(t.shape), "dtype": t.dtype, "bytes": t.untyped_storage().nbytes(),
                        "kind": kind, "param": param})
    return records


def saved_tensor_bytes(fn: Callable[[], object], exclude: list[torch.Tensor] | tuple = ()) -> dict[str, int]:
    """Bytes of the distinct storages that autograd saves while ``fn()`` runs.

    Returns {"activations": ..., "cast_copies": ...}. Pass the model's parameters as ``exclude``: the
    parameters themselves are not counted (they exist anyway), and a saved low-precision copy of one of them
    (autocast's cast for a matmul, of a trainable or a frozen parameter) is counted as a cast copy. Each
    storage is counted once, however many operations save it.
    """
    records = saved_tensors(fn, {str(i): t for i, t in enumerate(exclude)})
    return {"activations": sum(r["bytes"] for r in records if r["kind"] == "activation"),
            "cast_copies": sum(r["bytes"] for r in records if r["kind"] == "cast copy")}


# TF32 through one API, the current one: ``torch.backends.cuda.matmul.fp32_precision`` and
# ``torch.backends.cudnn.conv.fp32_precision`` ("tf32" / "ieee"), for setting and for reading. The legacy settings
# (the ``allow_tf32`` attributes, ``torch.set_float32_matmul_precision``) are not used here, for two reasons seen in
# torch itself: their setters warn on PyTorch 2.9-2.11 CUDA builds ("Please use the new API settings to control TF32
# behavior"), which lessons turn into errors; and after a write through the current API, torch 2.13's legacy getters
# raise RuntimeError ("... you have used mix of the legacy and new APIs ..."; measured on this course's CPU wheel:
# ``torch.get_float32_matmul_precision()`` and ``torch.backends.cuda.matmul.allow_tf32`` both raise once
# ``torch.backends.cuda.matmul.fp32_precision = "tf32"``), so mixing the two in one process breaks the reader.
def use_tf32() -> None:
    """Process-wide, from now on: fp32 matmuls (cuBLAS) and convolutions (cuDNN) on CUDA may run as TF32 (10-bit
    mantissa inputs, fp32 sums) on Ampere and later GPUs. CPU numerics are untouched."""
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.cudnn.conv.fp32_precision = "tf32"


def fp32_matmul_precision(device: torch.device | str) -> str:
    """How fp32 matmuls on ``device`` compute now: "tf32" on a CUDA GPU that has TF32 with it turned on, else "ieee"
    (IEEE fp32; the CPU always, as this course never sets the CPU's own ``mkldnn`` precision). Reads the current API
    only: "none" there means that nothing set it, i.e. torch's default, IEEE fp32 for matmuls."""
    if torch.device(device).type != "cuda":
        return "ieee"
    on = torch.backends.cuda.matmul.fp32_precision == "tf32"
    return "tf32" if on and torch.cuda.is_tf32_supported() else "ieee"


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
