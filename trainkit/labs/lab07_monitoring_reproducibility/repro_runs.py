"""Real training runs and what each leaves behind (lab 7): pairs meant to be identical, and runs to reproduce.

    from trainkit.labs.lab07_monitoring_reproducibility.repro_runs import LABELS, load_visible, make_pair, load_visible_targets, train

    pair = make_pair({"cause": "data_order", "kind": "shuffle_seed", "seed": 3})   # trains both runs (well under a second)
    pair.a.manifest       # run a's manifest.json, as a dict
    pair.a.log            # run a's metrics log: one dict per line of a JSON-lines file
    pair.label            # why the two runs differ: one of LABELS ("reproducible" when they do not)
    target = load_visible_targets()[0]           # a run to reproduce (exercise 7)
    train(target.settings) == target.log         # True: its log, bit for bit

Each run is a real minibatch training run (AdamW; an MLP on scikit-learn's digits, or on the regression task of
``trainkit.labs.lab06_debugging_protocol.runbank.regression_data``), trained twice with one planted cause of difference between the two, never a
drawn curve.

**What a run leaves behind.** ``run.manifest`` (a dict, as ``json.load`` gives it):

| key | what it records |
|---|---|
| ``run_id``, ``started_at``, ``host``, ``wall_time_s`` | this start of the run: they differ between any two runs |
| ``git_sha`` | the commit the code was run from |
| ``git_dirty`` | whether the working tree had uncommitted changes to tracked files |
| ``git_diff_sha256`` | SHA-256 of ``git diff HEAD`` when dirty (which changes, not only that there were some), else ``None`` |
| ``config`` | ``task``, ``model`` (``width``, ``depth``, ``dropout``: the probability of each dropout layer, 0 for none), ``optim`` (``name``, ``lr``, ``weight_decay``), ``batch_size``, ``steps``; ``init_from`` (only in a fine-tune: the checkpoint its initial weights are loaded from); and, where the pipeline records them, ``seed`` (of the run's random draws: the initial weights, unless they come from ``init_from``, and the dropout masks) and ``data`` (``shuffle_seed``, ``reshuffle_each_epoch``); older pipelines record neither |
| ``config_hash`` | SHA-256 of the config (keys sorted) |
| ``versions`` | ``python``, ``torch``, ``numpy`` |
| ``deterministic`` | whether ``torch.use_deterministic_algorithms(True)`` was on (then no reduction races) |

A manifest records what the pipeline was told, which is not always what the run did (a seed taken from an environment
variable that the config does not show, a data loader whose order depends on a setting no one records), and a
difference between two manifests is not always a difference between the runs (another host, a dirty tree whose
change touches nothing the run executes).

``run.log`` (a list of dicts, in order): one row per optimiser step ``s`` (``0 <= s < steps``) with ``"step"``,
``"epoch"``, ``"batch"`` (the data loader's fingerprint of the step's minibatch: the first 12 hex digits of the SHA-256
of its example indices, in order, as the bytes of their int64 tensor: ``sha256(idx.numpy().tobytes())``; equal
fingerprints, the same examples in the same order), ``"train/loss"`` (the
minibatch loss of step ``s``, before its update, in training mode: with dropout, if any), ``"lr"`` (the learning rate
of that update) and ``"grad_norm"`` (the global gradient norm before the update); every ``eval_every`` steps, from step 0,
the row also holds ``"val/loss"``, measured before that step's update; a last row ``{"step": steps, "val/loss": ...}``
holds the final validation loss. Every value is the number the run computed (a float32 loss stored exactly), so two
runs that computed the same thing have equal logs, bit for bit.

**The causes** (``LABELS``; lab 7's exercise fixes what each means):

| label | how it is planted |
|---|---|
| ``reproducible`` | nothing differs in what the runs compute (their manifests may still differ) |
| ``seed`` | another seed for the run's random draws: the initial weights (and the dropout masks), or, in a fine-tune from one checkpoint, the dropout masks only |
| ``data_order`` | the same initial weights; the minibatches come in another order (another shuffle seed, or an epoch reshuffled in one run and not in the other) |
| ``code_change`` | the code differs (uncommitted changes, or another commit) in a way that changes what the run computes |
| ``nondeterministic`` | the same settings and seeds (and code, or an edit that changes nothing the run computes); a reduction whose order is not fixed makes a sum differ in its last bits: a training step's (the runs drift apart from there) or a validation loss's (that logged value alone) |

**How the non-determinism is emulated (say so when you use it).** A GPU kernel that accumulates many values into the
same places (a scatter-add such as ``index_add_`` or ``scatter_add_`` on a CUDA tensor, both on the list of
``torch.use_deterministic_algorithms``) adds them with atomic adds, in the order the threads get there; floating-point
addition is not associative, so the total can change in its last bits from one run to the next. (A matrix product,
such as a linear layer's weight gradient, is a cuBLAS GEMM: deterministic for a fixed configuration.) Here
each step's loss and gradient are the sums of the contributions of ``SLICES`` slices of the minibatch; a deterministic
run adds them in a fixed order, a racy one (``race > 0``) adds them, at a step with probability ``race``, in another
order. A validation loss is the sum of ``EVAL_BLOCKS`` blocks' partial sums, which a racy evaluation (``eval_race >
0``) adds, at an evaluation with probability ``eval_race``, in a shuffled order. That is the same arithmetic a racy
reduction performs, on the CPU, and the same size of difference (an ulp or a few); a real GPU's races are more
frequent and involve more partial sums. Only runs whose manifest says ``deterministic: false`` race.

``make_pair`` also takes settings the visible pairs do not use (another ``task``, ``width``, ``depth``, ``dropout``,
``batch_size``, ``steps``, ``lr``, ``at``, ``race``, ``eval_race``): make pairs of your own to test a method.

**Runs to reproduce (lab 7's exercise 7).** ``load_visible_targets()`` trains runs and returns each as a ``Target``:
``target.manifest`` and ``target.log`` (what the run left behind, as above), ``target.settings`` (the settings of
``train`` the run used: the answer) and ``target.spec``. ``train(settings)`` takes the keys of ``SOUND`` (any left out
take its values; an unknown key raises ``ValueError``):

| setting | what it does |
|---|---|
| ``task``, ``width``, ``depth``, ``dropout``, ``batch_size``, ``steps``, ``lr``, ``weight_decay`` | as the manifest's ``config`` names them; ``lr`` is the learning rate of every update before a drop |
| ``eval_every`` | the validation loss is measured at every step that is a multiple of it (from step 0), and at the end |
| ``init_seed`` | ``torch.manual_seed(init_seed)`` before the model is built: the initial weights, and then (unless ``mask_seed`` is set) the dropout masks |
| ``mask_seed`` | ``None``, or a fine-tune: after the model is built, ``torch.manual_seed(mask_seed)``, which draws the dropout masks |
| ``order_seed`` | the data loader's generator, ``torch.Generator().manual_seed(order_seed)``: each epoch's order is ``torch.randperm(len(data.y_train), generator=...)``, step ``s`` of an epoch takes its ``s``-th slice of ``batch_size`` indices, and an epoch has ``len(data.y_train) // batch_size`` steps |
| ``reshuffle`` | ``True``: every epoch draws a new permutation from that generator; ``False``: every epoch repeats the first |
| ``lr_drop_at`` | ``None``, or the step from which every update's learning rate is ``lr * 0.3`` (a code change no config records) |

``build_model(settings)`` returns the model ``train`` starts from, built exactly as it builds it (the global generator
left where ``train`` leaves it before its first step); ``task_data(task)`` returns the data split and the loss function a
run of ``task`` uses. Every seed the pipelines draw (``init_seed``, ``mask_seed``, ``order_seed``) is in
``SEED_RANGE`` (0 to 999). A fine-tune's manifest names its initial weights ``config["init_from"]``:
``checkpoints/init-<h>.pt``, ``<h>`` the first 8 hex digits of the SHA-256 of the decimal text of the ``init_seed``
that drew them (``hashlib.sha256(str(init_seed).encode()).hexdigest()[:8]``); its ``config["seed"]``, where recorded,
is the ``mask_seed``. Only the settings in ``VARYING`` differ between the runs to reproduce; the others (``data_seed``,
``head_gain``, ``eps``, ``max_norm``, ``race``, ``eval_race``, ``race_seed``) keep ``SOUND``'s values in every one of
them, and every one of them is deterministic (``deterministic: true``: no race). Their manifests are written as above:
some record what the pipeline was told rather than what the run did, and older pipelines record no seeds.
"""
from __future__ import annotations

