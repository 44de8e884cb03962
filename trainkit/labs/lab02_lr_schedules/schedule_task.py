"""A small language-model task on which a learning-rate schedule is judged by the loss its run reaches.

Lab 2's decision exercise. A ``Variant`` is a run fixed before it starts: its step budget, its batch size and the
width of its model. The model is ``trainkit.models.mlp(VOCAB, width, 1, VOCAB)`` reading the current token one-hot
and predicting the next one; the tokens come from a ``trainkit.data.MarkovSource`` (64 symbols), whose next token
depends on the current one only. Every step draws a fresh minibatch of ``batch_size`` (token, next token) pairs, so
there is no overfitting: what limits the loss is the budget and the noise of the minibatch gradients.

``run(schedule, variant, seed)`` trains with ``torch.optim.AdamW`` (betas (0.9, 0.95), weight decay 0), setting the
learning rate of step s to ``schedule(s)`` for s = 0 .. variant.steps - 1, and returns the final validation loss:
the model's exact expected cross-entropy on the source (what an endless validation set would measure; no sampling
noise). It is never below ``floor(variant)``, the source's entropy rate: the excess over the floor is what a
schedule can still win. ``seed`` fixes the initialisation and the minibatches.

``lr_table(schedule, steps)`` is the check a schedule must pass before it trains: it is called at every step from 0
to steps - 1, and each value must be a real number (a Python int or float, not a bool), finite and >= 0.
"""
from __future__ import annotations

import functools
import json
import math
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from trainkit.data import MarkovSource
from trainkit.models import mlp

VOCAB = 64          # symbols of the source
SHARPNESS = 3.0     # of the source's transition rows (MarkovSource): its entropy rate is about 1.8 nats
BETAS = (0.9, 0.95)
VISIBLE_FILE = Path(__file__).with_name("schedule_visible.json")


@dataclass(frozen=True)
class Variant:
    """A run, as it is known before it starts."""
    name: str
    steps: int              # optimiser steps: the budget
    batch_size: int         # (token, next token) pairs per step
    width: int              # hidden units of the model
    source_seed: int = 0    # which Markov chain (each seed is another transition matrix)
    reference_loss: float | None = None   # the best final validation loss of the reference sweep (lab 2's grading)

    def __post_init__(self):
        for field in ("steps", "batch_size", "width"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{self.name}: {field} must be a positive int, got {value!r}")


VARIANT_FIELDS = ("name", "steps", "batch_size", "width", "source_seed")

# The lab's visible runs: budgets from 80 to 1200 steps, batches from 4 to 512 pairs, widths from 16 to 256.
VISIBLE_VARIANTS = [
    Variant("300 steps, batch 32, width 64", steps=300, batch_size=32, width=64),
    Variant("80 steps, batch 64, width 64", steps=80, batch_size=64, width=64),
    Variant("1200 steps, batch 16, width 64", steps=1200, batch_size=16, width=64),
    Variant("300 steps, batch 4, width 32", steps=300, batch_size=4, width=32),
    Variant("150 steps, batch 512, width 64", steps=150, batch_size=512, width=64),
    Variant("300 steps, batch 32, width 256", steps=300, batch_size=32, width=256),
    Variant("400 steps, batch 64, width 16", steps=400, batch_size=64, width=16),
    Variant("600 steps, batch 128, width 128", steps=600, batch_size=128, width=128, source_seed=1),
]


def variant_record(variant: Variant) -> dict:
    """The fields that define a variant's run, as a dict (for JSON)."""
    return {field: getattr(variant, field) for field in VARIANT_FIELDS}


def load_variants(path: Path) -> list[Variant]:
    """Variants stored by ``python -m autograder.banks build schedule``, with their reference losses."""
    records = json.loads(Path(path).read_text())["variants"]
    return [Variant(**{k: r[k] for k in VARIANT_FIELDS}, reference_loss=r["reference_loss"]) for r in records]


def visible() -> list[Variant]:
    """VISIBLE_VARIANTS with their reference losses."""
    stored = load_variants(VISIBLE_FILE)
    if [variant_record(v) for v in stored] != [variant_record(v) for v in VISIBLE_VARIANTS]:
        raise RuntimeError(f"{VISIBLE_FILE.name} does not hold VISIBLE_VARIANTS: rebuild it "
                           "(python -m autograder.banks build schedule)")
    return stored

# The name the lab's text uses for this bank's visible() (one function, two names).
load_visible = visible


@functools.lru_cache(maxsize=None)
def _source(source_seed: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(stationary distribution, transition matrix, entropy rate) of the source, float32 tensors."""
    source = MarkovSource(VOCAB, SHARPNESS, seed=source_seed)
    return source.stationary().float(), source.P.float(), source.entropy_rate()


@functools.lru_cache(maxsize=None)
def _pairs(source_seed: int) -> torch.Tensor:
    """The probability of each (token, next token) pair, flattened: pair k is (k // VOCAB, k % VOCAB)."""
    pi, P, _ = _source(source_seed)
    return (pi[:, None] * P).flatten()


def floor(variant: Variant) -> float:
    """The best validation loss any model can reach on the variant's source: its entropy rate (nats)."""
    return _source(variant.source_seed)[2]


def lr_table(schedule: Callable[[int], float], steps: int) -> list[float]:
    """``[schedule(0), ..., schedule(steps - 1)]`` as floats, after checking each value; ValueError says which step
    and what is wrong (an exception raised by the schedule itself is reported with its step)."""
    if not callable(schedule):
        raise ValueError(f"a schedule must be callable (step -> lr), got {type(schedule).__name__}")
    out = []
    for step in range(steps):
        try:
            lr = schedule(step)
        except Exception as exc:
            raise ValueError(f"the schedule raised at step {step} of {steps}: {type(exc).__name__}: {exc}") from None
        if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
            raise ValueError(f"the lr of step {step} is {lr!r} of type {type(lr).__name__}; return a Python float")
        lr = float(lr)
        if not math.isfinite(lr) or lr < 0:
            raise ValueError(f"the lr of step {step} of {steps} is {lr!r}; every lr must be finite and >= 0")
        out.append(lr)
    return out


def validation_loss(model: torch.nn.Module, variant: Variant) -> float:
    """The model's expected next-token cross-entropy on the variant's source (exact: every current token, weighted by
    how often the source visits it, against its true next-token distribution)."""
    pi, P, _ = _source(variant.source_seed)
    with torch.no_grad():
        logp = F.log_softmax(model(torch.eye(VOCAB)), dim=1)
    return float(-(pi * (P * logp).sum(dim=1)).sum())


def run(schedule: Callable[[int], float], variant: Variant, seed: int = 0) -> float:
    """Train the variant's model with lr ``schedule(s)`` at step s and return its final validation loss (nats);
    ``math.inf`` if the run diverged (a non-finite loss). ValueError if the schedule fails ``lr_table``."""
    lrs = lr_table(schedule, variant.steps)
    pairs = _pairs(variant.source_seed)
    torch.manual_seed(seed)
    model = mlp(VOCAB, variant.width, 1, VOCAB)
    opt = torch.optim.AdamW(model.parameters(), lr=0.0, betas=BETAS, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    eye = torch.eye(VOCAB)
    for lr in lrs:
        k = torch.multinomial(pairs, variant.batch_size, replacement=True, generator=g)
        x, y = k // VOCAB, k % VOCAB
        for group in opt.param_groups:
            group["lr"] = lr
        loss = F.cross_entropy(model(eye[x]), y)
        if not torch.isfinite(loss):
            return math.inf
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    final = validation_loss(model, variant)
    return final if math.isfinite(final) else math.inf
