"""Training setups you cannot read, each with one broken part: find it with the protocol (lab 6).

A ``Setup`` is a training run taken apart into six parts, each a plain Python object you can call, inspect and test
but whose source is not the point (in a real codebase it is a thousand lines away, or in a library):

| part | what it is | called as |
|---|---|---|
| ``data`` | the tensors (``x_train``, ``y_train``, ``x_val``, ``y_val``) | ``setup.data.x_train`` |
| ``model`` | builds a fresh model | ``setup.model()`` |
| ``loss`` | the training loss of a minibatch | ``setup.loss(output, targets)`` -> scalar tensor |
| ``order`` | the training examples of one epoch, in the order they are used | ``setup.order(y_train, epoch, generator)`` -> indices |
| ``lr`` | the learning rate of a step | ``setup.lr(step, steps_per_epoch)`` -> float |
| ``evaluate`` | the validation loss the run reports | ``setup.evaluate(model, x_val, y_val)`` -> float |

``train_setup(setup, seed)`` is the loop that puts them together; it is sound (it clears gradients, it switches the
model to training mode before each step), so a run that goes wrong goes wrong because of one of its parts.
``setup.intent`` says what the run is meant to be, as a script's docstring would (task, learning rate and its decay
per epoch, minibatch size, steps, model); ``setup.baseline`` is the loss of the best predictor that ignores its
inputs (log C for balanced classes, the variance of regression targets).

    from trainkit.labs.lab06_debugging_protocol.broken_setups import PARTS, load_visible_setups, make_setup, train_setup
    setups = load_visible_setups()          # each with .part (the broken one) and .spec
    model, run = train_setup(setups[0], seed=0)

Every broken part here is broken in a way lesson 6's protocol finds: a model that starts far from log C or that
gradients cannot reach, a loss that is not the task's, an order that is not a fresh shuffle of the whole training set,
a schedule that is not the one intended, an evaluation that does not measure the model on the validation set as it
is, data that are not what the model should learn from. ``make_setup(spec)`` builds one from a spec (see
``visible_specs()``): build more of your own to test a method. The grader's setups break the same parts in other ways
too, on other seeds, widths and data splits.
"""
from __future__ import annotations

import copy
import math
import types
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainkit.digits import DigitsSplit, Run, evaluate as eval_mode_loss, load_digits_split
from trainkit.models import ACTIVATIONS

PARTS = ("data", "model", "loss", "order", "lr", "evaluate")
TASKS = ("digits", "regression")
EVAL_EVERY = 20


@dataclass
class Setup:
    """A training run in six parts (see the module's table); ``part`` and ``spec`` say what was planted."""
    task: str
    intent: dict
    baseline: float
    data: DigitsSplit
    model: Callable[[], nn.Module]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    order: Callable[[torch.Tensor, int, torch.Generator], torch.Tensor]
    lr: Callable[[int, int], float]
    evaluate: Callable[[nn.Module, torch.Tensor, torch.Tensor], float]
    part: str | None = None          # the broken part (None: a sound setup)
    spec: dict = field(default_factory=dict)


