"""Lab 4's tuning tasks are real and fair: the budget is kept by the task, the stored bars are the sweeps', the hidden
tasks are not the visible ones, the reference tune passes every pair and the hasty answers do not."""
from __future__ import annotations

import math

import pytest
import torch

from autograder import notebooks as nbu
from autograder.tuning_check import GRID, UNSEEN_SEEDS, MARGIN, unseen, sweep
from course import load_catalogue, source_nb
from trainkit.data import excess_bar
from trainkit.labs.lab04_optimizers.tuning import (OPTIMIZERS, VISIBLE_SEEDS, BudgetExceeded, TuningTask, check_config, floor, grade_tune,
                             graded_loss, load_visible_tasks, run_config)

VISIBLE, HIDDEN = load_visible_tasks(), unseen()
CATALOGUE = load_catalogue("04_optimizers")


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _tune_from(source: str):
    namespace = {"TuningTask": TuningTask}
    exec(source, namespace)
    return namespace["tune"]


def _reference_tune():
    return _tune_from(nbu.reference_answers(source_nb("04_optimizers"))["tune"])


def _passed(tune, tasks, seeds):
    return [(spec["name"], optimizer, grade_tune(tune, spec, optimizer, seeds))
            for spec in tasks for optimizer in OPTIMIZERS]


def test_the_task_keeps_the_budget_and_refuses_bad_trials():
    task = TuningTask(VISIBLE[-1], "lion")
    assert task.budget == 8 * task.steps and task.steps == 150
    with pytest.raises(ValueError, match="steps must be"):
        task.trial({"lr": 1e-2}, steps=0)
    with pytest.raises(ValueError, match="steps must be"):
        task.trial({"lr": 1e-2}, steps=task.steps + 1)
    assert task.spent == 0
    first = task.trial({"lr": 1e-2}, steps=1)                 # both ends of the range are accepted
    assert math.isfinite(first) and task.spent == 1
    for _ in range(7):
        task.trial({"lr": 1e-2})
    assert task.spent == task.budget - task.steps + 1
    with pytest.raises(BudgetExceeded, match="budget"):
        task.trial({"lr": 1e-2})                              # one step too many: nothing runs
    assert task.spent == task.budget - task.steps + 1 and len(task.history) == 8
    task.trial({"lr": 1e-2}, steps=task.steps - 1)            # exactly the rest is fine
    assert task.spent == task.budget


def test_trials_repeat_and_the_grading_seeds_are_others():
    spec = VISIBLE[0]
    task = TuningTask(spec, "adamw")
    assert task.trial({"lr": 3e-3}, steps=30) == task.trial({"lr": 3e-3}, steps=30)
    assert run_config(spec, "adamw", {"lr": 3e-3}, 30, 0) == task.history[0][2]
    others = {run_config(spec, "adamw", {"lr": 3e-3}, 30, seed) for seed in (*VISIBLE_SEEDS, *UNSEEN_SEEDS)}
    assert task.history[0][2] not in others and len(others) == 4


@pytest.mark.parametrize("optimizer,config,error,match", [
    ("adamw", {}, ValueError, "needs 'lr'"),
    ("adamw", {"lr": 0.0}, ValueError, "lr must be"),
    ("adamw", {"lr": math.inf}, ValueError, "lr must be"),
    ("adamw", {"lr": "1e-3"}, ValueError, "lr must be"),
    ("adamw", {"lr": 1e-3, "weight_decay": -1e-9}, ValueError, "weight_decay must be"),
    ("adamw", {"lr": 1e-3, "betas": (0.9, 1.0)}, ValueError, "betas must be"),
    ("lion", {"lr": 1e-3, "betas": (0.9, 1.000001)}, ValueError, "betas must be"),
    ("lion", {"lr": 1e-3, "eps": 1e-8}, ValueError, "unknown keys"),
    ("adamw", {"lr": 1e-3, "momentum": 0.9}, ValueError, "unknown keys"),
    ("adamw", 1e-3, TypeError, "a configuration is a dict"),
    ("sgd", {"lr": 1e-3}, ValueError, "optimizer must be"),
])
def test_bad_configurations_are_refused_with_a_reason(optimizer, config, error, match):
    with pytest.raises(error, match=match):
        check_config(optimizer, config)


def test_the_edges_of_valid_configurations_are_accepted():
    assert check_config("lion", {"lr": 1e-3, "betas": (1.0, 1.0), "weight_decay": 0.0})["betas"] == (1.0, 1.0)
    assert check_config("adamw", {"lr": 5e-324, "betas": [0.0, 0.999999]})["betas"] == (0.0, 0.999999)
    assert check_config("adamw", {"lr": 1})["eps"] == 1e-8