import copy
import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from trainkit.digits import load_digits_split
from trainkit.models import mlp

LABELS = ("reproducible", "seed", "data_order", "code_change", "nondeterministic")
SLICES = 4            # the partial sums of a step's loss and gradient
EVAL_BLOCKS = 16      # the partial sums of a validation loss

# What a run does (not what its manifest says). make_pair's plants change these per side.
SOUND = dict(task="digits", data_seed=0, width=32, depth=1, dropout=0.0, batch_size=64, steps=40, lr=3e-3,
             weight_decay=0.0, eval_every=5, init_seed=0, mask_seed=None, order_seed=0, reshuffle=True,
             head_gain=1.0, lr_drop_at=None, eps=1e-8, max_norm=None, race=0.0, eval_race=0.0, race_seed=0)
TASKS = ("digits", "regression")


@dataclass
class RunRecord:
    """What one run left behind: its manifest and its metrics log."""
    manifest: dict
    log: list


@dataclass
class Pair:
    """Two runs meant to be identical, and why they are not (``label``); ``spec`` is what make_pair was given."""
    spec: dict
    label: str
    a: RunRecord
    b: RunRecord = field(repr=False)


_SHAPES = {"digits": (64, 10, "relu", False), "regression": (8, 1, "tanh", True)}   # in, out, activation, flatten


