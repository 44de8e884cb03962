"""Instructor side of lab 2's schedule decision: the grader's unseen runs and the reference losses of every run.

A schedule is judged by the validation loss its run reaches (``trainkit.labs.lab02_lr_schedules.schedule_task.run``) against the reference:
the best of a sweep of warmup + cosine schedules over the peak learning rate, measured once per variant on
``BUILD_SEEDS`` and stored. ``python -m autograder.banks build schedule`` sweeps the visible variants (stored for
students in trainkit/labs/lab02_lr_schedules/schedule_visible.json: their reference losses only) and the unseen ones below (stored here, in
schedule_unseen.json, with their sweeps). Grading trains only the student's schedule; tests/test_schedule_task.py
re-measures a sample of the stored references.

Instructor-only (the student edition leaves autograder/ out): the unseen variants are other budgets, batch sizes,
widths and Markov chains than the visible ones, some beyond the visible range, so that a rule fitted to the visible
runs must carry over and a table of the visible answers does not.
"""
from __future__ import annotations

import json
import math
from multiprocessing import get_context
from pathlib import Path

import torch

from trainkit.labs.lab02_lr_schedules import schedule_task as st

UNSEEN_FILE = Path(__file__).with_name("schedule_unseen.json")
BUILD_SEEDS = (0, 1, 2)
PEAKS = tuple(10 ** (k / 4) for k in range(-12, -1))      # 1e-3 .. 0.56, a quarter decade apart
WARMUP_FRACTION = 0.05

UNSEEN_VARIANTS = [
    st.Variant("unseen: 50 steps, batch 128, width 32", steps=50, batch_size=128, width=32, source_seed=2),
    st.Variant("unseen: 1500 steps, batch 8, width 128", steps=1500, batch_size=8, width=128, source_seed=3),
    st.Variant("unseen: 200 steps, batch 1024, width 64", steps=200, batch_size=1024, width=64, source_seed=4),
    st.Variant("unseen: 500 steps, batch 16, width 512", steps=500, batch_size=16, width=512, source_seed=5),
    st.Variant("unseen: 120 steps, batch 8, width 8", steps=120, batch_size=8, width=8, source_seed=6),
    st.Variant("unseen: 800 steps, batch 256, width 32", steps=800, batch_size=256, width=32, source_seed=7),
    st.Variant("unseen: 250 steps, batch 48, width 96", steps=250, batch_size=48, width=96, source_seed=8),
    st.Variant("unseen: 60 steps, batch 16, width 256", steps=60, batch_size=16, width=256, source_seed=9),
]


def warmup_cosine(peak: float, steps: int):
    """The reference family: linear warmup over the first 5 % of the steps, then a cosine from ``peak`` to 0."""
    warmup = max(1, round(WARMUP_FRACTION * steps))

    def lr(step: int) -> float:
        if step < warmup:
            return peak * (step + 1) / (warmup + 1)
        return peak * 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / (steps - warmup)))
    return lr


def _sweep_point(args) -> float:
    variant, peak = args
    torch.set_num_threads(1)
    return sum(st.run(warmup_cosine(peak, variant.steps), variant, seed) for seed in BUILD_SEEDS) / len(BUILD_SEEDS)


def sweep(variant: st.Variant, peaks=PEAKS, processes: int = 1) -> list[float]:
    """The mean final validation loss over BUILD_SEEDS of the reference schedule at each peak."""
    points = [(variant, peak) for peak in peaks]
    if processes == 1:
        return [_sweep_point(p) for p in points]
    with get_context("fork").Pool(processes) as pool:
        return pool.map(_sweep_point, points)


def _record(variant: st.Variant, losses: list[float]) -> dict:
    best = min(range(len(losses)), key=losses.__getitem__)
    if best in (0, len(losses) - 1):
        raise SystemExit(f"{variant.name}: the best peak {PEAKS[best]:.3g} is at the end of the sweep; widen PEAKS")
    return {**st.variant_record(variant), "reference_loss": losses[best], "best_peak": PEAKS[best],
            "sweep": dict(zip((f"{p:.4g}" for p in PEAKS), losses))}


def build(processes: int = 2) -> None:
    for variants, path, keep in ((st.VISIBLE_VARIANTS, st.VISIBLE_FILE, ("reference_loss",)),
                                 (UNSEEN_VARIANTS, UNSEEN_FILE, ("reference_loss", "best_peak", "sweep"))):
        records = []
        for variant in variants:
            record = _record(variant, sweep(variant, processes=processes))
            print(f"{variant.name:45s} best peak {record['best_peak']:.3g}  loss {record['reference_loss']:.4f}  "
                  f"floor {st.floor(variant):.4f}", flush=True)
            records.append({k: v for k, v in record.items() if k in st.VARIANT_FIELDS or k in keep})
        path.write_text(json.dumps({"version": 1, "seeds": list(BUILD_SEEDS), "variants": records}, indent=1) + "\n")


def unseen() -> list[st.Variant]:
    """The grader's unseen variants, each with its stored reference loss (``Variant.reference_loss``)."""
    return st.load_variants(UNSEEN_FILE)
