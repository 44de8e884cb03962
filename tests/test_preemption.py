"""Lab 8's checkpoint-interval decision: the simulator students try intervals on, the exact mean the grader scores
with, and that the grade rewards the decision (several honest routes reach full marks; rules that ignore the machine
do not)."""
from __future__ import annotations

import ast
import math

import numpy as np
import pytest

from autograder import notebooks as nbu
from autograder.preemption_check import UNSEEN_SETTINGS, best_save_every, excess, expected_run_time, worst_excess
from course import load_catalogue, source_nb
from trainkit.labs.lab08_infra_lab.preemption import FaultSetting, check_save_every, simulate_runs, visible

BANDS = {"sound": 1.20, "near the best": 1.05, "the best": 1.01}     # the notebook's SAVE_BANDS (checked below)


def _helper_cell() -> str:
    return next(c.source for c in source_nb("08_infra_lab").cells if nbu.grade_id(c) == "save_interval_checks")


def _visible():
    """VISIBLE_SETTINGS, VISIBLE_BEST and SAVE_BANDS as the notebook's read-only helper cell defines them."""
    names = {"FaultSetting": FaultSetting, "simulate_runs": simulate_runs, "visible_settings": visible}
    source = _helper_cell()
    tree = ast.parse(source)
    wanted = [node for node in tree.body if isinstance(node, ast.Assign)
              and node.targets[0].id in ("VISIBLE_SETTINGS", "VISIBLE_BEST", "SAVE_BANDS")]
    exec(compile(ast.Module(body=wanted, type_ignores=[]), "helpers", "exec"), names)
    return names["VISIBLE_SETTINGS"], names["VISIBLE_BEST"], names["SAVE_BANDS"]


def _answer(source: str):
    """The choose_save_every that a cell's source defines."""
    names = {"math": math, "np": np, "FaultSetting": FaultSetting, "simulate_runs": simulate_runs}
    exec(nbu.strip_solution_markers(source), names)
    return names["choose_save_every"]


_CATALOGUE = load_catalogue("08_infra_lab")
# Honest ways to decide, each defined once, where the grading proofs use them too: the reference (the exact mean of
# the model, every interval tried) and the catalogue's correct alternative (a search on the simulator) must reach
# full marks; Young's and Daly's rules of thumb (catalogued: they lose the last band) must be near the best.
reference = _answer(next(c.source for c in source_nb("08_infra_lab").cells if nbu.grade_id(c) == "save_interval"))
searched_by_simulation = _answer(_CATALOGUE.ALTERNATIVE["save_interval"])
young = _answer(_CATALOGUE.BUGS["save_young"]["save_interval"])
daly = _answer(_CATALOGUE.BUGS["save_daly"]["save_interval"])


def test_the_notebook_states_the_bands_and_the_best_visible_intervals():
    settings, best, bands = _visible()
    assert bands == BANDS
    assert {s.name: best_save_every(s)[0] for s in settings} == best
    hidden = {(s.steps, s.step_s, s.save_s, s.restart_s, s.mtbf_s) for s in UNSEEN_SETTINGS}
    assert not hidden & {(s.steps, s.step_s, s.save_s, s.restart_s, s.mtbf_s) for s in settings}
    assert not {s.name for s in UNSEEN_SETTINGS} & {s.name for s in settings}


@pytest.mark.parametrize("setting, save_every", [
    (FaultSetting("frequent failures", 3000, 0.5, 1, 10, 300), 47),
    (FaultSetting("long stretches", 5000, 4, 300, 600, 10800), 1668),
    (FaultSetting("hopeless: one stretch of many MTBFs", 3000, 0.5, 1, 10, 300), 3000),   # the normal-limit branch
    (FaultSetting("no restart cost", 400, 10, 2, 0, 600), 5),
])
def test_the_simulator_agrees_with_the_exact_mean(setting, save_every):
    walls = simulate_runs(setting, save_every, runs=40_000, seed=3)
    exact = expected_run_time(setting, save_every)
    assert abs(walls.mean() - exact) <= 4 * walls.std() / math.sqrt(len(walls)) + 1e-9 * exact, (walls.mean(), exact)
    assert walls.min() >= setting.steps * setting.step_s           # never faster than the work itself


