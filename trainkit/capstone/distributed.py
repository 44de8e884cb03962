"""The capstone under torchrun: which device and rank this process trains on, the process group's setup and teardown,
the refusal of more processes than GPUs, and each rank's own random streams (``rank_seeds``)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

from trainkit.capstone.config import ConfigError, TrainConfig
from trainkit.device import pick_device


@dataclass
class Placement:
    """Where this process trains: its device, its rank among ``world_size`` ranks, and whether it started the process
    group (then the Trainer ends it on close)."""
    device: torch.device
    rank: int
    world_size: int
    owns_process_group: bool


def check_gpus_for_ranks(local_rank: int) -> None:
    """Under torchrun on CUDA every process takes the GPU of its LOCAL_RANK: refuse, in one line, before any rank
    touches a GPU or waits for the others, when this machine has fewer GPUs than processes. Every rank of the machine
    refuses (it counts LOCAL_WORLD_SIZE, not only its own index), so none is left waiting in the rendezvous.

    No fallback: ranks sharing a GPU would be refused by NCCL itself ("Duplicate GPU detected"), and moving the run
    to the CPU behind the user's back is what this trainer never does (device='cuda' without CUDA is refused too); the
    message says how to get either on purpose."""
    gpus = torch.cuda.device_count()
    processes = max(int(os.environ.get("LOCAL_WORLD_SIZE", "0")), local_rank + 1)
    if processes > gpus:
        raise ConfigError(f"{processes} processes on this machine train on CUDA, one GPU each, and it has {gpus} "
                          f"GPU(s): start at most {gpus} (torchrun --nproc_per_node {gpus}), or train on the CPU "
                          "with gloo (--set device=cpu, or CUDA_VISIBLE_DEVICES='')")


def setup(cfg: TrainConfig) -> Placement:
    """The device ``cfg.device`` names (refused in one line where it is not there); under torchrun (WORLD_SIZE > 1)
    this rank's GPU, and the process group, started with NCCL on CUDA and gloo on the CPU unless one runs already."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    owns_process_group = False
    if cfg.device == "auto":
        device = pick_device()
    elif cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' asked for, but CUDA is not available")
    else:
        device = torch.device(cfg.device)
    if world_size > 1:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if device.type == "cuda":
            check_gpus_for_ranks(local_rank)
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
            owns_process_group = True
        rank = dist.get_rank()
    else:
        rank = 0
    return Placement(device=device, rank=rank, world_size=world_size, owns_process_group=owns_process_group)


def wrap(model: nn.Module, device: torch.device) -> nn.Module:
    """The model in DistributedDataParallel, which all-reduces the gradients during the backward pass."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)


def no_sync(model: nn.Module):
    """DDP's context that skips the all-reduce (a micro-batch before the last), through torch.compile's wrapper."""
    inner = getattr(model, "_orig_mod", model)
    return inner.no_sync()


def end_process_group(graceful: bool) -> None:
    # One last barrier, so that no rank tears its connections down while a peer is still in a collective (none
    # while an exception propagates: the other ranks may never reach it). destroy_process_group() then forgets
    # the group; gloo's own threads live on (DDP imports torch._dynamo, which keeps the group) until the
    # interpreter exits, which is why the command line ends a multi-rank run with os._exit (see trainkit.train).
    if graceful:
        dist.barrier()
    dist.destroy_process_group()


def rank_seeds(seed: int, rank: int) -> dict[str, Any]:
    """The seeds of one rank's global random streams: torch (dropout), Python's ``random`` and NumPy's legacy
    generator, drawn from ``numpy.random.SeedSequence(seed, spawn_key=(1, rank))``: purpose 1, the per-rank streams, as
    in lesson 7, so that no other use of the seed (purpose 0 is a data order there) meets the same sequence. Every
    (seed, rank) pair gets its own unrelated streams; ``seed + rank`` would not (run seed 0 rank 1 would repeat run
    seed 1 rank 0, lesson 7).
    Separate words per library, so that Python and NumPy (both Mersenne Twisters) do not start from one state."""
    words = [int(w) for w in np.random.SeedSequence(seed, spawn_key=(1, rank)).generate_state(6)]  # uint32 words
    return {"torch": words[0] << 32 | words[1], "python": words[2] << 32 | words[3],
            "numpy": words[4:6]}   # np.random.seed takes 32-bit words, not one 64-bit int
