"""Five small training scripts, each with one planted bug of the kinds lesson 6's protocol finds (lab 6).

Each ``script_*`` function is a whole training script: it builds its model, trains it on a task's data and returns
``(model, run)`` with the curves in a ``trainkit.digits.Run``. Each runs without an error and prints nothing; each
has exactly one bug, and its curves are worse than they should be. Read them, run the protocol on them, and write
the fixed script.

    from trainkit.broken_runs import SCRIPTS, TASK_OF, task_data
    model, run = SCRIPTS["a"](task_data(TASK_OF["a"]), seed=0)

Each script is whole on purpose, as a script in a real repository is: the loop is repeated in each, so that one
can be read top to bottom without the others. Their names say nothing about their bugs: finding
them is the exercise. All five share one signature: ``(data, seed=0, steps=200, width=64) -> (model, run)``; ``data`` is a
``DigitsSplit`` (``task_data`` builds the digits or the regression task of ``trainkit.runbank``).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainkit.digits import DigitsSplit, Run, evaluate, load_digits_split
from trainkit.models import mlp


def task_data(task: str, data_seed: int = 0) -> DigitsSplit:
    """The digits (classification, 10 classes) or the noisy regression of trainkit.runbank (8 inputs, 1 target)."""
    if task == "digits":
        return load_digits_split(seed=data_seed)
    if task == "regression":
        from trainkit.runbank import regression_data

        return regression_data(data_seed)
    raise ValueError(f"task must be 'digits' or 'regression', got {task!r}")


def script_a(data: DigitsSplit, seed: int = 0, steps: int = 200, width: int = 64):
    """A digits classifier, AdamW at 1e-3 decayed by 10 % after every epoch (ExponentialLR, gamma 0.9), minibatches
    of 64 reshuffled every epoch."""
    torch.manual_seed(seed)
    model = mlp(64, width, 1, 10)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    schedule = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
    g = torch.Generator().manual_seed(seed)
    run, order, pos = Run(), torch.randperm(len(data.y_train), generator=g), 0
    for step in range(steps + 1):
        if step % 20 == 0 or step == steps:
            run.val_loss.append(evaluate(model, data.x_val, data.y_val)[0])
            run.val_steps.append(step)
        if step == steps:
            break
        if pos + 64 > len(order):
            order, pos = torch.randperm(len(data.y_train), generator=g), 0
        idx, pos = order[pos:pos + 64], pos + 64
        loss = F.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        schedule.step()
        run.train_loss.append(loss.item())
    return model, run


def script_b(data: DigitsSplit, seed: int = 0, steps: int = 200, width: int = 64):
    """A digits classifier, AdamW at 1e-3, minibatches of 64 reshuffled every epoch."""
    torch.manual_seed(seed)
    model = mlp(64, width, 1, 10)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(seed)
    run, order, pos = Run(), torch.randperm(len(data.y_train), generator=g), 0
    for step in range(steps + 1):
        if step % 20 == 0 or step == steps:
            run.val_loss.append(evaluate(model, data.x_val, data.y_val)[0])
            run.val_steps.append(step)
        if step == steps:
            break
        if pos + 64 > len(order):
            order, pos = torch.randperm(len(data.y_train), generator=g), 0
        idx, pos = order[pos:pos + 64], pos + 64
        loss = F.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
        loss.backward()
        opt.step()
        run.train_loss.append(loss.item())
    return model, run


def script_e(data: DigitsSplit, seed: int = 0, steps: int = 200, width: int = 64):
    """A digits classifier with dropout 0.5, AdamW at 1e-3, minibatches of 64 reshuffled every epoch."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Dropout(0.5), nn.Linear(width, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(seed)
    run, order, pos = Run(), torch.randperm(len(data.y_train), generator=g), 0
    for step in range(steps + 1):
        if step % 20 == 0 or step == steps:
            with torch.no_grad():
                run.val_loss.append(F.cross_entropy(model(data.x_val), data.y_val).item())
            run.val_steps.append(step)
        if step == steps:
            break
        if pos + 64 > len(order):
            order, pos = torch.randperm(len(data.y_train), generator=g), 0
        idx, pos = order[pos:pos + 64], pos + 64
        model.train()
        loss = F.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        run.train_loss.append(loss.item())
    return model, run


def script_c(data: DigitsSplit, seed: int = 0, steps: int = 200, width: int = 64):
    """A regression MLP (8 inputs, one output), mean squared error, AdamW at 3e-3, minibatches of 64 reshuffled every
    epoch."""
    torch.manual_seed(seed)
    model = mlp(8, width, 1, 1, activation="tanh")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(seed)
    run, order, pos = Run(), torch.randperm(len(data.y_train), generator=g), 0
    for step in range(steps + 1):
        if step % 20 == 0 or step == steps:
            with torch.no_grad():
                model.eval()
                run.val_loss.append(F.mse_loss(model(data.x_val).squeeze(-1), data.y_val).item())
                model.train()
            run.val_steps.append(step)
        if step == steps:
            break
        if pos + 64 > len(order):
            order, pos = torch.randperm(len(data.y_train), generator=g), 0
        idx, pos = order[pos:pos + 64], pos + 64
        prediction = model(data.x_train[idx])
        loss = ((prediction - data.y_train[idx]) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        run.train_loss.append(loss.item())
    return model, run


def script_d(data: DigitsSplit, seed: int = 0, steps: int = 200, width: int = 64):
    """A digits classifier, AdamW at 1e-3, minibatches of 64 reshuffled every epoch."""
    torch.manual_seed(seed)
    model = mlp(64, width, 1, 10)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    order = torch.argsort(data.y_train, stable=True)
    run, pos = Run(), 0
    for step in range(steps + 1):
        if step % 20 == 0 or step == steps:
            run.val_loss.append(evaluate(model, data.x_val, data.y_val)[0])
            run.val_steps.append(step)
        if step == steps:
            break
        if pos + 64 > len(order):
            pos = 0
        idx, pos = order[pos:pos + 64], pos + 64
        loss = F.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        run.train_loss.append(loss.item())
    return model, run


SCRIPTS = {"a": script_a, "b": script_b, "c": script_c, "d": script_d, "e": script_e}
TASK_OF = {"a": "digits", "b": "digits", "c": "regression", "d": "digits", "e": "digits"}
