"""Instructor side of lab 4's tuning exercise: the grader's hidden tasks, and the bar each graded run must reach.

A task's bar, per optimiser, comes from a reference sweep: the learning rate stepped by a factor 10**(1/4) from 1e-6
to 10 (every other hyper-parameter at its default), each run for the task's full length on the grading seeds. The
bar lets a configuration's excess over the task's floor (``tuning.floor``: what no model can beat) be at most
``1 + MARGIN`` times the sweep's best excess (``trainkit.data.excess_bar``, lab 2's rule too): a ratio of whole
losses was loose where the floor is high (the bigram LM's bar admitted learning rates a factor 100 apart). A
configuration passes a task when the mean of its own runs on the same seeds is at most the bar. ``python -m autograder.banks build tuning`` runs the sweeps (a few
minutes) and stores the visible tasks with their bars in trainkit/labs/lab04_optimizers/tuning_visible.json and the hidden ones in
autograder/unseen/tuning_unseen.json, so grading never sweeps; tests/test_tuning.py re-runs a sample of each.

The hidden tasks are the visible kinds (digits with an MLP or a linear model, pixels standardised or in raw units; a
regression on a teacher network; a bigram language model) at other widths, depths, batch sizes, input and target
scales, vocabularies and data splits: their best learning rates are not the visible tasks', and a method that
searches finds them. Instructor-only (the student edition leaves autograder/ out), like the other *_check modules.
"""
from __future__ import annotations

import json
from pathlib import Path

from trainkit.labs.lab04_optimizers import tuning
from trainkit.data import excess_bar

UNSEEN_FILE = Path(__file__).with_name("tuning_unseen.json")
GRID = [10 ** (k / 4) for k in range(-24, 5)]        # 1e-6 ... 10, four per decade
MARGIN = 0.30                                        # a pass: an excess over the floor at most 30 % above the best
UNSEEN_SEEDS = (7, 8)                                # the grader's seeds; the visible tests use tuning.VISIBLE_SEEDS
STEPS = 150


def _digits(name, split, standardize, input_scale, width, depth, batch):
    return dict(name=name, kind="digits", split=split, standardize=standardize, input_scale=input_scale,
                width=width, depth=depth, batch=batch, steps=STEPS)


def _regression(name, split, n_in, target_scale, width, depth, batch):
    return dict(name=name, kind="regression", split=split, n_in=n_in, target_scale=target_scale, width=width,
                depth=depth, batch=batch, steps=STEPS)


def _bigram(name, split, vocab, batch):
    return dict(name=name, kind="bigram", split=split, vocab=vocab, batch=batch, steps=STEPS)


VISIBLE_SPECS = [
    _digits("digits, MLP 32 x 1, standardised pixels", 0, True, 1.0, 32, 1, 32),
    _digits("digits, MLP 32 x 1, pixels 0..255", 0, False, 255 / 16, 32, 1, 32),
    _digits("digits, linear, standardised pixels x 0.01", 0, True, 0.01, 0, 0, 64),
    _regression("regression, MLP 32 x 2, unit targets", 0, 16, 1.0, 32, 2, 32),
    _bigram("bigram LM, vocabulary 32", 0, 32, 128),
]
UNSEEN_SPECS = [
    _digits("digits, MLP 64 x 3, batch 24", 1, True, 1.0, 64, 3, 24),
    _digits("digits, MLP 48 x 2, pixels 0..16", 1, False, 1.0, 48, 2, 64),
    _digits("digits, linear, pixels 0..0.1", 1, False, 1 / 160, 0, 0, 32),
    _regression("regression, MLP 32 x 2, targets x 30", 1, 8, 30.0, 32, 2, 32),
    _regression("regression, linear, targets x 100", 1, 16, 100.0, 0, 0, 32),
    _bigram("bigram LM, vocabulary 128", 1, 128, 64),
]


def sweep(spec: dict, optimizer: str, seeds) -> list[float]:
    """The mean loss over ``seeds`` of each learning rate of GRID."""
    return [tuning.graded_loss(spec, optimizer, {"lr": lr}, seeds) for lr in GRID]


def with_bars(specs: list[dict], seeds) -> list[dict]:
    out = []
    for spec in specs:
        entry = dict(spec, floor=tuning.floor(spec), best={}, bar={}, best_lr={})
        for optimizer in tuning.OPTIMIZERS:
            losses = sweep(spec, optimizer, seeds)
            i = min(range(len(GRID)), key=losses.__getitem__)
            entry["best"][optimizer] = losses[i]
            entry["bar"][optimizer] = excess_bar(losses[i], entry["floor"], 1 + MARGIN)
            entry["best_lr"][optimizer] = GRID[i]
            print(f"  {spec['name']:45s} {optimizer:5s} best lr {GRID[i]:.2g}, loss {losses[i]:.4g}", flush=True)
        out.append(entry)
    return out


def build() -> None:
    import torch

    torch.set_num_threads(1)
    visible = with_bars(VISIBLE_SPECS, tuning.VISIBLE_SEEDS)
    for entry in visible:            # the student sees the bar, not where the sweep found it
        del entry["best_lr"]
    tuning.VISIBLE_JSON.write_text(json.dumps({"seeds": tuning.VISIBLE_SEEDS, "tasks": visible}, indent=1) + "\n")
    hidden = with_bars(UNSEEN_SPECS, UNSEEN_SEEDS)
    UNSEEN_FILE.write_text(json.dumps({"seeds": UNSEEN_SEEDS, "tasks": hidden}, indent=1) + "\n")


def unseen() -> list[dict]:
    """The grader's hidden task specs, each with its ``"bar"`` per optimiser (graded on UNSEEN_SEEDS)."""
    return json.loads(UNSEEN_FILE.read_text())["tasks"]
