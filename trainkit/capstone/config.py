"""The capstone's settings: ``TrainConfig`` (presets, JSON / TOML files, ``--set key=value`` flags) and its checks.

``trainkit.train`` exports the same names (``from trainkit.train import TrainConfig``). A value of the wrong type or
out of range raises ``ConfigError`` naming the setting; the command line prints it as one line.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainkit.corpus import ByteTokenizer
from trainkit.device import pick_device
from trainkit.capstone.gpt import GPTConfig

MAX_STEPS = 1_000_000   # the schedule is tabulated up front (about 15 s per million steps on a CPU core)


class ConfigError(ValueError):
    """A run that cannot start: an unknown key, a value of the wrong type or out of range, a missing file, an unusable
    out_dir, a checkpoint it cannot resume from. The command line prints it as one line and exits with 2."""



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
    max_consecutive_skips: int = 10  # this many skipped (non-finite) steps in a row is a lasting fault: stop the run
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
            _check_model_types(self.model)   # GPTConfig checks ranges, not types: float(False) and float(None)
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
        try:
            text = path.read_text(encoding="utf-8")   # JSON and TOML are UTF-8, whatever the locale says
        except UnicodeDecodeError as e:   # a ValueError, whose own message names no file
            raise ConfigError(f"config file {path} is not UTF-8 text: {e.reason} at byte {e.start}") from None
        except OSError as e:
            raise ConfigError(f"cannot read config file {path}: {e.strerror or e}") from None
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
        for name in ("steps", "batch_size", "grad_accum", "eval_every", "eval_batches", "log_every",
                     "max_consecutive_skips"):
            value = getattr(self, name)
            need(_is_int(value) and value >= 1, f"{name} must be an int >= 1, got {value!r}")
        for name in ("warmup", "save_every", "seed"):
            value = getattr(self, name)
            need(_is_int(value) and value >= 0, f"{name} must be an int >= 0, got {value!r}")
        need(self.steps <= MAX_STEPS, f"steps must be at most {MAX_STEPS:_} (the schedule is tabulated up front), "
                                      f"got {self.steps:_}")
        need(self.seed < 2 ** 64, f"seed must be below 2**64 (torch.manual_seed takes 64 bits), got {self.seed}")
        need(self.warmup < self.steps, f"warmup ({self.warmup}) must be smaller than steps ({self.steps})")
        need(_is_num(self.lr) and self.lr > 0 and math.isfinite(self.lr), f"lr must be a number > 0, got {self.lr!r}")
        need(_is_num(self.min_lr_ratio) and 0.0 <= self.min_lr_ratio <= 1.0,
             f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio!r}")
        need(_is_num(self.decay_frac) and 0.0 < self.decay_frac <= 1.0,
             f"decay_frac must be in (0, 1], got {self.decay_frac!r}")
        need(_is_num(self.weight_decay) and 0 <= self.weight_decay < math.inf,
             f"weight_decay must be a finite number >= 0, got {self.weight_decay!r}")
        need(_is_num(self.eps) and 0 < self.eps < math.inf, f"eps must be a finite number > 0, got {self.eps!r}")
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
        # a number or a boolean would become a folder named "5" or "True"; an empty one, the current folder
        need(isinstance(self.out_dir, str) and self.out_dir.strip() != "",
             f"out_dir must be a folder path (a non-empty string), got {self.out_dir!r}")
        need(isinstance(self.model, GPTConfig), f"model must be a GPTConfig, got {type(self.model).__name__}")
        _check_model_types(self.model.to_dict())
        need(self.model.vocab_size >= ByteTokenizer.vocab_size,
             f"model.vocab_size ({self.model.vocab_size}) is smaller than the tokenizer's {ByteTokenizer.vocab_size}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_TYPE_CHECKS = {"int": (_is_int, "an int"), "float": (_is_num, "a number"),
                "bool": (lambda v: isinstance(v, bool), "true or false"), "str": (lambda v: isinstance(v, str), "a string")}


def _check_model_types(model: dict) -> None:
    for f in dataclasses.fields(GPTConfig):
        if f.name in model and str(f.type) in _TYPE_CHECKS:
            ok, kind = _TYPE_CHECKS[str(f.type)]
            if not ok(model[f.name]):
                raise ConfigError(f"model.{f.name} must be {kind}, got {model[f.name]!r}")


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
