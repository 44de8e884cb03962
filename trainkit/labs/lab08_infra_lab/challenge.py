"""Lab 8's challenge: the lowest validation loss of the capstone's model family within a fixed budget.

The rules, the same for every entry (``check_entry`` enforces them before a run starts, with a message that says
which rule an entry breaks):
- the model is ``trainkit.gpt.GPT`` on the course's byte-level corpus, context ``BLOCK_SIZE`` = 64 bytes (the loss
  is measured on 64-byte windows, so the context is not a choice), at most ``MAX_NON_EMBEDDING`` parameters
  outside the embeddings (twice the preset's; ``param_counts`` counts an untied output head as an embedding);
- the data budget: at most ``TOKEN_BUDGET`` training tokens (steps x batch_size x grad_accum x 64, the preset's
  200 x 16 x 64) in at most ``MAX_STEPS`` optimiser steps, and at most ``WALL_CAP_S`` seconds of wall clock for the
  run (a guard against an entry that would hold up grading, far above what a sound entry needs);
- the run is on the CPU with fp32 or bf16, like the grading machines, so every entry is measured the same way;
- everything else is the entry's: learning rate, schedule, warmup, optimiser, betas, weight decay, clipping, the
  split of the budget into steps and batch size, the model's shape, a ``Trainer`` subclass.

An entry is ``(overrides, trainer_class)``: ``overrides`` changes ``PRESET`` (``TrainConfig`` fields; ``"model"`` a
dict of ``GPTConfig`` fields to change), ``trainer_class`` is ``Trainer`` or a subclass. ``run_entry(entry, seed)``
trains it with that seed (the weights' initialisation and the order of the batches) and scores the trained model
with ``evaluate``: the mean next-byte loss over the whole validation split, cut into windows of 64, in fp32, the
same for every run whatever its own evaluation settings. The grader re-runs each entry with a seed drawn at random
for the course and published nowhere (not in the lab, the feedback or the leaderboard; the entry's own code runs with
it, so it is unpublished, not unknowable), and scores the weights the run saved (``GRADED_RUN_FILE``) itself
(``autograder/unseen/challenge_check.py``).

Reference numbers (``PRESET_LOSS``): the preset scores 2.64, 2.69, 2.56, 2.60, 2.39 on seeds 0-3 and 7 (mean 2.58,
standard deviation 0.11); ``benchmarks/challenge.py`` measures them again. ``TUNED_LOSS`` is set by what careful
tuning reaches (measured by the course's authors; the figures are with the grader, in
``autograder/unseen/challenge_check.py``), so that the top band rewards tuning and not one obvious change.
"""
from __future__ import annotations

import dataclasses
import json
import math
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F

from trainkit.corpus import ByteTokenizer, TokenData, load_text
from trainkit.gpt import GPT, GPTConfig, param_counts
from trainkit.train import TrainConfig, Trainer

BLOCK_SIZE = 64
PRESET_MODEL = dict(vocab_size=256, block_size=BLOCK_SIZE, n_layer=2, d_model=64, n_heads_q=4, n_heads_kv=2,
                    d_ff=192, tie_weights=True)
# The preset: lab 8's demo run on a CPU (200 steps of 16 sequences, AdamW at 3e-3, warmup 20, cosine to 10 %).
PRESET = dict(steps=200, batch_size=16, grad_accum=1, lr=3e-3, warmup=20, precision="fp32")
TOKEN_BUDGET = 200 * 16 * BLOCK_SIZE                   # 204,800 training tokens
MAX_STEPS = 800
MAX_NON_EMBEDDING = 2 * 98_624                         # twice the preset model's non-embedding parameters
WALL_CAP_S = 180.0
UNIGRAM_LOSS = 3.2466                                  # the input-blind bar (lesson 8): a model that learnt nothing
PRESET_LOSS = 2.58                                     # the preset's mean score over seeds (above)
TUNED_LOSS = 2.25                                      # what careful tuning reaches (above)
# What the graded runs must reach (points per band: lab 8's exercise 7)
BANDS = {"learns": UNIGRAM_LOSS - 0.3, "preset": PRESET_LOSS, "tuned": TUNED_LOSS}