def _shape(task: str) -> tuple:
    if task not in _SHAPES:
        raise ValueError(f"unknown task {task!r}; one of {TASKS}")
    return _SHAPES[task]


def _task(task: str, data_seed: int):
    """(data split, loss function with a reduction argument, input size, output size, activation, flatten output)."""
    shape = _shape(task)
    if task == "digits":
        return (load_digits_split(seed=data_seed), F.cross_entropy, *shape)
    from trainkit.labs.lab06_debugging_protocol.runbank import regression_data

    return (regression_data(data_seed), F.mse_loss, *shape)


def task_data(task: str = "digits", data_seed: int = 0):
    """(the data split, the loss function) a run of ``task`` trains on: ``data.x_train``, ``data.y_train``, ``data.x_val``,
    ``data.y_val``; the loss function takes ``reduction=`` (``F.cross_entropy`` for digits, ``F.mse_loss`` for
    regression, whose model output is flattened to one number per example)."""
    data, loss_fn, *_ = _task(task, data_seed)
    return data, loss_fn


def build_model(settings: dict) -> nn.Module:
    """The model ``train(settings)`` starts from, built as it builds it: its initial weights drawn from ``init_seed``
    (dropout layers, if any, after each hidden activation; a regression model's output flattened); in a fine-tune
    (``mask_seed`` set) PyTorch's global generator is then seeded with ``mask_seed``, which draws the dropout masks.
    The model is in training mode, as ``train`` leaves it before its first step."""
    s = _settings(settings)
    return _model(s, *_shape(s["task"]))


def _model(s: dict, n_in: int, n_out: int, activation: str, flat: bool) -> nn.Module:
    torch.manual_seed(s["init_seed"])
    model = mlp(n_in, s["width"], s["depth"], n_out, activation=activation)
    if s["dropout"]:                                    # after each hidden layer's activation
        layers = list(model)
        model = nn.Sequential(*[m for i, layer in enumerate(layers)
                                for m in ([layer, nn.Dropout(s["dropout"])] if 0 < i < len(layers) - 1
                                          and i % 2 == 1 else [layer])])
    if s["mask_seed"] is not None:                      # initial weights from a checkpoint; the seed drives the rest
        torch.manual_seed(s["mask_seed"])
    if flat:
        model = nn.Sequential(model, nn.Flatten(0))
    with torch.no_grad():
        [m for m in model.modules() if isinstance(m, nn.Linear)][-1].weight.mul_(s["head_gain"])
    return model


