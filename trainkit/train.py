"""The capstone's reference training loop: a small GPT on Python's reference text, with everything of topics 1-7.

    python -m trainkit.train --config tiny                       # about a minute on a 2-core CPU
    python -m trainkit.train --config gpu                        # 4.85M parameters, ~20 epochs: minutes on a GPU
    python -m trainkit.train --config recipe                     # the guide's recipe (51.4M; far too big for this text)
    python -m trainkit.train --config auto --set lr=1e-3 --set model.n_layer=2 --set out_dir=runs/x
    python -m trainkit.train --config my_run.json --set resume=true
    torchrun --nproc_per_node 2 -m trainkit.train --config tiny  # DistributedDataParallel (gloo / NCCL)

From Python:

    from trainkit.train import TrainConfig, Trainer
    cfg = TrainConfig.tiny(steps=200, out_dir="runs/demo", logger="none")
    history = Trainer(cfg).fit()          # {"step": [...], "loss": [...], "val_loss": [...], ...}

What one optimiser step does (``Trainer.train_step``), in order:
1. ``lr = self.lr_at(step)`` is written into every parameter group (warmup + cosine or WSD, built from torch's
   own schedulers: ``LinearLR``, ``CosineAnnealingLR``, ``ConstantLR``, ``SequentialLR``).
2. ``grad_accum`` micro-batches: forward under ``self.autocast()``, ``(loss / grad_accum).backward()``; under DDP
   the gradients are all-reduced on the last micro-batch only. Micro-batch m of step s reads the batch
   ``get_batch("train", ..., step=s * grad_accum + m, seed, rank, world_size)``: a pure function, so resuming
   needs only the step number and ranks never read the same window.
3. ``self.before_clip(step)`` (a no-op hook: a test or a lab may poison a gradient here).
4. ``grad_norm = clip_grad_norm_(params, max_grad_norm)``: the norm of the whole accumulated gradient, measured
   before clipping (non-finite if any gradient element is).
5. ``self.should_skip(grad_norm)``: True (reference: the norm is not finite) means the gradients are dropped and
   ``optimizer.step()`` is NOT called, so the parameters and the optimiser's state (moments, its step count) are
   untouched; the loop's step counter and therefore the schedule still advance (the skipped step is spent).
6. ``self.log_step(step, stats)`` with stats = {"loss", "lr", "grad_norm", "tokens", "step_time", "skipped",
   "step_time_per_rank", "ready_time_per_rank"}. Every rank's whole step time is nearly the same (each waits for the
   slowest at the all-reduce), so a straggler shows in ``ready_time``: the seconds from the step's start until the
   rank has its data and its last forward done, i.e. until it is ready for the backward pass that syncs gradients.
Every ``eval_every`` steps (and after the last one) ``evaluate()`` runs in eval mode, without gradients, under the
same autocast as training, on the same ``eval_batches`` validation batches each time; then the latest checkpoint
(and the best one, when the validation loss improved) is written atomically (temporary file, fsync, os.replace),
with a checksum, once the logger has flushed the steps it covers to disk.

The settings (``TrainConfig``) live in ``trainkit.train_config``, the checkpoint files and the folder's lock in
``trainkit.checkpoint``; this module exports their names too.

Exact resume: a checkpoint holds the model, the optimiser state, the step, the best validation loss, the history,
every rank's RNG states (on CUDA, the one generator of the rank's own GPU), the config, and what "auto" resolved to
at the run's first start (``resolved``: the precision and the kind of device); the data order depends only on
(seed, step, rank, world_size). On the CPU a run stopped once any k optimiser steps have run (``fit(steps=k)``:
steps 0..k-1) and resumed (``resume=True``) logs bit-identical losses to a run that never stopped; so does a 2-rank
run under torchrun. An exact resume needs the same number of ranks on the same kind of device: precision="auto"
keeps the checkpoint's choice (a CPU run resumed on a GPU stays fp32, with a note), and a change of device kind is
recorded (``changed_on_resume["resolved.device"]``) and said, as it is not bit-exact.

What the loop refuses, so that it never resumes inexactly without a word nor writes a ruined checkpoint:
- resuming with a setting that fixes the batches, the model, the optimiser's kind or what "best" compares changed
  (``MUST_MATCH_ON_RESUME``): one line naming it. Every other setting may change on resume; it applies from the
  resumed step on (the optimiser's betas, eps and weight decay too) and the manifest records the change;
- a checkpoint that fails its checksum, cannot be read, holds non-finite weights, lacks a key or holds a value of the
  wrong type or range (one table of key -> check, ``trainkit.checkpoint.CONTENTS``, which every write is checked
  against too), or whose optimiser state does not fit this model's parameters: resume falls back to ``best.pt``
  with a note, or refuses (``trainkit.checkpoint``); a checkpoint of the earlier trainer (version 1) is named as such;
- a lasting non-finite value: after ``max_consecutive_skips`` skipped steps in a row the run stops
  (``TrainingStopped``), and no checkpoint is ever written with non-finite weights or optimiser state;
- a second run in the same ``out_dir`` while one runs (a lock on the folder);
- under torchrun on CUDA, more processes on a machine than it has GPUs (one GPU per process), and a resume on CUDA
  from a checkpoint holding more GPUs' random states than this machine has (written by an earlier trainer).
SIGTERM (a cluster's pre-emption notice) and SIGINT (Ctrl-C) end the step in progress, write ``latest.pt`` and raise
``Interrupted``; the command line then exits with 128 + the signal's number. A second one stops at once, except during
a checkpoint write, which finishes first (with ``latest.pt`` after ``best.pt``); the line says which step latest.pt
holds. Before training starts (or after it ends) either signal is one line and the same exit code. Exit codes: 0 done,
2 refused to start (one line: bad settings, an unusable out_dir, a checkpoint it cannot resume from), 3 stopped while
training (one line naming the file: lasting non-finite values, a checkpoint or log write that failed, a full disk
said as such; the last good checkpoint is kept).

On CUDA the Trainer turns TF32 on for the whole process (``trainkit.precision.use_tf32``: torch's current settings,
``torch.backends.cuda.matmul.fp32_precision`` and ``torch.backends.cudnn.conv.fp32_precision`` = "tf32"): on Ampere
and later GPUs its "fp32" matmuls and convolutions are TF32 (10-bit mantissa inputs, fp32 accumulation), not IEEE
fp32. The manifest records how fp32 matmuls computed: ``"fp32_matmul": "tf32"`` or ``"ieee"`` (a CPU run).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import importlib.metadata
import json
import math
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

from trainkit.checkpoint import (CHECKPOINT_VERSION, HISTORY_KEYS, DamagedCheckpoint, OutDirInUse, atomic_save,
                                 atomic_write_text, contents_problem, disk_full, first_non_finite, lock_out_dir,
                                 open_checkpoint, remove_stale_temporaries, seal)
from trainkit.corpus import ByteTokenizer, TokenData, load_text, unigram_loss
from trainkit.device import pick_device
from trainkit.gpt import GPT, GPTConfig, param_counts  # noqa: F401 -- GPTConfig: exported from here too
from trainkit.precision import fp32_matmul_precision, use_tf32
from trainkit.runlog import RunLogger
from trainkit.train_config import MAX_STEPS, ConfigError, TrainConfig  # noqa: F401 -- exported from here too

class TrainingStopped(RuntimeError):
    """The run stopped itself while training (a lasting non-finite value); the last good checkpoint is kept. The
    command line prints it as one line and exits with 3."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT arrived (``signum`` says which). After one, the step in progress finished and latest.pt
    was written: ``saved_at == step``. A second one stops at once, but never in the middle of a checkpoint write (the
    file in hand is finished first): ``saved_at`` is then the step latest.pt holds (None: this run wrote none), and
    ``step`` None when training had not started. The message says which."""

    def __init__(self, signum: int, step: int | None, saved_at: int | None = None):
        self.signum, self.step, self.saved_at = signum, step, saved_at
        name = signal.Signals(signum).name
        if step is None:
            message = f"stopped by {name} before training started: no step ran and no checkpoint was written"
        elif saved_at == step:
            message = f"stopped by {name} after {step} steps: latest.pt written"
        elif saved_at is None:
            message = f"stopped by {name} after {step} steps (a second signal), before latest.pt was written"
        else:
            message = f"stopped by {name} after {step} steps (a second signal): latest.pt holds step {saved_at}"
        super().__init__(message)


class WriteFailed(OSError):
    """A checkpoint or the log could not be written (a full disk, a file-size limit): the message names the file,
    says why and what the disk still holds. The command line prints it as one line and exits with 3."""

    def __init__(self, message: str, cause: OSError | None = None):
        super().__init__(message)
        self.cause_errno = getattr(cause, "errno", None)


def _why_not_written(e: OSError, folder: Path) -> str:
    """Why a write failed, in words: a full disk said as such, also where the error has no errno to say it (a log
    that was never written: wandb's service hit the full disk, not this process)."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT) or (e.errno is None and disk_full(folder)):
        return ("the disk is full" if e.errno != errno.EDQUOT else "the disk quota is used up") + \
               f" ({e.strerror or 'No space left on device'}): free some space"
    return e.strerror or str(e) or type(e).__name__


# --------------------------------------------------------------------------------------------- helpers
NOT_A_GIT_REPOSITORY = "not a git repository"


def git_sha(repo_dir: str | os.PathLike | None = None) -> str:
    """The commit of the code that trains (default: the git checkout holding this file), with ``+dirty`` when the
    work tree differs from it: a change to a tracked file, staged or not, or an untracked file that is not ignored
    (a new module the run imports is code the commit does not hold). ``"not a git repository"`` outside a checkout,
    in a repository with no commit yet, or where git cannot run."""
    repo_dir = repo_dir or Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--verify", "HEAD"], cwd=repo_dir, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return NOT_A_GIT_REPOSITORY
        status = subprocess.run(["git", "status", "--porcelain"], cwd=repo_dir, capture_output=True, text=True,
                                timeout=10)
    except (OSError, subprocess.SubprocessError):   # no git, a repo_dir that does not exist, a hung git
        return NOT_A_GIT_REPOSITORY
    # a status that cannot be read is not proof of a clean tree: count it as dirty
    dirty = status.returncode != 0 or status.stdout.strip() != ""
    return head.stdout.strip() + ("+dirty" if dirty else "")


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


def _rng_state(device: torch.device) -> dict:
    """This process's random states, as tensors and plain numbers (loadable with ``weights_only=True``).

    "cuda" holds one state, that of the generator this rank draws from on a GPU (its own device's; [] off CUDA),
    not ``get_rng_state_all()``: the states of GPUs the run never touched would tie the checkpoint to the number of
    GPUs of the machine that wrote it, and resuming where fewer are visible could not restore them."""
    kind, key, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": {"kind": kind, "key": torch.from_numpy(key.astype(np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "gauss": float(gauss)},
            "cuda": [torch.cuda.get_rng_state(device)] if device.type == "cuda" else []}


