"""Lab 6's banks of runs: the stored visible and unseen runs are real training runs, each showing its planted cause.

Both banks are trained once (``python -m autograder.runbank_check build``) and stored: training 42 visible runs takes
longer than a notebook cell may, and the 64 unseen ones would cost every graded lab-6 notebook 25 s (and grade it on
the grading CPU's digits). Here a sample of each is retrained and compared with what is stored: the first steps,
before any cause is planted, agree to a few digits on every CPU (later steps of a chaotic run need not).
"""
from __future__ import annotations

import math

import pytest
import torch

from autograder.runbank_check import load_unseen, shows_cause, unseen_specs
from trainkit import runbank

STORED = runbank.load_visible()
UNSEEN = load_unseen()


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
