"""Networks to initialise, and the measurements that judge an initialisation (lab 1's judgement exercise).

A *spec* (a dict) describes one network; ``build_net(spec)`` builds it at PyTorch's default initialisation:

- ``"kind"``: ``"plain"``, an ``nn.Sequential`` of ``nn.Linear(64, width)``, the activation, then ``depth - 1`` times
  ``nn.Linear(width, width)`` and the activation, then the head ``nn.Linear(width, 10)``;
  or ``"residual"``, an ``nn.Sequential`` of the stem ``nn.Linear(64, width)``, ``depth`` ``Residual`` blocks
  (``x + branch(x)``, branch = [``nn.LayerNorm``] ``nn.Linear`` activation ``nn.Linear``), [a final
  ``nn.LayerNorm``], and the head ``nn.Linear(width, 10)``. The LayerNorms are there when ``"norm"`` is True.
- ``"depth"`` (hidden layers, or blocks), ``"width"``, ``"bias"`` (every ``nn.Linear`` and ``nn.LayerNorm`` has a
  bias or none has), ``"activation"``: a name of ``ACTIVATIONS`` (``"leaky_relu"`` takes ``"slope"``).

The inputs are scikit-learn's digits (64 standardised pixels, 10 classes, ``trainkit.digits``).

What is judged (``judge``): after ``initialise(model, x)`` on a batch ``x`` of training inputs,
1. the forward signal: the root mean square of every *hidden representation* (``signal_points``: in a plain net the
   output of every ``nn.Linear`` but the head, in a residual net the output of the stem and of every block) on other
   inputs lies within ``FORWARD_BAND``;
2. the backward signal: a random gradient of RMS 1 put on the last hidden representation and propagated back to the
   others; the RMS of the gradient at every hidden representation lies within ``BACKWARD_BAND``;
3. a short run: ``RUN_STEPS`` AdamW steps (lr ``RUN_LR``) on one batch of ``RUN_BATCH`` training examples from that
   initialisation bring the loss on that batch to at most ``RUN_TARGET`` times the chance loss log 10;
and ``initialise`` changed parameter values only (the same modules, the same Parameter objects, no hooks).
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn as nn

from trainkit.digits import NUM_CLASSES, NUM_FEATURES, DigitsSplit, chance_loss, load_digits_split, train_run

ACTIVATIONS: dict[str, Callable[[float], nn.Module]] = {
    "relu": lambda slope: nn.ReLU(),
    "tanh": lambda slope: nn.Tanh(),
    "linear": lambda slope: nn.Identity(),
    "leaky_relu": lambda slope: nn.LeakyReLU(slope),
    "gelu": lambda slope: nn.GELU(),
    "silu": lambda slope: nn.SiLU(),
    "elu": lambda slope: nn.ELU(),
    "sigmoid": lambda slope: nn.Sigmoid(),
    "softplus": lambda slope: nn.Softplus(),
}
KINDS = ("plain", "residual")
FORWARD_BAND = (0.2, 5.0)      # RMS of every hidden representation (the inputs have RMS about 1)
BACKWARD_BAND = (0.1, 10.0)    # RMS of the gradient at every hidden representation, given RMS 1 at the last one
RUN_STEPS, RUN_LR, RUN_BATCH, RUN_TARGET = 10, 2e-3, 128, 0.9
X_INIT_SIZE, X_PROBE_SIZE = 256, 256


class Residual(nn.Module):
    """``x + branch(x)``: the branch is [``nn.LayerNorm``] ``nn.Linear`` activation ``nn.Linear``."""

    def __init__(self, width: int, activation: nn.Module, bias: bool, norm: bool):
        super().__init__()
        layers = [nn.LayerNorm(width, bias=bias)] if norm else []
        layers += [nn.Linear(width, width, bias=bias), activation, nn.Linear(width, width, bias=bias)]
        self.branch = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.branch(x)


def check_spec(spec: dict) -> None:
    """Raise ValueError, saying what is wrong, unless ``spec`` describes a network ``build_net`` can build."""
    if not isinstance(spec, dict):
        raise ValueError(f"a spec is a dict, got {type(spec).__name__}")
    known = {"kind", "depth", "width", "activation", "slope", "bias", "norm"}
    if set(spec) - known:
        raise ValueError(f"unknown spec keys {sorted(set(spec) - known)}; a spec has {sorted(known)}")
    if spec.get("kind") not in KINDS:
        raise ValueError(f"spec['kind'] must be one of {KINDS}, got {spec.get('kind')!r}")
    for key in ("depth", "width"):
        value = spec.get(key)
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise ValueError(f"spec[{key!r}] must be an int >= 1, got {value!r}")
    if spec.get("activation") not in ACTIVATIONS:
        raise ValueError(f"spec['activation'] must be one of {sorted(ACTIVATIONS)}, got {spec.get('activation')!r}")
    if "slope" in spec and spec["activation"] != "leaky_relu":
        raise ValueError("spec['slope'] is the negative slope of 'leaky_relu' only")
    if spec.get("norm") and spec["kind"] != "residual":
        raise ValueError("spec['norm'] (LayerNorms) is for residual nets only")


def net_spec(kind: str, depth: int, width: int, activation: str, bias: bool = True, norm: bool = False,
             slope: float | None = None) -> dict:
    """A spec (see the module docstring), checked."""
    spec = dict(kind=kind, depth=depth, width=width, activation=activation, bias=bias)
    spec.update({"norm": norm} if kind == "residual" else {})
    spec.update({"slope": slope} if slope is not None else {})
    check_spec(spec)
    return spec


# The visible networks: what ``init_report`` judges. The grader's are others (other depths, widths and activations).
VISIBLE_NETS = [
    net_spec("plain", 16, 128, "relu"), net_spec("plain", 16, 64, "relu", bias=False),
    net_spec("plain", 16, 64, "tanh"), net_spec("plain", 24, 128, "tanh", bias=False),
    net_spec("plain", 16, 128, "linear"), net_spec("plain", 8, 256, "linear", bias=False),
    net_spec("residual", 16, 64, "relu"), net_spec("residual", 32, 32, "relu"),
    net_spec("residual", 8, 128, "tanh", bias=False), net_spec("residual", 16, 128, "relu", norm=True),
    net_spec("residual", 24, 64, "linear", norm=True), net_spec("residual", 32, 64, "tanh", bias=False, norm=True),
]


def build_net(spec: dict, seed: int = 0) -> nn.Sequential:
    """The network ``spec`` describes, at PyTorch's default initialisation (drawn after ``torch.manual_seed(seed)``)."""
    check_spec(spec)
    width, depth, bias = spec["width"], spec["depth"], bool(spec.get("bias", True))
    activation = ACTIVATIONS[spec["activation"]]
    slope = float(spec.get("slope", 0.01))
    torch.manual_seed(seed)
    if spec["kind"] == "plain":
        layers: list[nn.Module] = []
        for d_in in [NUM_FEATURES] + [width] * (depth - 1):
            layers += [nn.Linear(d_in, width, bias=bias), activation(slope)]
    else:
        norm = bool(spec.get("norm", False))
        layers = [nn.Linear(NUM_FEATURES, width, bias=bias)]
        layers += [Residual(width, activation(slope), bias, norm) for _ in range(depth)]
        layers += [nn.LayerNorm(width, bias=bias)] if norm else []
    return nn.Sequential(*layers, nn.Linear(width, NUM_CLASSES, bias=bias))


