"""Small training runs that go wrong in fp16, and the loop that trains them with a precision recipe (lab 5).

A ``Variant`` is a small training job: data, a model builder, the training loss, a learning rate and a number of
steps. ``train_fp16(variant, recipe, seed)`` trains it with AdamW the way a mixed-precision loop does, following a
``Recipe``; ``train_fp16(variant, None, seed)`` is the fp32 run of the same variant and seed. Some variants train
in fp16 as well as in fp32 with any sensible recipe; others go wrong in fp16 in a planted way, and the recipe has
to fix it.

Every model is a ``Net``: a **stem** (an input ``Dense`` layer and an ``RMSNorm``), ``depth`` residual blocks
``x + proj(gelu(fc(norm(x))))``, a final ``RMSNorm`` and a ``Dense`` head. Under a recipe:

- the matmuls of the blocks and the head always run in fp16 (a ``Dense`` casts its weight and input to fp16, as
  autocast does; the gradient reaching an fp32 tensor through a cast is the fp16 gradient, rounded);
- ``"stem"`` in ``recipe.fp32`` runs the stem (its ``Dense`` and its ``RMSNorm``) in fp32, else in fp16;
- ``"norm"`` runs the blocks' and the final ``RMSNorm`` in fp32 (their output is cast back to fp16 for the next
  matmul), else in fp16 (``RMSNorm`` squares its input: in fp16 that square overflows above 256);
- ``"loss"`` casts the head's output to fp32 and computes the training loss there, else in fp16;
- the weights and AdamW's state are always fp32 master copies (as in autocast training); the forward pass casts
  them where it computes in fp16.

Loss scaling follows ``torch.amp.GradScaler``: the loss (in its own precision) is multiplied by the scale before
the backward pass; if any gradient is inf or NaN the step is skipped and the scale multiplied by
``backoff_factor``; after ``growth_interval`` clean steps in a row it is multiplied by ``growth_factor``. Else the
gradients are divided by the scale and AdamW steps. ``growth_factor=1`` and ``backoff_factor=1`` give a static
scale; ``init_scale=1`` with both factors 1 gives no scaling at all.

The loop is faithful where it matters here: every value that fp16 would store (activations, the loss, the
gradients flowing backward) is a real ``torch.float16`` tensor. It runs on the CPU (fp16 matmuls are slower there than fp32, so the models are tiny).

**The budget.** Every forward pass of a ``Net`` (any precision, with or without gradients, any batch) counts one
*pass*: a training step of ``train_fp16`` is one pass and its final validation pass one more, so a full run of a
60-step variant costs 61 passes, a 16-step trial 17, a forward pass of your own one. ``passes_spent()`` is the count
since import. The grader gives a recipe ``PASS_BUDGET = 250`` passes per variant (about four full runs; a one-batch
diagnosis needs a handful, a few short trial runs under a hundred): it calls ``fp16_recipe`` inside
``with pass_budget():``, where the pass after the 250th raises ``BudgetExceeded`` and the variant is a miss.
``pass_budget(limit)`` is yours to check your own function with; a scope opened inside another cannot raise the
outer one's limit. A brute-force grid does not fit: 6 initial scales x 4 choices of what stays in fp32 (nothing, or
one of the three parts) is 24 recipes, and their full runs plus the fp32 run they are compared with are 25 x 61 =
1 525 passes.

    from trainkit.labs.lab05_mixed_precision.fp16_runs import Recipe, load_visible_variants, train_fp16
    variants = load_visible_variants()
    run16 = train_fp16(variants[0], Recipe(init_scale=2.0**10), seed=0)
    run32 = train_fp16(variants[0], None, seed=0)
    print(run16.val_loss, run32.val_loss, sum(run16.skipped), run16.zero_grads[:3])
    with pass_budget() as spend:
        train_fp16(variants[0], None, seed=0, steps=16)
    print(spend.passes)                                  # 17 of the 250
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainkit.digits import load_digits_split

FP32_PARTS = ("stem", "norm", "loss")
MAX_FP32 = 1          # a recipe keeps at most this many of FP32_PARTS in fp32
ADAM_EPS = 1e-16      # AdamW's eps in every run: small enough that tiny losses train in fp32 as well
LOW = torch.float16
PASS_BUDGET = 250     # forward passes of a Net that fp16_recipe may spend on one variant (a full run costs 61)


# --- the budget --------------------------------------------------------------------------------------------------

class BudgetExceeded(RuntimeError):
    """A forward pass of a Net past the limit of an open ``pass_budget`` scope."""


_PASSES = [0]         # forward passes of every Net since import
_LIMITS: list = []    # the open scopes: (the total of _PASSES they end at, their limit)


def passes_spent() -> int:
    """Forward passes of any ``Net`` since import (a training step is one, a run's final validation pass one)."""
    return _PASSES[0]


class Spend:
    """What a ``pass_budget`` scope has spent so far: ``passes`` (of ``limit``)."""

    def __init__(self, limit: int):
        self.limit, self._start = limit, _PASSES[0]

    @property
    def passes(self) -> int:
        return _PASSES[0] - self._start


@contextmanager
def pass_budget(limit: int = PASS_BUDGET):
    """A scope in which at most ``limit`` forward passes of a ``Net`` run; the next raises ``BudgetExceeded``
    (and every one after it, so catching it does not help). Yields a ``Spend``. Scopes nest; the tightest holds."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be an int >= 0 (forward passes), got {limit!r}")
    spend = Spend(limit)
    _LIMITS.append((spend._start + spend.limit, spend.limit))
    try:
        yield spend
    finally:
        _LIMITS.pop()


def _count_pass() -> None:
    _PASSES[0] += 1
    over = [(end, limit) for end, limit in _LIMITS if _PASSES[0] > end]
    if over:
        limit = min(limit for _, limit in over)
        raise BudgetExceeded(f"a forward pass of a Net past the {limit} passes of its pass_budget scope (the grader "
                             f"gives fp16_recipe {PASS_BUDGET} per variant; a full {DEFAULTS['steps']}-step run costs "
                             f"{DEFAULTS['steps'] + 1})")


@dataclass(frozen=True)
class Recipe:
    """How to train a variant in fp16: the loss scale (GradScaler's four settings) and what stays in fp32."""
    init_scale: float = 1.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    fp32: frozenset = frozenset()

    def __post_init__(self):
        object.__setattr__(self, "fp32", frozenset(self.fp32))
        unknown = sorted(str(p) for p in self.fp32 if p not in FP32_PARTS)
        if unknown:
            raise ValueError(f"Recipe.fp32 names unknown parts {unknown}; choose from {list(FP32_PARTS)}")
        if len(self.fp32) > MAX_FP32:
            raise ValueError(f"Recipe.fp32 keeps {sorted(self.fp32)} in fp32: at most {MAX_FP32} of {list(FP32_PARTS)}")
        if not (math.isfinite(self.init_scale) and self.init_scale > 0):
            raise ValueError(f"init_scale must be a finite number > 0, got {self.init_scale!r}")
        if not (math.isfinite(self.growth_factor) and self.growth_factor >= 1):
            raise ValueError(f"growth_factor must be finite and >= 1, got {self.growth_factor!r}")
        if not 0 < self.backoff_factor <= 1:
            raise ValueError(f"backoff_factor must be in (0, 1], got {self.backoff_factor!r}")
        if int(self.growth_interval) != self.growth_interval or self.growth_interval < 1:
            raise ValueError(f"growth_interval must be an int >= 1, got {self.growth_interval!r}")


# --- the model ---------------------------------------------------------------------------------------------------

class Dense(nn.Module):
    """nn.Linear's layer (and init) computing in ``self.dtype``: weight and input are cast to it, as autocast does."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        ref = nn.Linear(n_in, n_out)
        self.weight, self.bias = ref.weight, ref.bias
        self.dtype = torch.float32

    def forward(self, x):
        return F.linear(x.to(self.dtype), self.weight.to(self.dtype), self.bias.to(self.dtype))


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + 1e-6) * weight, computed in ``self.dtype``; ``gain`` is the weight's initial value."""

    def __init__(self, width: int, gain: float = 1.0):
        super().__init__()
        self.weight = nn.Parameter(torch.full((width,), float(gain)))
        self.dtype = torch.float32

    def forward(self, x):
        x = x.to(self.dtype)
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * self.weight.to(self.dtype)


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = RMSNorm(width)
        self.fc = Dense(width, 2 * width)
        self.proj = Dense(2 * width, width)

    def forward(self, x):
        h = self.proj(F.gelu(self.fc(self.norm(x))))
        return x + h.to(x.dtype)


class Net(nn.Module):
    """stem (Dense, RMSNorm) -> blocks -> final RMSNorm -> Dense head. ``stream``: the stem norm's initial gain (the
    size of the residual stream); ``out_gain``: a fixed factor on the output (a regression net that predicts in
    the targets' units: normalised prediction times the targets' std). A regression net returns (N,), a classifier (N, C) logits."""

    def __init__(self, n_in: int, width: int, depth: int, n_out: int, stream: float = 1.0, out_gain: float = 1.0):
        super().__init__()
        self.stem = nn.Sequential(Dense(n_in, width), RMSNorm(width, stream))
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.norm = RMSNorm(width)
        self.head = Dense(width, n_out)
        self.out_gain = out_gain
        self.regression = n_out == 1

    def set_precision(self, fp32: frozenset | None) -> "Net":
        """fp32=None: everything in fp32. Else the matmuls of blocks and head in fp16, stem and norms by the set."""
        every = fp32 is None
        for m in self.modules():
            if isinstance(m, (Dense, RMSNorm)):
                m.dtype = torch.float32 if every else LOW
        if not every:
            for m in self.stem.modules():
                if isinstance(m, (Dense, RMSNorm)):
                    m.dtype = torch.float32 if "stem" in fp32 else LOW
            for m in [self.norm, *(b.norm for b in self.blocks)]:
                m.dtype = torch.float32 if "norm" in fp32 else LOW
        return self

    def forward(self, x):
        _count_pass()
        h = self.stem(x)
        for block in self.blocks:
            h = block(h)
        out = self.head(self.norm(h))
        if self.out_gain != 1.0:
            out = out * self.out_gain
        return out.squeeze(-1) if self.regression else out


# --- variants ----------------------------------------------------------------------------------------------------

@dataclass
class Variant:
    """A training job. ``loss(out, y)`` is the training loss (``loss_weight`` times the task's mean loss: cross-
    entropy for ``task="digits"``, MSE for ``"regression"``), computed in the dtype of ``out``; ``model()`` builds
    a fresh fp32 ``Net`` (seed torch first for a given init). ``name`` and ``spec`` say what was planted (the
    grader's variants come without them)."""
    task: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    model: Callable[[], Net]
    loss_weight: float
    lr: float
    steps: int
    batch_size: int
    name: str = ""
    spec: dict = field(default_factory=dict)

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.loss_weight * task_loss(self.task, out, y)


def task_loss(task: str, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The task's mean loss in the dtype of ``out``."""
    if task == "digits":
        return F.cross_entropy(out, y)
    return F.mse_loss(out, y.to(out.dtype))


# The defaults of a spec; a spec names its kind and whatever differs.
DEFAULTS = dict(task="digits", width=32, depth=1, split=0, input_scale=1.0, out_gain=1.0, stream=1.0,
                loss_weight=1.0, lr=5e-3, steps=60, batch_size=32, seed=0)


def _regression_data(split: int, n_train: int = 768, n_val: int = 256, n_in: int = 8):
    """A smooth random target of 8 Gaussian inputs plus noise, with unit variance (times ``out_gain`` later)."""
    g = torch.Generator().manual_seed(1000 + split)
    x = torch.randn(n_train + n_val, n_in, generator=g)
    w1, w2 = torch.randn(n_in, 16, generator=g), torch.randn(16, generator=g)
    y = torch.tanh(x @ w1 / math.sqrt(n_in)) @ w2 / 4 + 0.1 * torch.randn(n_train + n_val, generator=g)
    y = (y - y.mean()) / y.std()
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


@lru_cache(maxsize=None)
def _digits(split: int):
    d = load_digits_split(seed=split)
    return d.x_train, d.y_train, d.x_val, d.y_val


def make_variant(spec: dict) -> Variant:
    """Build a variant from a spec (see ``DEFAULTS`` for its keys; ``kind`` and ``seed`` are labels)."""
    unknown = set(spec) - set(DEFAULTS) - {"kind"}
    if unknown:
        raise ValueError(f"unknown spec keys {sorted(unknown)}; known: {sorted(DEFAULTS)} and 'kind'")
    s = {**DEFAULTS, **spec}
    if s["task"] == "digits":
        xt, yt, xv, yv = (t.clone() for t in _digits(s["split"]))
        n_out = 10
    elif s["task"] == "regression":
        xt, yt, xv, yv = _regression_data(s["split"])
        yt, yv, n_out = yt * s["out_gain"], yv * s["out_gain"], 1
    else:
        raise ValueError(f"task must be 'digits' or 'regression', got {s['task']!r}")
    xt, xv = xt * s["input_scale"], xv * s["input_scale"]
    n_in, width, depth, stream, gain = xt.shape[1], s["width"], s["depth"], s["stream"], s["out_gain"]
    return Variant(task=s["task"], x_train=xt, y_train=yt, x_val=xv, y_val=yv,
                   model=lambda: Net(n_in, width, depth, n_out, stream, gain), loss_weight=s["loss_weight"],
                   lr=s["lr"], steps=s["steps"], batch_size=s["batch_size"], name=s.get("kind", ""), spec=dict(spec))


# --- the loop ----------------------------------------------------------------------------------------------------

@dataclass
class FP16Run:
    """What a run did. ``val_loss``: the task's mean loss (unweighted, in fp32 from the model's outputs) on the
    validation set after the last step, with the run's own forward pass. Per step: ``train_loss`` (the unscaled
    loss), ``scale`` (the scale used), ``skipped`` (inf/NaN in a gradient: no update), ``zero_grads`` (the share of
    weight-gradient entries that are exactly 0 before unscaling: underflow shows here)."""
    val_loss: float = float("nan")
    train_loss: list = field(default_factory=list)
    scale: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    zero_grads: list = field(default_factory=list)


@torch.no_grad()
def evaluate(variant: Variant, model: Net) -> float:
    """The task's mean validation loss of ``model`` with its current precision, computed in fp32."""
    out = model(variant.x_val).float()
    return float(task_loss(variant.task, out, variant.y_val))


def train_fp16(variant: Variant, recipe: Recipe | None, seed: int = 0, steps: int | None = None) -> FP16Run:
    """Train a fresh ``variant.model()`` (torch seeded with ``seed``) for ``steps`` (default ``variant.steps``) AdamW
    steps (lr ``variant.lr`` decayed linearly to 0 over the run, eps 1e-16, no weight decay) on minibatches of ``variant.batch_size`` drawn from a
    generator seeded with ``seed``, under ``recipe``; ``recipe=None`` is the fp32 run (no casts, no scaling)."""
    if recipe is not None and not isinstance(recipe, Recipe):
        raise TypeError(f"recipe must be a trainkit.labs.lab05_mixed_precision.fp16_runs.Recipe or None, got {type(recipe).__name__}")
    steps = variant.steps if steps is None else steps
    torch.manual_seed(seed)
    model = variant.model().set_precision(None if recipe is None else recipe.fp32)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=variant.lr, weight_decay=0.0, eps=ADAM_EPS)
    g = torch.Generator().manual_seed(seed)
    n = len(variant.y_train)
    scale, good = (1.0, 0) if recipe is None else (float(recipe.init_scale), 0)
    run = FP16Run()
    weights = [p for name, p in model.named_parameters() if name.endswith("weight") and p.dim() == 2]
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = variant.lr * (1 - step / steps)        # linear decay to 0 over the run
        idx = torch.randint(0, n, (variant.batch_size,), generator=g)
        out = model(variant.x_train[idx])
        if recipe is None or "loss" in recipe.fp32:
            out = out.float()
        loss = variant.loss(out, variant.y_train[idx])
        opt.zero_grad(set_to_none=True)
        (loss * scale).backward()
        grads = [p.grad for p in params if p.grad is not None]
        finite = bool(torch.isfinite(loss)) and all(bool(torch.isfinite(gr).all()) for gr in grads)
        run.train_loss.append(float(loss.detach().float()))
        run.scale.append(scale)
        run.skipped.append(not finite)
        run.zero_grads.append(sum(int((w.grad == 0).sum()) for w in weights if w.grad is not None)
                              / sum(w.numel() for w in weights))
        if recipe is None:
            opt.step()
            continue
        if finite:
            with torch.no_grad():
                for gr in grads:
                    gr.div_(scale)
            opt.step()
            good += 1
            if good >= recipe.growth_interval:
                if math.isfinite(scale * recipe.growth_factor) and scale * recipe.growth_factor < 3.4e38:
                    scale *= recipe.growth_factor
                good = 0
        else:
            scale *= recipe.backoff_factor
            good = 0
    run.val_loss = evaluate(variant, model)
    return run


# --- the visible variants ----------------------------------------------------------------------------------------

# Each is graded on its own seed. "kind" says what was planted: clean (nothing), tiny_loss (a loss weighted far below
# 1), big_loss (a loss weighted far above 1), stem (raw inputs in large units), norm (a large residual stream),
# units (a regression net that predicts in large target units); "a+b" plants both.
VISIBLE_SPECS = [
    dict(kind="clean", seed=0),
    dict(kind="clean", task="regression", seed=1),
    dict(kind="tiny_loss", loss_weight=1e-9, seed=2),
    dict(kind="big_loss", loss_weight=1e4, seed=3),
    dict(kind="stem", input_scale=1000.0, seed=4),
    dict(kind="norm", stream=300.0, seed=5),
    dict(kind="units", task="regression", out_gain=300.0, seed=6),
    dict(kind="tiny_loss", task="regression", loss_weight=1e-10, seed=7),
    dict(kind="stem+big_loss", input_scale=2000.0, loss_weight=3e3, seed=8),
    dict(kind="norm+big_loss", stream=200.0, loss_weight=1e3, width=48, seed=9),
]


def visible() -> list[Variant]:
    """The visible variants, each with ``name`` (its kind) and ``spec`` (``spec["seed"]`` is the seed it is graded
    on)."""
    return [make_variant(spec) for spec in VISIBLE_SPECS]

# The name the lab's text uses for this bank's visible() (one function, two names).
load_visible_variants = visible
