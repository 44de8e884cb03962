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

This module is the command line. The loop is ``trainkit.capstone.trainer.Trainer``; its components are the other
modules of ``trainkit.capstone``: the settings (``config``: ``TrainConfig``), the model (``gpt``), the data checks
(``data``), the memory estimate (``memory``), the precision policy (``precision``), torchrun (``distributed``), the
checkpoint files, the folder's lock and the resume rules (``checkpoint``), the manifest (``manifest``) and the signals
(``signals``). This module exports their names too (``from trainkit.train import TrainConfig, Trainer``).

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
  wrong type or range (one table of key -> check, ``trainkit.capstone.checkpoint.CONTENTS``, which every write is
  checked against too), or whose optimiser state does not fit this model's parameters: resume falls back to
  ``best.pt`` with a note, or refuses (``trainkit.capstone.checkpoint``); a checkpoint of the earlier trainer (version
  1) is named as such;
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
import json
import os
import signal
import sys
import threading
import time

# Everything below is exported from here as before the split (``from trainkit.train import ...``, and tests that
# patch ``trainkit.train.torch``): the names of the components, and the old private names as aliases of the new ones.
import numpy as np  # noqa: F401
import torch  # noqa: F401
import torch.distributed as dist  # noqa: F401
import torch.nn as nn  # noqa: F401

from trainkit.capstone.checkpoint import (CHECKPOINT_VERSION, HISTORY_KEYS, MUST_MATCH_ON_RESUME,  # noqa: F401
                                          DamagedCheckpoint, OutDirInUse, TrainingStopped, WriteFailed, _flatten,
                                          atomic_save, atomic_write_text, contents_problem, disk_full,
                                          first_non_finite, lock_out_dir, open_checkpoint, remove_stale_temporaries,
                                          seal)
from trainkit.capstone.checkpoint import checkpoint_device as _checkpoint_device  # noqa: F401
from trainkit.capstone.checkpoint import prepare_out_dir as _prepare_out_dir  # noqa: F401
from trainkit.capstone.checkpoint import rng_state as _rng_state  # noqa: F401
from trainkit.capstone.checkpoint import set_rng_state as _set_rng_state  # noqa: F401
from trainkit.capstone.checkpoint import why_not_written as _why_not_written  # noqa: F401
from trainkit.capstone.config import MAX_STEPS, ConfigError, TrainConfig  # noqa: F401
from trainkit.capstone.data import load_data  # noqa: F401
from trainkit.capstone.distributed import check_gpus_for_ranks as _check_gpus_for_ranks  # noqa: F401
from trainkit.capstone.distributed import rank_seeds  # noqa: F401
from trainkit.capstone.gpt import GPT, GPTConfig, param_counts  # noqa: F401
from trainkit.capstone.manifest import NOT_A_GIT_REPOSITORY, git_sha  # noqa: F401
from trainkit.capstone.manifest import package_version as _version  # noqa: F401
from trainkit.capstone.memory import check_model_fits as _check_model_fits  # noqa: F401
from trainkit.capstone.memory import memory_bytes as _memory_bytes  # noqa: F401
from trainkit.capstone.precision import resolve_precision  # noqa: F401
from trainkit.capstone.precision import setup_precision as _setup_precision  # noqa: F401
from trainkit.capstone.signals import Interrupted, stop_signals_to
from trainkit.capstone.trainer import LOG_FLUSH_TIMEOUT, Trainer, _quiet_log_writer_threads  # noqa: F401
from trainkit.corpus import ByteTokenizer, TokenData, load_text, unigram_loss  # noqa: F401
from trainkit.device import pick_device  # noqa: F401
from trainkit.precision import fp32_matmul_precision, use_tf32  # noqa: F401
from trainkit.runlog import RunLogger  # noqa: F401


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
        # trainkit.capstone.distributed.end_process_group), and freeing their work while Python is being torn down can
        # abort a rank (SIGABRT) after a run that finished. Everything is on disk by now (fsynced checkpoints, a closed
        # logger).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
