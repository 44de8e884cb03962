"""Five small training scripts, each with one planted bug of the kinds lesson 6's protocol finds (lab 6).

A script here is a ``Script``: one training loop (``run_script``, read it: it is the same for all five and it is
sound) run with six parts that each script writes for itself:

    build(width)                  -> (model, optimiser, schedule or None)
    epoch_order(data, generator)  -> the order of the training examples for one epoch
    new_epoch(schedule)           called when the loop starts a new epoch (not before the first)
    loss(model, x, y)             -> the minibatch's loss
    update(optimiser, schedule, loss)   one optimisation step from that loss
    validate(model, data)         -> the validation loss

Calling a script runs it: ``SCRIPTS["a"](data, seed=0, steps=200, width=64) -> (model, run)``, with the curves in
a ``trainkit.digits.Run``. Each runs without an error and prints nothing; each has exactly one bug, in one of its
parts, and its curves are worse than they should be. ``script.replace(part=...)`` is the same script with one or
more parts replaced, so a fix is the part that was wrong, written right:

    from trainkit.labs.lab06_debugging_protocol.broken_runs import SCRIPTS, TASK_OF, task_data
    model, run = SCRIPTS["a"](task_data(TASK_OF["a"]), seed=0)
    fixed = SCRIPTS["a"].replace(update=my_update)        # then fixed(data, seed=0) as above

The parts' names say what they are for, not whether they are right: finding the bug is the exercise. ``data`` is
a ``DigitsSplit`` (``task_data`` builds the digits or the regression task of ``trainkit.labs.lab06_debugging_protocol.runbank``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainkit.digits import DigitsSplit, Run, evaluate, load_digits_split
from trainkit.models import mlp

BATCH = 64
EVAL_EVERY = 20


def task_data(task: str, data_seed: int = 0) -> DigitsSplit:
    """The digits (classification, 10 classes) or the noisy regression of trainkit.labs.lab06_debugging_protocol.runbank (8 inputs, 1 target)."""
    if task == "digits":
        return load_digits_split(seed=data_seed)
    if task == "regression":
        from trainkit.labs.lab06_debugging_protocol.runbank import regression_data

        return regression_data(data_seed)
    raise ValueError(f"task must be 'digits' or 'regression', got {task!r}")


@dataclass(frozen=True)
class Script:
    """A training script as its six parts (see the module's docstring); calling it runs ``run_script``."""
    intent: str              # what the script means to do: the bug is where a part does something else
    build: Callable
    epoch_order: Callable
    new_epoch: Callable
    loss: Callable
    update: Callable
    validate: Callable

    def __call__(self, data: DigitsSplit, seed: int = 0, steps: int = 200, width: int = 64):
        return run_script(self, data, seed=seed, steps=steps, width=width)

    def replace(self, **parts) -> Script:
        """This script with the given parts replaced (keyword names as above)."""
        unknown = sorted(set(parts) - {f.name for f in dataclasses.fields(self)} | ({"intent"} & set(parts)))
        if unknown:
            raise TypeError(f"a script's parts are build, epoch_order, new_epoch, loss, update and validate; "
                            f"got {', '.join(unknown)}")
        return dataclasses.replace(self, **parts)


def run_script(script: Script, data: DigitsSplit, seed: int = 0, steps: int = 200, width: int = 64):
    """The loop all five scripts share: minibatches of 64 taken in ``epoch_order``, a new order for every epoch,
    the validation loss at step 0 and every 20 steps to ``steps``, one training loss per step. Returns
    ``(model, run)``."""
    torch.manual_seed(seed)
    model, opt, schedule = script.build(width)
    g = torch.Generator().manual_seed(seed)
    run, order, pos = Run(), script.epoch_order(data, g), 0
    for step in range(steps + 1):
        if step % EVAL_EVERY == 0 or step == steps:
            run.val_loss.append(float(script.validate(model, data)))
            run.val_steps.append(step)
        if step == steps:
            break
        if pos + BATCH > len(order):
            order, pos = script.epoch_order(data, g), 0
            script.new_epoch(schedule)
        idx, pos = order[pos:pos + BATCH], pos + BATCH
        model.train()
        loss = script.loss(model, data.x_train[idx], data.y_train[idx])
        script.update(opt, schedule, loss)
        run.train_loss.append(loss.item())
    return model, run


# --- script a -------------------------------------------------------------------------------------------------
def a_build(width):
    model = mlp(64, width, 1, 10)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, opt, torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)