def describe(spec: dict) -> str:
    """A short name for ``spec``: 'residual 16 x 128 gelu, pre-LayerNorm, no bias'."""
    act = spec["activation"] + (f"({spec['slope']:g})" if "slope" in spec else "")
    extra = (", pre-LayerNorm" if spec.get("norm") else "") + ("" if spec.get("bias", True) else ", no bias")
    return f"{spec['kind']} {spec['depth']} x {spec['width']} {act}{extra}"


def signal_points(model: nn.Sequential) -> list[nn.Module]:
    """The modules whose outputs are the hidden representations: every top-level ``nn.Linear`` but the head, and
    every ``Residual`` block."""
    linears = [m for m in model if isinstance(m, nn.Linear)]
    return [m for m in model if isinstance(m, Residual) or (isinstance(m, nn.Linear) and m is not linears[-1])]


def signal_profile(model: nn.Sequential, x: torch.Tensor, seed: int = 0) -> tuple[list[float], list[float]]:
    """(forward RMS, backward RMS) at every hidden representation of ``model`` (``signal_points``) on inputs ``x``.

    Backward: a gradient drawn from N(0, 1) (after ``torch.manual_seed(seed)``) is put on the last hidden
    representation and propagated back; the RMS of the gradient that reaches each one (1 at the last)."""
    outputs: list[torch.Tensor] = []
    handles = [m.register_forward_hook(lambda module, inputs, out: outputs.append(out)) for m in signal_points(model)]
    try:
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    forward = [float(o.detach().pow(2).mean().sqrt()) for o in outputs]
    torch.manual_seed(seed)
    cotangent = torch.randn(outputs[-1].shape, device=outputs[-1].device)
    grads = torch.autograd.grad(outputs[-1], outputs, grad_outputs=cotangent, allow_unused=True)
    backward = [0.0 if g is None else float(g.pow(2).mean().sqrt()) for g in grads]
    return forward, backward


