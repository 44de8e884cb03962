"""Inside the grading kernel: undo what a submission did to the things the test cells rely on.

The grader (``autograder.preprocessors.SafeExecute``) calls, through hidden cells the student never sees:
- ``snapshot()`` once, before the first cell of the notebook: the attributes of the modules and classes the
  tests use (the check helpers, torch/numpy/math comparison functions, PyTorch's reference implementations,
  builtins such as AssertionError, IPython's cell runner) and the code of every function in them;
- ``before_locked()`` / ``after_locked()`` around each locked cell (the setup cell, every test cell): the
  names those cells bind in the notebook's namespace (helpers such as ``twin_models``) and their code;
- ``restore()`` right before each test cell: everything above is put back as it was. It returns what it had
  to put back, which the grader prints in the test cell's output so an instructor can see it in feedback.

So a solution cell that rebinds ``expect_close``, swaps a helper's ``__code__``, patches ``torch.isclose`` or
``torch.nn.init.calculate_gain``, shadows ``AssertionError`` or silences IPython's error reporting gets
the test cells run against the originals. This cannot be complete inside one Python process: code that
deliberately hunts for this module's saved references (through ``gc``, ``sys.modules``) or patches the
built-in functions it uses can still defeat it. docs/security.md says what is and is not protected.
"""
from __future__ import annotations

import builtins
import importlib
import sys
import types

# Modules whose attributes the tests compare with or call (only those importable are watched).
MODULES = (
    "builtins", "math", "operator", "functools", "copy", "numpy", "numpy.testing", "torch", "torch.nn",
    "torch.nn.functional", "torch.nn.init", "torch.nn.utils", "torch.nn.utils.clip_grad", "torch.optim",
    "torch.optim.lr_scheduler", "torch.amp", "torch.amp.grad_scaler", "torch.linalg", "torch.testing",
    "lion_pytorch", "trainkit.checks", "trainkit", "trainkit.models", "trainkit.data",
    "trainkit.corpus", "trainkit.runlog", "trainkit.digits", "trainkit.train",
    # the capstone, step by step (trainkit.gpt, .train_config and .checkpoint are aliases of three of these)
    "trainkit.capstone.trainer", "trainkit.capstone.checkpoint", "trainkit.capstone.config", "trainkit.capstone.gpt",
    "trainkit.capstone.data", "trainkit.capstone.distributed", "trainkit.capstone.manifest",
    "trainkit.capstone.memory", "trainkit.capstone.precision", "trainkit.capstone.signals",
    # each lab's material (trainkit/labs/): the judgement exercises' visible variants among it; the grader's unseen
    # ones are not watched: they are lent afresh to each test cell that loads them (autograder.lending), so nothing a
    # solution cell did can have touched them
    "trainkit.labs.lab01_signal_propagation.init_nets", "trainkit.labs.lab02_lr_schedules.schedule_task",
    "trainkit.labs.lab03_gradient_clipping.unstable_runs", "trainkit.labs.lab04_optimizers.tuning",
    "trainkit.labs.lab05_mixed_precision.fp16_runs", "trainkit.labs.lab06_debugging_protocol.runbank",
    "trainkit.labs.lab06_debugging_protocol.broken_runs", "trainkit.labs.lab06_debugging_protocol.broken_setups",
    "trainkit.labs.lab07_monitoring_reproducibility.repro_runs", "trainkit.labs.lab08_infra_lab.challenge",
    "trainkit.labs.lab08_infra_lab.preemption",
    # what the grader lends and takes back the unseen variants with (autograder.lending), and what that relies on
    "autograder.lending", "gc", "os", "shutil", "tempfile", "importlib", "importlib.util",
)
# Classes whose methods a submission could patch to make comparisons pass.
CLASSES = (
    ("torch", "Tensor"), ("torch.nn", "Module"), ("torch.nn", "Parameter"), ("torch.nn", "Linear"),
    ("torch.optim", "Optimizer"), ("torch.optim", "AdamW"), ("torch.optim", "Adam"), ("torch.optim", "SGD"),
    ("torch.optim.lr_scheduler", "LRScheduler"), ("torch.optim.lr_scheduler", "LambdaLR"),
    ("torch.amp", "GradScaler"), ("lion_pytorch", "Lion"), ("numpy", "ndarray"),
    ("trainkit.train", "Trainer"), ("trainkit.train", "TrainConfig"), ("trainkit.runlog", "RunLogger"),
    ("trainkit.capstone.gpt", "GPT"), ("trainkit.corpus", "TokenData"),
    ("trainkit.labs.lab01_signal_propagation.init_nets", "Residual"),
    ("IPython.core.interactiveshell", "InteractiveShell"), ("ipykernel.zmqshell", "ZMQInteractiveShell"),
)
# Builtins that ipykernel itself replaces for every request (stdin forwarding).
KERNEL_OWNED_BUILTINS = ("input", "raw_input", "getpass")
# The shell methods that run a cell and report its errors: a submission must not replace them on the instance.
SHELL_METHODS = ("run_cell", "run_cell_async", "run_code", "run_ast_nodes", "showtraceback", "_showtraceback",
                 "showsyntaxerror", "should_run_async", "transform_cell")

_saved: dict = {}          # (kind, owner id) -> (owner, {name: value}), captured by snapshot()
_codes: dict = {}          # id(function) -> (function, __code__, __defaults__, __kwdefaults__)
_locked_names: dict = {}   # name -> object bound by a locked cell in the notebook's namespace
_before: dict = {}


