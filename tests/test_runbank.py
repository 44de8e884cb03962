"""Lab 6's banks of runs: the stored visible and unseen runs are real training runs, each showing its planted cause.

Both banks are trained once (``python -m autograder.banks build runbank``) and stored: training 42 visible runs takes
longer than a notebook cell may, and the 64 unseen ones would cost every graded lab-6 notebook 25 s (and grade it on
the grading CPU's digits). Here a sample of each is retrained and compared with what is stored: the first steps,
before any cause is planted, agree to a few digits on every CPU (later steps of a chaotic run need not).
"""
from __future__ import annotations

import math
import random
import statistics
from pathlib import Path

import pytest
import torch

import autograder.notebooks as nbu
from autograder.runbank_check import unseen, shows_cause, unseen_specs
from trainkit.labs.lab06_debugging_protocol import runbank

STORED = runbank.load_visible()
UNSEEN = unseen()


def test_the_stored_bank_covers_every_task_and_cause_twice():
    seen = {}
    for run in STORED:
        key = (run.spec["task"], run.label)
        seen[key] = seen.get(key, 0) + 1
        assert run.label == run.spec["cause"]
    assert seen == {(t, c): 2 for t in runbank.TASKS for c in runbank.LABELS}


def test_every_stored_run_shows_its_planted_cause():
    unclear = [run.spec for run in STORED if not shows_cause(run)]
    assert not unclear, f"stored runs whose curves do not show their cause: {unclear}"


def test_the_unseen_bank_keeps_most_runs_and_every_cause_of_every_task():
    specs = unseen_specs()
    # each stored run is the run of one spec (its spec completed with make_run's defaults), in the specs' order
    made_from = [next(i for i, spec in enumerate(specs) if spec.items() <= run.spec.items()) for run in UNSEEN]
    assert made_from == sorted(set(made_from))
    assert len(UNSEEN) >= 0.8 * len(specs)
    kept = {(run.spec["task"], run.label) for run in UNSEEN}
    assert kept == {(spec["task"], spec["cause"]) for spec in specs}, "a task lost a whole cause"
    assert {s["task"] for s in specs} - set(runbank.TASKS) == set(runbank.OTHER_TASKS), "unseen runs show a task more"
    assert not {tuple(sorted(r.spec.items())) for r in UNSEEN} & {tuple(sorted(r.spec.items())) for r in STORED}


def test_every_unseen_run_shows_its_planted_cause():
    assert all(run.label == run.spec["cause"] for run in UNSEEN)
    unclear = [run.spec for run in UNSEEN if not shows_cause(run)]
    assert not unclear, f"stored unseen runs whose curves do not show their cause: {unclear}"


# visible: digits healthy, regression nan, bytes chance_plateau; unseen: the first digits, markov and regression runs
@pytest.mark.parametrize("bank,index", [("visible", 0), ("visible", 17), ("visible", 33), ("unseen", 0),
                                        ("unseen", -1), ("unseen", 25)])
def test_a_stored_run_is_the_training_run_of_its_spec(bank, index):
    torch.set_num_threads(1)
    stored = (STORED if bank == "visible" else UNSEEN)[index]
    again = runbank.make_run(stored.spec)
    n = 20
    assert again.curves.baseline == pytest.approx(stored.curves.baseline, rel=1e-5)
    assert again.curves.reference == pytest.approx(stored.curves.reference, rel=1e-2)
    assert list(again.curves.train_loss[:n]) == pytest.approx(list(stored.curves.train_loss[:n]), rel=1e-3, nan_ok=True)
    assert list(again.curves.val_steps) == list(stored.curves.val_steps)
    assert shows_cause(again)


def test_a_cause_that_does_not_show_is_not_labelled_as_shown():
    healthy = next(run for run in STORED if run.label == "healthy")
    as_spike = runbank.BankRun({**healthy.spec, "cause": "spike_recovers", "at": 0.5}, "spike_recovers", healthy.curves)
    assert not shows_cause(as_spike)
    as_nan = runbank.BankRun(healthy.spec, "nan", healthy.curves)
    assert not shows_cause(as_nan)
    broken = runbank.BankRun(healthy.spec, "healthy", runbank.Curves(
        healthy.curves.train_loss[:-1] + (math.nan,), healthy.curves.val_loss, healthy.curves.val_steps,
        healthy.curves.baseline, healthy.curves.reference))
    assert not shows_cause(broken)


def test_unknown_task_or_cause_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown task"):
        runbank.make_run({"task": "images", "cause": "healthy", "seed": 0})
    with pytest.raises(ValueError, match="unknown cause"):
        runbank.make_run({"task": "digits", "cause": "exploding", "seed": 0})


# --- hand-written curves: what a practitioner calls a spike, on runs no bank generator made (issue 43) -----------