def _settings(settings: dict) -> dict:
    unknown = set(settings) - set(SOUND)
    if unknown:
        raise ValueError(f"unknown run settings {sorted(unknown)}; the settings are {sorted(SOUND)}")
    return {**SOUND, **settings}


def train(settings: dict) -> list:
    """Train one run with ``settings`` (the keys of ``SOUND``; those left out take its values); return its log."""
    s = _settings(settings)
    data, loss_fn, n_in, n_out, activation, flat = _task(s["task"], s["data_seed"])
    model = _model(s, n_in, n_out, activation, flat)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=s["lr"], weight_decay=s["weight_decay"], eps=s["eps"])
    order_gen = torch.Generator().manual_seed(s["order_seed"])
    race = random.Random(s["race_seed"])
    n, batch, steps = len(data.y_train), s["batch_size"], s["steps"]
    per_epoch = n // batch
    order = torch.randperm(n, generator=order_gen)
    model.train()
    log = []
    for step in range(steps + 1):
        row = {"step": step}
        if step % s["eval_every"] == 0 or step == steps:
            blocks = list(range(EVAL_BLOCKS))
            if s["eval_race"] and race.random() < s["eval_race"]:
                race.shuffle(blocks)                    # the blocks' sums land in another order
            row["val/loss"] = _val_loss(model, data.x_val, data.y_val, loss_fn, blocks)
        if step == steps:
            log.append(row)
            break
        epoch, pos = divmod(step, per_epoch)
        if pos == 0 and epoch > 0 and s["reshuffle"]:
            order = torch.randperm(n, generator=order_gen)
        idx = order[pos * batch:(pos + 1) * batch]
        x, y = data.x_train[idx], data.y_train[idx]
        fingerprint = hashlib.sha256(idx.numpy().tobytes()).hexdigest()[:12]
        lr = s["lr"] * (0.3 if s["lr_drop_at"] is not None and step >= s["lr_drop_at"] else 1.0)
        for group in opt.param_groups:
            group["lr"] = lr
        sums = []                                       # (loss, gradients) of each slice: its share of the mean
        for k in range(SLICES):
            part = loss_fn(model(x[k::SLICES]), y[k::SLICES], reduction="sum") / len(y)
            sums.append((part.detach(), torch.autograd.grad(part, params)))
        at_once = _order(race, s["race"])
        loss = sums[at_once[0]][0]
        grads = list(sums[at_once[0]][1])
        for k in at_once[1:]:
            loss = loss + sums[k][0]
            grads = [g + h for g, h in zip(grads, sums[k][1])]
        for p, g in zip(params, grads):
            p.grad = g
        if s["max_norm"] is not None:
            norm = torch.nn.utils.clip_grad_norm_(params, s["max_norm"])
        else:
            norm = torch.nn.utils.get_total_norm(grads)
        opt.step()
        row.update({"epoch": epoch, "batch": fingerprint, "train/loss": float(loss), "lr": lr,
                    "grad_norm": float(norm)})
        log.append(row)
    return log


def _order(race: random.Random, p: float) -> list:
    """The order in which the SLICES partial sums are added: fixed, or (a race, with probability p) another one."""
    order = list(range(SLICES))
    if p and race.random() < p:
        order = order[1:] + order[:1] if race.random() < 0.5 else order[::-1]
    return order


@torch.no_grad()
def _val_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn, order: list) -> float:
    """The mean validation loss (eval mode), as the sum of ``len(order)`` blocks' partial sums added in ``order``."""
    was_training = model.training
    model.eval()
    n = len(order)
    parts = [loss_fn(model(x[k::n]), y[k::n], reduction="sum") / len(y) for k in range(n)]
    model.train(was_training)
    total = parts[order[0]]
    for k in order[1:]:
        total = total + parts[k]
    return float(total)


# --- manifests ------------------------------------------------------------------------------------------------

def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def text_sha(text: str) -> str:
    """A commit-like hash of a text (a planted commit's sha)."""
    return hashlib.sha256(text.encode()).hexdigest()


