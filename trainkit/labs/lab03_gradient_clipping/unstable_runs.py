"""Small real training runs that go wrong in planted ways: lab 3's guard exercise.

A ``RunSpec`` describes one run: a task (``"digits"``: scikit-learn's digits with an MLP; ``"regression"``: a noisy
teacher network with a tanh MLP; ``"rnn"``: a tanh RNN that must remember the first value of a sequence), an
optimizer (SGD with momentum 0.9, or AdamW) and learning rate, and what goes wrong in it:

- ``loss_scale``: the loss the run differentiates is ``loss_scale`` times the mean loss (a summed reduction, targets in
  other units, a loss weight). With SGD the learning rate is divided by it, so the run trains the same, but its
  gradient norms are ``loss_scale`` times larger. Runs differ in their natural gradient norm by a factor of a million;
- ``spikes``: that many bad minibatches at random steps, whose inputs (digits, rnn) or targets (regression) are
  ``spike_factor`` times what they should be (a unit mix-up, a corrupt shard): a loss and gradient spike;
- ``nonfinite``: that many minibatches with a NaN or an infinite entry in their inputs (an infinite input can give a
  finite loss and non-finite gradients).

- ``stretch``: the bad minibatches come in stretches of that many in a row (``spikes`` is then the number of
  stretches): a bad shard read from start to end;
- ``scale_drift``: the loss scale changes by this factor over the run, smoothly (a loss scale that grows, a loss weight
  that is annealed); with SGD the learning rate follows it, so the run trains the same but its healthy gradient norms
  drift by that factor, on top of the drift that comes from the loss falling;
- ``weight_spread``: each minibatch's loss is weighted by ``exp(weight_spread * z)``, z standard normal (a summed loss
  over minibatches of very different sizes or lengths): healthy gradient norms are heavy-tailed, and at 1.5 or more a
  tenth of healthy steps lies ten times or more above the typical one. These steps are not faults: the clean run
  takes them.

Spike factors range from mild (a few times the healthy input or target, so the gradient is only a few times the
typical one, yet many such minibatches unsettle the run) to huge. No planted fault comes before step
``first_fault`` (at least 20): the first 20 steps of every run are clean.

``run_with_guard(spec, guard)`` trains the run and calls ``guard(parameters, loss)`` after every ``backward()`` and
before the optimizer step: ``parameters`` is the list of the model's parameters (their ``.grad`` holds this step's
gradients; the guard may scale them in place, it must not change the parameters themselves) and ``loss`` is the
step's loss as a Python float (the scaled loss that was differentiated; it may be NaN or inf). The guard returns the
Python bool ``True`` to take the step, ``False`` to skip it (no optimizer step; the gradients are cleared either way).
It returns a ``GuardedRun``: the validation loss of the fresh and of the trained model (the mean, unscaled loss on
held-out data; ``inf`` when a parameter is not finite), the number of skipped steps, and every step's loss and
gradient norm before the guard (for plots).

``reference_run(spec)`` is the clean run: the same run with exactly its planted bad minibatches skipped. ``judge``
compares a guarded run with it, the way lab 3 grades: the run must end with finite parameters, skip at most
``MAX_SKIPPED`` of its steps, and end within ``LOSS_TOLERANCE`` of the gap between the fresh model's validation loss
and the clean run's. ``natural_norm(spec)`` is the median gradient norm of the run's first 20 steps;
``norm_summary(run)`` describes a run's norms in one line (their drift, their tail, how large the bad minibatches'
are).

    from trainkit.labs.lab03_gradient_clipping.unstable_runs import VISIBLE_SPECS, judge, run_with_guard
    result = run_with_guard(VISIBLE_SPECS[0], my_guard)
    print(judge(VISIBLE_SPECS[0], result))        # '' when the run passes, else why not
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainkit.digits import load_digits_split
from trainkit.models import mlp
from trainkit.labs.lab06_debugging_protocol.runbank import regression_data

TASKS = ("digits", "regression", "rnn")
MAX_SKIPPED = 0.10       # a guarded run may skip at most this fraction of its steps
LOSS_TOLERANCE = 0.20    # ... and end at most this fraction of the clean run's gap above the clean run's loss
OPTIMIZERS = ("sgd", "adamw")
RNN_LENGTH = 20          # the RNN's sequences: 20 steps of 2 features; the target is the first step's first feature


@dataclass(frozen=True)
class RunSpec:
    """One run and what goes wrong in it (see the module's docstring)."""
    name: str
    task: str = "regression"
    optimizer: str = "sgd"
    lr: float = 0.05
    loss_scale: float = 1.0
    steps: int = 300
    batch_size: int = 32
    width: int = 32
    seed: int = 0
    data_seed: int = 0
    spikes: int = 0
    spike_factor: float = 100.0
    nonfinite: int = 0
    first_fault: int = 20
    stretch: int = 1
    scale_drift: float = 1.0
    weight_spread: float = 0.0

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"{self.name}: task must be one of {TASKS}, got {self.task!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"{self.name}: optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if not (self.lr > 0 and self.loss_scale > 0 and self.spike_factor > 0 and self.scale_drift > 0):
            raise ValueError(f"{self.name}: lr, loss_scale, spike_factor and scale_drift must be > 0")
        if self.stretch < 1 or self.weight_spread < 0:
            raise ValueError(f"{self.name}: stretch must be at least 1 and weight_spread at least 0")
        if self.first_fault < 20 or self.steps <= self.first_fault + self.spikes * self.stretch + self.nonfinite:
            raise ValueError(f"{self.name}: first_fault must be at least 20, and the faults must fit after it")


@dataclass
class GuardedRun:
    """What ``run_with_guard`` measured: the outcome and the curves."""
    spec: RunSpec
    start_val_loss: float                                   # the fresh model's validation loss
    final_val_loss: float                                   # the trained model's (inf if a parameter is not finite)
    skipped: int
    loss: list[float] = field(default_factory=list)         # every step's loss (scaled, as differentiated)
    grad_norm: list[float] = field(default_factory=list)    # every step's gradient norm before the guard
    taken: list[bool] = field(default_factory=list)         # whether each step was taken
    fault_steps: dict = field(default_factory=dict)          # {"spike": [...], "nonfinite": [...]}

    @property
    def finished(self) -> bool:
        return math.isfinite(self.final_val_loss)


@lru_cache(maxsize=8)
def _data(task: str, data_seed: int):
    if task == "digits":
        d = load_digits_split(seed=data_seed)
        return d.x_train, d.y_train, d.x_val, d.y_val
    if task == "regression":
        d = regression_data(data_seed)
        return d.x_train, d.y_train[:, None], d.x_val, d.y_val[:, None]
    g = torch.Generator().manual_seed(3000 + data_seed)
    x = torch.randn(2048 + 512, RNN_LENGTH, 2, generator=g)
    y = x[:, :1, 0].clone()                                   # remember the first value for 20 steps
    return x[:2048], y[:2048], x[2048:], y[2048:]


class _RNN(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.rnn = nn.RNN(2, width, nonlinearity="tanh", batch_first=True)
        self.head = nn.Linear(width, 1)
        with torch.no_grad():
            nn.init.orthogonal_(self.rnn.weight_hh_l0)        # keeps a memory of the first steps

    def forward(self, x):                                     # x: (B, T, 2)
        out, _ = self.rnn(x)                                  # (B, T, width)
        return self.head(out[:, -1])                          # (B, 1)


def _model(spec: RunSpec) -> nn.Module:
    if spec.task == "digits":
        return mlp(64, spec.width, 1, 10)
    if spec.task == "regression":
        return mlp(8, spec.width, 2, 1, activation="tanh")
    return _RNN(spec.width)


def _loss(spec: RunSpec) -> Callable:
    return F.cross_entropy if spec.task == "digits" else F.mse_loss


def fault_steps(spec: RunSpec) -> dict:
    """{"spike": steps, "nonfinite": steps}: where the planted bad minibatches are (drawn from the run's seed)."""
    g = torch.Generator().manual_seed(10_000 + spec.seed)
    if spec.stretch == 1:
        steps = (spec.first_fault + torch.randperm(spec.steps - spec.first_fault, generator=g)).tolist()
        return {"spike": sorted(steps[:spec.spikes]),
                "nonfinite": sorted(steps[spec.spikes:spec.spikes + spec.nonfinite])}
    # stretches of `stretch` bad minibatches in a row: their starts drawn from slots that keep them apart
    slots = (spec.steps - spec.first_fault) // spec.stretch
    order = torch.randperm(slots, generator=g).tolist()
    spike = sorted(spec.first_fault + slot * spec.stretch + k
                   for slot in order[:spec.spikes] for k in range(spec.stretch))
    free = sorted(set(range(spec.first_fault, spec.steps)) - set(spike))
    pick = torch.randperm(len(free), generator=g)[:spec.nonfinite].tolist()
    return {"spike": spike, "nonfinite": sorted(free[i] for i in pick)}


def _val_loss(model: nn.Module, spec: RunSpec, x, y) -> float:
    if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        return math.inf
    with torch.no_grad():
        value = float(_loss(spec)(model(x), y))
    return value if math.isfinite(value) else math.inf


def run_with_guard(spec: RunSpec, guard: Callable[[list, float], bool] | None = None) -> GuardedRun:
    """Train ``spec``'s run, asking ``guard(parameters, loss)`` before every optimizer step (None: always step).

    Raises ``TypeError`` when the guard returns something other than a Python bool and ``RuntimeError`` when it
    changes a parameter (it may change only the gradients)."""
    x_train, y_train, x_val, y_val = _data(spec.task, spec.data_seed)
    torch.manual_seed(spec.seed)
    model = _model(spec)
    params = list(model.parameters())
    opt = (torch.optim.SGD(params, lr=spec.lr, momentum=0.9) if spec.optimizer == "sgd"
           else torch.optim.AdamW(params, lr=spec.lr, weight_decay=0.0))
    weights = torch.exp(spec.weight_spread * torch.randn(spec.steps, generator=torch.Generator().manual_seed(
        30_000 + spec.seed))).tolist()
    faults = fault_steps(spec)
    spikes, nonfinite = set(faults["spike"]), set(faults["nonfinite"])
    g = torch.Generator().manual_seed(20_000 + spec.seed)
    loss_fn = _loss(spec)
    run = GuardedRun(spec, _val_loss(model, spec, x_val, y_val), math.inf, 0, fault_steps=faults)
    for step in range(spec.steps):
        idx = torch.randint(0, len(x_train), (spec.batch_size,), generator=g)
        x, y = x_train[idx], y_train[idx]
        if step in spikes:
            if spec.task == "regression":
                y = y * spec.spike_factor
            else:
                x = x * spec.spike_factor
        if step in nonfinite:
            x = x.clone()
            x.view(-1)[7] = math.nan if step % 2 else math.inf
        opt.zero_grad(set_to_none=True)
        scale = spec.loss_scale * spec.scale_drift ** (step / spec.steps)
        if spec.optimizer == "sgd":
            opt.param_groups[0]["lr"] = spec.lr / scale
        loss = scale * weights[step] * loss_fn(model(x), y)
        loss.backward()
        grads = [p.grad for p in params if p.grad is not None]
        run.grad_norm.append(float(torch.nn.utils.get_total_norm(grads)))
        run.loss.append(float(loss.detach()))
        take = True
        if guard is not None:
            before = [p.detach().clone() for p in params]
            take = guard(params, run.loss[-1])
            if not isinstance(take, bool):
                raise TypeError(f"the guard must return a Python bool (True: step, False: skip), got {take!r}")
            same = (torch.allclose(b, p.detach(), rtol=0.0, atol=0.0, equal_nan=True) for b, p in zip(before, params))
            if not all(same):
                raise RuntimeError("the guard changed a parameter: it may scale the gradients, never the parameters")
        if take:
            opt.step()
        else:
            run.skipped += 1
        run.taken.append(take)
    opt.zero_grad(set_to_none=True)
    run.final_val_loss = _val_loss(model, spec, x_val, y_val)
    return run


def reference_run(spec: RunSpec) -> GuardedRun:
    """The clean run: the same run with exactly its planted bad minibatches skipped, and nothing else done."""
    bad = {s for steps in fault_steps(spec).values() for s in steps}
    calls = []

    def skip_the_planted(parameters, loss):
        calls.append(loss)
        return len(calls) - 1 not in bad
    return run_with_guard(spec, skip_the_planted)


def natural_norm(spec: RunSpec) -> float:
    """The median gradient norm of the run's first 20 steps (no fault comes that early)."""
    short = dataclasses.replace(spec, spikes=0, nonfinite=0, steps=21)
    return statistics.median(run_with_guard(short).grad_norm[:20])


def norm_summary(run: GuardedRun) -> str:
    """One line on a run's gradient norms (before the guard): the healthy norm at the start and at the end (the
    median of the first and of the last 20 healthy steps), how many healthy steps lie 10x or more above the median of
    the 20 healthy steps before them, and how large the bad minibatches' norms are against that median (the median
    ratio and the smallest), with the longest stretch of bad minibatches in a row."""
    bad = {s for steps in run.fault_steps.values() for s in steps}
    healthy = [(t, n) for t, n in enumerate(run.grad_norm) if t not in bad and math.isfinite(n)]
    norms = [n for _, n in healthy]
    if len(norms) < 21:
        return "too few healthy steps to summarise"
    index = {t: i for i, (t, _) in enumerate(healthy)}

    def before(t: int) -> float:                 # the median of the 20 healthy norms before step t
        i = index[t] if t in index else sum(1 for u, _ in healthy if u < t)
        return statistics.median(norms[max(0, i - 20):i]) if i >= 5 else math.nan
    tail = sum(1 for t, n in healthy[20:] if n >= 10 * before(t))
    ratios = sorted(run.grad_norm[t] / before(t) for t in run.fault_steps.get("spike", []) if before(t) > 0)
    longest, length, last = 0, 0, -2
    for t in sorted(run.fault_steps.get("spike", [])):
        length = length + 1 if t == last + 1 else 1
        longest, last = max(longest, length), t
    text = (f"healthy norm {statistics.median(norms[:20]):.2g} at the start, {statistics.median(norms[-20:]):.2g} "
            f"at the end; {tail} healthy steps >= 10x their recent median")
    if ratios:
        text += (f"; {len(ratios)} bad minibatches at {statistics.median(ratios):.3g}x the recent median "
                 f"(smallest {ratios[0]:.3g}x), at most {longest} in a row")
    return text


def judge(spec: RunSpec, run: GuardedRun, reference: GuardedRun | None = None) -> str:
    """'' when ``run`` (a guarded run of ``spec``) passes, else why not: it must end with finite parameters, skip at
    most MAX_SKIPPED of its steps, and end at a validation loss at most LOSS_TOLERANCE of the clean run's gap (the fresh
    model's loss minus the clean run's final loss) above the clean run's. ``reference``: ``reference_run(spec)``."""
    reference = reference_run(spec) if reference is None else reference
    allowed = reference.final_val_loss + LOSS_TOLERANCE * (reference.start_val_loss - reference.final_val_loss)
    limit = int(MAX_SKIPPED * spec.steps)
    if not run.finished:
        return f"the run did not finish: a parameter is not finite (skipped {run.skipped} of {spec.steps} steps)"
    if run.skipped > limit:
        planted = sum(len(steps) for steps in reference.fault_steps.values())
        return (f"skipped {run.skipped} of {spec.steps} steps (at most {limit} allowed; the run has {planted} bad "
                "minibatches)")
    if run.final_val_loss > allowed:
        return (f"final validation loss {run.final_val_loss:.4g}; the clean run's {reference.final_val_loss:.4g}, "
                f"the fresh model's {reference.start_val_loss:.4g} (allowed: {allowed:.4g})")
    return ""


# The visible runs: every task, both optimizers, natural gradient norms from about 1e-3 to 1e3, spikes of several
# sizes (many mild ones in two runs), stretches of bad minibatches, heavy-tailed healthy norms, norms that drift 30x
# down or 100x up, NaN and infinite inputs, a fault as early as step 20. (The grader's runs are others of the same
# kinds, with other settings.)
VISIBLE_SPECS = (
    RunSpec("regression, SGD, a few bad minibatches", task="regression", optimizer="sgd", lr=0.05, spikes=6,
            nonfinite=2, seed=1),
    RunSpec("regression, SGD, summed loss (x1000)", task="regression", optimizer="sgd", lr=0.05, loss_scale=1000,
            spikes=5, nonfinite=2, seed=2),
    RunSpec("regression, AdamW, x0.001, minibatch weights vary a lot", task="regression", optimizer="adamw", lr=3e-3,
            loss_scale=1e-3, weight_spread=1.8, spikes=3, nonfinite=1, seed=43),
    RunSpec("digits, AdamW, raw-pixel minibatches", task="digits", optimizer="adamw", lr=3e-3, spikes=6,
            spike_factor=30, nonfinite=2, seed=4),
    RunSpec("digits, SGD, loss x30, stretches of bad minibatches", task="digits", optimizer="sgd", lr=0.05,
            loss_scale=30, spikes=4, stretch=10, spike_factor=20, seed=54),
    RunSpec("digits, SGD, many mildly bad minibatches", task="digits", optimizer="sgd", lr=0.1, spikes=40,
            spike_factor=8, seed=46),
    RunSpec("rnn, AdamW", task="rnn", optimizer="adamw", lr=3e-3, spikes=4, spike_factor=20, nonfinite=2, seed=7,
            steps=150),
    RunSpec("digits, SGD, loss x30 falling 30x, mildly bad minibatches", task="digits", optimizer="sgd", lr=0.1,
            loss_scale=30, scale_drift=1 / 30, spikes=35, spike_factor=8, nonfinite=1, seed=52),
    RunSpec("regression, SGD, loss x10 growing 100x, many spikes", task="regression", optimizer="sgd", lr=0.05,
            loss_scale=10, scale_drift=100, spikes=10, seed=9),
    RunSpec("digits, SGD, loss x300, non-finite inputs only", task="digits", optimizer="sgd", lr=0.05,
            loss_scale=300, nonfinite=4, seed=10),
)


def visible() -> list[RunSpec]:
    """The visible runs."""
    return list(VISIBLE_SPECS)
