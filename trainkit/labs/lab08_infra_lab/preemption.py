"""How often to save a checkpoint when the machine can be taken away: a model of a run under preemption.

Lab 8's decision exercise. A run of ``steps`` optimiser steps, each ``step_s`` seconds, saves a checkpoint after
every ``save_every`` steps and after its last step; a save takes ``save_s`` seconds and is atomic (lesson 8): a save
cut short by a failure never happened. The machine fails (a preemption, a crashed node) at random moments of work,
steps and saves alike, at a constant rate: a Poisson process with a mean time between failures of ``mtbf_s`` seconds
of work. After a failure the run restarts from its last completed save, which costs ``restart_s`` seconds (a new
machine, the process, loading the checkpoint); no failure happens during a restart. The run's wall clock is the time
until its final save has completed.

Saving often wastes time in saves; saving rarely wastes the work redone after each failure. ``simulate_runs`` draws
such runs, failure by failure, as machines would produce them: their mean measures an interval.
(The grader scores an interval by the exact mean of this model instead: ``autograder/unseen/preemption_check.py``.)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FaultSetting:
    """One run and the machine it runs on (all times in seconds)."""
    name: str
    steps: int          # optimiser steps of the run
    step_s: float       # time of one optimiser step
    save_s: float       # time of one checkpoint save
    restart_s: float    # time from a failure until the run is training again from its last save
    mtbf_s: float       # mean time between failures, counted over the time spent working (steps and saves)

    def __post_init__(self):
        if not (isinstance(self.steps, int) and self.steps >= 1):
            raise ValueError(f"{self.name}: steps must be a positive int, got {self.steps!r}")
        for field in ("step_s", "mtbf_s"):
            if not getattr(self, field) > 0:
                raise ValueError(f"{self.name}: {field} must be > 0, got {getattr(self, field)!r}")
        for field in ("save_s", "restart_s"):
            if not getattr(self, field) >= 0:
                raise ValueError(f"{self.name}: {field} must be >= 0, got {getattr(self, field)!r}")


def check_save_every(setting: FaultSetting, save_every) -> int:
    """``save_every`` as an int, after checking it is a whole number of steps from 1 to ``setting.steps``."""
    if isinstance(save_every, bool) or not isinstance(save_every, (int, np.integer)):
        raise TypeError(f"save_every for {setting.name!r} must be an int (a number of steps), "
                        f"got {type(save_every).__name__} {save_every!r}")
    if not 1 <= save_every <= setting.steps:
        raise ValueError(f"save_every for {setting.name!r} must be between 1 and its {setting.steps} steps "
                         f"(a run always saves after its last step), got {save_every}")
    return int(save_every)


def _stretches(setting: FaultSetting, save_every: int) -> tuple[int, float, float]:
    """(number of full stretches, work of a full stretch, work of the last, shorter one or 0): a stretch is the work
    between two saves, the save that ends it included."""
    full, rest = divmod(setting.steps, save_every)
    work = save_every * setting.step_s + setting.save_s
    tail = rest * setting.step_s + setting.save_s if rest else 0.0
    return full, work, tail


def simulate_runs(setting: FaultSetting, save_every: int, runs: int = 1000, seed: int = 0) -> np.ndarray:
    """The wall clock (seconds) of ``runs`` independent runs drawn at random, as machines would produce them.

    Each stretch of work ``w`` (the steps between two saves and the save that ends them) is attempted until one
    attempt meets no failure: the failed attempts of a run are a negative binomial count, each cut short after a
    time drawn from the exponential distribution truncated to ``[0, w)``, and followed by a restart. Where a run
    would fail more than ``_EXACT_LIMIT`` times in all, the sum of its cut-short attempts is drawn from the normal
    distribution with the same mean and variance (the central limit theorem; a run that long is hopeless anyway)."""
    save_every = check_save_every(setting, save_every)
    rng = np.random.default_rng(seed)
    full, work, tail = _stretches(setting, save_every)
    wall = np.full(runs, full * work + tail, dtype=np.float64)
    for count, w in ((full, work), (1 if tail else 0, tail)):
        if count == 0:
            continue
        p_fail = -np.expm1(-w / setting.mtbf_s)                     # an attempt at this stretch meets a failure
        if p_fail >= 1.0 - 1e-12:
            wall[:] = np.inf                                         # a stretch far longer than the machine lasts
            continue
        failures = rng.negative_binomial(count, 1.0 - p_fail, size=runs).astype(np.float64)
        wall += failures * setting.restart_s + _cut_short(rng, failures, w, setting.mtbf_s, p_fail)
    return wall


_EXACT_LIMIT = 20_000


def _cut_short(rng, failures: np.ndarray, w: float, mtbf: float, p_fail: float) -> np.ndarray:
    """Per run, the summed length of ``failures`` attempts cut short by a failure (each < w)."""
    def truncated(u):              # inverse CDF of the exponential (mean mtbf) truncated to [0, w)
        return -mtbf * np.log1p(-u * p_fail)
    out = np.zeros(len(failures))
    small = failures <= _EXACT_LIMIT
    n = failures[small].astype(np.int64)
    if n.sum() > 0:
        running = np.concatenate([[0.0], np.cumsum(truncated(rng.random(int(n.sum()))))])
        ends = np.cumsum(n)
        out[small] = running[ends] - running[ends - n]
    if (~small).any():
        # mean and variance of one cut-short attempt, from the truncated distribution's first two moments
        q = 1.0 - p_fail
        mean = mtbf - w * q / p_fail
        second = 2 * mtbf * mean - w * w * q / p_fail
        var = max(second - mean * mean, 0.0)
        big = failures[~small]
        out[~small] = big * mean + np.sqrt(big * var) * rng.standard_normal(len(big))
    return out


# Exercise 6's visible settings (the grader's are others: autograder/unseen/preemption_check.py).
VISIBLE_SETTINGS = [
    FaultSetting("laptop demo run", steps=2000, step_s=0.05, save_s=0.02, restart_s=5, mtbf_s=3600),
    FaultSetting("spot GPU", steps=20000, step_s=0.3, save_s=20, restart_s=120, mtbf_s=2400),
    FaultSetting("big model on a cluster", steps=5000, step_s=4, save_s=300, restart_s=600, mtbf_s=10800),
    FaultSetting("preemptible CPU", steps=3000, step_s=0.5, save_s=1, restart_s=10, mtbf_s=300),
    FaultSetting("short run, slow save", steps=1000, step_s=0.2, save_s=60, restart_s=30, mtbf_s=3600),
    FaultSetting("slow steps, cheap save", steps=400, step_s=10, save_s=2, restart_s=60, mtbf_s=600),
    FaultSetting("huge save", steps=10000, step_s=1, save_s=900, restart_s=900, mtbf_s=36000),
    FaultSetting("rarely fails", steps=50000, step_s=0.1, save_s=5, restart_s=60, mtbf_s=604800),
]


def visible() -> list[FaultSetting]:
    """Exercise 6's visible settings."""
    return list(VISIBLE_SETTINGS)