def test_grading_says_why_a_pair_missed():
    spec = VISIBLE[-1]

    def over_budget(task, optimizer):
        while True:
            task.trial({"lr": 1e-2})

    def crashes(task, optimizer):
        raise RuntimeError("boom")

    assert "went over the budget" in grade_tune(over_budget, spec, "adamw", VISIBLE_SEEDS)[2]
    assert "tune raised RuntimeError: boom" in grade_tune(crashes, spec, "adamw", VISIBLE_SEEDS)[2]
    assert "not a valid configuration" in grade_tune(lambda t, o: 0.05, spec, "adamw", VISIBLE_SEEDS)[2]
    config, loss, why = grade_tune(lambda t, o: {"lr": 1e-5}, spec, "adamw", VISIBLE_SEEDS)
    assert why.startswith("lr 1e-05: mean loss") and loss > spec["bar"]["adamw"]


def test_the_hidden_tasks_are_other_tasks_whose_best_learning_rates_spread_over_decades():
    def strip(spec):
        return {k: v for k, v in spec.items() if k not in ("name", "bar", "best", "floor", "best_lr")}

    visible = [strip(s) for s in VISIBLE]
    assert all(strip(s) not in visible for s in HIDDEN)
    assert {s["name"] for s in HIDDEN}.isdisjoint(s["name"] for s in VISIBLE)
    assert set(UNSEEN_SEEDS).isdisjoint({0, *VISIBLE_SEEDS})
    for optimizer in OPTIMIZERS:
        best = [s["best_lr"][optimizer] for s in HIDDEN]
        assert max(best) / min(best) >= 100, (optimizer, best)
    assert any(s["best_lr"]["lion"] < s["best_lr"]["adamw"] / 3 for s in HIDDEN)


@pytest.mark.parametrize("spec,seeds", [(VISIBLE[-1], VISIBLE_SEEDS), (HIDDEN[-1], UNSEEN_SEEDS)],
                         ids=["visible-bigram", "hidden-bigram"])
def test_a_stored_bar_is_its_sweep(spec, seeds):
    """The stored best is the reference sweep's best mean loss (2 % allowed for another CPU's kernels) and the bar lets
    the excess over the task's floor be at most 1 + MARGIN times the best one's (labs 2 and 4: one rule)."""
    assert spec["floor"] == pytest.approx(floor(spec))
    for optimizer in OPTIMIZERS:
        best = min(sweep(spec, optimizer, seeds))
        assert math.isclose(spec["best"][optimizer], best, rel_tol=0.02), (optimizer, best)
        assert spec["bar"][optimizer] == pytest.approx(excess_bar(spec["best"][optimizer], spec["floor"], 1 + MARGIN))
    assert GRID[0] == pytest.approx(1e-6) and GRID[-1] == pytest.approx(10.0)


def test_a_sloppy_lr_on_a_task_with_a_high_floor_misses_the_bar():
    """The bigram LM's floor (its entropy rate, 2.22 nats) is most of its loss: lr 1.0, far from the sweep's best,
    keeps the whole loss within 30 % of the best (the old bar) but not the excess over the floor, so it fails."""
    spec = next(s for s in VISIBLE if s["kind"] == "bigram")
    assert spec["floor"] > 0.9 * spec["best"]["adamw"], "the floor should be most of the loss here"
    sloppy = graded_loss(spec, "adamw", {"lr": 1.0}, VISIBLE_SEEDS)
    assert sloppy <= 1.3 * spec["best"]["adamw"], "the old rule (whole loss within 30 %) would pass it"
    assert sloppy > spec["bar"]["adamw"], (sloppy, spec["bar"])


def test_the_reference_passes_every_pair_and_the_hasty_answers_do_not():
    """The reference passes all 22 pairs, most with room to spare; answering without a search, or with a three-point
    grid, misses most of the grader's tasks."""
    reference = _reference_tune()
    results = _passed(reference, VISIBLE, VISIBLE_SEEDS) + _passed(reference, HIDDEN, UNSEEN_SEEDS)
    missed = [(name, optimizer, why) for name, optimizer, (_, _, why) in results if why]
    assert not missed, missed
    specs = {s["name"]: s for s in VISIBLE + HIDDEN}
    ratios = [(loss - specs[name]["floor"]) / (specs[name]["bar"][optimizer] - specs[name]["floor"])
              for name, optimizer, (_, loss, _) in results]
    print("excess / the bar's excess, per pair:", sorted(round(r, 3) for r in ratios))
    assert sum(r <= 0.9 for r in ratios) >= 0.75 * len(ratios), sorted(ratios)
    for bug in ("tune_hasty_defaults", "tune_three_point_grid"):
        hasty = _tune_from(CATALOGUE.BUGS[bug]["tune"])
        passed = [not why for _, _, (_, _, why) in _passed(hasty, HIDDEN, UNSEEN_SEEDS)]
        assert sum(passed) < 0.5 * len(passed), (bug, passed)


def test_the_budget_cannot_be_raised_by_assignment():
    task = TuningTask(VISIBLE[-1], "adamw")
    for name in ("budget", "spent", "steps", "history"):
        with pytest.raises(AttributeError):
            setattr(task, name, 10**9)
    task.history.clear()                                     # a copy: the task's own record is untouched
    task.trial({"lr": 1e-2}, steps=5)
    task.history.clear()
    assert task.spent == 5 and len(task.history) == 1
