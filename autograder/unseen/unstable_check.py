"""Instructor side of lab 3's guard exercise: the grader's unstable runs, which students never see.

They are runs of the same kinds as ``trainkit.labs.lab03_gradient_clipping.unstable_runs.VISIBLE_SPECS`` (the same three tasks, both optimizers,
spikes huge and mild, stretches of bad minibatches, heavy-tailed healthy norms, norms drifting within a run, NaN and
infinite inputs, no fault before step 20) with other seeds, data splits, widths, learning rates, spike sizes, counts
and stretch lengths, drift rates (30x up, 100x down) and noise levels, and natural gradient norms that reach past the
visible ones' range (from about 3e-4 to 5e3): a guard tuned to the visible runs' numbers, or one rule applied without
looking at the runs (skip above 10x a running median, never clip), misses some of them.
Instructor-only (not in the student edition), like ``setups_check``.

Nothing here is stored: a run costs 0.1 to 0.5 s on one core, so the hidden test cell trains each one's clean run
(``reference_run``) next to the student's, on the grader's CPU. tests/test_unstable_runs.py checks that the reference
guard passes each of them with a margin, and that the first reading, the hasty median rule and fixed thresholds fail
some.
"""
from __future__ import annotations

from trainkit.labs.lab03_gradient_clipping.unstable_runs import RunSpec

UNSEEN_SPECS = (
    RunSpec("regression, SGD, loss x3000 growing 30x, wider", task="regression", optimizer="sgd", lr=0.03,
            loss_scale=3000, scale_drift=30, spikes=5, spike_factor=300, nonfinite=2, seed=21, data_seed=3, width=48),
    RunSpec("regression, AdamW, x0.0003, minibatch weights vary a lot", task="regression", optimizer="adamw", lr=3e-3,
            loss_scale=3e-4, weight_spread=1.6, spikes=4, spike_factor=200, nonfinite=2, seed=63, data_seed=6),
    RunSpec("digits, AdamW, x0.003, minibatch weights vary a lot, wider", task="digits", optimizer="adamw", lr=3e-3,
            loss_scale=0.003, weight_spread=1.7, spikes=3, spike_factor=20, nonfinite=2, seed=61, data_seed=1,
            width=48),
    RunSpec("digits, SGD, loss x100, many mildly bad minibatches", task="digits", optimizer="sgd", lr=0.1,
            loss_scale=100, spikes=45, spike_factor=6, nonfinite=1, seed=64, data_seed=2),
    RunSpec("rnn, AdamW, loss x0.01", task="rnn", optimizer="adamw", lr=2e-3, loss_scale=0.01, spikes=4,
            spike_factor=30, nonfinite=1, seed=25, steps=150, data_seed=1),
    RunSpec("rnn, AdamW, minibatch weights vary a lot", task="rnn", optimizer="adamw", lr=3e-3, weight_spread=1.8,
            spikes=2, spike_factor=30, nonfinite=1, seed=62, steps=150, data_seed=2),
    RunSpec("digits, SGD, falling 100x, mildly bad minibatches", task="digits", optimizer="sgd", lr=0.08,
            scale_drift=0.01, spikes=35, spike_factor=12, seed=65, data_seed=5),
    RunSpec("digits, AdamW, loss x10, stretches of bad minibatches", task="digits", optimizer="adamw", lr=3e-3,
            loss_scale=10, spikes=4, stretch=8, spike_factor=40, nonfinite=2, seed=67, data_seed=3),
    RunSpec("digits, SGD, loss x3, stretches of bad minibatches", task="digits", optimizer="sgd", lr=0.05,
            loss_scale=3, spikes=6, stretch=6, spike_factor=15, nonfinite=1, seed=66, data_seed=4),
    RunSpec("regression, AdamW, loss x0.1", task="regression", optimizer="adamw", lr=3e-3, loss_scale=0.1, spikes=6,
            spike_factor=200, nonfinite=2, seed=29, data_seed=6),
)


def unseen() -> list[RunSpec]:
    """The grader's runs."""
    return list(UNSEEN_SPECS)
