"""Real data that ships with scikit-learn, and a plain training run that records its curves.

``load_digits_split`` returns scikit-learn's bundled 8x8 handwritten digits (1797 images, 64 pixels with
values 0..16, 10 classes; no download) as float32 / int64 tensors, split once into train and validation
with a fixed seed and, by default, standardised with the *training* set's per-pixel mean and std.

``train_run`` trains a classifier on minibatches and returns the train loss of every step and the
validation loss every ``eval_every`` steps: the curves the debugging lesson reads. It is deliberately
plain (one optimizer, an optional per-step learning rate, an optional clip) so that a failure in a
curve comes from the setting being demonstrated, not from the loop.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_CLASSES = 10
NUM_FEATURES = 64


@dataclass
class DigitsSplit:
    x_train: torch.Tensor  # (N_train, 64) float32
    y_train: torch.Tensor  # (N_train,) int64
    x_val: torch.Tensor    # (N_val, 64) float32
    y_val: torch.Tensor    # (N_val,) int64
    mean: torch.Tensor     # (64,) per-pixel mean of the raw training pixels
    std: torch.Tensor      # (64,) per-pixel std of the raw training pixels (1 where a pixel is constant)

    def to(self, device) -> "DigitsSplit":
        return DigitsSplit(*(t.to(device) for t in (self.x_train, self.y_train, self.x_val, self.y_val,
                                                     self.mean, self.std)))


def load_digits_split(val_fraction: float = 0.25, seed: int = 0, standardize: bool = True,
                      device: torch.device | str | None = None) -> DigitsSplit:
    """scikit-learn's digits as tensors, split at random (fixed ``seed``) into train and validation.

    standardize: subtract the training mean and divide by the training std, per pixel. Pixels that are
    constant on the training set (some corners are always 0) get std 1, so nothing is divided by zero.
    With ``standardize=False`` the raw pixel values 0..16 are returned (mean and std are still reported).
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    from sklearn.datasets import load_digits  # bundled with scikit-learn: no network

    bunch = load_digits()
    x = torch.tensor(bunch.data, dtype=torch.float32)   # (1797, 64), values 0..16
    y = torch.tensor(bunch.target, dtype=torch.int64)   # (1797,)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    n_val = int(round(val_fraction * len(x)))
    val, train = perm[:n_val], perm[n_val:]
    mean = x[train].mean(0)
    std = x[train].std(0)
    std = torch.where(std > 0, std, torch.ones_like(std))
    xt, xv = x[train], x[val]
    if standardize:
        xt, xv = (xt - mean) / std, (xv - mean) / std
    split = DigitsSplit(xt.contiguous(), y[train].contiguous(), xv.contiguous(), y[val].contiguous(), mean, std)
    return split.to(device) if device is not None else split


@dataclass
class Run:
    """Curves of one training run. ``train_loss[s]`` is the loss of step s (before its update);
    ``val_loss[i]`` was measured after ``val_steps[i]`` updates (the first at 0 updates)."""
    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    val_steps: list[int] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    val_acc: list[float] = field(default_factory=list)


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
             loss_fn: Callable = F.cross_entropy) -> tuple[float, float]:
    """(mean loss, accuracy) of ``model`` on (x, y), in eval mode; the model's mode is restored after."""
    was_training = model.training
    model.eval()
    logits = model(x)
    loss = float(loss_fn(logits, y))
    acc = float((logits.argmax(-1) == y).float().mean())
    model.train(was_training)
    return loss, acc


def train_run(model: nn.Module, data: DigitsSplit, steps: int, lr: float, *, optimizer: str = "adam",
              batch_size: int = 64, eval_every: int = 10, lr_at: Callable[[int], float] | None = None,
              max_norm: float | None = None, weight_decay: float = 0.0, momentum: float = 0.9,
              loss_fn: Callable = F.cross_entropy, seed: int = 0) -> Run:
    """Train ``model`` for ``steps`` minibatch steps on ``data.x_train`` and record its curves.

    optimizer: "adam" (torch.optim.AdamW with ``weight_decay``) or "sgd" (with ``momentum``).
    lr_at: if given, the learning rate of step s is ``lr_at(s)`` (else ``lr`` throughout).
    max_norm: if given, gradients are clipped to this global norm before each update.
    Minibatches are drawn without replacement from a reshuffled training set each epoch, from a
    generator seeded with ``seed``. Non-finite losses are recorded as they are and training goes on.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    if optimizer == "adam":
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    elif optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    else:
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    g = torch.Generator().manual_seed(seed)
    n = len(data.x_train)
    order, pos = torch.randperm(n, generator=g), 0
    run = Run()
    model.train()
    for step in range(steps + 1):
        if step % eval_every == 0 or step == steps:
            vl, va = evaluate(model, data.x_val, data.y_val, loss_fn)
            run.val_loss.append(vl)
            run.val_acc.append(va)
            run.val_steps.append(step)
        if step == steps:
            break
        if pos + batch_size > n:
            order, pos = torch.randperm(n, generator=g), 0
        idx = order[pos:pos + batch_size].to(data.x_train.device)
        pos += batch_size
        step_lr = lr_at(step) if lr_at is not None else lr
        for group in opt.param_groups:
            group["lr"] = step_lr
        loss = loss_fn(model(data.x_train[idx]), data.y_train[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if max_norm is not None:
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        opt.step()
        run.train_loss.append(float(loss.detach()))
        run.grad_norm.append(float(norm))
        run.lr.append(step_lr)
    return run


def chance_loss(num_classes: int = NUM_CLASSES) -> float:
    """The cross-entropy of a uniform guess, log C: where a well-initialised classifier starts."""
    return math.log(num_classes)
