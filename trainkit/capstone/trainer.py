"""The capstone's training loop, ``Trainer``: the class lab 8 reads top to bottom and subclasses.

What one optimiser step does, in order, is in ``trainkit.train``'s module doc (the command line over this class).
The parts a lab overrides are methods here (``lr_at``, ``log_step``, ``should_skip``, ``autocast``, ``maybe_compile``
with ``compile_backend``, ``before_clip``, ``build_optimizer``); the rest is one component per concern, each in its own
module of ``trainkit.capstone``: the settings (``config``), the model (``gpt``), the data checks (``data``), the
memory estimate (``memory``), the precision policy (``precision``), torchrun (``distributed``), checkpoints and
resume (``checkpoint``), the manifest (``manifest``) and the signals that stop a run (``signals``).
"""
from __future__ import annotations

import contextlib
import errno
import math
import os
import random
import sys
import threading
import time
import weakref
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

from trainkit.capstone import checkpoint, distributed
from trainkit.capstone.checkpoint import (HISTORY_KEYS, OutDirInUse, TrainingStopped, WriteFailed, disk_full,
                                          lock_out_dir, remove_stale_temporaries, why_not_written)
from trainkit.capstone.config import ConfigError, TrainConfig
from trainkit.capstone.data import eval_batch_size, load_data
from trainkit.capstone.distributed import rank_seeds
from trainkit.capstone.gpt import GPT, param_counts
from trainkit.capstone.manifest import build_manifest, write_manifest
from trainkit.capstone.memory import check_model_fits
from trainkit.capstone.precision import setup_precision
from trainkit.capstone.signals import Interrupted, stop_signals_to
from trainkit.corpus import ByteTokenizer, unigram_loss
from trainkit.runlog import RunLogger


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


class Trainer:
    """The reference loop. Build it from a TrainConfig; ``fit()`` trains and returns the history.

    The lab replaces single parts by subclassing and overriding ``lr_at``, ``log_step``, ``should_skip``,
    ``autocast``, ``maybe_compile`` or ``before_clip``; the loop calls them exactly as ``trainkit.train``'s module doc
    says.

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

        # -- distributed: the device, this rank, the process group under torchrun --------------------------------
        placement = distributed.setup(cfg)
        self.device, self.rank, self.world_size = placement.device, placement.rank, placement.world_size
        self.ddp = self.world_size > 1
        self._owns_process_group = placement.owns_process_group
        self.is_main = self.rank == 0

        # -- precision ----------------------------------------------------------------------------------
        # a resume may replace "auto"'s choice with the checkpoint's (``checkpoint.restore``): the precision the run
        # began with
        self.precision = setup_precision(cfg.precision, self.device)

        # -- data, model, optimiser, schedule --------------------------------------------------------------
        self.data = load_data(cfg)
        self.unigram_loss = unigram_loss(self.data.train, self.data.val, ByteTokenizer.vocab_size)
        self.eval_batch_size = eval_batch_size(cfg, self.data, self.world_size)   # per rank
        size = check_model_fits(cfg, self.device)
        torch.manual_seed(cfg.seed)                      # the same initial weights on every rank
        try:
            self.raw_model = GPT(cfg.model).to(self.device)
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
            model = distributed.wrap(model, self.device)
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
            checkpoint.prepare_out_dir(self.out_dir)
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
                checkpoint.resume(self)
            self.manifest = build_manifest(self)
            if self.is_main:
                write_manifest(self)
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
        """One optimiser step (see ``trainkit.train``'s module doc); returns the stats passed to ``log_step``."""
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
            sync = contextlib.nullcontext() if (last or not self.ddp) else distributed.no_sync(model)
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
        why = why_not_written(e, self.out_dir)
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

    # -- checkpoints (the component: trainkit.capstone.checkpoint) -----------------------------------------------
    def state_dict(self) -> dict:
        """Everything a checkpoint holds (the keys of ``checkpoint.CONTENTS``); under DDP every rank must call it."""
        return checkpoint.trainer_state(self)

    def save_checkpoint(self, path: str | os.PathLike) -> None:
        """Write everything needed to resume exactly, with its checksum, atomically; under DDP only rank 0 writes
        (every rank must call it: the RNG states are gathered). The logger is flushed first, so the log on disk
        holds every step the checkpoint covers. Raises ``TrainingStopped`` rather than write non-finite weights or
        optimiser state (the file on disk keeps its last finite state), and ``WriteFailed`` (an OSError) when the
        disk refuses the write or the log (the file on disk is the previous one, whole)."""
        checkpoint.save(self, path)

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """Restore a checkpoint written by ``save_checkpoint``: it must pass its checks (``open_checkpoint``) and
        agree with this run on every setting of ``MUST_MATCH_ON_RESUME`` and on the world size."""
        checkpoint.load(self, path)

    def note(self, message: str) -> None:
        """Keep a one-line remark about this start in ``notes`` and print it (rank 0, stdout)."""
        self.notes.append(message)
        if self.is_main:
            print(f"note: {message}", flush=True)

    def close(self) -> None:
        """Close a logger this Trainer opened and a process group it started; let go of out_dir's lock."""
        self._close(graceful=True)

    def _close(self, graceful: bool) -> None:
        if self.logger is not None and self._external_logger is None:
            self.logger.close()
            self.logger = None
        if self._owns_process_group and dist.is_initialized():
            distributed.end_process_group(graceful)
            self._owns_process_group = False
        self._release_out_dir()

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self._close(graceful=exc_type is None)
