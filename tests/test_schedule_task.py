"""Lab 2's schedule decision (trainkit.labs.lab02_lr_schedules.schedule_task, autograder.schedule_check): the stored references are the runs
of their sweeps, the grader's variants are not the visible ones, the reference decision passes every variant with
room to spare while a decision that ignores the run does not, and the task's helpers refuse what they cannot run."""
from __future__ import annotations

import json
import math

import pytest
import torch

from autograder import schedule_check as sc
from course import source_nb
from trainkit.labs.lab02_lr_schedules import schedule_task as st

pytestmark = pytest.mark.usefixtures("one_thread")

VISIBLE = st.load_visible()
UNSEEN = sc.unseen()
STORED_UNSEEN = json.loads(sc.UNSEEN_FILE.read_text())["variants"]
MARGIN = 1.25           # the notebook's: a variant passes when its excess <= MARGIN * the reference's


def _solution(grade_id: str):
    """The reference answer of a solution cell of lab 2, as a function."""
    (cell,) = [c for c in source_nb("02_lr_schedules").cells
               if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id]
    namespace = {"math": math, "Callable": object}
    exec(cell.source, namespace)
    return namespace[grade_id]


def _excess_ratio(choose, variant: st.Variant, seeds) -> float:
    schedule = choose(variant.steps, variant.batch_size, variant.width)
    loss = sum(st.run(schedule, variant, seed) for seed in seeds) / len(seeds)
    return (loss - st.floor(variant)) / (variant.reference_loss - st.floor(variant))


def test_the_stored_variants_are_the_builds():
    assert [st.variant_record(v) for v in VISIBLE] == [st.variant_record(v) for v in st.VISIBLE_VARIANTS]
    assert [st.variant_record(v) for v in UNSEEN] == [st.variant_record(v) for v in sc.UNSEEN_VARIANTS]
    for record in STORED_UNSEEN:
        losses = list(record["sweep"].values())
        assert record["reference_loss"] == min(losses)
        assert min(losses) not in (losses[0], losses[-1]), f"{record['name']}: the best peak is at an end of the sweep"
    for variant in VISIBLE + UNSEEN:
        assert variant.reference_loss > st.floor(variant), variant.name


def test_the_grader_variants_are_not_the_visible_ones_and_reach_beyond_them():
    runs = lambda vs: {(v.steps, v.batch_size, v.width, v.source_seed) for v in vs}  # noqa: E731
    assert not runs(UNSEEN) & runs(VISIBLE)
    assert not {v.source_seed for v in UNSEEN} & {v.source_seed for v in VISIBLE}, "the unseen runs use other chains"
    assert not {v.name for v in UNSEEN} & {v.name for v in VISIBLE}
    for field in ("steps", "batch_size", "width"):
        visible = [getattr(v, field) for v in VISIBLE]
        unseen = [getattr(v, field) for v in UNSEEN]
        assert min(unseen) < min(visible) or max(unseen) > max(visible), f"the unseen {field}s stay inside the visible"


@pytest.mark.parametrize("variant", [VISIBLE[1], UNSEEN[0], UNSEEN[7]], ids=lambda v: v.name)
def test_a_stored_reference_is_the_run_of_its_best_peak(variant):
    """Re-measured on the build's seeds: equal up to the kernel path's rounding (a chaotic run: 5 % of the excess)."""
    peak = {r["name"]: r for r in STORED_UNSEEN}.get(variant.name, {}).get("best_peak")
    peaks = [peak] if peak else list(sc.PEAKS)
    again = min(sc.sweep(variant, peaks))
    excess = variant.reference_loss - st.floor(variant)
    assert abs(again - variant.reference_loss) <= 0.05 * excess, (variant.name, again, variant.reference_loss)


def test_the_reference_decision_passes_every_variant_with_room_to_spare():
    choose = _solution("choose_schedule")
    ratios = {v.name: _excess_ratio(choose, v, (100, 101) if v in VISIBLE else (7, 8)) for v in VISIBLE + UNSEEN}
    ratios.update({f"{v.name} (seeds 30, 31)": _excess_ratio(choose, v, (30, 31)) for v in UNSEEN[::3]})
    worst = max(ratios, key=ratios.get)
    assert ratios[worst] <= MARGIN - 0.1, f"{worst}: excess {ratios[worst]:.2f} x the reference's"


def test_a_decision_that_ignores_the_run_misses():
    """One peak for every run, tuned on the first visible one: right there, clearly worse where the run differs."""
    def one_peak(steps, batch_size, width):
        return sc.warmup_cosine(0.0316, steps)
    assert _excess_ratio(one_peak, VISIBLE[0], (100, 101)) <= MARGIN
    unseen = {v.name: _excess_ratio(one_peak, v, (7, 8)) for v in (UNSEEN[0], UNSEEN[2])}
    assert all(r > MARGIN + 0.05 for r in unseen.values()), unseen
    constant = _excess_ratio(lambda *run: (lambda step: 1e-3), VISIBLE[1], (100, 101))
    assert constant > 3 * MARGIN, constant


def test_run_is_deterministic_and_never_below_the_floor():
    variant = VISIBLE[1]
    schedule = sc.warmup_cosine(0.05, variant.steps)
    first, again = st.run(schedule, variant, 3), st.run(schedule, variant, 3)
    assert first == again and first > st.floor(variant)
    assert st.run(lambda step: 1e30, variant, 0) == math.inf, "a run that diverges reports inf"


@pytest.mark.parametrize("schedule,match", [
    (lambda step: float("nan"), "step 0 .* finite"),
    (lambda step: 1e-3 if step < 5 else -1e-6, "step 5 .* >= 0"),
    (lambda step: 1e-3 if step < 9 else math.inf, "step 9 .* finite"),
    (lambda step: torch.tensor(1e-3), "type Tensor"),
    (lambda step: True, "type bool"),
    (lambda step: 1.0 / (3 - step), "raised at step 3 .* ZeroDivisionError"),
    (0.001, "must be callable"),
])
def test_lr_table_says_which_step_is_wrong(schedule, match):
    with pytest.raises(ValueError, match=match):
        st.lr_table(schedule, 10)


def test_lr_table_accepts_ints_and_zero():
    assert st.lr_table(lambda step: 0 if step == 0 else 1, 3) == [0.0, 1.0, 1.0]


@pytest.mark.parametrize("field,value", [("steps", 0), ("batch_size", -1), ("width", True), ("steps", 10.0)])
def test_a_variant_needs_positive_int_sizes(field, value):
    with pytest.raises(ValueError, match=field):
        st.Variant("bad", **{"steps": 10, "batch_size": 4, "width": 8, field: value})
