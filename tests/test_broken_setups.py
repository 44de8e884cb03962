"""Lab 6's blind setups (trainkit.labs.lab06_debugging_protocol.broken_setups, autograder.setups_check): every graded setup is broken in exactly
the part it names, the bug costs its run, the grader's setups differ from the visible ones, and every kind of
breakage the grader uses is shown by a visible setup."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from autograder import setups_check
from trainkit.labs.lab06_debugging_protocol import broken_setups as bs

VISIBLE = bs.visible_specs()
STORED = json.loads(setups_check.UNSEEN_FILE.read_text())["specs"]


pytestmark = pytest.mark.usefixtures("one_thread")


def _sound_of(spec):
    return {k: v for k, v in spec.items() if k not in ("part", "kind")}


def test_visible_setups_cover_every_part_on_both_tasks():
    parts = {(s["task"], s["part"]) for s in VISIBLE}
    assert parts == {(t, p) for t in bs.TASKS for p in bs.PARTS}
    assert len(VISIBLE) == 63


def test_a_broken_setup_differs_from_the_sound_one_in_its_part_only():
    for spec in VISIBLE[::5]:
        broken, sound = bs.make_setup(spec), bs.make_setup(_sound_of(spec))
        assert broken.part == spec["part"] and sound.part is None
        same_data = all(torch.equal(getattr(broken.data, f), getattr(sound.data, f))
                        for f in ("x_train", "y_train", "x_val", "y_val"))
        assert same_data == (spec["part"] != "data"), spec
        assert broken.intent == sound.intent, "the intent says what the run should be, never what is broken"


def test_parts_carry_no_name_that_gives_the_bug_away():
    sound = bs.make_setup(_sound_of(VISIBLE[0]))
    for spec in VISIBLE + [setups_check.unseen_specs()[0]]:
        setup = setups_check.make(spec)
        for part in bs.PARTS[1:]:
            fn = getattr(setup, part)
            assert fn.__name__ == fn.__qualname__ == fn.__code__.co_name == getattr(sound, part).__name__ == part
        assert type(setup.model()).__name__ == "Net"


@pytest.mark.parametrize("spec", VISIBLE[::3] + VISIBLE[1::6], ids=lambda s: f"{s['task']}-{s['part']}-{s['kind']}-{s['dropout']}")
def test_a_visible_bug_costs_its_run(spec):
    assert setups_check.shows_bug(spec, seeds=(0,)), f"{spec}: its run reports no clearly worse validation loss"


@pytest.mark.parametrize("spec", STORED[::7], ids=lambda s: f"{s['task']}-{s['part']}-{s['kind']}")
def test_a_stored_unseen_bug_still_costs_its_run(spec):
    assert setups_check.shows_bug(spec, seeds=(2,)), f"{spec}: stored as graded, but its run is not clearly worse"


def test_unseen_setups_break_every_part_in_ways_the_visible_ones_never_show():
    visible_kinds = {(s["part"], s["kind"]) for s in VISIBLE}
    unseen_kinds = {(s["part"], s["kind"]) for s in STORED}
    assert not set(setups_check.UNSEEN_BUGS) & set(bs.BUGS), "a hidden bug is in the students' module"
    for part in bs.PARTS:
        assert {k for k in unseen_kinds - visible_kinds if k[0] == part}, f"no unseen way of breaking {part!r}"
    settings = lambda s: (s["width"], s["depth"], s["dropout"], s["data_seed"])  # noqa: E731
    assert not {settings(s) for s in STORED} & {settings({"width": 64, "depth": 1, "data_seed": 0, **s})
                                                for s in VISIBLE}
    assert STORED == [s for s in setups_check.unseen_specs() if s in STORED], "stored specs are the build's, in order"
    assert len(STORED) >= 0.8 * len(setups_check.unseen_specs())


def test_every_kind_of_breakage_the_grader_uses_is_shown_by_a_visible_setup():
    """A careful student's visible setups must not promise more than the unseen ones give: each hidden bug names the
    visible bug of its kind (another mechanism, size or place), in the same part, and that bug is in the visible set
    on a task where the hidden one is graded, or on the digits (measured: some kinds show on one task only)."""
    assert set(setups_check.SHOWN_BY) == set(setups_check.UNSEEN_BUGS)
    visible = {(s["task"], s["part"], s["kind"]) for s in VISIBLE}
    for hidden, shown in setups_check.SHOWN_BY.items():
        assert hidden[0] == shown[0] and shown in bs.BUGS, (hidden, shown)
        graded_on = {s["task"] for s in STORED if (s["part"], s["kind"]) == hidden}
        shown_on = {task for task, *kind in visible if tuple(kind) == shown}
        assert shown_on & graded_on or "digits" in shown_on, f"{hidden} is graded on {graded_on}, {shown} shown on {shown_on}"
    assert {(s["part"], s["kind"]) for s in VISIBLE} == set(bs.BUGS), "every visible bug has a visible setup"


def test_the_intent_describes_the_sound_model_layer_by_layer():
    for spec in ({"task": "digits", "width": 48, "depth": 2, "dropout": 0.5}, {"task": "regression", "width": 32}):
        setup = bs.make_setup(spec)
        intent, model = setup.intent, setup.model()
        dims = [intent["inputs"]] + [intent["width"]] * intent["depth"] + [intent["outputs"]]
        assert sum(p.numel() for p in model.parameters()) == sum(a * b + b for a, b in zip(dims, dims[1:]))
        assert (intent["activation"], intent["dropout"]) == (("relu", 0.5) if spec["task"] == "digits" else ("tanh", 0.0))
        out = model(setup.data.x_val[:5])
        assert tuple(out.shape) == ((5, 10) if spec["task"] == "digits" else (5,))


def test_train_setup_says_when_an_order_is_shorter_than_a_minibatch():
    setup = bs.make_setup({"task": "digits"})
    short = dataclasses.replace(setup, order=lambda targets, epoch, generator: torch.arange(10))
    with pytest.raises(ValueError, match="fewer than one minibatch"):
        bs.train_setup(short, steps=3)


def test_unknown_bugs_and_tasks_are_refused_with_their_names():
    with pytest.raises(ValueError, match="no bug"):
        bs.make_setup({"task": "digits", "part": "model", "kind": "sum"})
    with pytest.raises(ValueError, match="task must be one of"):
        bs.make_setup({"task": "images"})