def _set_rng_state(state: dict, device: torch.device) -> None:
    """Restore what ``_rng_state`` saved. A CUDA state is restored only on CUDA: into this rank's device where the
    checkpoint holds one (the generator it drew from, whichever GPU index it has here), into every GPU where it
    holds several (a checkpoint of an earlier trainer, which kept every visible GPU's; ``Trainer`` first checks that
    this machine has that many). Off CUDA, or from a CPU checkpoint, nothing CUDA's is touched: the device kind
    changed, and the resume records that (``Trainer._check_resume_settings``)."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    cuda = list(state.get("cuda") or [])
    if device.type == "cuda" and len(cuda) == 1:
        torch.cuda.set_rng_state(cuda[0], device)
    elif device.type == "cuda" and cuda:
        torch.cuda.set_rng_state_all(cuda)


def _prepare_out_dir(out_dir: Path) -> None:
    """Create ``out_dir`` and check that files can be written in it: one line now rather than a traceback at the first
    checkpoint."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"out_dir {str(out_dir)!r} is a file, not a folder") from None
    except NotADirectoryError:
        raise ConfigError(f"out_dir {str(out_dir)!r} is inside a file, not a folder") from None
    except OSError as e:
        raise ConfigError(f"cannot create out_dir {str(out_dir)!r}: {e.strerror}") from None
    try:
        with tempfile.TemporaryFile(dir=out_dir):   # the way to know: permissions, a read-only disk, root's rights
            pass
    except OSError as e:
        raise ConfigError(f"out_dir {str(out_dir)!r} is not writable: {e.strerror}") from None


def _memory_bytes(device: torch.device) -> tuple[int, str] | None:
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


def _check_model_fits(cfg: "TrainConfig", device: torch.device) -> str:
    """Refuse, in one line, a model whose training state cannot fit in the memory this process may use, before
    allocating it (the allocator's own refusal is a traceback; on a CPU a near miss swaps for hours instead, and under
    RLIMIT_AS the build grinds for minutes before it fails). Returns the estimate, in words."""
    with torch.device("meta"):                     # shapes only, no memory
        one, two = (param_counts(GPT(dataclasses.replace(cfg.model, n_layer=n)))["total"] for n in (1, 2))
    params = one + (cfg.model.n_layer - 1) * (two - one)   # every block adds the same number of parameters
    # fp32 weights and gradients, and the optimiser's moments: two for AdamW, one for Lion (activations come on top)
    need = params * 4 * (4 if cfg.optimizer == "adamw" else 3)
    memory = _memory_bytes(device)
    if memory is not None and need > memory[0]:
        have, where = memory
        raise ConfigError(f"the model is too large: {params:_} parameters need about {need / 1e9:_.1f} GB for "
                          f"weights, gradients and optimiser state, and {where} {have / 1e9:.1f} GB; "
                          "choose smaller model.* settings")
    return f"{params:_} parameters, about {need / 1e9:_.1f} GB to train"


def _check_gpus_for_ranks(local_rank: int) -> None:
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


def _setup_precision(requested: str, device: torch.device) -> str:
    """The Trainer's precision set-up: the resolved precision; on CUDA, TF32 turned on for the process."""
    precision = resolve_precision(requested, device)
    if device.type == "cuda":
        # process-wide: from here on every fp32 matmul and convolution in this process (this run's "fp32", and the
        # fp32 parts of a bf16 run) is TF32 on Ampere and later; the manifest records it as fp32_matmul "tf32"
        use_tf32()
    return precision


def load_data(cfg: TrainConfig) -> TokenData:
    tok = ByteTokenizer()
    if cfg.data == "pydoc":
        text = load_text()
    else:
        path = Path(cfg.data)
        if not path.exists():
            raise ConfigError(f"data file not found: {path} (use data='pydoc' for the built-in corpus)")
        if not path.is_file():   # /dev/null, a folder, a pipe (which would block): only a regular file is text
            kind = "a folder" if path.is_dir() else "not a regular file (a device, a pipe or a socket)"
            raise ConfigError(f"data {path} is {kind}; data must be a UTF-8 text file or 'pydoc'")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(f"data file {path} is not UTF-8 text: {e}") from None
        except OSError as e:
            raise ConfigError(f"cannot read data file {path}: {e.strerror or e}") from None
        if not text:   # TokenData would fail in torch.frombuffer, with a message about buffer lengths
            raise ConfigError(f"data file {path} is empty")
    data = TokenData.from_text(text, tok, val_fraction=cfg.val_fraction)
    T = cfg.model.block_size
    for split in ("train", "val"):
        if len(data.split(split)) < 2 * T + 1:
            raise ConfigError(f"data {cfg.data!r}: the {split} split has {len(data.split(split))} tokens, too few "
                              f"for block_size {T}")
    return data