# Where a graded run's weights go in $TRAINKIT_CHALLENGE_DIR, for the grader to score: a name without the seed in it
GRADED_RUN_FILE = "graded_run.pt"

# Settings an entry may not change: the data and its split, the seed (the grader's), where files go, the device.
FIXED = {"data": "pydoc", "val_fraction": 0.1, "device": "cpu", "logger": "none", "progress": False,
         "resume": False, "compile": False}
FIXED_MODEL = {"vocab_size": 256, "block_size": BLOCK_SIZE}


class ChallengeError(ValueError):
    """An entry that breaks a rule of the challenge (the message names the rule)."""


@dataclass
class ChallengeRun:
    seed: int
    val_loss: float          # evaluate() of the trained model
    tokens: int              # training tokens the run consumed (counted step by step)
    steps: int               # optimiser steps it ran
    wall_s: float
    non_embedding: int       # the model's parameters outside the embeddings
    overrides: dict          # the entry's changes to PRESET (JSON-able)
    trainer: str             # the trainer class's name
    skipped: int = 0         # steps the loop skipped (non-finite gradients)


# ------------------------------------------------------------------------------------------------ the rules
def _jsonable(value):
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def check_entry(entry) -> tuple[dict, type]:
    """The entry as (overrides, trainer_class), after checking every rule; raises ChallengeError otherwise."""
    if not (isinstance(entry, tuple) and len(entry) == 2):
        raise ChallengeError(f"an entry is a pair (overrides dict, trainer class), got {type(entry).__name__}")
    overrides, trainer_class = entry
    if not isinstance(overrides, dict):
        raise ChallengeError(f"the overrides must be a dict of TrainConfig fields, got {type(overrides).__name__}")
    if not (isinstance(trainer_class, type) and issubclass(trainer_class, Trainer)):
        raise ChallengeError(f"the trainer must be trainkit.train.Trainer or a subclass of it, got {trainer_class!r}")
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ChallengeError(f"not TrainConfig fields: {unknown}")
    fixed = sorted(k for k in overrides if k in FIXED or k in ("seed", "out_dir"))
    if fixed:
        raise ChallengeError(f"the challenge fixes {fixed} (the data, the seed, the device and where files go are "
                             "the same for every entry)")
    model = overrides.get("model", {})
    if not isinstance(model, dict):
        raise ChallengeError("overrides['model'] must be a dict of GPTConfig fields to change, e.g. {'n_layer': 3}")
    bad_model = sorted(k for k in model if k in FIXED_MODEL and model[k] != FIXED_MODEL[k])
    if bad_model:
        raise ChallengeError(f"the model's {bad_model} are fixed: vocab_size 256, block_size {BLOCK_SIZE}")
    cfg = build_config(overrides, seed=0, out_dir=tempfile.gettempdir())
    if cfg.precision not in ("fp32", "bf16"):
        raise ChallengeError(f"precision {cfg.precision!r}: the challenge runs on the CPU, in 'fp32' or 'bf16'")
    tokens = cfg.steps * cfg.batch_size * cfg.grad_accum * BLOCK_SIZE
    if tokens > TOKEN_BUDGET:
        raise ChallengeError(f"{cfg.steps} steps x {cfg.batch_size} x {cfg.grad_accum} x {BLOCK_SIZE} = {tokens:,} "
                             f"training tokens; the budget is {TOKEN_BUDGET:,}")
    if cfg.steps > MAX_STEPS:
        raise ChallengeError(f"{cfg.steps} optimiser steps; at most {MAX_STEPS}")
    n = non_embedding(cfg.model)
    if n > MAX_NON_EMBEDDING:
        raise ChallengeError(f"the model has {n:,} parameters outside the embeddings; at most {MAX_NON_EMBEDDING:,}")
    return overrides, trainer_class


def build_config(overrides: dict, seed: int, out_dir) -> TrainConfig:
    """The run's TrainConfig: PRESET with the overrides, the fixed settings, one evaluation at the end."""
    model = GPTConfig(**{**PRESET_MODEL, **overrides.get("model", {}), **FIXED_MODEL})
    settings = {**PRESET, "eval_every": 10**9, "eval_batches": 4, **overrides, **FIXED}
    settings.update(model=model, seed=seed, out_dir=str(out_dir))
    try:
        return TrainConfig(**settings)
    except (TypeError, ValueError) as e:
        raise ChallengeError(f"the overrides do not make a valid TrainConfig: {e}") from None