def test_a_run_without_failures_takes_its_work_and_saves():
    s = FaultSetting("no failures to speak of", 1000, 0.1, 2.0, 30, 1e15)
    assert simulate_runs(s, 300, runs=10, seed=0) == pytest.approx(np.full(10, 100 + 4 * 2.0))
    assert expected_run_time(s, 300) == pytest.approx(108.0)
    assert best_save_every(s)[0] == 1000                           # one save, at the end


def test_an_interval_hundreds_of_mtbfs_long_scores_infinite_not_an_error():
    s = FaultSetting("hopeless at the end", 100_000, 1.0, 1.0, 1.0, 10.0)
    assert excess(s, s.steps) == math.inf
    assert best_save_every(s)[0] < 100


def test_best_save_every_is_the_minimum():
    s = FaultSetting("small", 120, 1.0, 3.0, 20, 200)
    times = [expected_run_time(s, k) for k in range(1, s.steps + 1)]
    k, t = best_save_every(s)
    assert times[k - 1] == pytest.approx(t) and t == pytest.approx(min(times))


@pytest.mark.parametrize("how", ["the exact mean", "a search on the simulator"])
def test_honest_ways_to_decide_reach_full_marks(how):
    choose = reference if how == "the exact mean" else searched_by_simulation
    settings, _, _ = _visible()
    for group in (settings, UNSEEN_SETTINGS):
        ratio, name, *_ = worst_excess(choose, group)
        assert ratio <= BANDS["the best"], (how, name, ratio)


@pytest.mark.parametrize("name, rule", [("young", young), ("daly", daly)])
def test_rules_of_thumb_are_near_the_best_but_not_the_best(name, rule):
    """Young's and Daly's intervals assume saves cheap next to the MTBF and an endless run: the visible tests show
    where that costs them the last band (the "huge save" run), so the hidden settings' verdict is no surprise."""
    settings, _, _ = _visible()
    for group in (settings, UNSEEN_SETTINGS):
        ratio = worst_excess(rule, group)[0]
        assert BANDS["the best"] < ratio <= BANDS["near the best"], (name, ratio)


@pytest.mark.parametrize("rule", [lambda s: min(100, s.steps), lambda s: max(1, s.steps // 10),
                                  lambda s: s.steps, lambda s: 1, lambda s: max(1, round(math.sqrt(s.steps)))],
                         ids=["hundred", "tenth", "only-at-the-end", "every-step", "sqrt-steps"])
def test_rules_that_ignore_the_machine_are_not_sound(rule):
    settings, _, _ = _visible()
    for group in (settings, UNSEEN_SETTINGS):
        assert worst_excess(rule, group)[0] > BANDS["sound"]


def test_the_visible_measurement_tracks_the_exact_ratio():
    """The visible tests measure the ratio over 20,000 simulated runs; it must sit close to the grader's exact one."""
    settings, best, _ = _visible()
    for s in settings:
        for k in (young(s), max(1, best[s.name] // 3)):
            mine = simulate_runs(s, k, runs=20_000, seed=1).mean() / simulate_runs(s, best[s.name], runs=20_000,
                                                                                   seed=1).mean()
            assert mine == pytest.approx(excess(s, k), rel=0.015), (s.name, k)


@pytest.mark.parametrize("value, error", [(0, ValueError), (1001, ValueError), (2.5, TypeError), (True, TypeError),
                                          ("10", TypeError)])
def test_an_interval_the_run_cannot_have_is_refused_with_its_reason(value, error):
    s = FaultSetting("a run", 1000, 0.1, 1, 1, 100)
    with pytest.raises(error, match="save_every for 'a run'"):
        check_save_every(s, value)
    assert check_save_every(s, np.int64(10)) == 10


def test_a_setting_that_makes_no_sense_is_refused():
    with pytest.raises(ValueError, match="mtbf_s must be > 0"):
        FaultSetting("x", 10, 0.1, 1, 1, 0)
    with pytest.raises(ValueError, match="steps must be a positive int"):
        FaultSetting("x", 10.0, 0.1, 1, 1, 10)
