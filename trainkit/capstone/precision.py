"""The capstone's precision policy: what "fp32", "bf16" and "auto" become on this device, on a first start and on a
resume (``trainkit.precision`` holds the course's TF32 switches, which this module turns on for CUDA runs)."""
from __future__ import annotations

import torch

from trainkit.capstone.config import ConfigError
from trainkit.precision import use_tf32


def resolve_precision(requested: str, device: torch.device, kept: str | None = None) -> str:
    """The precision a run computes in: "fp32" or "bf16" as asked; for "auto", ``kept`` where the run already has one
    (a resume keeps what "auto" became at the run's first start: a CPU run resumed on a GPU stays fp32, a GPU run
    resumed on a CPU stays bf16), else bf16 on a CUDA GPU with native bf16 and fp32 elsewhere. Refuses bf16 on a
    GPU that cannot run it."""
    if requested == "auto" and kept is not None:
        precision = kept
    elif requested == "auto":
        # native bf16 only (Ampere and later): the default counts T4's and V100's emulated bf16, slower than fp32
        bf16_ok = device.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False)
        # On a CPU, bf16 autocast is faster for some models and slower for others (on an Intel Xeon with AMX: 1.0-1.2x
        # for the tiny preset, 2.2-2.4x at d_model 512, 0.4x for lab 8's demo model): off unless measured faster.
        precision = "bf16" if bf16_ok else "fp32"
    else:
        precision = requested
    # an explicit "bf16" is honoured where bf16 at least runs (emulated on a T4 or V100)
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        if requested == "auto":
            raise ConfigError("precision 'auto' keeps bf16, what this run has trained in since its first start, but "
                              "this GPU has no bf16 support; set precision=fp32 to go on in fp32 (the manifest "
                              "records the change), or resume on a GPU with bf16")
        raise ConfigError("precision 'bf16' asked for, but this GPU has no bf16 support")
    return precision


def setup_precision(requested: str, device: torch.device) -> str:
    """The Trainer's precision set-up: the resolved precision; on CUDA, TF32 turned on for the process."""
    precision = resolve_precision(requested, device)
    if device.type == "cuda":
        # process-wide: from here on every fp32 matmul and convolution in this process (this run's "fp32", and the
        # fp32 parts of a bf16 run) is TF32 on Ampere and later; the manifest records it as fp32_matmul "tf32"
        use_tf32()
    return precision