def manifest(settings: dict, rng: random.Random, git_sha: str, diff: str | None = None, deterministic: bool = True,
             records_seeds: bool = True) -> dict:
    """The manifest a pipeline writes for a run of ``settings`` (what it was told: the seeds it records may not be the
    ones the run used). ``diff``: the text of the uncommitted changes (None: a clean tree); ``rng`` draws this start's
    own fields."""
    s = {**SOUND, **settings}
    config = {"task": s["task"], "model": {"width": s["width"], "depth": s["depth"], "dropout": s["dropout"]},
              "optim": {"name": "adamw", "lr": s["lr"], "weight_decay": s["weight_decay"]},
              "batch_size": s["batch_size"], "steps": s["steps"]}
    if s["mask_seed"] is not None:                  # a fine-tune: the initial weights are a stored checkpoint's
        config["init_from"] = f"checkpoints/init-{text_sha(str(s['init_seed']))[:8]}.pt"
    if records_seeds:
        config["seed"] = s["init_seed"] if s["mask_seed"] is None else s["mask_seed"]
        config["data"] = {"shuffle_seed": s["order_seed"], "reshuffle_each_epoch": s["reshuffle"]}
    day, hour, minute = rng.randint(1, 28), rng.randint(0, 23), rng.randint(0, 59)
    return {
        "run_id": _hex(rng, 8),
        "started_at": f"2026-{rng.randint(1, 12):02d}-{day:02d}T{hour:02d}:{minute:02d}:{rng.randint(0, 59):02d}Z",
        "host": f"{rng.choice(['gpu', 'node', 'worker'])}-{rng.randint(1, 40):02d}",
        "wall_time_s": round(rng.uniform(20, 90), 1),
        "git_sha": git_sha,
        "git_dirty": diff is not None,
        "git_diff_sha256": None if diff is None else text_sha(diff),
        "config": config,
        "config_hash": text_sha(json.dumps(config, sort_keys=True)),
        "versions": {"python": "3.12.3", "torch": torch.__version__.split("+")[0], "numpy": np.__version__},
        "deterministic": deterministic,
    }


# --- planting a cause -------------------------------------------------------------------------------------------
# A plant turns a spec into the two sides: for each, the settings the run uses and how its manifest is written
# (manifest()'s keyword arguments, plus "told": settings the pipeline was told instead of what the run used).

def plant_side(changes=None, told=None, **manifest_kw) -> dict:
    """One side of a planted pair: the settings it changes, what its pipeline was told, how its manifest is written."""
    return {"changes": changes or {}, "told": told or {}, "manifest": manifest_kw}


def code_diff(what: str, seed: int) -> str:
    """The uncommitted diff a run's tree holds: an edit of train.py, told apart by ``what`` and ``seed``."""
    return f"--- a/train.py\n+++ b/train.py\n@@ {what} (edit {seed})"


