"""One package per lab, named by its key (labNN_topic, as solutions/NN_topic/): the exercise material students run
and the visible variants of its judgement exercises. The grader's unseen variants are autograder/unseen/, never here.

A judgement exercise grades a decision on variants the student never sees. Every lab writes that mechanism in one
shape, a ``Bank`` below: the lab's module has ``visible()`` (what ships), the grader's module has ``unseen()`` (lent only
to the test cells that load it, autograder/lending.py), both without arguments and returning a list of the same kind of
variant. A bank that is trained once and stored has ``build()`` in its grader's module: ``python -m autograder.banks
build NAME`` (instructors). tests/test_banks.py holds every bank to this shape, and checks that no unseen variant is
a visible one.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Bank:
    """One judgement exercise's variants. ``visible`` and ``unseen`` name functions as ``"module:function"``."""
    name: str
    lab: str                 # the lab's key, as solutions/<lab>/
    visible: str
    unseen: str              # instructor-side: importable only where autograder/unseen/ is
    stored: bool = False     # trained once and stored as JSON: the grader's module has build()

    def load_visible(self) -> list:
        module, function = self.visible.split(":")
        return getattr(importlib.import_module(module), function)()


def _lab(key: str, module: str) -> str:
    return f"trainkit.labs.lab{key}.{module}"


BANKS = (
    Bank("init", "01_signal_propagation", _lab("01_signal_propagation", "init_nets:visible"),
         "autograder.init_check:unseen"),
    Bank("schedule", "02_lr_schedules", _lab("02_lr_schedules", "schedule_task:visible"),
         "autograder.schedule_check:unseen", stored=True),
    Bank("unstable", "03_gradient_clipping", _lab("03_gradient_clipping", "unstable_runs:visible"),
         "autograder.unstable_check:unseen"),
    Bank("tuning", "04_optimizers", _lab("04_optimizers", "tuning:visible"), "autograder.tuning_check:unseen",
         stored=True),
    Bank("fp16", "05_mixed_precision", _lab("05_mixed_precision", "fp16_runs:visible"), "autograder.fp16_check:unseen"),
    Bank("runbank", "06_debugging_protocol", _lab("06_debugging_protocol", "runbank:visible"),
         "autograder.runbank_check:unseen", stored=True),
    Bank("setups", "06_debugging_protocol", _lab("06_debugging_protocol", "broken_setups:visible"),
         "autograder.setups_check:unseen", stored=True),
    Bank("repro", "07_monitoring_reproducibility", _lab("07_monitoring_reproducibility", "repro_runs:visible"),
         "autograder.repro_check:unseen", stored=True),
    Bank("repro_targets", "07_monitoring_reproducibility",
         _lab("07_monitoring_reproducibility", "repro_runs:visible_targets"), "autograder.repro_check:unseen_targets"),
    Bank("preemption", "08_infra_lab", _lab("08_infra_lab", "preemption:visible"), "autograder.preemption_check:unseen"),
)