def non_embedding(model: GPTConfig) -> int:
    with torch.device("meta"):
        return param_counts(GPT(model))["non_embedding"]


# ------------------------------------------------------------------------------------------------ the score
@lru_cache(maxsize=1)
def _val_windows() -> tuple[torch.Tensor, torch.Tensor]:
    val = TokenData.from_text(load_text(), ByteTokenizer()).val
    n = (len(val) - 1) // BLOCK_SIZE
    return val[: n * BLOCK_SIZE].view(n, BLOCK_SIZE), val[1: n * BLOCK_SIZE + 1].view(n, BLOCK_SIZE)


@torch.no_grad()
def evaluate(model: GPT) -> float:
    """Mean next-byte loss (nats) of ``model`` over the whole validation split in windows of 64, fp32, eval mode,
    on the CPU. It does not depend on the run's seed, its own evaluation settings or its precision."""
    inputs, targets = _val_windows()
    was_training = model.training
    model.eval()
    total = 0.0
    try:
        for i in range(0, len(inputs), 256):
            logits, _ = model(inputs[i:i + 256])
            total += F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets[i:i + 256].reshape(-1),
                                     reduction="sum").item()
    finally:
        model.train(was_training)
    return total / targets.numel()


# ------------------------------------------------------------------------------------------------ a run
def run_entry(entry, seed: int, save_to: str | Path | None = None) -> ChallengeRun:
    """Train the entry with ``seed`` under the challenge's rules and score it; with ``save_to``, also write the
    trained weights and the run's record there (what the grader re-scores)."""
    overrides, trainer_class = check_entry(entry)
    with tempfile.TemporaryDirectory(prefix="challenge-") as tmp:
        cfg = build_config(overrides, seed=seed, out_dir=tmp)
        trainer = trainer_class(cfg)
        counted = {"tokens": 0, "steps": 0, "skipped": 0}
        start = time.perf_counter()
        own_step = trainer.train_step

        def budgeted_step(step):     # the budget is counted here, outside the entry's code
            if counted["steps"] >= cfg.steps:
                raise ChallengeError(f"the run asked for more than its {cfg.steps} steps")
            if time.perf_counter() - start > WALL_CAP_S:
                raise ChallengeError(f"the run took longer than {WALL_CAP_S:.0f} s of wall clock")
            stats = own_step(step)
            counted["steps"] += 1
            counted["tokens"] += cfg.batch_size * cfg.grad_accum * BLOCK_SIZE
            counted["skipped"] += bool(stats.get("skipped"))
            return stats

        trainer.train_step = budgeted_step
        try:
            trainer.fit()
        finally:
            trainer.close()
        wall = time.perf_counter() - start
        model = trainer.raw_model.to("cpu").float()
        result = ChallengeRun(seed=seed, val_loss=evaluate(model), tokens=counted["tokens"], steps=counted["steps"],
                              wall_s=round(wall, 2), non_embedding=param_counts(model)["non_embedding"],
                              overrides=json.loads(json.dumps(overrides, default=_jsonable)),
                              trainer=trainer_class.__qualname__, skipped=counted["skipped"])
    if result.tokens > TOKEN_BUDGET:
        raise ChallengeError(f"the run consumed {result.tokens:,} tokens; the budget is {TOKEN_BUDGET:,}")
    if save_to is not None:
        save_run(save_to, result, model)
    return result


def save_run(path: str | Path, result: ChallengeRun, model: GPT) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"record": dataclasses.asdict(result), "model": dataclasses.asdict(model.cfg),
                "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()}}, path)


def band_report(loss: float, what: str) -> str:
    """Which bands a score reaches, in words (the visible test's message)."""
    parts = [f"{name} (<= {bar:.2f}): {'yes' if loss <= bar else 'no'}" for name, bar in BANDS.items()]
    return f"{what}: validation loss {loss:.4f}; " + ", ".join(parts)