def a_epoch_order(data, g):
    return torch.randperm(len(data.y_train), generator=g)


def a_new_epoch(schedule):
    pass


def a_loss(model, x, y):
    return F.cross_entropy(model(x), y)


def a_update(opt, schedule, loss):
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    schedule.step()


def a_validate(model, data):
    return evaluate(model, data.x_val, data.y_val)[0]


# --- script b -------------------------------------------------------------------------------------------------
def b_build(width):
    model = mlp(64, width, 1, 10)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), None


def b_epoch_order(data, g):
    return torch.randperm(len(data.y_train), generator=g)


def b_new_epoch(schedule):
    pass


def b_loss(model, x, y):
    return F.cross_entropy(model(x), y)


def b_update(opt, schedule, loss):
    loss.backward()
    opt.step()


def b_validate(model, data):
    return evaluate(model, data.x_val, data.y_val)[0]


# --- script c -------------------------------------------------------------------------------------------------
def c_build(width):
    model = mlp(8, width, 1, 1, activation="tanh")
    return model, torch.optim.AdamW(model.parameters(), lr=3e-3), None


def c_epoch_order(data, g):
    return torch.randperm(len(data.y_train), generator=g)


def c_new_epoch(schedule):
    pass


def c_loss(model, x, y):
    prediction = model(x)
    return ((prediction - y) ** 2).mean()


def c_update(opt, schedule, loss):
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def c_validate(model, data):
    with torch.no_grad():
        model.eval()
        value = F.mse_loss(model(data.x_val).squeeze(-1), data.y_val).item()
        model.train()
    return value


# --- script d -------------------------------------------------------------------------------------------------
def d_build(width):
    model = mlp(64, width, 1, 10)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), None


def d_epoch_order(data, g):
    return torch.argsort(data.y_train, stable=True)


def d_new_epoch(schedule):
    pass


def d_loss(model, x, y):
    return F.cross_entropy(model(x), y)


def d_update(opt, schedule, loss):
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def d_validate(model, data):
    return evaluate(model, data.x_val, data.y_val)[0]


# --- script e -------------------------------------------------------------------------------------------------
def e_build(width):
    model = nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Dropout(0.5), nn.Linear(width, 10))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), None


def e_epoch_order(data, g):
    return torch.randperm(len(data.y_train), generator=g)


def e_new_epoch(schedule):
    pass


def e_loss(model, x, y):
    return F.cross_entropy(model(x), y)


def e_update(opt, schedule, loss):
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def e_validate(model, data):
    with torch.no_grad():
        return F.cross_entropy(model(data.x_val), data.y_val).item()


def _script(intent: str, name: str) -> Script:
    parts = {f.name: globals()[f"{name}_{f.name}"] for f in dataclasses.fields(Script) if f.name != "intent"}
    return Script(intent=intent, **parts)


SCRIPTS = {
    "a": _script("A digits classifier, AdamW at 1e-3 decayed by 10 % after every epoch (ExponentialLR, gamma 0.9), "
                 "minibatches of 64 reshuffled every epoch, the validation loss in eval mode.", "a"),
    "b": _script("A digits classifier, AdamW at 1e-3, minibatches of 64 reshuffled every epoch, the validation loss "
                 "in eval mode.", "b"),
    "c": _script("A regression MLP (8 inputs, one output), mean squared error, AdamW at 3e-3, minibatches of 64 "
                 "reshuffled every epoch, the validation loss in eval mode.", "c"),
    "d": _script("A digits classifier, AdamW at 1e-3, minibatches of 64 reshuffled every epoch, the validation loss "
                 "in eval mode.", "d"),
    "e": _script("A digits classifier with dropout 0.5, AdamW at 1e-3, minibatches of 64 reshuffled every epoch, the "
                 "validation loss in eval mode.", "e"),
}
TASK_OF = {"a": "digits", "b": "digits", "c": "regression", "d": "digits", "e": "digits"}