# How long a checkpoint waits for the logger to put the steps it covers on disk (wandb's service writes its file every
# 0.1 s here: seconds are plenty). A full disk is not waited for at all (Trainer._flush_logger).
LOG_FLUSH_TIMEOUT = 20.0


@contextlib.contextmanager
def _quiet_log_writer_threads():
    """TensorBoard writes its event file from a thread of its own. A write that fails there (a full disk) ends the
    thread with a traceback on stderr, and the writer keeps the error and raises it in the main thread at the next
    log() or flush(), where fit() reports it in one line. While fit() runs, that thread's traceback is left out."""
    previous = threading.excepthook

    def hook(args):
        if not (issubclass(args.exc_type, OSError) and type(args.thread).__name__ == "_AsyncWriterThread"):
            previous(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous


# On resume, these settings must equal the checkpoint's (the reason is the message's); with another value the resumed
# run would silently be another run. Every other setting may change: it applies from the resumed step on (the
# schedule, the optimiser's betas, eps and weight decay, clipping, precision, the cadence of evaluation, checkpoints
# and logs) and the manifest records it under "changed_on_resume". The data are compared by content.
MUST_MATCH_ON_RESUME = {
    "model": "the checkpoint's weights are this model's",
    "seed": "it fixes every step's batches",
    "batch_size": "it fixes every step's batches",
    "grad_accum": "it fixes every step's batches",
    "val_fraction": "it fixes the split into training and validation text",
    "optimizer": "the checkpoint's optimiser state belongs to this optimiser",
    "eval_batches": "best.pt was chosen by validation losses over this many batches",
}


def _checkpoint_device(state: dict) -> str | None:
    """The kind of device ("cpu", "cuda") a checkpoint's run trained on: recorded since the trainer keeps it; for an
    earlier checkpoint, "cpu" where no rank holds a CUDA random state (that trainer saved them wherever CUDA was
    available), else unknown (None)."""
    recorded = state.get("resolved", {}).get("device")
    if recorded is not None:
        return recorded
    return "cpu" if not any(rank.get("cuda") for rank in state["rng"]) else None


def _flatten(config: dict) -> dict:
    """{"lr": ..., "model.n_layer": ...}: a config dict with the model's settings as "model.<field>"."""
    flat = {k: v for k, v in config.items() if k != "model"}
    flat.update({f"model.{k}": v for k, v in config.get("model", {}).items()})
    return flat


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------------------------- trainer

@contextlib.contextmanager
def stop_signals_to(handler):
    """SIGTERM and SIGINT go to ``handler`` while the block runs; the handlers they had are back after it."""
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)