def train_setup(setup: Setup, seed: int = 0, steps: int | None = None) -> tuple[nn.Module, Run]:
    """Train ``setup`` with AdamW (weight decay 0.01) and return ``(model, run)``.

    Each epoch takes ``setup.order(y_train, epoch, generator)`` (the generator is seeded with ``seed``) and uses its
    consecutive minibatches of ``intent["batch_size"]`` (a short last one is dropped); step s uses the learning rate
    ``setup.lr(s, steps_per_epoch)``. ``run.val_loss`` holds ``setup.evaluate(model, x_val, y_val)`` every 20 steps
    from step 0 and after the last; ``run.lr`` the learning rate of every step.
    """
    steps = setup.intent["steps"] if steps is None else steps
    batch = setup.intent["batch_size"]
    data = setup.data
    steps_per_epoch = len(data.y_train) // batch
    torch.manual_seed(seed)
    model = setup.model()
    opt = torch.optim.AdamW(model.parameters(), lr=setup.intent["lr"], weight_decay=0.01)
    g = torch.Generator().manual_seed(seed)
    run, batches, epoch = Run(), [], 0
    for step in range(steps + 1):
        if step % EVAL_EVERY == 0 or step == steps:
            run.val_loss.append(float(setup.evaluate(model, data.x_val, data.y_val)))
            run.val_steps.append(step)
            model.train()
        if step == steps:
            break
        if not batches:
            order = torch.as_tensor(setup.order(data.y_train, epoch, g))
            batches = [order[i:i + batch] for i in range(0, len(order) - batch + 1, batch)][::-1]
            epoch += 1
            if not batches:
                raise ValueError(f"order gave {len(order)} indices, fewer than one minibatch of {batch}")
        idx = batches.pop()
        lr = float(setup.lr(step, steps_per_epoch))
        for group in opt.param_groups:
            group["lr"] = lr
        model.train()
        loss = setup.loss(model(data.x_train[idx]), data.y_train[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        run.train_loss.append(float(loss.detach()))
        run.lr.append(lr)
    return model, run


# --- sound parts ------------------------------------------------------------------------------------------------

class Squeeze(nn.Module):
    """(N, 1) -> (N,): a regression model's one output per example."""

    def forward(self, x):
        return x.squeeze(-1)


class Net(nn.Module):
    """Every setup's model: a trunk (the hidden layers) and a head (the output layer and what follows it)."""

    def __init__(self, trunk: nn.Module, head: nn.Module, cut: bool = False):
        super().__init__()
        self.trunk, self.head, self._cut = trunk, head, cut

    def forward(self, x):
        h = self.trunk(x)
        return self.head(h.detach() if self._cut else h)


def _net(n_in, width, depth, n_out, activation, dropout, regression=False) -> Net:
    layers: list[nn.Module] = []
    dims = [n_in] + [width] * depth
    for d_in, d_out in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(d_in, d_out), ACTIVATIONS[activation]()]
        if dropout:
            layers.append(nn.Dropout(dropout))
    head = [nn.Linear(dims[-1], n_out)] + ([Squeeze()] if regression else [])
    return Net(nn.Sequential(*layers), nn.Sequential(*head))


# The arguments of _net for each task's model of a given width, depth and dropout.
NET_ARGS = {
    "digits": lambda width, depth, dropout: (64, width, depth, 10, "relu", dropout),
    "regression": lambda width, depth, dropout: (8, width, depth, 1, "tanh", dropout, True),
}


def _anonymous(fn: Callable, name: str) -> Callable:
    """``fn`` under the part's name, whichever function it is (a part is judged by what it does)."""
    code = fn.__code__.replace(co_name=name)
    if hasattr(code, "co_qualname"):
        code = code.replace(co_qualname=name)
    out = types.FunctionType(code, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    out.__qualname__ = name
    return out


@lru_cache(maxsize=8)
def _data(task: str, data_seed: int) -> DigitsSplit:
    if task == "digits":
        return load_digits_split(seed=data_seed)
    from trainkit.labs.lab06_debugging_protocol.runbank import regression_data

    return regression_data(data_seed)


def sound_setup(spec: dict) -> Setup:
    """The sound setup of a spec: {"task", "width", "depth", "dropout", "data_seed"} (the planted bug left out)."""
    task, width, depth, dropout = spec["task"], spec["width"], spec["depth"], spec["dropout"]
    data = _data(task, spec["data_seed"])
    if task == "digits":
        intent = dict(task=task, lr=3e-3, lr_decay_per_epoch=0.9, batch_size=64, steps=200,
                      model=f"MLP 64 -> {width} x {depth} (ReLU, dropout {dropout}) -> 10 logits")
        baseline = math.log(10)

        def model():
            return _net(*NET_ARGS[task](width, depth, dropout))

        def loss(out, y):
            return F.cross_entropy(out, y)
    elif task == "regression":
        intent = dict(task=task, lr=3e-3, lr_decay_per_epoch=0.97, batch_size=64, steps=200,
                      model=f"MLP 8 -> {width} x {depth} (tanh, dropout {dropout}) -> 1 output, squeezed to (N,)")
        baseline = float(((data.y_val - data.y_train.mean()) ** 2).mean())

        def model():
            return _net(*NET_ARGS[task](width, depth, dropout))

        def loss(out, y):
            return F.mse_loss(out, y)
    else:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    intent["loss"] = "cross-entropy of the logits" if task == "digits" else "mean squared error"
    n_in, _, _, n_out, activation, *_ = NET_ARGS[task](width, depth, dropout)
    intent.update(inputs=n_in, width=width, depth=depth, activation=activation, dropout=dropout, outputs=n_out)
    lr0, decay = intent["lr"], intent["lr_decay_per_epoch"]

    def order(targets, epoch, generator):
        return torch.randperm(len(targets), generator=generator)

    def lr(step, steps_per_epoch):
        return lr0 * decay ** (step // steps_per_epoch)

    def evaluate(m, x, y):
        return eval_mode_loss(m, x, y, loss)[0]

    return Setup(task, intent, baseline, data, model, loss, order, lr, evaluate, None, dict(spec))


# --- broken parts: (part, kind) -> a function (sound setup) -> the broken part ------------------------------------

def _scaled_init(s: Setup, factor: float):
    sound = s.model

    def model():
        m = sound()
        with torch.no_grad():
            for layer in m.modules():
                if isinstance(layer, nn.Linear):
                    layer.weight.mul_(factor)
        return m
    return model


def _detached(s: Setup):
    sound = s.model

    def model():
        m = sound()
        m._cut = True                                  # a stray .detach() between the trunk and the head
        return m
    return model


def _appended(s: Setup, layer: Callable[[], nn.Module]):
    sound = s.model

    def model():
        m = sound()
        m.head.append(layer())
        return m
    return model


def _nll_of_logits(s: Setup):
    return lambda out, y: F.nll_loss(out, y)                       # no log_softmax: unbounded below


def _broadcast_loss(s: Setup):
    return lambda out, y: ((out.unsqueeze(-1) - y) ** 2).mean()    # (N, 1) - (N,) -> (N, N)


def _sorted_order(s: Setup):
    return lambda targets, epoch, generator: torch.argsort(targets, stable=True)


def _first_part(s: Setup, fraction: float):
    batch = s.intent["batch_size"]

    def order(targets, epoch, generator):
        return torch.randperm(max(batch, int(fraction * len(targets))), generator=generator)
    return order


def _per_step_decay(s: Setup):
    lr0, decay = s.intent["lr"], s.intent["lr_decay_per_epoch"]
    return lambda step, steps_per_epoch: lr0 * decay ** step


def _lr_times(s: Setup, factor: float):
    sound = s.lr
    return lambda step, steps_per_epoch: factor * sound(step, steps_per_epoch)


def _train_mode_eval(s: Setup):
    loss = s.loss

    def evaluate(m, x, y):
        with torch.no_grad():
            return float(loss(m(x), y))
    return evaluate


def _with_data(s: Setup, **changes) -> DigitsSplit:
    d = s.data
    parts = dict(x_train=d.x_train, y_train=d.y_train, x_val=d.x_val, y_val=d.y_val, mean=d.mean, std=d.std)
    return DigitsSplit(**{**parts, **changes})


def _misaligned(s: Setup):
    return _with_data(s, y_train=torch.roll(s.data.y_train, 1))    # each input with its neighbour's target


def _leaked_labels(s: Setup):
    x = s.data.x_train.clone()
    x[:, 0] = s.data.y_train.float() - (4.5 if s.task == "digits" else 0.0)   # one input carries the target, in
    return _with_data(s, x_train=x)                                           # training only


def _noisy_column(s: Setup):
    d = s.data
    g = torch.Generator().manual_seed(5)
    y = d.y_train.float()
    x = d.x_train.clone()
    column = 20 if s.task == "digits" else 2
    x[:, column] = (y - y.mean()) / y.std() + 0.5 * torch.randn(len(y), generator=g)   # a noisy copy of the target,
    return _with_data(s, x_train=x)                                                     # in training only


def _biased_off(s: Setup, bias: float):
    sound = s.model

    def model():
        m = sound()
        with torch.no_grad():
            m.trunk[0].bias.fill_(bias)                 # the first hidden layer starts saturated (tanh) or off (ReLU)
        return m
    return model


def _frozen_head(s: Setup):
    sound = s.model

    def model():
        m = sound()
        m.head.requires_grad_(False)                    # the output layer never learns
        return m
    return model


class _InputDropoutNet(Net):
    """A model whose forward drops inputs with F.dropout and no training=self.training: on in eval mode too."""

    def forward(self, x):
        return self.head(self.trunk(F.dropout(x, 0.2)))


_InputDropoutNet.__name__ = _InputDropoutNet.__qualname__ = "Net"     # every setup's model is a Net


def _input_dropout(s: Setup):
    sound = s.model

    def model():
        m = sound()
        return _InputDropoutNet(m.trunk, m.head)
    return model


def _thin(s: Setup, divisor: int):
    spec = s.spec

    def model():                                        # a fraction of the width the intent says
        return _net(*NET_ARGS[s.task](max(2, spec["width"] // divisor), spec["depth"], spec["dropout"]))
    return model


def _reversed_gradient(s: Setup):
    sound = s.loss
    return lambda out, y: 2 * sound(out.detach(), y) - sound(out, y)   # the right value, the gradient reversed


def _smoothed(s: Setup):
    return lambda out, y: F.cross_entropy(out, y, label_smoothing=0.6)


def _tripled_targets(s: Setup):
    return lambda out, y: F.mse_loss(out, 3.0 * y)                     # targets in the wrong units


def _class_blocks(s: Setup):
    batch = s.intent["batch_size"]

    def order(targets, epoch, generator):               # every example once, in a fresh order each epoch, but each
        ranked = torch.argsort(targets.float() + 0.01 * torch.rand(len(targets), generator=generator))
        full = len(ranked) // batch * batch             # minibatch is one block of neighbouring targets
        blocks = ranked[:full].view(-1, batch)[torch.randperm(full // batch, generator=generator)]
        return torch.cat([blocks.reshape(-1), ranked[full:]])
    return order


def _chunk_sum_eval(s: Setup):
    loss = s.loss

    def evaluate(m, x, y):                              # the mean of each chunk of 64, summed (not averaged)
        was = m.training
        m.eval()
        with torch.no_grad():
            total = sum(float(loss(m(x[i:i + 64]), y[i:i + 64])) for i in range(0, len(y), 64))
        m.train(was)
        return total
    return evaluate


def _rolled_eval(s: Setup):
    sound = s.evaluate
    return lambda m, x, y: sound(m, x, torch.roll(y, 1))               # each input with its neighbour's target


def _snapshot_eval(s: Setup):
    sound = s.evaluate
    kept = {}

    def evaluate(m, x, y):                              # evaluates a copy of the model taken at its first evaluation
        if "copy" not in kept:
            kept["copy"] = copy.deepcopy(m)
        return sound(kept["copy"], x, y)
    return evaluate


BUGS: dict[tuple[str, str], Callable] = {
    ("data", "misaligned"): _misaligned,
    ("data", "leaked_labels"): _leaked_labels,
    ("data", "noisy_column"): _noisy_column,
    ("model", "init_x10"): lambda s: _scaled_init(s, 10.0),
    ("model", "init_x0.01"): lambda s: _scaled_init(s, 0.01),
    ("model", "biased_off"): lambda s: _biased_off(s, -10.0),
    ("model", "detached_trunk"): _detached,
    ("model", "frozen_head"): _frozen_head,
    ("model", "softmax_output"): lambda s: _appended(s, lambda: nn.Softmax(dim=-1)),
    ("model", "relu_output"): lambda s: _appended(s, nn.ReLU),
    ("model", "input_dropout"): _input_dropout,
    ("model", "thin"): lambda s: _thin(s, 16),
    ("loss", "nll_of_logits"): _nll_of_logits,
    ("loss", "broadcast"): _broadcast_loss,
    ("loss", "reversed_gradient"): _reversed_gradient,
    ("loss", "smoothed"): _smoothed,
    ("loss", "tripled_targets"): _tripled_targets,
    ("order", "sorted"): _sorted_order,
    ("order", "first_tenth"): lambda s: _first_part(s, 0.1),
    ("order", "class_blocks"): _class_blocks,
    ("lr", "per_step_decay"): _per_step_decay,
    ("lr", "x300"): lambda s: _lr_times(s, 300.0),
    ("lr", "x0.01"): lambda s: _lr_times(s, 0.01),
    ("evaluate", "train_mode"): _train_mode_eval,
    ("evaluate", "chunk_sum"): _chunk_sum_eval,
    ("evaluate", "rolled_targets"): _rolled_eval,
    ("evaluate", "snapshot"): _snapshot_eval,
}
# The bugs that show on each task (measured with autograder.setups_check.shows_bug: a sorted order, a per-step decay,
# an order of one-class minibatches, a frozen output layer or a 100x too small init barely hurt the regression, whose
# random tanh features also fit it well with a detached trunk; label smoothing is a classifier's, tripled targets a
# regression's).
TASK_BUGS = {
    "digits": [k for k in BUGS if k[1] not in ("broadcast", "relu_output", "tripled_targets")],
    "regression": [k for k in BUGS if k[1] not in ("nll_of_logits", "softmax_output", "sorted", "per_step_decay",
                                                   "detached_trunk", "frozen_head", "init_x0.01", "smoothed",
                                                   "class_blocks")],
}
# Shown once per task (alternating dropout 0 and 0.5) rather than twice, to keep the lab's run time.
ONCE = {("data", "noisy_column"), ("model", "init_x0.01"), ("model", "biased_off"), ("model", "frozen_head"),
        ("model", "input_dropout"), ("model", "thin"), ("loss", "reversed_gradient"), ("loss", "smoothed"),
        ("loss", "tripled_targets"), ("order", "class_blocks"), ("evaluate", "chunk_sum"),
        ("evaluate", "rolled_targets"), ("evaluate", "snapshot")}


def make_setup(spec: dict, bugs: dict | None = None) -> Setup:
    """The setup of ``spec``: {"task", "part", "kind"} (the broken part and how it is broken; part None: sound) and
    optionally "width" (64), "depth" (1), "dropout" (0.0; a train-mode evaluation needs dropout to show) and
    "data_seed" (0). ``bugs`` adds ways of breaking a part to ``BUGS``."""
    spec = {"width": 64, "depth": 1, "dropout": 0.0, "data_seed": 0, "part": None, "kind": None, **spec}
    setup = sound_setup(spec)
    if spec["part"] is None:
        for part in PARTS[1:]:
            setattr(setup, part, _anonymous(getattr(setup, part), part))
        return setup
    table = {**BUGS, **(bugs or {})}
    key = (spec["part"], spec["kind"])
    if key not in table:
        raise ValueError(f"no bug {key!r}; known: {sorted(table)}")
    setattr(setup, spec["part"], table[key](setup))
    setup.part = spec["part"]
    for part in PARTS[1:]:
        setattr(setup, part, _anonymous(getattr(setup, part), part))
    return setup


# --- the visible setups -------------------------------------------------------------------------------------------

def visible_specs() -> list[dict]:
    """Every bug of ``BUGS`` on each task it shows on: twice (without dropout and with dropout 0.5; a train-mode
    evaluation needs dropout to show: it has dropout 0.5 twice, with widths 64 and 32), or once for those in ``ONCE``
    (dropout 0 and 0.5 in turn)."""
    specs = []
    for task in TASKS:
        once = 0
        for part, kind in TASK_BUGS[task]:
            if (part, kind) in ONCE:
                specs.append({"task": task, "part": part, "kind": kind, "dropout": (0.0, 0.5)[once % 2], "width": 64})
                once += 1
                continue
            for k in range(2):
                dropout, width = (0.5, (64, 32)[k]) if part == "evaluate" else ((0.0, 0.5)[k], 64)
                specs.append({"task": task, "part": part, "kind": kind, "dropout": dropout, "width": width})
    return specs


def visible() -> list[Setup]:
    """The visible setups (``visible_specs()``), each with ``.part``, its broken part, and ``.spec``."""
    return [make_setup(spec) for spec in visible_specs()]

# The name the lab's text uses for this bank's visible() (one function, two names).
load_visible_setups = visible
