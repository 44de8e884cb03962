"""The capstone's memory estimate: refuse, in one line and before allocating it, a model whose training state cannot
fit in the memory this process may use."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import torch

from trainkit.capstone.config import ConfigError, TrainConfig
from trainkit.capstone.gpt import GPT, param_counts


def memory_bytes(device: torch.device) -> tuple[int, str] | None:
    """The memory this process may still allocate on ``device``, and what sets it; None where it cannot be told.
    On a CPU: the least of the physical memory, the address space left under RLIMIT_AS (``ulimit -v``: allocations
    beyond it fail, after minutes of trying for a large model) and the cgroup's limit (a container's: beyond it the
    kernel kills the process)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory, "this GPU has"
    limits = []
    try:
        limits.append((os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this cpu has"))
    except (AttributeError, ValueError, OSError):   # no sysconf (Windows)
        pass
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            with open("/proc/self/statm") as f:       # the address space in use now, in pages
                used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            limits.append((max(soft - used, 0), "RLIMIT_AS (ulimit -v) leaves this process"))
    except (ImportError, OSError, ValueError):
        pass
    try:   # the whole limit, like the physical memory: what the cgroup uses now is mostly page cache it can drop
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            limits.append((int(limit), "the cgroup's memory.max allows"))
    except (OSError, ValueError):
        pass
    return min(limits) if limits else None


def check_model_fits(cfg: TrainConfig, device: torch.device) -> str:
    """Refuse, in one line, a model whose training state cannot fit in the memory this process may use, before
    allocating it (the allocator's own refusal is a traceback; on a CPU a near miss swaps for hours instead, and under
    RLIMIT_AS the build grinds for minutes before it fails). Returns the estimate, in words."""
    with torch.device("meta"):                     # shapes only, no memory
        one, two = (param_counts(GPT(dataclasses.replace(cfg.model, n_layer=n)))["total"] for n in (1, 2))
    params = one + (cfg.model.n_layer - 1) * (two - one)   # every block adds the same number of parameters
    # fp32 weights and gradients, and the optimiser's moments: two for AdamW, one for Lion (activations come on top)
    need = params * 4 * (4 if cfg.optimizer == "adamw" else 3)
    memory = memory_bytes(device)
    if memory is not None and need > memory[0]:
        have, where = memory
        raise ConfigError(f"the model is too large: {params:_} parameters need about {need / 1e9:_.1f} GB for "
                          f"weights, gradients and optimiser state, and {where} {have / 1e9:.1f} GB; "
                          "choose smaller model.* settings")
    return f"{params:_} parameters, about {need / 1e9:_.1f} GB to train"
