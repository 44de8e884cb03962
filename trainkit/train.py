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
(and the best one, when the validation loss improved) is written atomically (temporary file, fsync, os.replace).

Exact resume: a checkpoint holds the model, the optimiser state, the step, the best validation loss, the history,
every rank's RNG states and the config; the data order depends only on (seed, step, rank, world_size). On the CPU a
run stopped once any k optimiser steps have run (``fit(steps=k)``: steps 0..k-1) and resumed (``resume=True``) logs
bit-identical losses to a run that never stopped; so does a 2-rank run under torchrun.

On CUDA the Trainer turns TF32 on for the whole process (``torch.backends.cuda.matmul.allow_tf32`` and
``torch.backends.cudnn.allow_tf32``): on Ampere and later GPUs its "fp32" matmuls and convolutions are TF32 (10-bit
mantissa inputs, fp32 accumulation), not IEEE fp32. The manifest records it ("tf32").
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import platform
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

from trainkit.corpus import ByteTokenizer, TokenData, load_text, unigram_loss
from trainkit.device import pick_device
from trainkit.gpt import GPT, GPTConfig, param_counts

CHECKPOINT_VERSION = 1


class ConfigError(ValueError):
    """A bad configuration: an unknown key, a value of the wrong type or out of range, a missing file."""