PLANTS: dict[tuple[str, str], Callable[[dict], tuple[dict, dict]]] = {
    # nothing differs in what is computed
    ("reproducible", "same"): lambda sp: (plant_side(), plant_side()),
    ("reproducible", "doc_change"): lambda sp: (plant_side(), plant_side(diff=f"--- a/README.md\n+++ b/README.md\n@@ {sp['seed']}")),
    ("reproducible", "same_diff"): lambda sp: (plant_side(diff=code_diff("eval every 5", sp["seed"])),
                                               plant_side(diff=code_diff("eval every 5", sp["seed"]))),
    ("reproducible", "unflagged"): lambda sp: (plant_side(deterministic=False), plant_side(deterministic=False)),
    # the initial weights
    ("seed", "recorded"): lambda sp: (plant_side(), plant_side({"init_seed": sp["seed"] + 1})),
    ("seed", "unrecorded"): lambda sp: (plant_side(), plant_side({"init_seed": sp["seed"] + 1}, told={"init_seed": sp["seed"]})),
    ("seed", "old_manifest"): lambda sp: (plant_side(records_seeds=False),
                                          plant_side({"init_seed": sp["seed"] + 1}, records_seeds=False)),
    # a fine-tune from one checkpoint: the seed moves only the dropout masks
    ("seed", "dropout_only"): lambda sp: (plant_side(mask_settings(sp, 0)), plant_side(mask_settings(sp, 1))),
    # the order of the minibatches
    ("data_order", "shuffle_seed"): lambda sp: (plant_side(), plant_side({"order_seed": sp["seed"] + 1})),
    ("data_order", "reshuffle"): lambda sp: (plant_side(), plant_side({"reshuffle": False})),
    ("data_order", "unrecorded"): lambda sp: (plant_side(), plant_side({"order_seed": sp["seed"] + 1}, told={"order_seed": sp["seed"]})),
    # the code
    ("code_change", "head_init"): lambda sp: (plant_side(), plant_side({"head_gain": 0.5}, diff=code_diff("head init x0.5", sp["seed"]))),
    ("code_change", "lr_drop"): lambda sp: (plant_side(), plant_side({"lr_drop_at": sp["at"]}, diff=code_diff("lr drop", sp["seed"]))),
    ("code_change", "adam_eps"): lambda sp: (plant_side(), plant_side({"eps": 1e-6}, diff=code_diff("eps 1e-6", sp["seed"]))),
    # a racy reduction in both runs: in training, in evaluation only, or in training with a harmless edit in one tree
    ("nondeterministic", "race"): lambda sp: racy_sides(sp, {"race": sp["race"]}),
    ("nondeterministic", "eval_race"): lambda sp: racy_sides(sp, {"eval_race": sp["eval_race"]}),
    ("nondeterministic", "race_comment"): lambda sp: racy_sides(sp, {"race": sp["race"]},
                                                           diffs=(None, code_diff("a comment", sp["seed"]))),
}
PAIR_DEFAULTS = dict(seed=0, task="digits", width=32, depth=1, dropout=0.0, batch_size=64, steps=40, lr=3e-3, at=20,
                     race=0.04, eval_race=0.5)


def mask_settings(sp: dict, moved: int) -> dict:
    """A fine-tune's settings: the initial weights of seed ``sp["seed"]``, dropout, its masks from seed + ``moved``."""
    return {"dropout": sp["dropout"] or 0.1, "mask_seed": sp["seed"] + moved}


def racy_sides(sp: dict, race: dict, diffs=(None, None), **manifest_kw) -> tuple[dict, dict]:
    """Both sides race the same way (each run draws its own races); ``diffs``: each tree's uncommitted changes."""
    first = 2 * sp["seed"] + (100 if any(diffs) else 0)               # not the draws of the clean trees' pairs
    return tuple(plant_side({**race, "race_seed": first + i}, deterministic=False, diff=diffs[i], **manifest_kw)
                 for i in (0, 1))


def make_pair(spec: dict, plants: dict | None = None) -> Pair:
    """Train the two runs of ``spec``: {"cause", "kind", "seed"} and optionally "task", "width", "depth", "dropout",
    "batch_size", "steps", "lr", "at" (the step a code change starts to act), "race" (the probability, per step, that
    a racy reduction in training adds in another order), "eval_race" (the same, per evaluation). ``plants`` (default ``PLANTS``): {(cause, kind): plant}."""
    plants = PLANTS if plants is None else plants
    if (spec.get("cause"), spec.get("kind")) not in plants:
        raise ValueError(f"unknown cause and kind {(spec.get('cause'), spec.get('kind'))!r}; one of {sorted(plants)}")
    unknown = set(spec) - set(PAIR_DEFAULTS) - {"cause", "kind"}
    if unknown:
        raise ValueError(f"unknown spec keys {sorted(unknown)}; a spec takes cause, kind and {sorted(PAIR_DEFAULTS)}")
    sp = {**PAIR_DEFAULTS, **spec}
    shared = {k: sp[k] for k in ("task", "width", "depth", "dropout", "batch_size", "steps", "lr")}
    shared.update(init_seed=sp["seed"], order_seed=sp["seed"], data_seed=sp["seed"] % 2)
    rng = random.Random(text_sha(json.dumps(sp, sort_keys=True)))        # this pair's own fields, from the whole spec
    git_sha = _hex(rng, 40)
    runs = []
    for side in plants[(sp["cause"], sp["kind"])](sp):
        kw = {"git_sha": git_sha, **side["manifest"]}
        settings = {**shared, **side["changes"]}
        told = {**settings, **side["told"]}
        runs.append(RunRecord(manifest(told, rng, **kw), train(settings)))
    if rng.random() < 0.5:                                          # the changed run is not always b
        runs.reverse()
    return Pair(dict(spec), sp["cause"], *runs)


