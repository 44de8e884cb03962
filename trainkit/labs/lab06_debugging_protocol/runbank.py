"""Real training runs with one planted cause each, for learning to read curves (lab 6).

    from trainkit.labs.lab06_debugging_protocol.runbank import LABELS, load_visible, make_run

    run = make_run({"task": "bytes", "cause": "spike_recovers", "seed": 3, "at": 0.4})   # trains it (about a second)
    run.curves                              # what a practitioner sees: the curves, a baseline and a reference
    run.label                               # the cause that was planted ("healthy", "spike_recovers", ...)

Every run is a real minibatch training run (``trainkit.digits.train_run``), not a drawn curve, on one of three
tasks whose losses live on different scales:

- ``digits``: scikit-learn's 8x8 digits, an MLP classifier, cross-entropy (the baseline is log 10 = 2.30);
- ``regression``: y = teacher(x) + noise with a fixed random teacher network, an MLP, mean squared error; the
  noise is large, so even a perfect model ends far above 0 (the reachable loss is the noise variance);
- ``bytes``: next-byte prediction on Python's reference text (``trainkit.corpus``) from the previous 8 bytes, an
  MLP language model, cross-entropy; a byte model cannot go below the text's entropy, far above 0.

The cause is planted in the setting (a learning rate, the data, the schedule), never in the curve:

| label | the planted cause |
|---|---|
| ``healthy`` | a sound setting |
| ``nan`` | a learning rate so large that the loss overflows |
| ``chance_plateau`` | targets shuffled apart from their inputs: nothing to learn beyond the baseline |
| ``both_plateau`` | plain SGD at a learning rate far too low: train and validation stall together |
| ``overfitting`` | a large model on a few dozen or hundred examples |
| ``spike_recovers`` | one step at a huge learning rate, early or late in a sound run |
| ``spike_stays`` | the learning rate jumps and stays far too high from some step on |

A practitioner reading a run knows more than its curves: ``curves.baseline`` is the loss of the best predictor
that ignores its inputs (log C for balanced classes, the unigram loss of the text, the variance of the targets),
and ``curves.reference`` the final validation loss of a sound run of the same task and model from another seed
(what a previous run, a paper or a colleague would tell you). Neither is a threshold; how to use them is the
reader's judgement.

Graded runs are only those whose curves show their cause plainly, with margins (a planted spike that the run does
not recover from is not graded as a recovery): the instructor's side checks each run before it is stored or graded
(``autograder/unseen/runbank_check.py``, instructor-only: it is not in the student edition, because with it a student could
try each label and keep the one it accepts).
On another CPU a run's later digits differ; ``make_run`` still returns a real run of the planted cause.

``make_run`` also takes settings the visible bank does not use ("batch_size": noisier curves, "few", "steps", and
the task "markov", next-token prediction on a random Markov chain): train runs of your own to test a method.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainkit.digits import DigitsSplit, load_digits_split, train_run
from trainkit.models import mlp

LABELS = ("healthy", "nan", "chance_plateau", "both_plateau", "overfitting", "spike_recovers", "spike_stays")
TASKS = ("digits", "regression", "bytes")           # the tasks of the visible bank
OTHER_TASKS = ("markov",)                           # a task the visible bank does not show
CONTEXT = 8          # bytes task: the model sees the previous 8 bytes


@dataclass(frozen=True)
class Curves:
    """What a reader of a run has: the curves and two reference levels (all losses in the task's own units)."""
    train_loss: tuple      # the training (minibatch) loss of every step, in order
    val_loss: tuple        # the validation loss at each evaluation, in order
    val_steps: tuple       # the number of updates before each evaluation (the first is 0)
    baseline: float        # the loss of the best predictor that ignores its inputs
    reference: float       # the final validation loss of a sound run of the same task and model (another seed)


@dataclass
class BankRun:
    spec: dict
    label: str
    curves: Curves


# --- the three tasks -------------------------------------------------------------------------------------------

class _Squeeze(nn.Module):
    def forward(self, x):
        return x.squeeze(-1)


@lru_cache(maxsize=8)
def regression_data(data_seed: int, n_train: int = 512, n_val: int = 2048, noise: float = 0.7) -> DigitsSplit:
    """y = teacher(x) + noise: a fixed random tanh network of 8 inputs, its output scaled to variance 1, noise std 0.7."""
    g = torch.Generator().manual_seed(1000 + data_seed)
    teacher = [torch.randn(8, 32, generator=g) / math.sqrt(8), torch.randn(32, generator=g) / math.sqrt(32)]
    x = torch.randn(n_train + n_val, 8, generator=g)
    signal = torch.tanh(x @ teacher[0]) @ teacher[1]
    signal = signal / signal.std()
    y = signal + noise * torch.randn(len(x), generator=g)
    z = torch.zeros(8)
    return DigitsSplit(x[:n_train], y[:n_train], x[n_train:], y[n_train:], z, z + 1)


@lru_cache(maxsize=4)
def _bytes_data(data_seed: int, n_train: int = 20000, n_val: int = 2000) -> tuple[DigitsSplit, float]:
    from trainkit.corpus import ByteTokenizer, TokenData, load_text, unigram_loss

    data = TokenData.from_text(load_text(), ByteTokenizer())
    g = torch.Generator().manual_seed(2000 + data_seed)

    def windows(tokens, n):
        start = torch.randint(0, len(tokens) - CONTEXT - 1, (n,), generator=g)
        idx = start[:, None] + torch.arange(CONTEXT + 1)
        w = tokens[idx]
        return w[:, :CONTEXT].contiguous(), w[:, CONTEXT].contiguous()

    xt, yt = windows(data.train, n_train)
    xv, yv = windows(data.val, n_val)
    z = torch.zeros(CONTEXT)
    return DigitsSplit(xt, yt, xv, yv, z, z + 1), unigram_loss(data.train, data.val)


@lru_cache(maxsize=4)
def _markov_data(data_seed: int, n_train: int = 8000, n_val: int = 4000) -> tuple[DigitsSplit, float]:
    from trainkit.data import MarkovSource

    source = MarkovSource(vocab_size=32, sharpness=2.0, seed=3000 + data_seed)
    g = torch.Generator().manual_seed(3000 + data_seed)
    x, y = source.sample((n_train + n_val) // 50, 50, generator=g)
    x, y = x.reshape(-1), y.reshape(-1)
    pi = source.stationary()
    baseline = float(-(pi * pi.log()).sum())            # the best input-blind guess: the stationary distribution
    z = torch.zeros(1)
    return DigitsSplit(x[:n_train], y[:n_train], x[n_train:], y[n_train:], z, z + 1), baseline


def _byte_model(width: int) -> nn.Module:
    return nn.Sequential(nn.Embedding(256, 16), nn.Flatten(1), mlp(16 * CONTEXT, width, 1, 256, activation="gelu"))


def _task(task: str, data_seed: int):
    """(data, baseline loss, model builder(width, depth), loss function, sound settings) of a task."""
    if task == "digits":
        data = load_digits_split(seed=data_seed)
        return data, math.log(10), (lambda w, d: mlp(64, w, d, 10)), F.cross_entropy, dict(lr=1e-3, steps=200, batch_size=64)
    if task == "regression":
        data = regression_data(data_seed)
        baseline = float(((data.y_val - data.y_train.mean()) ** 2).mean())
        return (data, baseline, (lambda w, d: nn.Sequential(mlp(8, w, d, 1, activation="tanh"), _Squeeze())), F.mse_loss,
                dict(lr=3e-3, steps=200, batch_size=256))
    if task == "bytes":
        data, baseline = _bytes_data(data_seed)
        return data, baseline, (lambda w, d: _byte_model(w)), F.cross_entropy, dict(lr=3e-3, steps=200, batch_size=128)
    if task == "markov":
        data, baseline = _markov_data(data_seed)
        return (data, baseline, (lambda w, d: nn.Sequential(nn.Embedding(32, 16), mlp(16, w, d, 32, activation="gelu"))),
                F.cross_entropy, dict(lr=3e-3, steps=200, batch_size=128))
    raise ValueError(f"unknown task {task!r}; one of {TASKS + OTHER_TASKS}")


def _subset(data: DigitsSplit, n: int) -> DigitsSplit:
    return DigitsSplit(data.x_train[:n], data.y_train[:n], data.x_val, data.y_val, data.mean, data.std)


def _shuffled(data: DigitsSplit, seed: int) -> DigitsSplit:
    perm = torch.randperm(len(data.y_train), generator=torch.Generator().manual_seed(seed + 100))
    return DigitsSplit(data.x_train, data.y_train[perm], data.x_val, data.y_val, data.mean, data.std)


# --- planting a cause -----------------------------------------------------------------------------------------

# Per task: nan_lr (SGD), slow_lr (SGD, for both_plateau), few (training examples of an overfitting run, with a model
# twice as wide and one layer deeper), spike_once (the multiple of the sound lr taken for one step; (early, late)
# where a spike before the middle of the run needs a smaller one to recover) and spike_stays (the multiple kept from
# the spike on). Sized so that the visible runs show their cause with margins (autograder/unseen/runbank_check.py).
PLANTS = {
    "digits": dict(nan_lr=1e3, slow_lr=1e-3, few=40, spike_once=(420.0, 700.0), spike_stays=900.0),
    "regression": dict(nan_lr=3e2, slow_lr=5e-5, few=24, spike_once=300.0, spike_stays=9000.0),
    "bytes": dict(nan_lr=3e3, slow_lr=1e-2, few=300, spike_once=100.0, spike_stays=900.0),
    "markov": dict(nan_lr=3e3, slow_lr=1e-2, few=100, spike_once=100.0, spike_stays=900.0),
}


def _train(task, cause, seed, width, depth, data_seed, at, steps, batch_size=None, few=None):
    data, baseline, build, loss_fn, sound = _task(task, data_seed)
    plant = PLANTS[task]
    lr, steps = sound["lr"], steps or sound["steps"]
    at_step = int(round(at * steps))
    kw = dict(loss_fn=loss_fn, seed=seed, eval_every=20)
    batch = batch_size or sound["batch_size"]
    torch.manual_seed(seed)
    model = build(width, depth)
    if cause == "healthy":
        return train_run(model, data, steps, lr, batch_size=batch, **kw), baseline
    if cause == "nan":
        return train_run(model, data, steps, plant["nan_lr"], optimizer="sgd", batch_size=batch, **kw), baseline
    if cause == "chance_plateau":
        return train_run(model, _shuffled(data, seed), steps, lr, batch_size=batch, **kw), baseline
    if cause == "both_plateau":
        return train_run(model, data, steps, plant["slow_lr"], optimizer="sgd", batch_size=batch, **kw), baseline
    if cause == "overfitting":
        torch.manual_seed(seed)
        model = build(2 * width, depth + 1)
        few = few or plant["few"]
        return train_run(model, _subset(data, few), steps, lr, batch_size=few, **kw), baseline
    if cause == "spike_recovers":
        once = plant["spike_once"]
        big = lr * (once if isinstance(once, float) else once[at >= 0.5])      # (early, late): later runs need more
        return train_run(model, data, steps, lr, lr_at=lambda s: big if s == at_step else lr, batch_size=batch, **kw), baseline
    if cause == "spike_stays":
        big = lr * plant["spike_stays"]
        return train_run(model, data, steps, lr, lr_at=lambda s: big if s >= at_step else lr, batch_size=batch, **kw), baseline
    raise ValueError(f"unknown cause {cause!r}; one of {LABELS}")


@lru_cache(maxsize=64)
def reference_loss(task: str, width: int, depth: int, data_seed: int, steps=None, batch_size=None) -> float:
    """The final validation loss of a sound run of this task, model and budget, from a seed no bank run uses."""
    run, _ = _train(task, "healthy", 9999, width, depth, data_seed, 0.5, steps, batch_size=batch_size)
    return float(run.val_loss[-1])


def make_run(spec: dict) -> BankRun:
    """Train the run that ``spec`` describes: {"task", "cause", "seed"} and optionally "width", "depth",
    "data_seed", "at" (where a spike is planted, as a fraction of the run), "steps", "batch_size" (the minibatch:
    smaller is noisier) and "few" (the number of training examples of an overfitting run)."""
    spec = {"width": 64, "depth": 1, "data_seed": 0, "at": 0.5, "steps": None, "batch_size": None, "few": None, **spec}
    reference = reference_loss(spec["task"], spec["width"], spec["depth"], spec["data_seed"], spec["steps"],
                               spec["batch_size"])
    run, baseline = _train(spec["task"], spec["cause"], spec["seed"], spec["width"], spec["depth"], spec["data_seed"],
                           spec["at"], spec["steps"], spec["batch_size"], spec["few"])
    curves = Curves(tuple(run.train_loss), tuple(run.val_loss), tuple(run.val_steps), float(baseline), reference)
    return BankRun(spec, spec["cause"], curves)


# --- the visible bank -----------------------------------------------------------------------------------------

def visible_specs() -> list[dict]:
    """The runs a student iterates on: every task and cause, two seeds, spikes early and late."""
    specs = []
    for task in TASKS:
        for cause in LABELS:
            for seed in (0, 1):
                spec = {"task": task, "cause": cause, "seed": seed}
                if cause.startswith("spike"):
                    spec["at"] = (0.3, 0.7)[seed]
                specs.append(spec)
    return specs



# --- the stored bank -----------------------------------------------------------------------------------------
# Training the 42 visible runs takes about half a minute on a CPU, too long for a notebook cell: they are trained
# once by the instructor (`python -m autograder.banks build runbank`, which stores only runs that show their cause;
# it stores the grader's unseen runs too, in autograder/)
# and stored here, losses to 6 significant digits. tests/test_runbank.py retrains a sample and checks they are theirs.

VISIBLE_FILE = Path(__file__).with_name("runbank_visible.json")


def _short(v: float) -> float:
    return float(f"{v:.6g}") if math.isfinite(v) else v


def to_record(run: BankRun) -> dict:
    c = run.curves
    return {"spec": run.spec, "label": run.label, "train_loss": [_short(v) for v in c.train_loss],
            "val_loss": [_short(v) for v in c.val_loss], "val_steps": list(c.val_steps),
            "baseline": _short(c.baseline), "reference": _short(c.reference)}


def from_record(record: dict) -> BankRun:
    curves = Curves(tuple(float(v) for v in record["train_loss"]), tuple(float(v) for v in record["val_loss"]),
                    tuple(int(s) for s in record["val_steps"]), float(record["baseline"]), float(record["reference"]))
    return BankRun(dict(record["spec"]), record["label"], curves)


def load_bank(path: Path) -> list[BankRun]:
    """The runs stored in ``path`` (written by ``autograder.runbank_check``), with their labels."""
    return [from_record(r) for r in json.loads(Path(path).read_text())["runs"]]


def visible() -> list[BankRun]:
    """The visible bank: 42 real runs (every task and cause, two seeds, spikes early and late), with labels."""
    return load_bank(VISIBLE_FILE)

# The name the lab's text uses for this bank's visible() (one function, two names).
load_visible = visible
