"""One place for device choice, seeding and notebook start-up.

Every lesson and lab starts with ``DEVICE = setup_notebook(seed=0)``. Notebooks then size their demos
with ``by_device(cpu=..., gpu=...)`` so that the same notebook runs in about a minute on a laptop CPU
and uses the full recipe on a CUDA GPU.
"""
from __future__ import annotations

import os
import random
import warnings

import numpy as np
import torch

# Set by the test suite (tests/conftest.py): any warning a notebook emits becomes an error, so
# "no warnings in the output" is checked rather than hoped for.
STRICT_WARNINGS_ENV = "TRAINKIT_STRICT_WARNINGS"
# Force the CPU even where CUDA exists (useful to reproduce what CI sees).
FORCE_CPU_ENV = "TRAINKIT_FORCE_CPU"


def pick_device() -> torch.device:
    """CUDA if available (and not disabled with TRAINKIT_FORCE_CPU=1), else the CPU."""
    if torch.cuda.is_available() and os.environ.get(FORCE_CPU_ENV, "0") != "1":
        return torch.device("cuda")
    return torch.device("cpu")


def by_device(cpu, gpu, device: torch.device | None = None):
    """Pick a size (or any value) for the device at hand: ``steps = by_device(cpu=200, gpu=5000)``."""
    device = device if device is not None else pick_device()
    return gpu if device.type == "cuda" else cpu


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and PyTorch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def setup_notebook(seed: int = 0, quiet_warnings: bool = False, threads: int | None = None) -> torch.device:
    """Start a notebook the same way everywhere and return the device to use.

    seed: seeds Python, NumPy and PyTorch.
    quiet_warnings: labs pass True so that a harmless library warning never clutters a test cell.
        Lessons leave it False: a warning there is a defect to fix, and the test suite turns every
        warning into an error (TRAINKIT_STRICT_WARNINGS=1).
    threads: cap PyTorch's CPU threads (default: leave PyTorch's choice).
    """
    if os.environ.get(STRICT_WARNINGS_ENV, "0") == "1" and not quiet_warnings:
        warnings.simplefilter("error")
        # ipykernel's own shutdown handler raises a PendingDeprecationWarning: the kernel's, not the notebook's.
        warnings.filterwarnings("default", category=PendingDeprecationWarning, module="ipykernel")
    elif quiet_warnings:
        warnings.simplefilter("ignore")
    if threads is not None:
        torch.set_num_threads(threads)
    seed_everything(seed)
    device = pick_device()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"torch {torch.__version__} | device: {device.type} ({name}) | seed {seed}")
    return device