def _curve(level, noise=0.03, steps=200, seed=0, heavy=False):
    """A hand-written run: the training loss level(step) times minibatch noise (log-normal, or Student-t with 3
    degrees of freedom where `heavy`), validation the noise-free level every 20 steps."""
    rng = random.Random(seed)

    def draw():
        if not heavy:
            return rng.gauss(0.0, 1.0)
        return rng.gauss(0.0, 1.0) / math.sqrt(sum(rng.gauss(0.0, 1.0) ** 2 for _ in range(3)) / 3)

    train = tuple(level(s) * math.exp(noise * draw()) for s in range(steps))
    val_steps = tuple(range(0, steps + 1, 20))
    return train, tuple(level(min(s, steps - 1)) for s in val_steps), val_steps


def _decay(start, floor, rate):
    return lambda s: floor + (start - floor) * math.exp(-rate * s)


def _digits_like(level, reference=0.08, **kw):
    train, val, val_steps = _curve(level, **kw)
    return runbank.Curves(train, val, val_steps, math.log(10), reference)


_SETTLED = _decay(2.3, 0.08, 0.05)                  # a classifier that settles at 0.08 nats (baseline log 10)
HAND_WRITTEN = {
    # one bad step at 5x the recent loss (0.08 -> 0.4), back within three steps: far less than half the range (1.1)
    "a 5x spike that recovers": ("spike_recovers", _digits_like(
        lambda s: _SETTLED(s) + (0.32 * 0.3 ** (s - 120) if s >= 120 else 0.0), seed=1)),
    # a jump to 4x the recent loss that the run never comes back from
    "a 4x spike that stays": ("spike_stays", _digits_like(
        lambda s: _SETTLED(s) + (0.24 + 0.01 * math.sin(s) if s >= 110 else 0.0), seed=2)),
    # one step at 20x: 0.05 -> 1.0, and the next step back where it was
    "a 20x one-step spike": ("spike_recovers", _digits_like(
        lambda s: 1.0 if s == 140 else _decay(2.3, 0.05, 0.06)(s), reference=0.05, seed=3)),
    # a language model whose schedule decays to nothing by step 60: train and val stall together at 3.5 nats,
    # far below the unigram baseline (4.5) and far above what the model reaches (2.0)
    "a schedule stalled above the floor": ("both_plateau", runbank.Curves(
        *_curve(_decay(5.5, 3.5, 0.08), noise=0.01, seed=4), 4.5, 2.0)),
    # learns, creeps back to chance (log 10) and blows up 7 steps before the end: the run never comes back
    "a creep back to chance, then a spike": ("spike_stays", _digits_like(
        lambda s: 9.0 if s >= 193 else (_SETTLED(s) if s < 80 else min(2.3, 0.17 + 0.02 * (s - 80))), seed=5)),
    # heavy-tailed minibatch noise (Student-t, 3 degrees of freedom) around a low loss: a batch 47 times as far from
    # the recent level as the typical one (but 1.2x the level) is noise, not a spike
    "a healthy classifier, heavy-tailed noise": ("healthy", _digits_like(
        _decay(2.3, 0.15, 0.05), reference=0.15, noise=0.05, heavy=True, seed=6)),
    # a noisy regression whose floor (the noise variance, 0.5) is far above 0, heavy-tailed minibatches
    "a healthy regression, heavy-tailed noise": ("healthy", runbank.Curves(
        *_curve(_decay(1.0, 0.5, 0.04), noise=0.02, heavy=True, seed=7), 1.0, 0.5)),
    # a byte model near its reference (2.0 nats), heavy-tailed noise
    "a healthy byte model, heavy-tailed noise": ("healthy", runbank.Curves(
        *_curve(_decay(5.5, 2.0, 0.04), noise=0.02, heavy=True, seed=8), 4.5, 2.0)),
}


def _reference_diagnose():
    """The reference ``diagnose`` of lab 6, from its solution cell."""
    path = Path(__file__).resolve().parents[1] / "solutions" / "06_debugging_protocol" / "06_debugging_protocol.ipynb"
    cell = next(c for c in nbu.read(path).cells if nbu.grade_id(c) == "diagnose")
    namespace = {"math": math, "statistics": statistics}
    exec(nbu.strip_solution_markers(cell.source), namespace)
    return namespace["diagnose"]


@pytest.mark.parametrize("name", list(HAND_WRITTEN))
def test_the_reference_reads_hand_written_runs_as_a_practitioner_would(name):
    """Spikes of 4 to 20 times a low recent loss (far less than half the learnable range), a run that ends in a
    spike, a stalled schedule, and heavy-tailed noise that is no spike (issue 43)."""
    want, curves = HAND_WRITTEN[name]
    assert _reference_diagnose()(curves) == want


@pytest.mark.parametrize("name", [k for k in HAND_WRITTEN if "creep" not in k])
def test_the_graders_bar_takes_the_hand_written_runs_as_showing_their_cause(name):
    """shows_cause uses the same spike definition (a spike in the last 15 % of a run, the creep's, is not graded)."""
    want, curves = HAND_WRITTEN[name]
    at = next((i for i in range(10, len(curves.train_loss))
               if curves.train_loss[i] > 2.5 * statistics.median(curves.train_loss[i - 10:i])), 100)
    assert shows_cause(runbank.BankRun({"at": at / len(curves.train_loss)}, want, curves))
