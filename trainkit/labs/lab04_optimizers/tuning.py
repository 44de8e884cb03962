"""Tuning an optimiser within a budget of trial steps (lab 4): small real tasks whose best learning rate differs.

A ``TuningTask`` is one training run you may try before you commit to a configuration: ``task.trial(config, steps)``
trains a fresh model for ``steps`` steps with ``config`` and returns its validation loss. Every trial starts from the
same initialisation and sees the minibatches in the same order (the task's trial seed), so the only thing a trial
tells you is how ``config`` does. The steps of all trials together may not exceed ``task.budget``; a trial that would
go over raises ``BudgetExceeded`` and runs nothing.

    from trainkit.labs.lab04_optimizers.tuning import load_visible_tasks, TuningTask
    task = TuningTask(load_visible_tasks()[0], "adamw")
    task.trial({"lr": 1e-3})                  # validation loss after task.steps steps (costs task.steps)
    task.trial({"lr": 1e-2}, steps=40)        # after 40 steps (costs 40)
    task.budget - task.spent                  # what is left; task.history lists every trial

A configuration is a dict: ``"lr"`` (required, > 0), and optionally ``"weight_decay"`` (>= 0, default 0.0) and
``"betas"`` (two numbers; AdamW's default (0.9, 0.999), each in [0, 1); Lion's (0.9, 0.99), each in [0, 1]); AdamW also
takes ``"eps"`` (> 0, default 1e-8). The learning rate is constant through the run. ``check_config`` says what is
wrong with one. The optimisers are ``torch.optim.AdamW`` and ``lion_pytorch.Lion``.

The tasks are tiny: scikit-learn's digits (an MLP or a linear classifier, the pixels standardised or in raw units), a
regression on a random teacher network (targets of unit or large scale), and a bigram language model (a table of
next-token logits) on a Markov source. What makes a learning rate good differs between them by orders of magnitude.
A non-finite validation loss (a run that diverged) is returned as ``math.inf``.
"""
from __future__ import annotations

import json
import math
import numbers
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from lion_pytorch import Lion

from trainkit.data import MarkovSource
from trainkit.digits import load_digits_split
from trainkit.models import mlp

OPTIMIZERS = ("adamw", "lion")
DEFAULTS = {"adamw": {"weight_decay": 0.0, "betas": (0.9, 0.999), "eps": 1e-8},
            "lion": {"weight_decay": 0.0, "betas": (0.9, 0.99)}}
BUDGET_RUNS = 8                      # a task's budget: this many full-length runs' worth of steps
VISIBLE_JSON = Path(__file__).with_name("tuning_visible.json")
VISIBLE_SEEDS = (1, 2)               # the visible tests rerun the chosen config on these seeds; the grader on others


class BudgetExceeded(RuntimeError):
    """A trial would take the steps spent on a task past its budget."""