# --------------------------------------------------------------------------------------------- config
@dataclass
class TrainConfig:
    model: GPTConfig = field(default_factory=GPTConfig.tiny)
    data: str = "pydoc"            # "pydoc" (pydoc_data.topics, ships with Python) or a path to a UTF-8 text file
    val_fraction: float = 0.1      # the last 10% of the token stream is validation
    steps: int = 300               # optimiser steps
    batch_size: int = 32           # sequences per micro-batch per rank
    grad_accum: int = 1            # micro-batches per optimiser step
    lr: float = 3e-3               # peak learning rate
    min_lr_ratio: float = 0.1      # the schedule ends at lr * min_lr_ratio
    warmup: int = 30               # linear warmup steps (lr / warmup at step 0, lr at step `warmup`)
    schedule: str = "cosine"       # "cosine" or "wsd" (warmup, stable, linear decay over the last decay_frac)
    decay_frac: float = 0.2        # WSD only: the fraction of steps spent decaying
    optimizer: str = "adamw"       # "adamw" (decay on matrices, none on norm weights) or "lion" (lion-pytorch)
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.1
    eps: float = 1e-8              # AdamW only
    max_grad_norm: float = 1.0     # global-norm clip after accumulation (math.inf: measure the norm, never clip)
    precision: str = "auto"        # "fp32", "bf16" (autocast) or "auto" (bf16 on a GPU that has it, else fp32)
    compile: bool = False          # torch.compile, falling back to eager (and recording why) where it fails
    eval_every: int = 100          # evaluate (and write the latest checkpoint) every N steps and after the last
    eval_batches: int = 8          # validation batches per evaluation (the same ones every time)
    log_every: int = 1             # log the training series every N steps
    save_every: int = 0            # also write the latest checkpoint every N steps (0: only at evaluations / end)
    logger: str = "wandb"          # "wandb" (offline), "tensorboard" or "none"
    out_dir: str = "runs/capstone"  # checkpoints, manifest and logs
    seed: int = 0
    resume: bool = False           # continue from out_dir/latest.pt if it exists
    device: str = "auto"           # "auto" (trainkit.device.pick_device), "cpu" or "cuda"
    progress: bool = True          # a tqdm progress bar (written to stdout, a widget in notebooks)

    def __post_init__(self):
        if isinstance(self.model, dict):
            try:
                self.model = GPTConfig(**self.model)
            except TypeError as e:
                raise ConfigError(f"model: {e}") from None
        if isinstance(self.betas, list):
            self.betas = tuple(self.betas)
        self.validate()

    # -- presets -------------------------------------------------------------------------------------
    @classmethod
    def tiny(cls, **overrides) -> "TrainConfig":
        """The CPU configuration: GPTConfig.tiny(), 300 steps of 32 x 128 bytes (1.2M tokens), AdamW at 3e-3,
        warmup 30, cosine to 10%: about a minute on 2 CPU cores."""
        return cls(**overrides)

    @classmethod
    def gpu(cls, **overrides) -> "TrainConfig":
        """The GPU run (``--config auto`` on CUDA), sized for this corpus's 0.42M training bytes rather than for the
        guide's "1B tokens" (the recipe would read its 655M tokens as about 1 560 epochs, with a 51.4M model that
        can memorise the text). GPTConfig(n_layer=6, d_model=256, 8 query / 4 key-value heads, d_ff 768, block 256,
        dropout 0.1): 4.85M parameters (4.72M non-embedding). 1 000 steps of 32 x 256 bytes: 8.19M tokens, 19.5
        epochs of the training split. AdamW lr 1e-3, betas (0.9, 0.95), weight decay 0.1, warmup 100, cosine to
        10%, clip 1.0, bf16 autocast where the GPU has native bf16. Compute: 33.4M FLOPs per token (6 N + 12
        n_layer d_model T), 2.7e14 FLOPs in all: seconds of matmul time at a current GPU's peak, a few minutes
        even at a T4's 8 TFLOP/s of fp32; small models are launch-bound, so expect well under that peak. Sized by
        this arithmetic; not yet timed on a GPU in this repository."""
        base = dict(model=GPTConfig(vocab_size=256, block_size=256, n_layer=6, d_model=256, n_heads_q=8,
                                    n_heads_kv=4, d_ff=768, tie_weights=True, dropout=0.1),
                    steps=1000, batch_size=32, grad_accum=1, lr=1e-3, min_lr_ratio=0.1, warmup=100,
                    betas=(0.9, 0.95), weight_decay=0.1, max_grad_norm=1.0, precision="auto", eval_every=100,
                    eval_batches=20, log_every=10, out_dir="runs/gpu")
        return cls(**{**base, **overrides})

    @classmethod
    def seed_recipe(cls, **overrides) -> "TrainConfig":
        """The infrastructure guide's recipe: GPTConfig.seed_recipe() (51.4M parameters), 20 000 steps of 32
        sequences of 1024 tokens (655M tokens), AdamW lr 3e-4, betas (0.9, 0.95), weight decay 0.1, warmup 200,
        cosine to 10%, clip 1.0, bf16 autocast. Meant for a GPU, and for a corpus of about 1B tokens: on this
        course's text it is about 1 560 epochs (``gpu()`` is the run that fits the data)."""
        base = dict(model=GPTConfig.seed_recipe(), steps=20_000, batch_size=32, grad_accum=1, lr=3e-4,
                    min_lr_ratio=0.1, warmup=200, betas=(0.9, 0.95), weight_decay=0.1, max_grad_norm=1.0,
                    precision="auto", eval_every=500, eval_batches=20, log_every=10, out_dir="runs/recipe")
        return cls(**{**base, **overrides})

    @classmethod
    def for_device(cls, device: torch.device | str | None = None, **overrides) -> "TrainConfig":
        """``tiny()`` on a CPU, ``gpu()`` on a CUDA GPU."""
        device = torch.device(device) if device is not None else pick_device()
        return (cls.gpu if device.type == "cuda" else cls.tiny)(**overrides)

    # -- dict / file / flags ---------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["betas"] = list(self.betas)
        return d

    @classmethod
    def from_dict(cls, d: dict, base: "TrainConfig | None" = None) -> "TrainConfig":
        """A config from a (possibly nested or partial) dict; keys not given keep ``base``'s values (default:
        the tiny preset). Unknown keys are an error."""
        if not isinstance(d, dict):
            raise ConfigError(f"a config must be a JSON object (a dict), got {type(d).__name__}")
        merged = (base or cls.tiny()).to_dict()
        for key, value in d.items():
            if key == "model":
                if not isinstance(value, dict):
                    raise ConfigError("config key 'model' must be an object of model settings")
                for mkey, mvalue in value.items():
                    _check_key("model." + mkey)
                    merged["model"][mkey] = _coerce("model." + mkey, mvalue)
            else:
                _check_key(key)
                merged[key] = _coerce(key, value)
        return cls(**merged)

    @classmethod
    def from_file(cls, path: str | os.PathLike, base: "TrainConfig | None" = None) -> "TrainConfig":
        """A config from a JSON (or TOML) file; keys it does not set keep ``base``'s values (default: tiny)."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        text = path.read_text()
        try:
            if path.suffix == ".toml":
                import tomllib
                d = tomllib.loads(text)
            else:
                d = json.loads(text)
        except ValueError as e:
            raise ConfigError(f"cannot parse config file {path}: {e}") from None
        return cls.from_dict(d, base=base)

    def with_flags(self, flags: list[str]) -> "TrainConfig":
        """A copy with ``key=value`` overrides (``lr=1e-3``, ``model.n_layer=2``, ``betas=[0.9,0.99]``)."""
        d: dict[str, Any] = {}
        for flag in flags:
            if "=" not in flag:
                raise ConfigError(f"--set expects key=value, got {flag!r}")
            key, raw = flag.split("=", 1)
            key = key.strip()
            _check_key(key)
            value = _parse_value(raw)
            if key.startswith("model."):
                d.setdefault("model", {})[key[len("model."):]] = value
            else:
                d[key] = value
        return type(self).from_dict(d, base=self)

    def validate(self) -> None:
        def need(ok: bool, msg: str):
            if not ok:
                raise ConfigError(msg)
        for name in ("steps", "batch_size", "grad_accum", "eval_every", "eval_batches", "log_every"):
            value = getattr(self, name)
            need(_is_int(value) and value >= 1, f"{name} must be an int >= 1, got {value!r}")
        for name in ("warmup", "save_every", "seed"):
            value = getattr(self, name)
            need(_is_int(value) and value >= 0, f"{name} must be an int >= 0, got {value!r}")
        need(self.warmup < self.steps, f"warmup ({self.warmup}) must be smaller than steps ({self.steps})")
        need(_is_num(self.lr) and self.lr > 0 and math.isfinite(self.lr), f"lr must be a number > 0, got {self.lr!r}")
        need(_is_num(self.min_lr_ratio) and 0.0 <= self.min_lr_ratio <= 1.0,
             f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio!r}")
        need(_is_num(self.decay_frac) and 0.0 < self.decay_frac <= 1.0,
             f"decay_frac must be in (0, 1], got {self.decay_frac!r}")
        need(_is_num(self.weight_decay) and self.weight_decay >= 0,
             f"weight_decay must be >= 0, got {self.weight_decay!r}")
        need(_is_num(self.eps) and self.eps > 0, f"eps must be > 0, got {self.eps!r}")
        need(_is_num(self.max_grad_norm) and self.max_grad_norm > 0,
             f"max_grad_norm must be > 0 (math.inf: never clip), got {self.max_grad_norm!r}")
        need(isinstance(self.betas, tuple) and len(self.betas) == 2 and all(_is_num(b) and 0 <= b < 1 for b in self.betas),
             f"betas must be two numbers in [0, 1), got {self.betas!r}")
        need(_is_num(self.val_fraction) and 0 < self.val_fraction < 1,
             f"val_fraction must be in (0, 1), got {self.val_fraction!r}")
        choices = dict(schedule=("cosine", "wsd"), optimizer=("adamw", "lion"), precision=("fp32", "bf16", "auto"),
                       logger=("wandb", "tensorboard", "none"), device=("auto", "cpu", "cuda"))
        for name, allowed in choices.items():
            value = getattr(self, name)
            need(value in allowed, f"{name} must be one of {', '.join(allowed)}; got {value!r}")
        for name in ("compile", "resume", "progress"):
            need(isinstance(getattr(self, name), bool), f"{name} must be true or false, got {getattr(self, name)!r}")
        need(isinstance(self.data, str) and self.data != "", f"data must be 'pydoc' or a file path, got {self.data!r}")
        need(isinstance(self.model, GPTConfig), f"model must be a GPTConfig, got {type(self.model).__name__}")
        need(self.model.vocab_size >= ByteTokenizer.vocab_size,
             f"model.vocab_size ({self.model.vocab_size}) is smaller than the tokenizer's {ByteTokenizer.vocab_size}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _field_types() -> dict[str, Any]:
    types = {f.name: f.type for f in dataclasses.fields(TrainConfig) if f.name != "model"}
    types.update({"model." + f.name: f.type for f in dataclasses.fields(GPTConfig)})
    return types


def _check_key(key: str) -> None:
    known = _field_types()
    if key not in known and key != "model":
        top = sorted(k for k in known if not k.startswith("model.")) + ["model.<field>"]
        raise ConfigError(f"unknown config key {key!r} (known keys: {', '.join(top)})")


def _coerce(key: str, value):
    """JSON gives ints where floats are meant (lr: 1): accept those; leave everything else to validate()."""
    typ = str(_field_types()[key])
    if typ == "float" and _is_int(value):
        return float(value)
    if key == "max_grad_norm" and value in ("inf", "Infinity"):
        return math.inf
    return value


def _parse_value(raw: str):
    raw = raw.strip()
    low = raw.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("inf", "infinity"):
        return math.inf
    try:
        return json.loads(raw)
    except ValueError:
        return raw


# --------------------------------------------------------------------------------------------- helpers
def atomic_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` to a temporary file next to ``path``, fsync it, then ``os.replace`` it over ``path``: a crash
    at any moment leaves either the old file or the new one, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _atomic_write_text(text: str, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


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
    generator, drawn from ``numpy.random.SeedSequence(seed, spawn_key=(rank,))``. Every (seed, rank) pair gets its
    own unrelated streams; ``seed + rank`` would not (run seed 0 rank 1 would repeat run seed 1 rank 0, lesson 7).
    Separate words per library, so that Python and NumPy (both Mersenne Twisters) do not start from one state."""
    words = [int(w) for w in np.random.SeedSequence(seed, spawn_key=(rank,)).generate_state(6)]  # uint32 words
    return {"torch": words[0] << 32 | words[1], "python": words[2] << 32 | words[3],
            "numpy": words[4:6]}   # np.random.seed takes 32-bit words, not one 64-bit int