def _user_ns() -> dict:
    from IPython import get_ipython

    return get_ipython().user_ns


def _remember_code(value) -> None:
    if isinstance(value, types.FunctionType):
        _codes[id(value)] = (value, value.__code__, value.__defaults__, value.__kwdefaults__)


def snapshot() -> None:
    """Record the watched modules and classes (call once, before any student code runs)."""
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except Exception:   # noqa: BLE001 -- a module that does not import here is not watched
            continue
        attrs = dict(vars(module))
        _saved["module", name] = (module, attrs)
        for value in attrs.values():
            _remember_code(value)
        _saved["sys.modules", name] = (sys.modules, {name: module})
    for module_name, cls_name in CLASSES:
        try:
            cls = getattr(importlib.import_module(module_name), cls_name)
        except Exception:   # noqa: BLE001 -- a class that is not there is not watched
            continue
        attrs = dict(vars(cls))
        _saved["class", f"{module_name}.{cls_name}"] = (cls, attrs)
        for value in attrs.values():
            _remember_code(getattr(value, "__func__", value))
    from IPython import get_ipython

    shell = get_ipython()
    _saved["shell", "shell"] = (shell, {n: vars(shell)[n] for n in SHELL_METHODS if n in vars(shell)})


def before_locked() -> None:
    """Before a locked cell (setup or test): remember the namespace, to see what the cell binds."""
    _before.clear()
    _before.update(_user_ns())


def after_locked() -> None:
    """After a locked cell: the names it bound (new or rebound) are the grader's; remember them and their code."""
    ns = _user_ns()
    for name, value in ns.items():
        if name.startswith("_") or (name in _before and _before[name] is value):
            continue
        if callable(value) or isinstance(value, types.ModuleType):   # helpers, imports; not data the tests recompute
            _locked_names[name] = value
            _remember_code(value)


def _put_back(owner, name, value, changed, label) -> None:
    current = vars(owner).get(name, _MISSING) if not isinstance(owner, dict) else owner.get(name, _MISSING)
    if current is value:
        return
    if isinstance(owner, dict):
        owner[name] = value
    else:
        setattr(owner, name, value)
    if not _honest_change(label, name, value, current):
        changed.append(f"{label}.{name}" if label else name)


# Module state that honest code changes: tempfile's lazily made name generator and folder (any temporary file, and
# the grader's own lending, makes them).
_LAZY_STATE = {("tempfile", "_name_sequence"), ("tempfile", "tempdir")}


def _honest_change(label: str, name: str, old, new) -> bool:
    """A change put back without saying so in the feedback (put back all the same): lazily made module state, or a
    wrapper written in torch around the very same function (torch._dynamo wraps torch.manual_seed once an optimizer
    first steps and nn.Module.__init__ once a model is compiled; an optimizer wraps its class's step for the
    profiler). The feedback's "restored" note is for what a submission changed."""
    if (label, name) in _LAZY_STATE:
        return True
    code = getattr(new, "__code__", None)
    if not callable(old) or code is None or not code.co_filename.startswith(_torch_dir()):
        return False
    cells = getattr(new, "__closure__", None) or ()
    return getattr(new, "__wrapped__", None) is old or any(_contents(c) is old for c in cells)


def _torch_dir() -> str:
    """torch's package folder, once torch is imported (before, no wrapper of torch's can exist)."""
    import os

    torch = sys.modules.get("torch")
    return os.path.dirname(torch.__file__) + os.sep if getattr(torch, "__file__", None) else "\0"


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:        # an empty cell
        return None


_MISSING = object()


def restore() -> list[str]:
    """Put back everything recorded; return what had been changed."""
    changed: list[str] = []
    for (kind, label), (owner, attrs) in _saved.items():
        for name, value in attrs.items():
            if kind == "module" and label == "builtins" and name in KERNEL_OWNED_BUILTINS:
                continue
            try:
                _put_back(owner, name, value, changed, "" if kind == "sys.modules" else label)
            except (AttributeError, TypeError):
                continue  # read-only attributes of built-in types cannot have been changed either
    ns = _user_ns()
    for name, value in _locked_names.items():
        if ns.get(name, _MISSING) is not value:
            ns[name] = value
            changed.append(name)
    for name in ("AssertionError", "Exception", "isinstance", "float", "abs", "len", "all", "any", "print",
                 "type", "getattr", "hasattr", "range", "zip", "sum", "min", "max", "round", "bool", "int"):
        if name in ns and ns[name] is not vars(builtins).get(name) and name not in _locked_names:
            del ns[name]             # a global that shadows a builtin the tests use
            changed.append(name)
    for function, code, defaults, kwdefaults in _codes.values():
        if function.__code__ is not code or function.__defaults__ is not defaults or function.__kwdefaults__ is not kwdefaults:
            function.__code__, function.__defaults__, function.__kwdefaults__ = code, defaults, kwdefaults
            changed.append(f"{function.__module__}.{function.__qualname__}.__code__")
    from IPython import get_ipython

    shell = get_ipython()
    own = _saved.get(("shell", "shell"), (None, {}))[1]
    for name in SHELL_METHODS:
        if name in vars(shell) and name not in own:
            delattr(shell, name)        # an instance attribute that hides the class's method
            changed.append(f"shell.{name}")
    return changed