# --- the stored pairs ---------------------------------------------------------------------------------------------
# Training the visible pairs takes several seconds, too long for a notebook cell: they are trained once by the
# instructor (`python -m autograder.banks build repro`, which stores only pairs whose logs show their cause) and stored
# here with every number exact. tests/test_repro_runs.py retrains a sample and checks they are theirs.

VISIBLE_FILE = Path(__file__).with_name("repro_visible.json")


def to_record(pair: Pair) -> dict:
    def run(r: RunRecord) -> dict:
        keys = sorted({k for row in r.log for k in row})
        return {"manifest": r.manifest, "log": {k: [row.get(k) for row in r.log] for k in keys}}  # by column: smaller
    return {"spec": pair.spec, "label": pair.label, "a": run(pair.a), "b": run(pair.b)}


def from_record(record: dict) -> Pair:
    def run(r: dict) -> RunRecord:
        columns = r["log"]
        rows = [{k: columns[k][i] for k in columns if columns[k][i] is not None} for i in range(len(columns["step"]))]
        return RunRecord(copy.deepcopy(r["manifest"]), rows)
    return Pair(dict(record["spec"]), record["label"], run(record["a"]), run(record["b"]))


def load_pairs(path: Path) -> list[Pair]:
    """The pairs stored in ``path`` (written by ``autograder.repro_check``), with their labels."""
    return [from_record(r) for r in json.loads(Path(path).read_text())["pairs"]]


def visible_specs() -> list[dict]:
    """The pairs a student iterates on: every cause and kind, on the digits task, on two or three seeds."""
    specs = []
    for (cause, kind) in PLANTS:
        seeds = (0, 1, 2) if cause == "nondeterministic" or kind == "dropout_only" else (0, 1)
        specs += [{"cause": cause, "kind": kind, "seed": seed, **({"dropout": 0.1} if seed == 1 else {})}
                  for seed in seeds]
    return specs


def visible() -> list[Pair]:
    """The visible pairs (every cause and kind on the digits task), with their labels and specs."""
    return load_pairs(VISIBLE_FILE)

# The name the lab's text uses for this bank's visible() (one function, two names).
load_visible = visible


# --- runs to reproduce (exercise 7) -----------------------------------------------------------------------------
# A target is one run and what it left behind. A kind turns a spec into the settings the run used and how its manifest
# is written, as a plant does for one side of a pair ("told": what the pipeline recorded instead of what the run used).
# The logs are trained when a target is built, never stored: reproducing one bit for bit means training it again on the
# same machine, and another CPU's kernels may round the stored numbers differently.

SEED_RANGE = range(1000)           # the pipelines draw every seed (init_seed, mask_seed, order_seed) from here
VARYING = ("task", "width", "depth", "dropout", "batch_size", "steps", "lr", "weight_decay", "eval_every", "init_seed",
           "mask_seed", "order_seed", "reshuffle", "lr_drop_at")       # the settings in which targets differ


@dataclass
class Target:
    """A run to reproduce: ``manifest`` and ``log`` (what it left behind), ``settings`` (what it ran: the answer)."""
    spec: dict
    settings: dict
    manifest: dict
    log: list = field(repr=False)


def fine_tune_settings(sp: dict) -> dict:
    """Initial weights of seed ``sp["seed"]`` from a checkpoint, dropout masks from ``sp["mask_seed"]``."""
    return {"mask_seed": sp["mask_seed"], "dropout": sp["dropout"] or 0.1}