def check_config(optimizer: str, config) -> dict:
    """``config`` with the optimiser's defaults filled in; ValueError (or TypeError) saying what is wrong."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    if not isinstance(config, dict):
        raise TypeError(f"a configuration is a dict such as {{'lr': 1e-3}}, got {type(config).__name__}")
    unknown = sorted(set(config) - {"lr", *DEFAULTS[optimizer]}, key=str)
    if unknown:
        raise ValueError(f"unknown keys {unknown} for {optimizer}: it takes 'lr' and {sorted(DEFAULTS[optimizer])}")
    if "lr" not in config:
        raise ValueError("a configuration needs 'lr'")
    out = {**DEFAULTS[optimizer], **config}

    def number(key, ok, rule):
        value = out[key]
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or not ok(value):
            raise ValueError(f"{key} must be a finite number {rule}, got {value!r}")
        return float(value)

    out["lr"] = number("lr", lambda v: v > 0, "> 0")
    out["weight_decay"] = number("weight_decay", lambda v: v >= 0, ">= 0")
    if "eps" in out:
        out["eps"] = number("eps", lambda v: v > 0, "> 0")
    betas, top = out["betas"], 1.0 if optimizer == "lion" else 1.0 - 1e-12
    if not (isinstance(betas, (tuple, list)) and len(betas) == 2 and all(
            isinstance(b, numbers.Real) and not isinstance(b, bool) and 0.0 <= b <= top for b in betas)):
        raise ValueError(f"betas must be two numbers in [0, {'1]' if optimizer == 'lion' else '1)'}, got {betas!r}")
    out["betas"] = tuple(float(b) for b in betas)
    return out


@lru_cache(maxsize=None)
def _data(kind: str, source: tuple) -> tuple[torch.Tensor, ...]:
    """(x_train, y_train, x_val, y_val) of a task, built once per process (each call of ``task_data`` clones them)."""
    params = dict(source)
    if kind == "digits":
        d = load_digits_split(seed=params["split"], standardize=params["standardize"])
        s = params["input_scale"]
        return d.x_train * s, d.y_train, d.x_val * s, d.y_val
    if kind == "regression":                     # y = a random tanh teacher of x, plus 10 % noise, scaled
        g = torch.Generator().manual_seed(1000 + params["split"])
        n, n_in = 1200, params["n_in"]
        x = torch.randn(n, n_in, generator=g)
        hidden = torch.tanh(2.0 * x @ torch.randn(n_in, 32, generator=g) / math.sqrt(n_in))
        y = (hidden @ torch.randn(32, 1, generator=g)).squeeze(1)
        y = (y / y.std() + 0.1 * torch.randn(n, generator=g)) * params["target_scale"]
        return x[:900], y[:900, None], x[900:], y[900:, None]
    source = MarkovSource(params["vocab"], sharpness=2.0, seed=params["split"])
    g = torch.Generator().manual_seed(2000 + params["split"])
    x, y = source.sample(64, 64, generator=g)
    xv, yv = source.sample(16, 64, generator=g)
    return x.reshape(-1), y.reshape(-1), xv.reshape(-1), yv.reshape(-1)


DATA_KEYS = {"digits": ("split", "standardize", "input_scale"), "regression": ("split", "n_in", "target_scale"),
             "bigram": ("split", "vocab")}


def task_data(spec: dict) -> tuple[torch.Tensor, ...]:
    """(x_train, y_train, x_val, y_val) of a task spec (fresh copies)."""
    return tuple(t.clone() for t in _data(spec["kind"], tuple((k, spec[k]) for k in DATA_KEYS[spec["kind"]])))


def build_model(spec: dict) -> nn.Module:
    """A fresh model for the task (initialised from torch's global generator)."""
    if spec["kind"] == "bigram":
        return nn.Embedding(spec["vocab"], spec["vocab"])     # row i: the logits of the token after token i
    n_in = 64 if spec["kind"] == "digits" else spec["n_in"]
    n_out = 10 if spec["kind"] == "digits" else 1
    return mlp(n_in, spec["width"], spec["depth"], n_out)


def task_loss(spec: dict, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(output, target) if spec["kind"] == "regression" else F.cross_entropy(output, target)


def run_config(spec: dict, optimizer: str, config: dict, steps: int, seed: int) -> float:
    """Train a fresh model of the task for ``steps`` steps with ``config``; its validation loss (inf if not finite).

    ``seed`` fixes the initialisation and the order of the minibatches (a fresh shuffle every epoch)."""
    config = check_config(optimizer, config)
    x_train, y_train, x_val, y_val = _data(spec["kind"], tuple((k, spec[k]) for k in DATA_KEYS[spec["kind"]]))
    # torch.manual_seed seeds the CPU's generator and every CUDA device's: fork them all, so that a run leaves the
    # caller's random state as it was on every device (devices=[] would give back only the CPU's)
    with torch.random.fork_rng(devices=range(torch.cuda.device_count())):
        torch.manual_seed(seed)
        model = build_model(spec)
    if optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=config["lr"], betas=config["betas"], eps=config["eps"],
                                weight_decay=config["weight_decay"])
    else:
        opt = Lion(model.parameters(), lr=config["lr"], betas=config["betas"], weight_decay=config["weight_decay"])
    g = torch.Generator().manual_seed(10_000 + seed)
    n, batch = len(x_train), spec["batch"]
    order, pos = torch.randperm(n, generator=g), 0
    for _ in range(steps):
        if pos + batch > n:
            order, pos = torch.randperm(n, generator=g), 0
        idx = order[pos:pos + batch]
        pos += batch
        loss = task_loss(spec, model(x_train[idx]), y_train[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    with torch.no_grad():
        value = float(task_loss(spec, model(x_val), y_val))
    return value if math.isfinite(value) else math.inf


class TuningTask:
    """One task for one optimiser, with a budget of trial steps (see the module's docstring).

    Read-only attributes: ``name``, ``optimizer`` ("adamw" or "lion"), ``steps`` (the length of the run that is
    graded), ``budget`` (trial steps in all: BUDGET_RUNS * steps), ``spent``, ``history`` (a list of
    (config, steps, loss), one per trial)."""

    __slots__ = ("_name", "_optimizer", "_steps", "_run", "_ledger")

    def __init__(self, spec: dict, optimizer: str, seed: int = 0):
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
        self._name, self._optimizer, self._steps = spec["name"], optimizer, int(spec["steps"])
        self._run = lambda config, steps: run_config(spec, optimizer, config, steps, seed)
        self._ledger: list[tuple[dict, int, float]] = []

    name = property(lambda self: self._name)
    optimizer = property(lambda self: self._optimizer)
    steps = property(lambda self: self._steps)
    budget = property(lambda self: BUDGET_RUNS * self._steps)
    spent = property(lambda self: sum(steps for _, steps, _ in self._ledger))
    history = property(lambda self: [(dict(config), steps, loss) for config, steps, loss in self._ledger])

    def trial(self, config: dict, steps: int | None = None) -> float:
        """The validation loss after ``steps`` (default ``self.steps``; 1 to ``self.steps``) steps with ``config``."""
        steps = self.steps if steps is None else steps
        if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= self.steps:
            raise ValueError(f"steps must be an int from 1 to {self.steps}, got {steps!r}")
        check_config(self.optimizer, config)
        if self.spent + steps > self.budget:
            raise BudgetExceeded(f"{self.name}: a trial of {steps} steps would spend {self.spent + steps} of a budget "
                                 f"of {self.budget} steps ({self.budget - self.spent} left)")
        config = dict(config)
        loss = self._run(config, steps)
        self._ledger.append((config, steps, loss))
        return loss

    def __repr__(self) -> str:
        return (f"TuningTask({self.name!r}, {self.optimizer!r}, steps={self.steps}, "
                f"spent {self.spent} of {self.budget})")


def floor(spec: dict) -> float:
    """The validation loss no model can go below on a task, in expectation: the bigram source's entropy rate; the
    regression's noise (10 % of the target scale, squared); 0 for the digits (their error can reach 0)."""
    if spec["kind"] == "bigram":
        return MarkovSource(spec["vocab"], sharpness=2.0, seed=spec["split"]).entropy_rate()
    if spec["kind"] == "regression":
        return (0.1 * spec["target_scale"]) ** 2
    return 0.0


def visible() -> list[dict]:
    """The visible task specs, each with ``"best"`` (per optimiser, the best mean loss of a learning-rate sweep on
    VISIBLE_SEEDS), ``"floor"`` and ``"bar"``: the loss the graded run must reach at most, its excess over the floor
    at most 1.3 times the best one's (``trainkit.data.excess_bar``; see lab 4)."""
    return json.loads(VISIBLE_JSON.read_text())["tasks"]

# The name the lab's text uses for this bank's visible() (one function, two names).
load_visible_tasks = visible


def graded_loss(spec: dict, optimizer: str, config: dict, seeds) -> float:
    """What grading measures: the mean validation loss of full-length runs of ``config`` on ``seeds``."""
    losses = [run_config(spec, optimizer, config, int(spec["steps"]), seed) for seed in seeds]
    return sum(losses) / len(losses)


def grade_tune(tune, spec: dict, optimizer: str, seeds) -> tuple[dict | None, float, str]:
    """How grading judges ``tune`` on one task and optimiser: (its config, the graded loss, why it missed or "").

    ``tune(task, optimizer)`` gets a fresh ``TuningTask`` (trial seed 0); the configuration it returns is run for the
    task's full length on each of ``seeds`` and passes when the mean loss is at most ``spec["bar"][optimizer]``."""
    task = TuningTask(spec, optimizer)
    try:
        config = tune(task, optimizer)
    except BudgetExceeded as exc:
        return None, math.inf, f"went over the budget ({exc})"
    except Exception as exc:
        return None, math.inf, f"tune raised {type(exc).__name__}: {exc}"
    try:
        config = dict(config) if isinstance(config, dict) else config
        check_config(optimizer, config)
    except (TypeError, ValueError) as exc:
        return None, math.inf, f"returned {config!r:.60}, not a valid configuration: {exc}"
    loss, bar = graded_loss(spec, optimizer, config, seeds), spec["bar"][optimizer]
    if not loss <= bar:
        return config, loss, (f"lr {config['lr']:.3g}: mean loss {loss:.4g} on the grading seeds, above the bar "
                              f"{bar:.4g} (trials spent: {task.spent} of {task.budget} steps)")
    return config, loss, ""
