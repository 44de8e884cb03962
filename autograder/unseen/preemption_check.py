"""Lab 8's checkpoint-interval decision, scored by the outcome: the exact mean wall clock of the run that a chosen
``save_every`` produces under trainkit.labs.lab08_infra_lab.preemption's model, against the best interval of the same run.

Instructor-only (the student edition leaves autograder/ out): the hidden test cell imports ``UNSEEN_SETTINGS`` and
``worst_excess`` from here. The settings are other runs and machines than the notebook's visible ones: other step
counts, save costs from 0.02 s to 15 min, failure rates from a few a minute to one a week, and runs shorter than the
interval that would be best for an endless run.
"""
from __future__ import annotations

import math

import numpy as np

from trainkit.labs.lab08_infra_lab.preemption import FaultSetting, _stretches, check_save_every


def expected_run_time(setting: FaultSetting, save_every: int) -> float:
    """The mean wall clock of the run (seconds). A stretch of work w completes at the first attempt that meets no
    failure (probability exp(-w / mtbf)); every failed attempt costs the time until its failure plus a restart.
    Summed, the mean time to complete the stretch is (exp(w / mtbf) - 1) * (mtbf + restart_s)."""
    save_every = check_save_every(setting, save_every)
    full, work, tail = _stretches(setting, save_every)

    def per_stretch(w):
        try:
            return math.expm1(w / setting.mtbf_s) * (setting.mtbf_s + setting.restart_s)
        except OverflowError:          # a stretch hundreds of MTBFs long: the run (practically) never ends
            return math.inf
    return full * per_stretch(work) + (per_stretch(tail) if tail else 0.0)


def best_save_every(setting: FaultSetting) -> tuple[int, float]:
    """The interval with the lowest expected wall clock, found by trying every one, and that time."""
    k = np.arange(1, setting.steps + 1, dtype=np.float64)
    full, rest = np.floor(setting.steps / k), setting.steps % k
    scale = setting.mtbf_s + setting.restart_s
    with np.errstate(over="ignore"):       # hopeless intervals: an infinite mean, never the best
        times = full * np.expm1((k * setting.step_s + setting.save_s) / setting.mtbf_s) * scale
        times += np.where(rest > 0, np.expm1((rest * setting.step_s + setting.save_s) / setting.mtbf_s) * scale, 0.0)
    i = int(np.argmin(times))
    return i + 1, float(times[i])


def excess(setting: FaultSetting, save_every: int) -> float:
    """How much longer the run takes on average with ``save_every`` than with the best interval (1.0 = the best)."""
    return expected_run_time(setting, save_every) / best_save_every(setting)[1]


def worst_excess(choose, settings) -> tuple[float, str, int, int]:
    """The worst ``excess`` of ``choose(setting)`` over ``settings``: (ratio, setting name, chosen, best)."""
    worst = (0.0, "", 0, 0)
    for setting in settings:
        chosen = choose(setting)
        ratio = excess(setting, chosen)
        if ratio > worst[0]:
            worst = (ratio, setting.name, int(chosen), best_save_every(setting)[0])
    return worst


# The grader's settings: none of them is a visible one. Save costs from 0.05 s to 10 min, failures from one a minute
# to one in three days, restarts from 2 s to 30 min, runs from 50 to 100,000 steps; in some the best interval is a
# few steps, in others the whole run (the run is shorter than the interval an endless run would want).
UNSEEN_SETTINGS = [
    FaultSetting("small GPU job, frequent preemption", steps=8000, step_s=0.1, save_s=0.5, restart_s=20, mtbf_s=900),
    FaultSetting("mid-size model, slow restarts", steps=1500, step_s=2, save_s=30, restart_s=300, mtbf_s=7200),
    FaultSetting("long run of a small model", steps=60000, step_s=0.05, save_s=3, restart_s=30, mtbf_s=1800),
    FaultSetting("very slow steps", steps=250, step_s=30, save_s=10, restart_s=120, mtbf_s=3000),
    FaultSetting("45-second saves", steps=4000, step_s=0.25, save_s=45, restart_s=60, mtbf_s=1200),
    FaultSetting("ten-minute saves, daily failures", steps=12000, step_s=1.5, save_s=600, restart_s=900, mtbf_s=86400),
    FaultSetting("short run, two-minute save", steps=800, step_s=0.5, save_s=120, restart_s=60, mtbf_s=14400),
    FaultSetting("a failure a minute", steps=30000, step_s=0.02, save_s=0.05, restart_s=2, mtbf_s=60),
    FaultSetting("restarts dearer than saves", steps=2500, step_s=3, save_s=5, restart_s=600, mtbf_s=1800),
    FaultSetting("hundred thousand steps, rare failures", steps=100000, step_s=0.2, save_s=40, restart_s=300,
                 mtbf_s=259200),
    FaultSetting("two-minute MTBF, tiny saves", steps=600, step_s=1, save_s=0.1, restart_s=5, mtbf_s=120),
    FaultSetting("cluster, a failure every 90 minutes", steps=7000, step_s=0.8, save_s=200, restart_s=120,
                 mtbf_s=5400),
    FaultSetting("fifty one-minute steps", steps=50, step_s=60, save_s=20, restart_s=300, mtbf_s=7200),
    FaultSetting("cheap saves, failures every ten hours", steps=20000, step_s=0.5, save_s=2, restart_s=30,
                 mtbf_s=36000),
    FaultSetting("run shorter than its best interval", steps=3000, step_s=0.1, save_s=90, restart_s=60, mtbf_s=900),
    FaultSetting("half-hour restarts", steps=9000, step_s=2, save_s=60, restart_s=1800, mtbf_s=21600),
]


def unseen() -> list[FaultSetting]:
    """The grader's settings, none of them a visible one."""
    return list(UNSEEN_SETTINGS)