TARGET_KINDS: dict[str, Callable[[dict], dict]] = {
    "recorded": lambda sp: plant_side(),                                         # the manifest says it all (but eval_every)
    "old_pipeline": lambda sp: plant_side(records_seeds=False),                  # no seeds, no data settings recorded
    "order_unrecorded": lambda sp: plant_side(told={"order_seed": sp["told"]}),  # the loader read its seed elsewhere
    "reshuffle_unrecorded": lambda sp: plant_side({"reshuffle": False}, told={"reshuffle": True}),
    "lr_drop": lambda sp: plant_side({"lr_drop_at": sp["at"]}, diff=code_diff(f"lr x0.3 from step {sp['at']}", sp["seed"])),
    "fine_tune": lambda sp: plant_side(fine_tune_settings(sp)),                          # initial weights from init_from
}
TARGET_DEFAULTS = dict(seed=0, order_seed=None, mask_seed=1, told=0, at=20, eval_every=5, reshuffle=True,
                       task="digits", width=32, depth=1, dropout=0.0, batch_size=64, steps=30, lr=3e-3,
                       weight_decay=0.0)


def make_target(spec: dict, kinds: dict | None = None) -> Target:
    """Train the run of ``spec`` and write its manifest: {"kind"} and optionally "seed" (the initial weights' seed),
    "order_seed" (default: "seed"), "mask_seed" (a fine-tune's dropout masks), "told" (what a manifest that is wrong
    records instead), "at" (the step of an lr drop), "eval_every", "reshuffle", "task", "width", "depth", "dropout",
    "batch_size", "steps", "lr", "weight_decay". ``kinds`` (default ``TARGET_KINDS``): {kind: side}."""
    kinds = TARGET_KINDS if kinds is None else kinds
    if spec.get("kind") not in kinds:
        raise ValueError(f"unknown kind {spec.get('kind')!r}; one of {sorted(kinds)}")
    unknown = set(spec) - set(TARGET_DEFAULTS) - {"kind"}
    if unknown:
        raise ValueError(f"unknown spec keys {sorted(unknown)}; a spec takes kind and {sorted(TARGET_DEFAULTS)}")
    sp = {**TARGET_DEFAULTS, **spec}
    settings = {k: sp[k] for k in ("task", "width", "depth", "dropout", "batch_size", "steps", "lr", "weight_decay",
                                   "eval_every", "reshuffle")}
    settings.update(init_seed=sp["seed"], order_seed=sp["seed"] if sp["order_seed"] is None else sp["order_seed"])
    side = kinds[sp["kind"]](sp)
    settings.update(side["changes"])
    rng = random.Random(text_sha("target " + json.dumps(sp, sort_keys=True)))
    written = manifest({**settings, **side["told"]}, rng, git_sha=_hex(rng, 40), **side["manifest"])
    return Target(dict(spec), settings, written, train(settings))


def visible_target_specs() -> list[dict]:
    """The runs a student iterates on: every kind on the digits task, one model size, two or three runs each."""
    return [
        {"kind": "recorded", "seed": 0},
        {"kind": "recorded", "seed": 42, "order_seed": 7, "eval_every": 4},
        {"kind": "old_pipeline", "seed": 11, "order_seed": 250},
        {"kind": "old_pipeline", "seed": 404, "eval_every": 10},
        {"kind": "old_pipeline", "seed": 87, "order_seed": 3, "reshuffle": False},
        {"kind": "order_unrecorded", "seed": 2, "order_seed": 58, "told": 2},
        {"kind": "order_unrecorded", "seed": 9, "order_seed": 613, "told": 0, "eval_every": 8},
        {"kind": "reshuffle_unrecorded", "seed": 5},
        {"kind": "lr_drop", "seed": 1, "at": 20},
        {"kind": "lr_drop", "seed": 30, "order_seed": 31, "at": 26, "eval_every": 4},
        {"kind": "fine_tune", "seed": 21, "mask_seed": 1},
        {"kind": "fine_tune", "seed": 700, "mask_seed": 3, "eval_every": 10, "dropout": 0.2},
    ]


def visible_targets() -> list[Target]:
    """The visible runs to reproduce (each trained now, about 0.15 s a run), with their true settings."""
    return [make_target(spec) for spec in visible_target_specs()]

# The name the lab's text uses for this bank's visible() (one function, two names).
load_visible_targets = visible_targets