class Trainer:
    """The reference loop. Build it from a TrainConfig; ``fit()`` trains and returns the history.

    The lab replaces single parts by subclassing and overriding ``lr_at``, ``log_step``, ``should_skip``,
    ``autocast``, ``maybe_compile`` or ``before_clip``; the loop calls them exactly as the module doc says.

    logger: a ``trainkit.runlog.RunLogger`` to log into (the caller closes it); default: one of
        ``cfg.logger`` opened by ``fit()`` under ``out_dir`` on rank 0 and closed when ``fit()`` returns.

    The Trainer holds ``out_dir``'s lock (rank 0) from construction until ``close()``, or until it is garbage
    collected; Trainers of one process may share a folder. ``notes`` lists the one-line remarks of this start (a
    fallback to best.pt, settings changed on resume, temporaries removed), also printed on rank 0.
    """

    def __init__(self, cfg: TrainConfig, logger=None):
        if not isinstance(cfg, TrainConfig):
            raise TypeError(f"Trainer needs a TrainConfig, got {type(cfg).__name__}")
        cfg.validate()
        self.cfg = cfg
        self._external_logger = logger
        self.logger = logger
        self.out_dir = Path(cfg.out_dir)

        # -- distributed --------------------------------------------------------------------------------
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.ddp = self.world_size > 1
        self._owns_process_group = False
        if cfg.device == "auto":
            device = pick_device()
        elif cfg.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("device 'cuda' asked for, but CUDA is not available")
        else:
            device = torch.device(cfg.device)
        if self.ddp:
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            if device.type == "cuda":
                _check_gpus_for_ranks(local_rank)
                device = torch.device("cuda", local_rank)
                torch.cuda.set_device(device)
            if not dist.is_initialized():
                dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
                self._owns_process_group = True
            self.rank = dist.get_rank()
        else:
            self.rank = 0
        self.device = device
        self.is_main = self.rank == 0

        # -- precision ----------------------------------------------------------------------------------
        # a resume may replace "auto"'s choice with the checkpoint's (``_restore``): the precision the run began with
        self.precision = _setup_precision(cfg.precision, device)

        # -- data, model, optimiser, schedule --------------------------------------------------------------
        self.data = load_data(cfg)
        self.unigram_loss = unigram_loss(self.data.train, self.data.val, ByteTokenizer.vocab_size)
        need = cfg.batch_size * self.world_size
        windows = {split: (len(self.data.split(split)) - cfg.model.block_size) // cfg.model.block_size
                   for split in ("train", "val")}
        if need > windows["train"]:
            raise ConfigError(f"batch_size {cfg.batch_size} x {self.world_size} rank(s) needs {need} windows of "
                              f"{cfg.model.block_size} tokens; the train split has only {windows['train']}")
        # evaluation batches per rank: batch_size, or fewer where the validation split is small (the recipe's 1024)
        self.eval_batch_size = min(cfg.batch_size, windows["val"] // self.world_size)
        if self.eval_batch_size < 1:
            raise ConfigError(f"the val split has {windows['val']} windows of {cfg.model.block_size} tokens, fewer "
                              f"than the {self.world_size} rank(s)")
        size = _check_model_fits(cfg, device)
        torch.manual_seed(cfg.seed)                      # the same initial weights on every rank
        try:
            self.raw_model = GPT(cfg.model).to(device)
        except (MemoryError, RuntimeError) as e:   # fits on paper, not in the memory free right now
            if not isinstance(e, (MemoryError, torch.OutOfMemoryError)) and "allocate" not in str(e):
                raise
            # a MemoryError usually says nothing at all: name it rather than end the line at the colon
            first = (str(e).strip().splitlines() or [""])[0][:200] or f"{type(e).__name__} (no detail given)"
            raise ConfigError(f"out of memory building the model ({size}): {first}") from None
        self.counts = param_counts(self.raw_model)
        self.optimizer = self.build_optimizer()
        self._lr_table = self._build_lr_table()
        self.compile_status = {"requested": cfg.compile, "active": False, "reason": None}
        model: nn.Module = self.raw_model
        if self.ddp:
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
        self.model = self.maybe_compile(model) if cfg.compile else model
        seeds = rank_seeds(cfg.seed, self.rank)          # dropout (and any Python / NumPy draw) differs per rank
        torch.manual_seed(seeds["torch"])
        random.seed(seeds["python"])
        np.random.seed(seeds["numpy"])

        self.step = 0
        self.best_val = math.inf
        self.history: dict[str, list] = {k: [] for k in HISTORY_KEYS}   # the keys a checkpoint's history must have
        self.resumed_from: int | None = None
        self.resumed_file: str | None = None             # latest.pt, or best.pt where latest.pt was damaged
        self.resume_changes: dict[str, list] = {}        # setting -> [the checkpoint's value, this run's]
        self.notes: list[str] = []
        self._latest_saved_at: int | None = None
        self._skips_in_a_row = 0
        self._stop_signal: int | None = None             # set by SIGTERM / SIGINT while fit() runs
        self._writing = False                            # a checkpoint write is in progress: a signal waits for it
        self._late_signal: int | None = None             # a second signal that came during a write
        self._release_out_dir = lambda: None
        self._lock_problem: str | None = None

        # -- out_dir: checked, locked, cleaned; resume; manifest ---------------------------------------------
        if self.is_main:
            _prepare_out_dir(self.out_dir)
            try:
                self._release_out_dir, self._lock_problem = lock_out_dir(self.out_dir)
            except OutDirInUse:
                raise ConfigError(f"out_dir {cfg.out_dir!r} is in use by another run (it holds the folder's lock); "
                                  "wait for it to end or choose another out_dir") from None
            weakref.finalize(self, self._release_out_dir)    # a Trainer nobody closes lets go when collected
        try:
            if self.is_main:   # safe while we hold the lock: no other run is writing one
                removed = remove_stale_temporaries(self.out_dir)
                if removed:
                    self.note(f"removed {len(removed)} temporary file(s) of killed runs from {cfg.out_dir} "
                              f"({sum(size for _, size in removed) / 1e6:.1f} MB)")
            if cfg.resume:
                self._resume()
            self.manifest = self._manifest()
            if self.is_main:
                self._write_manifest()
        except BaseException:
            self._release_out_dir()
            raise

    # -- parts the lab may override ------------------------------------------------------------------------
    def build_optimizer(self) -> torch.optim.Optimizer:
        """AdamW (or Lion) with weight decay on matrices and embeddings, none on vectors (norm weights)."""
        cfg = self.cfg
        params = [p for p in self.raw_model.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        if cfg.optimizer == "lion":
            from lion_pytorch import Lion
            return Lion(groups, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
        extra = {"fused": True} if self.device.type == "cuda" else {}
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay,
                                 **extra)

    def _build_lr_table(self) -> list[float]:
        """The learning rate of every step 0..steps-1, read off torch's own schedulers on a throwaway optimiser.

        cosine: LinearLR from lr / warmup to lr over ``warmup`` steps, then CosineAnnealingLR down to
        lr * min_lr_ratio at the last step. wsd: the same warmup, ConstantLR at lr, then LinearLR down to
        lr * min_lr_ratio over the last ``decay_frac`` of the steps."""
        cfg = self.cfg
        sched = torch.optim.lr_scheduler
        dummy = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=cfg.lr)
        parts, milestones = [], []
        if cfg.warmup > 0:
            parts.append(sched.LinearLR(dummy, start_factor=1.0 / cfg.warmup, end_factor=1.0, total_iters=cfg.warmup))
            milestones.append(cfg.warmup)
        rest = cfg.steps - cfg.warmup
        if cfg.schedule == "cosine":
            parts.append(sched.CosineAnnealingLR(dummy, T_max=max(rest - 1, 1), eta_min=cfg.lr * cfg.min_lr_ratio))
        else:
            decay = max(1, min(rest, round(cfg.decay_frac * cfg.steps)))
            stable = rest - decay
            if stable > 0:
                parts.append(sched.ConstantLR(dummy, factor=1.0, total_iters=stable))
                milestones.append(cfg.warmup + stable)
            parts.append(sched.LinearLR(dummy, start_factor=1.0, end_factor=cfg.min_lr_ratio,
                                        total_iters=max(decay - 1, 1)))
        scheduler = parts[0] if len(parts) == 1 else sched.SequentialLR(dummy, parts, milestones=milestones)
        table = []
        for _ in range(cfg.steps):
            table.append(float(dummy.param_groups[0]["lr"]))
            dummy.step()
            scheduler.step()
        return table

    def lr_at(self, step: int) -> float:
        """The learning rate for optimiser step ``step`` (0-based); past the end, the last step's value."""
        return self._lr_table[min(max(step, 0), len(self._lr_table) - 1)]

    def autocast(self):
        """The context for forward passes: bf16 autocast when the precision says so, else nothing."""
        if self.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    compile_backend = "inductor"   # torch.compile's backend (a subclass may pick "eager": tracing, no code generated)

    def maybe_compile(self, model: nn.Module) -> nn.Module:
        """``torch.compile(model, backend=self.compile_backend)``, tried on one real-shaped forward and backward; if
        anything fails (no compiler, an unsupported platform), the eager model and the reason (in ``compile_status``)."""
        try:
            compiled = torch.compile(model, backend=self.compile_backend)
            x, y = self.data.get_batch("train", self.cfg.batch_size, self.cfg.model.block_size, step=0,
                                       seed=self.cfg.seed, device=self.device)
            with self.autocast():
                _, loss = compiled(x, y)
            loss.backward()
            self.optimizer.zero_grad(set_to_none=True)
            self.compile_status.update(active=True, reason=None)
            return compiled
        except Exception as e:  # noqa: BLE001 -- any failure means: run eager
            self.optimizer.zero_grad(set_to_none=True)
            first = (str(e).strip().splitlines() or [""])[0][:300]
            self.compile_status.update(active=False, reason=f"{type(e).__name__}: {first}")
            return model

    def before_clip(self, step: int) -> None:
        """Called after the gradients of step ``step`` are accumulated (and all-reduced), before clipping: a
        hook for injecting a fault. The reference does nothing."""

    def should_skip(self, grad_norm: torch.Tensor) -> bool:
        """True to drop this step's update: the reference skips when the global gradient norm is not finite."""
        return not bool(torch.isfinite(grad_norm))

    def log_step(self, step: int, stats: dict) -> None:
        """Log one optimiser step through ``self.logger`` (every ``log_every`` steps, on rank 0)."""
        if self.logger is None or step % self.cfg.log_every:
            return
        metrics = {"train/loss": stats["loss"], "lr": stats["lr"], "grad_norm": stats["grad_norm"],
                   "step_time": stats["step_time"], "tokens_per_s": stats["tokens"] / max(stats["step_time"], 1e-12),
                   "skipped": float(stats["skipped"])}
        if self.world_size > 1:
            for r, (t, ready) in enumerate(zip(stats["step_time_per_rank"], stats["ready_time_per_rank"])):
                metrics[f"step_time/rank{r}"] = t
                metrics[f"ready_time/rank{r}"] = ready
        self.logger.log(metrics, step=step)

    # -- the loop ----------------------------------------------------------------------------------------------
    def train_step(self, step: int) -> dict:
        """One optimiser step (see the module doc); returns the stats passed to ``log_step``."""
        cfg, model, opt = self.cfg, self.model, self.optimizer
        t0 = time.perf_counter()
        lr = self.lr_at(step)
        for group in opt.param_groups:
            group["lr"] = lr
        model.train()
        loss_sum = torch.zeros((), device=self.device)
        for micro in range(cfg.grad_accum):
            x, y = self.data.get_batch("train", cfg.batch_size, cfg.model.block_size, step=step * cfg.grad_accum + micro,
                                       seed=cfg.seed, rank=self.rank, world_size=self.world_size, device=self.device)
            last = micro == cfg.grad_accum - 1
            sync = contextlib.nullcontext() if (last or not self.ddp) else self._no_sync()
            with sync:
                with self.autocast():
                    _, loss = model(x, y)
                if last:  # this rank's own work so far; the backward below waits for the other ranks
                    if self.ddp and self.device.type == "cuda":
                        torch.cuda.synchronize(self.device)
                    ready_time = time.perf_counter() - t0
                (loss / cfg.grad_accum).backward()
            loss_sum += loss.detach().float()
        self.before_clip(step)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), cfg.max_grad_norm)
        skipped = self.should_skip(grad_norm)
        if self.ddp:  # every rank must agree (their gradients are the same unless a hook poisoned one rank's)
            flag = torch.tensor([float(skipped)], device=self.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            skipped = bool(flag.item())
        if not skipped:
            opt.step()
        opt.zero_grad(set_to_none=True)
        loss_value = loss_sum / cfg.grad_accum
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        step_time = time.perf_counter() - t0
        per_rank, ready_per_rank = [step_time], [ready_time]
        if self.ddp:  # the mean loss over ranks, every rank's step time and ready time (a straggler shows in the latter)
            gathered = [torch.zeros(3, device=self.device) for _ in range(self.world_size)]
            mine = torch.tensor([step_time, ready_time], device=self.device)
            dist.all_gather(gathered, torch.cat([loss_value.reshape(1), mine]))
            loss_value = torch.stack([g[0] for g in gathered]).mean()
            per_rank = [float(g[1]) for g in gathered]
            ready_per_rank = [float(g[2]) for g in gathered]
        return {"loss": float(loss_value), "lr": lr, "grad_norm": float(grad_norm),
                "tokens": cfg.batch_size * cfg.model.block_size * cfg.grad_accum * self.world_size,
                "step_time": step_time, "skipped": skipped, "step_time_per_rank": per_rank,
                "ready_time_per_rank": ready_per_rank}

    def _no_sync(self):
        inner = getattr(self.model, "_orig_mod", self.model)
        return inner.no_sync()

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean validation loss over ``eval_batches`` fixed batches (eval mode, no gradients, training's
        autocast); averaged over ranks, each rank taking its own slice of each batch. A batch holds
        ``self.eval_batch_size`` sequences per rank: ``batch_size``, or fewer where the validation split has
        fewer windows than batch_size x ranks."""
        cfg = self.cfg
        self.model.eval()
        total = torch.zeros((), device=self.device)
        for i in range(cfg.eval_batches):
            x, y = self.data.get_batch("val", self.eval_batch_size, cfg.model.block_size, step=i, seed=cfg.seed,
                                       rank=self.rank, world_size=self.world_size, device=self.device)
            with self.autocast():
                _, loss = self.model(x, y)
            total += loss.float()
        total /= cfg.eval_batches
        if self.ddp:
            dist.all_reduce(total)
            total /= self.world_size
        self.model.train()
        return float(total)

    def fit(self, steps: int | None = None) -> dict:
        """Train, stopping once ``steps`` optimiser steps have run (steps 0..steps-1, counted from the start of the
        run, a resumed one included; default ``cfg.steps``; the schedule always spans ``cfg.steps``), and return
        the history: lists "step", "loss", "lr", "grad_norm", "skipped", "step_time", "tokens", and "val_step"
        (the 0-based step after which each evaluation ran), "val_loss". Stopping early writes the latest
        checkpoint, so ``resume=True`` continues exactly from there.

        Raises ``TrainingStopped`` after ``cfg.max_consecutive_skips`` skipped steps in a row, ``WriteFailed`` when
        a checkpoint or the log cannot be written (a full disk), and ``Interrupted`` once the step in progress when
        SIGTERM or SIGINT arrived has finished and latest.pt holds it (or at once after a second one)."""
        cfg = self.cfg
        end = cfg.steps if steps is None else int(steps)
        if not 0 <= end <= cfg.steps:
            raise ValueError(f"fit(steps={steps}): must be between 0 and cfg.steps={cfg.steps}")
        owns_logger = False
        if self.logger is None and self.is_main and cfg.logger != "none":
            self.logger = RunLogger(cfg.logger, dir=self.out_dir, project="trainkit-capstone",
                                    config={**cfg.to_dict(), "manifest": self.manifest})
            owns_logger = True
        bar = None
        if cfg.progress and self.is_main and end > self.step:
            from tqdm.auto import tqdm
            bar = tqdm(total=end, initial=self.step, desc="train", file=sys.stdout, dynamic_ncols=True,
                       mininterval=0.5)
        closed = False
        try:
            with self._stop_on_signals(), _quiet_log_writer_threads():
                while self.step < end:
                    step = self.step
                    stats = self.train_step(step)
                    self.step = step + 1
                    for key in ("loss", "lr", "grad_norm", "skipped", "step_time", "tokens"):
                        self.history[key].append(stats[key])
                    self.history["step"].append(step)
                    if self.is_main:
                        self.log_step(step, stats)
                    # one skipped step is a bad batch; many in a row, a lasting fault (a NaN in a weight or in the
                    # optimiser state): every later step would be skipped too, so stop
                    self._skips_in_a_row = self._skips_in_a_row + 1 if stats["skipped"] else 0
                    if self._skips_in_a_row >= cfg.max_consecutive_skips:
                        raise TrainingStopped(self._lasting_fault(step))
                    if self.step % cfg.eval_every == 0 or self.step == cfg.steps:
                        val = self.evaluate()
                        self.history["val_step"].append(step)
                        self.history["val_loss"].append(val)
                        if self.is_main and self.logger is not None:
                            self.logger.log({"val/loss": val}, step=step)
                        if val < self.best_val:
                            self.best_val = val
                            self.save_checkpoint(self.out_dir / "best.pt")
                        self.save_checkpoint(self.out_dir / "latest.pt")
                    elif cfg.save_every and self.step % cfg.save_every == 0:
                        self.save_checkpoint(self.out_dir / "latest.pt")
                    if bar is not None:
                        bar.update(1)
                        post = {"loss": f"{stats['loss']:.3f}"}
                        if self.history["val_loss"]:
                            post["val"] = f"{self.history['val_loss'][-1]:.3f}"
                        bar.set_postfix(post, refresh=False)
                    if self._stop_requested():       # SIGTERM / SIGINT: keep this step, then stop
                        if self._latest_saved_at != self.step:
                            self.save_checkpoint(self.out_dir / "latest.pt")
                        raise Interrupted(self._stop_signal, self.step, self._latest_saved_at)
                if self._latest_saved_at != self.step:
                    self.save_checkpoint(self.out_dir / "latest.pt")   # stopped between saves: resumable from here
                if owns_logger:
                    closed = True
                    self._close_own_logger()
        except OSError as e:   # the only files the loop writes are checkpoints (WriteFailed already) and the log
            if isinstance(e, WriteFailed):
                raise
            raise self._log_write_failed(e) from None
        finally:
            if bar is not None:
                bar.close()
            if owns_logger and not closed:
                # the run is already ending with an exception, which says more than a failed close of its log
                with contextlib.suppress(OSError):
                    self._close_own_logger()
        return self.history

    def _close_own_logger(self) -> None:
        logger, self.logger = self.logger, None
        if logger is not None:
            logger.close()

    def _kept(self) -> str:
        """What the disk still holds for a resume, for the end of a message about a failed write."""
        if self._latest_saved_at is None:
            return "no checkpoint of this run was written"
        return f"latest.pt on disk keeps step {self._latest_saved_at}"

    def _log_write_failed(self, e: OSError) -> WriteFailed:
        """A failed write of the logger (TensorBoard's event file, wandb's run file), as one line."""
        where = getattr(e, "filename", None) or getattr(self.logger, "path", None) or self.out_dir
        backend = getattr(self.logger, "backend", None) or self.cfg.logger
        why = _why_not_written(e, self.out_dir)
        return WriteFailed(f"cannot write the {backend} log in {where}: {why}; {self._kept()}", e)

    def _flush_logger(self) -> None:
        """Put every logged step on disk before a checkpoint that covers it exists. wandb's flush waits for its
        service to write the run file: on a full disk that never happens, so it is not waited for, and any other
        wait is bounded (``LOG_FLUSH_TIMEOUT``)."""
        logger = self.logger
        if logger is None or not hasattr(logger, "flush"):
            return
        try:
            if isinstance(logger, RunLogger):
                if logger.backend == "wandb" and disk_full(logger.path or self.out_dir):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                logger.flush(timeout=LOG_FLUSH_TIMEOUT)
            else:
                logger.flush()
        except OSError as e:   # TimeoutError is one
            raise self._log_write_failed(e) from None

    def _lasting_fault(self, step: int) -> str:
        n = self._skips_in_a_row
        kept = (f"latest.pt keeps step {self._latest_saved_at}, the last finite state" if self._latest_saved_at
                else "no checkpoint was written")
        return (f"stopping after step {step}: the last {n} steps ({step - n + 1}..{step}) were all skipped "
                f"(non-finite gradient norm, max_consecutive_skips={self.cfg.max_consecutive_skips}), so a weight or "
                f"the optimiser state is not finite or a setting makes it so; {kept}")

    @contextlib.contextmanager
    def _stop_on_signals(self):
        """While fit() runs, SIGTERM (a cluster's pre-emption notice) and SIGINT (Ctrl-C, a notebook's interrupt
        button) ask the loop to stop after the step in progress. A second one stops at once, but not during a
        checkpoint write: that finishes first, so the files on disk stay whole and ``Interrupted`` says truly which
        step latest.pt holds. Signal handlers belong to the main thread: elsewhere nothing changes."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def ask_to_stop(signum, frame):
            if self._stop_signal is None:
                self._stop_signal = signum
            elif self._writing:
                # raised here, it would come out of torch's zip writer (which calls back into Python for every write)
                # as a RuntimeError, or abort the process (SIGABRT) from a C++ destructor: the file in hand is
                # finished first, and save_checkpoint acts on the signal then
                self._late_signal = signum
            else:
                raise Interrupted(signum, self.step, self._latest_saved_at)

        self._stop_signal = self._late_signal = None
        with stop_signals_to(ask_to_stop):
            yield

    def _stop_requested(self) -> bool:
        flag = self._stop_signal or 0
        if self.ddp:   # every rank must stop after the same step: they write the checkpoint together
            t = torch.tensor([float(flag)], device=self.device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            flag = int(t.item())
        if flag:
            self._stop_signal = flag
        return bool(flag)

    # -- checkpoints -------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        rng = _rng_state(self.device)
        if self.ddp:
            every = [None] * self.world_size
            dist.all_gather_object(every, rng)
        else:
            every = [rng]
        return {"version": CHECKPOINT_VERSION, "step": self.step, "best_val": self.best_val,
                "model": self.raw_model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "schedule": {"kind": self.cfg.schedule, "lr_next": self.lr_at(self.step)},
                "rng": every, "world_size": self.world_size, "history": self.history,
                "skips_in_a_row": self._skips_in_a_row, "data": self.data.describe(),
                "config": self.cfg.to_dict(), "compile_status": dict(self.compile_status),
                # the precision this run trains in (what "auto" became at its first start: a resume with "auto"
                # keeps it) and the kind of device it ran on
                "resolved": {"precision": self.precision, "device": self.device.type}}

    def save_checkpoint(self, path: str | os.PathLike) -> None:
        """Write everything needed to resume exactly, with its checksum, atomically; under DDP only rank 0 writes
        (every rank must call it: the RNG states are gathered). The logger is flushed first, so the log on disk
        holds every step the checkpoint covers. Raises ``TrainingStopped`` rather than write non-finite weights or
        optimiser state (the file on disk keeps its last finite state), and ``WriteFailed`` (an OSError) when the
        disk refuses the write or the log (the file on disk is the previous one, whole)."""
        path = Path(path)
        bad = first_non_finite(self.raw_model.state_dict(), self.optimizer.state_dict())
        if bad is not None:   # the same on every rank (DDP keeps the weights equal), so all ranks stop together
            kept = f"{path.name} on disk keeps its last finite state" if path.exists() else "no file was written"
            raise TrainingStopped(f"not writing {path.name} after {self.step} steps: {bad} is not finite; {kept}")
        # A second SIGTERM / SIGINT from here on waits (see _stop_on_signals) until the save is done, on every rank
        # (each holds it at the barrier, where they stop together); raised mid-write, it would come out of torch's zip
        # writer as a RuntimeError, or abort the process.
        self._writing = True
        try:
            state = self.state_dict()
            if self.is_main:
                problem = contents_problem(state)   # the table open_checkpoint checks: what is written can be read
                if problem is not None:
                    raise RuntimeError(f"the trainer built a checkpoint that open_checkpoint would refuse: "
                                       f"{path.name} {problem}")
                try:
                    self._flush_logger()
                    atomic_save(seal(state), path)
                except OSError as e:   # the file on disk is the previous one, whole (atomic_save)
                    if isinstance(e, WriteFailed):
                        raise
                    raise WriteFailed(f"cannot write {path} after {self.step} steps: "
                                      f"{_why_not_written(e, path.parent)}; {self._kept()}", e) from None
            if path.name == "latest.pt":
                self._latest_saved_at = self.step
            if self.ddp:
                dist.barrier()
        finally:
            self._writing = False
        if self._late_signal is not None and path.name != "best.pt":
            # a second signal came during the save, now finished; best.pt is always followed by latest.pt: the stop
            # comes after that one, so that latest.pt holds the step
            raise Interrupted(self._late_signal, self.step, self._latest_saved_at)

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """Restore a checkpoint written by ``save_checkpoint``: it must pass its checks (``open_checkpoint``) and
        agree with this run on every setting of ``MUST_MATCH_ON_RESUME`` and on the world size."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no checkpoint at {path}")
        try:
            state = open_checkpoint(path)
            self._check_optimizer_fits(state)
        except DamagedCheckpoint as e:
            raise ValueError(f"{path} {e}") from None
        self._restore(state, path.name)

    def _resume(self) -> None:
        """resume=True: continue from latest.pt; from best.pt, saying so, when latest.pt cannot be trusted; refuse
        when neither can; say so when out_dir holds no checkpoint at all."""
        damaged = []
        for name in ("latest.pt", "best.pt"):
            path = self.out_dir / name
            if not path.exists():
                continue
            try:
                state = open_checkpoint(path)
                self._check_optimizer_fits(state)
            except DamagedCheckpoint as e:   # a file that fails a check is treated alike, whichever check it fails
                damaged.append(f"{name} {e}")
                continue
            if damaged:
                self.note(f"{damaged[0]}; resuming from {name} (step {state['step']}) instead")
            self._restore(state, name)
            self.resumed_from, self.resumed_file = self.step, name
            return
        if damaged:
            raise ConfigError(f"cannot resume from {self.cfg.out_dir}: {'; '.join(damaged)}; move the files away "
                              "to start afresh")
        self.note(f"resume=true, but {self.cfg.out_dir} holds no checkpoint: starting from step 0")

    def _check_optimizer_fits(self, state: dict) -> None:
        """What open_checkpoint cannot check alone: that the optimiser state pairs with this trainer's parameters
        (torch's load_state_dict pairs them by position and checks only the counts; a moment of the wrong shape would
        fail at the first step, mid-run). Raises ``DamagedCheckpoint``. A checkpoint of another model or optimiser
        is left to ``_check_resume_settings``, which refuses it naming the setting."""
        then = state["config"]
        if then.get("model") != self.cfg.model.to_dict() or then.get("optimizer") != self.cfg.optimizer:
            return
        saved, live = state["optimizer"]["param_groups"], self.optimizer.param_groups
        if [len(g["params"]) for g in saved] != [len(g["params"]) for g in live]:
            raise DamagedCheckpoint(f"has a bad 'optimizer': its parameter groups hold "
                                    f"{[len(g['params']) for g in saved]} parameters, this trainer's "
                                    f"{[len(g['params']) for g in live]}")
        params = dict(zip((i for g in saved for i in g["params"]), (p for g in live for p in g["params"])))
        kinds = {frozenset(entry) for entry in state["optimizer"]["state"].values()}
        if len(kinds) > 1:
            raise DamagedCheckpoint("has a bad 'optimizer': its parameters hold different kinds of state "
                                    f"({' / '.join(sorted(','.join(sorted(k)) for k in kinds))})")
        for i, entry in state["optimizer"]["state"].items():
            for key, value in entry.items():
                if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != params[i].shape:
                    raise DamagedCheckpoint(f"has a bad 'optimizer': its {key} of parameter {i} has shape "
                                            f"{list(value.shape)}, the parameter {list(params[i].shape)}")

    def _restore(self, state: dict, name: str) -> None:
        self._check_optimizer_fits(state)
        self._check_resume_settings(state, name)
        self._keep_precision(state, name)
        # the checkpoint gives the optimiser's state (moments, step counts); its hyperparameters (lr, betas, eps,
        # weight decay) are this run's, which load_state_dict would otherwise overwrite with the checkpoint's
        hyper = [{k: v for k, v in group.items() if k != "params"} for group in self.optimizer.param_groups]
        self.raw_model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for group, settings in zip(self.optimizer.param_groups, hyper):
            group.update(settings)
        self.step = int(state["step"])
        self.best_val = float(state["best_val"])
        self.history = state["history"]
        self._skips_in_a_row = int(state["skips_in_a_row"])
        self._latest_saved_at = self.step
        _set_rng_state(state["rng"][self.rank], self.device)

    def _check_resume_settings(self, state: dict, name: str) -> None:
        """Refuse (one line naming the setting) a resume that would silently be another run; record every other
        changed setting in ``self.resume_changes`` (and say so)."""
        if state["world_size"] != self.world_size:
            raise ConfigError(f"cannot resume from {name}: it was written by {state['world_size']} rank(s) and this "
                              f"run has {self.world_size}; exact resume needs the same world size")
        then, now = _flatten(state["config"]), _flatten(self.cfg.to_dict())
        changes = {}
        for key in sorted(set(then) | set(now)):
            old, new = then.get(key), now.get(key)
            # where the run lives is not a setting of the run: a copied or moved folder resumes the same run
            if key in ("resume", "out_dir") or old == new:
                continue
            why = MUST_MATCH_ON_RESUME.get(key.split(".")[0])
            if why is not None:
                raise ConfigError(f"cannot resume from {name}: {key} is {old!r} there and {new!r} here, and a resumed "
                                  f"run must keep it ({why}); set it back, or start afresh in another out_dir")
            changes[key] = [old, new]
        if state["data"]["sha256"] != self.data.sha256():   # the same text under another path is fine
            raise ConfigError(f"cannot resume from {name}: the data are not the checkpoint's (token sha256 "
                              f"{state['data']['sha256'][:12]}... there, {self.data.sha256()[:12]}... here)")
        if self.cfg.steps < state["step"]:
            raise ConfigError(f"cannot resume from {name}: it has run {state['step']} steps, more than "
                              f"steps={self.cfg.steps}")
        cuda_states = len(state["rng"][self.rank].get("cuda") or [])
        if self.device.type == "cuda" and cuda_states > torch.cuda.device_count():
            # only a checkpoint of an earlier trainer, which saved every visible GPU's generator, holds several
            raise ConfigError(f"cannot resume from {name}: its rank {self.rank} holds the random states of "
                              f"{cuda_states} CUDA GPUs and this machine has {torch.cuda.device_count()}; an exact "
                              f"resume needs the same GPUs: resume where {cuda_states} are visible, or start afresh "
                              "in another out_dir")
        ran_on = _checkpoint_device(state)
        if ran_on is not None and ran_on != self.device.type:
            # the config may say "auto" both times: the device kind is compared as resolved, and recorded
            changes["resolved.device"] = [ran_on, self.device.type]
            self.note(f"resuming from {name} on {self.device.type} a run that ran on {ran_on} until step "
                      f"{state['step']}: from here on it is not bit-identical to a run that never stopped (other "
                      "kernels, other random generators); an exact resume needs the same kind of device")
        self.resume_changes = changes
        if changes:
            self.note(f"resuming from {name} with changed settings, applied from step {state['step']} on: "
                      + ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items()))

    def _keep_precision(self, state: dict, name: str) -> None:
        """precision="auto" keeps what it became at the run's first start (the checkpoint's), so that resuming on
        another machine never changes the numerics without a word; an explicit precision applies as asked (a
        change from the checkpoint's config is recorded like any other)."""
        kept = state.get("resolved", {}).get("precision")
        if kept is None and _checkpoint_device(state) == "cpu":
            kept = "fp32"   # a checkpoint of an earlier trainer, from a CPU run: "auto" meant fp32 there
        try:
            precision = resolve_precision(self.cfg.precision, self.device, kept=kept)
        except ConfigError as e:
            raise ConfigError(f"cannot resume from {name}: {e}") from None
        if self.cfg.precision == "auto" and kept is not None:
            fresh = resolve_precision("auto", self.device)
            if fresh != kept:
                self.note(f"precision auto stays {kept}, what this run has trained in since its first start (a new "
                          f"run here would pick {fresh}); set precision={fresh} to change it from step "
                          f"{state['step']} on (the manifest records the change)")
        self.precision = precision

    def note(self, message: str) -> None:
        """Keep a one-line remark about this start in ``notes`` and print it (rank 0, stdout)."""
        self.notes.append(message)
        if self.is_main:
            print(f"note: {message}", flush=True)

    # -- manifest -------------------------------------------------------------------------------------------
    def _manifest(self) -> dict:
        on_cuda = self.device.type == "cuda"
        return {"config": self.cfg.to_dict(), "git_sha": git_sha(), "torch": torch.__version__,
                "python": platform.python_version(), "platform": platform.platform(),
                "versions": {name: _version(name) for name in ("numpy", "wandb", "tensorboard", "lion-pytorch")},
                "command": list(sys.argv), "threads": torch.get_num_threads(),
                # None on a CPU run
                "cuda": torch.version.cuda if on_cuda else None,
                "cudnn": torch.backends.cudnn.version() if on_cuda else None,
                "gpu": torch.cuda.get_device_name(self.device) if on_cuda else None,
                # how this run's fp32 matmuls compute: "tf32" on a GPU that has it (turned on above), else "ieee"
                "fp32_matmul": fp32_matmul_precision(self.device),
                "tokenizer": self.data.tokenizer.describe(), "data": {"source": self.cfg.data, **self.data.describe()},
                "seed": self.cfg.seed, "world_size": self.world_size, "device": str(self.device),
                "precision": self.precision, "compile": dict(self.compile_status), "params": self.counts,
                "unigram_val_loss": self.unigram_loss, "resumed_from_step": self.resumed_from,
                "resumed_from_file": self.resumed_file, "changed_on_resume": self.resume_changes,
                "out_dir_lock": self._lock_problem or "held", "notes": list(self.notes),
                "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def _write_manifest(self) -> None:
        """manifest.json: this start's manifest, and under "previous_starts" those of the starts it resumed (oldest
        first), so a resumed run says what each part of it ran with."""
        path = self.out_dir / "manifest.json"
        previous = []
        if self.resumed_from is not None:
            try:
                before = json.loads(path.read_text())
                previous = before.pop("previous_starts", []) + [before]
            except (OSError, ValueError, AttributeError):   # missing or unreadable: the history starts here
                self.note(f"{path.name} of the run resumed from was missing or unreadable: its history is lost")
        text = json.dumps({**self.manifest, "previous_starts": previous}, indent=2, sort_keys=True, default=str)
        try:
            atomic_write_text(text + "\n", path)
        except OSError as e:   # a full disk, a file-size limit: no temporary is left behind
            raise ConfigError(f"cannot write {path}: {e.strerror or e}") from None

    def close(self) -> None:
        """Close a logger this Trainer opened and a process group it started; let go of out_dir's lock."""
        self._close(graceful=True)

    def _close(self, graceful: bool) -> None:
        if self.logger is not None and self._external_logger is None:
            self.logger.close()
            self.logger = None
        if self._owns_process_group and dist.is_initialized():
            self._end_process_group(graceful)
        self._release_out_dir()

    def _end_process_group(self, graceful: bool) -> None:
        # One last barrier, so that no rank tears its connections down while a peer is still in a collective (none
        # while an exception propagates: the other ranks may never reach it). destroy_process_group() then forgets
        # the group; gloo's own threads live on (DDP imports torch._dynamo, which keeps the group) until the
        # interpreter exits, which is why the command line ends a multi-rank run with os._exit (see the end).
        if graceful:
            dist.barrier()
        dist.destroy_process_group()
        self._owns_process_group = False

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self._close(graceful=exc_type is None)


# --------------------------------------------------------------------------------------------- CLI
PRESETS = {"tiny": TrainConfig.tiny, "gpu": TrainConfig.gpu, "recipe": TrainConfig.seed_recipe,
           "auto": TrainConfig.for_device}


def config_from_args(argv: list[str] | None = None) -> tuple[TrainConfig, int | None]:
    parser = argparse.ArgumentParser(prog="python -m trainkit.train",
                                     description="Train the capstone GPT on Python's reference text.")
    parser.add_argument("--config", default="auto",
                        help="tiny, gpu, recipe, auto (tiny on a CPU, gpu on a CUDA GPU) or a JSON/TOML file "
                             "(default: auto)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting, e.g. --set lr=1e-3 --set model.n_layer=2 (repeatable)")
    parser.add_argument("--stop-at", type=int, default=None, metavar="K",
                        help="stop once K optimiser steps have run (steps 0..K-1); the schedule still spans `steps`, "
                             "the latest checkpoint is written, and --set resume=true continues from it")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    args = parser.parse_args(argv)
    if args.config in PRESETS:
        cfg = PRESETS[args.config]()
    else:
        cfg = TrainConfig.from_file(args.config)
    cfg = cfg.with_flags(args.set)
    if args.print_config:
        print(json.dumps(cfg.to_dict(), indent=2))
        raise SystemExit(0)
    if args.stop_at is not None and not 0 <= args.stop_at <= cfg.steps:
        raise ConfigError(f"--stop-at must be between 0 and steps ({cfg.steps}), got {args.stop_at}")
    return cfg, args.stop_at


@contextlib.contextmanager
def _signals_stop_the_command(progress: dict):
    """Outside fit() (which installs its own handlers), SIGTERM and SIGINT end the command with one line and 128 + the
    signal's number, not a traceback (SIGINT's KeyboardInterrupt) or a silent death (SIGTERM's default action):
    ``progress`` holds the Trainer once there is one, to say what was trained and saved, and "over" once the command
    has ended (its last line said): a signal after that changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        if progress.get("over"):
            return
        trainer = progress.get("trainer")
        if trainer is None:
            raise Interrupted(signum, None)
        raise Interrupted(signum, trainer.step, trainer._latest_saved_at)

    with stop_signals_to(stop):
        yield


def main(argv: list[str] | None = None) -> int:
    """The command line. Exit codes: 0 done; 2 refused to start; 3 stopped while training, the last good checkpoint
    kept (lasting non-finite values, a checkpoint or log write that failed: a full disk); 128 + the signal's number
    after SIGTERM or SIGINT (the line says what latest.pt holds). Errors are one line on stderr."""
    progress: dict = {}
    with _signals_stop_the_command(progress):
        try:
            code = _main(argv, progress)
            progress["over"] = True
        except Interrupted as e:   # also one that lands just after _main returned: what it says is still true
            progress["over"] = True
            trainer = progress.get("trainer")
            if trainer is None or trainer.is_main:
                hint = ": resume with --set resume=true" if e.saved_at is not None else ""
                print(f"{e}{hint}", file=sys.stderr)
            code = 128 + e.signum
    return code


def _main(argv: list[str] | None, progress: dict) -> int:
    try:
        cfg, stop_at = config_from_args(argv)
        trainer = Trainer(cfg)
    except (ConfigError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    progress["trainer"] = trainer
    with trainer:
        if trainer.is_main:
            c = trainer.counts
            compiled = ("compiled" if trainer.compile_status["active"] else
                        f"eager ({trainer.compile_status['reason']})" if cfg.compile else "eager")
            resumed = ("" if trainer.resumed_from is None else f" | resumed at step {trainer.resumed_from}"
                       + ("" if trainer.resumed_file == "latest.pt" else f" (from {trainer.resumed_file})"))
            print(f"device {trainer.device} x {trainer.world_size} | {trainer.precision} | {compiled} | "
                  f"params {c['total'] / 1e6:.2f}M ({c['non_embedding'] / 1e6:.2f}M non-embedding) | "
                  f"unigram val loss {trainer.unigram_loss:.4f}" + resumed)
        first, t0 = trainer.step, time.perf_counter()
        try:
            trainer.fit(steps=stop_at)
        except (TrainingStopped, OSError) as e:   # OSError: a checkpoint or log write failed (WriteFailed)
            print(f"error: {e}", file=sys.stderr)
            return 3
        if trainer.is_main:
            print(summary_line(trainer, first, time.perf_counter() - t0, stop_at))
    return 0


def summary_line(trainer: Trainer, first: int, seconds: float, stop_at: int | None) -> str:
    """The CLI's last line: what this process ran (from step ``first`` to ``trainer.step``), the last evaluation
    (this run's or the checkpoint's), and how to go on when ``--stop-at`` ended the run early."""
    cfg, history, done = trainer.cfg, trainer.history, trainer.step
    if done == first:
        return (f"done: no step ran: {done} of {cfg.steps} optimiser steps had already run"
                + (f" (--stop-at {stop_at})" if stop_at is not None and stop_at < cfg.steps else "")
                + f" | checkpoints in {trainer.out_dir}")
    if history["val_loss"]:
        evaluation = (f"last evaluation (after {history['val_step'][-1] + 1} steps): val loss "
                      f"{history['val_loss'][-1]:.4f} (best {trainer.best_val:.4f}, "
                      f"unigram {trainer.unigram_loss:.4f})")
    else:
        evaluation = "no evaluation yet"
    line = (f"done: ran steps {first}..{done - 1} ({done - first} steps) in {seconds:.1f} s | {evaluation} | "
            f"checkpoints in {trainer.out_dir}")
    if done < cfg.steps:   # only --stop-at ends a run before cfg.steps
        line += f" | stopped early at {done} of {cfg.steps} steps: resume with --set resume=true"
    return line


if __name__ == "__main__":
    # main() handles both signals while it runs and puts these back when it returns: from then on the command has said
    # its last line, and a late signal (Ctrl-C pressed twice after a fast stop) must not turn the interpreter's
    # shutdown into a traceback or another exit code
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    code = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # Under torchrun, skip the interpreter's teardown: gloo's threads outlive destroy_process_group() (see
        # Trainer._end_process_group), and freeing their work while Python is being torn down can abort a rank
        # (SIGABRT) after a run that finished. Everything is on disk by now (fsynced checkpoints, a closed logger).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
