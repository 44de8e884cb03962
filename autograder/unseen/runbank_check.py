"""Instructor side of lab 6's bank of runs: which runs show their planted cause plainly, and the stored banks.

``shows_cause(run)`` is the bank's quality bar, not a diagnosis: it knows the planted cause (and where a spike was
planted) and checks, with margins, that the curves show it. A run that does not is never graded: the visible bank
refuses to store one (``build_visible``), and lab 6's hidden test leaves such an unseen run out. It lives here, not
in ``trainkit`` (which students have), because with it a student could try each label and keep the one it accepts.

    python -m autograder.banks build runbank     # retrain the visible and the unseen runs, store both

The visible runs (trainkit/labs/lab06_debugging_protocol/runbank_visible.json) go to students; the unseen ones (autograder/unseen/runbank_unseen.json,
instructor-only like this module) are what lab 6's hidden tests grade ``diagnose`` on. Both are trained once and
stored rather than trained at grading: every submission is graded on the same runs, whatever CPU grades it, and a
grading run does not spend 25 s of each lab-6 notebook retraining them. tests/test_runbank.py retrains a sample of
each and checks that the stored runs are the training runs of their specs.
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import torch

from trainkit.labs.lab06_debugging_protocol import runbank


def _noise(train) -> float:
    """A robust standard deviation of the minibatch noise: the MAD of step-to-step changes, / sqrt 2."""
    steps = [b - a for a, b in zip(train, train[1:])]
    middle = statistics.median(steps)
    return 1.4826 * statistics.median(abs(d - middle) for d in steps) / math.sqrt(2)


def spike_size(before: float, scale: float) -> float:
    """The rise above the level before a step that makes a spike at that level: half the learnable range `scale`, or,
    where the loss is already low, twice the level before (a jump to 3 times the recent loss), whichever is less.
    A spike that recovers ends within half this size of the level before; one that stays ends at least this far above."""
    return min(0.5 * scale, 2 * max(before, 0.0))


def _jump_size(train, scale, before) -> float:
    """How far a loss must rise above its recent level `before` to be a spike: the spike size at that level, and
    far out of the minibatch noise (8 robust standard deviations) and of rounding (5 % of the learnable range)."""
    return max(spike_size(before, scale), 8 * _noise(train), 0.05 * scale)


def _first_jump(train, scale, window=10):
    """(index, level before) of the first step whose loss exceeds the median of the previous `window` by a jump."""
    for i in range(window, len(train)):
        before = statistics.median(train[i - window:i])
        if train[i] - before > _jump_size(train, scale, before):
            return i, before
    return None, None


def shows_cause(run: runbank.BankRun) -> bool:
    """Whether the curves show the planted cause with a clear margin (runs that do not are left out of the bank)."""
    c = run.curves
    train, val = list(c.train_loss), list(c.val_loss)
    finite = all(math.isfinite(v) for v in train + val)
    if run.label == "nan":
        return not finite
    if not finite:
        return False
    scale = c.baseline - c.reference          # the part of the loss a sound run learns away
    n = len(train)
    end = statistics.median(train[-n // 10:])
    if run.label.startswith("spike"):
        at = int(round(run.spec["at"] * n))          # where the spike was planted
        before, peak = statistics.median(train[at - 10:at]), max(train[at:at + 5])
        if peak - before < _jump_size(train[:at], scale, before) or at > 0.85 * n:
            return False
        size = spike_size(before, scale)
        if run.label == "spike_recovers":
            return end <= before + 0.5 * size and val[-1] <= c.reference + 0.3 * scale
        return end >= before + size
    if _first_jump(train, scale)[0] is not None:
        return False
    if run.label == "healthy":
        return val[-1] <= c.reference + 0.15 * scale and val[-1] - min(val) < 0.1 * scale
    if run.label == "chance_plateau":                 # a model may memorise a little: training ends a bit lower
        return val[-1] >= c.baseline - 0.1 * scale and end >= c.baseline - 0.4 * scale
    if run.label == "both_plateau":
        return c.reference + 0.3 * scale <= val[-1] <= c.baseline - 0.25 * scale
    if run.label == "overfitting":
        return end <= c.reference and val[-1] >= c.reference + 0.2 * scale
    raise ValueError(run.label)


UNSEEN_FILE = Path(__file__).with_name("runbank_unseen.json")


def unseen_specs() -> list[dict]:
    """The grader's runs, unlike the visible ones: other seeds, a wider model, the other split of each task's data,
    minibatches of 8 (noisier curves), spikes at 35 % and 65 % of the run, and a task the visible runs do not show
    (markov)."""
    specs = []
    for task, settings in [("digits", [dict(seed=5, width=96, data_seed=1), dict(seed=6, batch_size=8, few=80),
                                       dict(seed=7, batch_size=8, data_seed=1)]),
                           ("regression", [dict(seed=5, width=96, data_seed=1), dict(seed=6, batch_size=8, few=64),
                                           dict(seed=7, batch_size=8, data_seed=1)]),
                           ("bytes", [dict(seed=5, data_seed=1), dict(seed=6, batch_size=32)]),
                           ("markov", [dict(seed=5), dict(seed=6, batch_size=32, data_seed=1)])]:
        for k, setting in enumerate(settings):
            for cause in runbank.LABELS:
                spec = {"task": task, "cause": cause, **setting}
                if cause.startswith("spike"):
                    spec["at"] = (0.35, 0.65)[(k + runbank.LABELS.index(cause)) % 2]
                specs.append(spec)
    return specs


def _store(path: Path, runs: list[runbank.BankRun]) -> None:
    path.write_text(json.dumps({"version": 1, "runs": [runbank.to_record(r) for r in runs]}, separators=(",", ":")) + "\n")


def build_visible(path: Path = runbank.VISIBLE_FILE) -> list[runbank.BankRun]:
    """Train the visible runs and store them; refuses to store a run that does not show its cause."""
    runs = [runbank.make_run(spec) for spec in runbank.visible_specs()]
    unclear = [r.spec for r in runs if not shows_cause(r)]
    if unclear:
        raise SystemExit(f"these runs do not show their cause clearly; change their settings: {unclear}")
    _store(path, runs)
    return runs


def build_unseen(path: Path = UNSEEN_FILE) -> list[runbank.BankRun]:
    """Train the unseen runs and store those that show their cause; refuses if more than a fifth do not (then the
    settings need a look: the graded set would lose whole causes)."""
    specs = unseen_specs()
    runs = [run for run in map(runbank.make_run, specs) if shows_cause(run)]
    if len(runs) < 0.8 * len(specs):
        raise SystemExit(f"only {len(runs)} of {len(specs)} unseen runs show their cause; change their settings")
    _store(path, runs)
    return runs


def unseen() -> list[runbank.BankRun]:
    """The grader's unseen runs (stored by ``build_unseen``), with their planted causes."""
    return runbank.load_bank(UNSEEN_FILE)


def build() -> None:
    """Retrain and store the visible and the unseen runs (``python -m autograder.banks build runbank``)."""
    torch.set_num_threads(1)
    made = build_visible()
    print(f"stored {len(made)} runs in {runbank.VISIBLE_FILE}")
    made = build_unseen()
    print(f"stored {len(made)} of {len(unseen_specs())} runs in {UNSEEN_FILE} (the others do not show their cause)")