def short_run(model: nn.Module, seed: int = 0) -> tuple[float, float]:
    """(loss before, loss after) ``RUN_STEPS`` AdamW steps (lr ``RUN_LR``) on one fixed batch of ``RUN_BATCH`` training
    examples drawn with ``seed`` (``trainkit.digits.train_run``, every step on the whole batch)."""
    x, y = _examples(seed + 1000, RUN_BATCH)
    batch = DigitsSplit(x, y, x, y, _digits().mean, _digits().std)
    run = train_run(model, batch, RUN_STEPS, RUN_LR, batch_size=RUN_BATCH, eval_every=RUN_STEPS, seed=seed)
    return run.val_loss[0], run.val_loss[-1]


_DATA = {}


def _digits():
    if "split" not in _DATA:
        _DATA["split"] = load_digits_split()
    return _DATA["split"]


def _examples(seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    split = _digits()
    pick = torch.randperm(len(split.y_train), generator=torch.Generator().manual_seed(seed))[:n]
    return split.x_train[pick].clone(), split.y_train[pick].clone()


def inputs(seed: int, n: int = X_INIT_SIZE) -> torch.Tensor:
    """``n`` training inputs of the digits, drawn without replacement with ``seed``."""
    return _examples(seed, n)[0]


def _tampered(model: nn.Module, before: list[tuple[str, nn.Module]], params: list[nn.Parameter]) -> str:
    now = list(model.named_modules())
    if [(n, type(m)) for n, m in now] != [(n, type(m)) for n, m in before] or any(a is not b for (_, a), (_, b)
                                                                                   in zip(now, before)):
        return "initialise changed the model's modules: change the values of its parameters only"
    if len(list(model.parameters())) != len(params) or any(p is not q for p, q in zip(model.parameters(), params)):
        return "initialise replaced Parameter objects: fill the existing ones in place (under torch.no_grad())"
    for name, m in now:
        if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks:
            return f"initialise left a hook on module {name or '(the model)'!r}: change parameter values only"
        if "forward" in vars(m):
            return f"initialise replaced module {name or '(the model)'!r}'s forward: change parameter values only"
    if any(p.requires_grad is False for p in params):
        return "initialise froze parameters (requires_grad=False): every parameter must still train"
    return ""


def judge(spec: dict, initialise: Callable[[nn.Module, torch.Tensor], None], seed: int = 0) -> str:
    """'' when ``initialise`` passes on the network ``spec`` describes (built with ``seed``), else why not."""
    model = build_net(spec, seed)
    before, params = list(model.named_modules()), list(model.parameters())
    torch.manual_seed(1000 + seed)
    try:
        initialise(model, inputs(seed))
    except Exception as exc:  # the student's code: any failure is a miss with its reason
        return f"initialise raised {type(exc).__name__}: {exc}"
    why = _tampered(model, before, params)
    if why:
        return why
    if not all(bool(torch.isfinite(p).all()) for p in params):
        return "a parameter is not finite after initialise"
    forward, backward = signal_profile(model, inputs(seed + 500, X_PROBE_SIZE), seed)
    for what, values, (lo, hi) in (("forward RMS", forward, FORWARD_BAND), ("backward RMS", backward, BACKWARD_BAND)):
        bad = [(i, v) for i, v in enumerate(values) if not lo <= v <= hi]
        if bad:
            i, v = max(bad, key=lambda iv: abs(math.log(max(iv[1], 1e-30))))
            return (f"{what} {v:.3g} at hidden representation {i + 1} of {len(values)} (must be in [{lo:g}, {hi:g}]; "
                    f"from {min(values):.3g} to {max(values):.3g} through depth)")
    start, end = short_run(model, seed)
    target = RUN_TARGET * chance_loss()
    if not end <= target:
        return (f"the short run went from validation loss {start:.3g} to {end:.3g} (must reach {target:.3g}, "
                f"{RUN_TARGET:g} x log 10)")
    return ""


def visible() -> list[dict]:
    """The visible networks (specs for ``build_net``)."""
    return list(VISIBLE_NETS)