def _rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def load_data(cfg: TrainConfig) -> TokenData:
    tok = ByteTokenizer()
    if cfg.data == "pydoc":
        text = load_text()
    else:
        path = Path(cfg.data)
        if not path.is_file():
            raise ConfigError(f"data file not found: {path} (use data='pydoc' for the built-in corpus)")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(f"data file {path} is not UTF-8 text: {e}") from None
    data = TokenData.from_text(text, tok, val_fraction=cfg.val_fraction)
    T = cfg.model.block_size
    for split in ("train", "val"):
        if len(data.split(split)) < 2 * T + 1:
            raise ConfigError(f"data {cfg.data!r}: the {split} split has {len(data.split(split))} tokens, too few "
                              f"for block_size {T}")
    return data


# --------------------------------------------------------------------------------------------- trainer
class Trainer:
    """The reference loop. Build it from a TrainConfig; ``fit()`` trains and returns the history.

    The lab replaces single parts by subclassing and overriding ``lr_at``, ``log_step``, ``should_skip``,
    ``autocast``, ``maybe_compile`` or ``before_clip``; the loop calls them exactly as the module doc says.

    logger: a ``trainkit.runlog.RunLogger`` to log into (the caller closes it); default: one of
        ``cfg.logger`` opened by ``fit()`` under ``out_dir`` on rank 0 and closed when ``fit()`` returns.
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
        if cfg.precision == "auto":
            # native bf16 only (Ampere and later): the default counts T4's and V100's emulated bf16, slower than fp32
            bf16_ok = device.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False)
            self.precision = "bf16" if bf16_ok else "fp32"   # bf16 autocast is slower than fp32 on most CPUs
        else:
            self.precision = cfg.precision
        # an explicit "bf16" is honoured where bf16 at least runs (emulated on a T4 or V100)
        if self.precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError("precision 'bf16' asked for, but this GPU has no bf16 support")
        if device.type == "cuda":
            # process-wide: from here on every fp32 matmul and convolution in this process (this run's "fp32", and
            # the fp32 parts of a bf16 run) is TF32 on Ampere and later; recorded in the manifest as "tf32"
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True

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
        torch.manual_seed(cfg.seed)                      # the same initial weights on every rank
        self.raw_model = GPT(cfg.model).to(device)
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
        self.history: dict[str, list] = {k: [] for k in ("step", "loss", "lr", "grad_norm", "skipped", "step_time",
                                                         "tokens", "val_step", "val_loss")}
        self.resumed_from: int | None = None
        self._latest_saved_at: int | None = None
        if cfg.resume and (self.out_dir / "latest.pt").is_file():
            self.load_checkpoint(self.out_dir / "latest.pt")
            self.resumed_from = self.step
        self.manifest = self._manifest()
        if self.is_main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            _atomic_write_text(json.dumps(self.manifest, indent=2, sort_keys=True, default=str) + "\n",
                               self.out_dir / "manifest.json")

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

    def maybe_compile(self, model: nn.Module) -> nn.Module:
        """``torch.compile(model)``, tried on one real-shaped forward and backward; if anything fails (no
        compiler, an unsupported platform), the eager model and the reason (in ``compile_status``)."""
        try:
            compiled = torch.compile(model)
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
        checkpoint, so ``resume=True`` continues exactly from there."""
        cfg = self.cfg
        end = cfg.steps if steps is None else int(steps)
        if not 0 <= end <= cfg.steps:
            raise ValueError(f"fit(steps={steps}): must be between 0 and cfg.steps={cfg.steps}")
        owns_logger = False
        if self.logger is None and self.is_main and cfg.logger != "none":
            from trainkit.runlog import RunLogger
            self.logger = RunLogger(cfg.logger, dir=self.out_dir, project="trainkit-capstone",
                                    config={**cfg.to_dict(), "manifest": self.manifest})
            owns_logger = True
        bar = None
        if cfg.progress and self.is_main and end > self.step:
            from tqdm.auto import tqdm
            bar = tqdm(total=end, initial=self.step, desc="train", file=sys.stdout, dynamic_ncols=True,
                       mininterval=0.5)
        try:
            while self.step < end:
                step = self.step
                stats = self.train_step(step)
                self.step = step + 1
                for key in ("loss", "lr", "grad_norm", "skipped", "step_time", "tokens"):
                    self.history[key].append(stats[key])
                self.history["step"].append(step)
                if self.is_main:
                    self.log_step(step, stats)
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
            if self._latest_saved_at != self.step:
                self.save_checkpoint(self.out_dir / "latest.pt")   # stopped between saves: resumable from here
        finally:
            if bar is not None:
                bar.close()
            if owns_logger:
                self.logger.close()
                self.logger = None
        return self.history

    # -- checkpoints -------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        rng = _rng_state()
        if self.ddp:
            every = [None] * self.world_size
            dist.all_gather_object(every, rng)
        else:
            every = [rng]
        return {"version": CHECKPOINT_VERSION, "step": self.step, "best_val": self.best_val,
                "model": self.raw_model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "schedule": {"kind": self.cfg.schedule, "lr_next": self.lr_at(self.step)},
                "rng": every, "world_size": self.world_size, "history": self.history,
                "config": self.cfg.to_dict(), "compile_status": dict(self.compile_status)}

    def save_checkpoint(self, path: str | os.PathLike) -> None:
        """Write everything needed to resume exactly, atomically; under DDP only rank 0 writes (every rank
        must call it: the RNG states are gathered)."""
        state = self.state_dict()
        if self.is_main:
            atomic_save(state, path)
        if Path(path).name == "latest.pt":
            self._latest_saved_at = self.step
        if self.ddp:
            dist.barrier()

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """Restore a checkpoint written by ``save_checkpoint`` (same model configuration and world size)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no checkpoint at {path}")
        state = torch.load(path, map_location=self.device, weights_only=False)
        if state.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"{path}: checkpoint version {state.get('version')!r}, expected {CHECKPOINT_VERSION}")
        if state["config"]["model"] != self.cfg.model.to_dict():
            raise ValueError(f"{path} holds a different model configuration: {state['config']['model']}")
        if state["world_size"] != self.world_size:
            raise ValueError(f"{path} was written by {state['world_size']} rank(s); this run has {self.world_size}: "
                             "exact resume needs the same world size")
        self.raw_model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        self.best_val = float(state["best_val"])
        self.history = state["history"]
        self._latest_saved_at = self.step
        _set_rng_state(state["rng"][self.rank])

    # -- manifest -------------------------------------------------------------------------------------------
    def _manifest(self) -> dict:
        on_cuda = self.device.type == "cuda"
        return {"config": self.cfg.to_dict(), "git_sha": git_sha(), "torch": torch.__version__,
                "python": platform.python_version(), "platform": platform.platform(),
                "threads": torch.get_num_threads(),
                # None on a CPU run; "tf32": fp32 matmuls really run as TF32 (turned on above, and the GPU has it)
                "cuda": torch.version.cuda if on_cuda else None,
                "cudnn": torch.backends.cudnn.version() if on_cuda else None,
                "gpu": torch.cuda.get_device_name(self.device) if on_cuda else None,
                "tf32": bool(on_cuda and torch.backends.cuda.matmul.allow_tf32 and torch.cuda.is_tf32_supported()),
                "tokenizer": self.data.tokenizer.describe(), "data": {"source": self.cfg.data, **self.data.describe()},
                "seed": self.cfg.seed, "world_size": self.world_size, "device": str(self.device),
                "precision": self.precision, "compile": dict(self.compile_status), "params": self.counts,
                "unigram_val_loss": self.unigram_loss, "resumed_from_step": self.resumed_from,
                "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def close(self) -> None:
        """Close a logger this Trainer opened and a process group it started."""
        if self.logger is not None and self._external_logger is None:
            self.logger.close()
            self.logger = None
        if self._owns_process_group and dist.is_initialized():
            dist.destroy_process_group()
            self._owns_process_group = False

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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


def main(argv: list[str] | None = None) -> int:
    try:
        cfg, stop_at = config_from_args(argv)
        trainer = Trainer(cfg)
    except (ConfigError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with trainer:
        if trainer.is_main:
            c = trainer.counts
            compiled = ("compiled" if trainer.compile_status["active"] else
                        f"eager ({trainer.compile_status['reason']})" if cfg.compile else "eager")
            print(f"device {trainer.device} x {trainer.world_size} | {trainer.precision} | {compiled} | "
                  f"params {c['total'] / 1e6:.2f}M ({c['non_embedding'] / 1e6:.2f}M non-embedding) | "
                  f"unigram val loss {trainer.unigram_loss:.4f}" +
                  (f" | resumed at step {trainer.resumed_from}" if trainer.resumed_from is not None else ""))
        first, t0 = trainer.step, time.perf_counter()
        trainer.fit(steps=stop_at)
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
    sys.exit(main())
