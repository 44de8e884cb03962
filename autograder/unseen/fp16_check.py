"""Instructor side of lab 5's fp16 recipes: the grader's unseen variants.

The same planted kinds as the visible ones (``trainkit.labs.lab05_mixed_precision.fp16_runs.VISIBLE_SPECS``: a tiny or a huge loss weight, raw
inputs in large units, a large residual stream, a regression net in large target units, and pairs of them) at other
magnitudes, widths, depths, data splits and seeds. Instructor-only (not in the student edition): with the unseen
variants in sight a student could tune a recipe to them instead of diagnosing the variant in hand.

The variants are cheap to build (milliseconds) and to train (a fraction of a second each), so grading trains the
fp32 run of each next to the student's fp16 run on the same machine, and nothing is stored.
``python -m autograder.fp16_check`` prints, per variant, how far from its fp32 run a few fixed recipes land: the
measurement the band (2 %) and the variants were chosen from (tests/test_fp16_runs.py asserts it).
"""
from __future__ import annotations

import math

from trainkit.labs.lab05_mixed_precision.fp16_runs import Recipe, Variant, make_variant, train_fp16

UNSEEN_SPECS = [
    dict(kind="clean", width=48, depth=2, split=1, seed=11),
    dict(kind="clean", task="regression", width=24, split=2, seed=12),
    dict(kind="tiny_loss", loss_weight=3e-10, split=3, seed=13),
    dict(kind="tiny_loss", task="regression", loss_weight=3e-11, width=48, seed=14),
    dict(kind="big_loss", task="regression", loss_weight=3e3, seed=15),
    dict(kind="big_loss", loss_weight=3e4, depth=2, seed=16),
    dict(kind="stem", input_scale=3000.0, split=4, seed=17),
    dict(kind="stem", task="regression", input_scale=500.0, seed=18),
    dict(kind="norm", stream=120.0, depth=2, seed=19),
    dict(kind="norm", task="regression", stream=500.0, seed=20),
    dict(kind="units", task="regression", out_gain=1000.0, split=5, seed=21),
    dict(kind="units", task="regression", out_gain=150.0, width=48, seed=22),
    dict(kind="stem+big_loss", input_scale=800.0, loss_weight=1e4, split=6, seed=23),
    dict(kind="norm+big_loss", task="regression", stream=400.0, loss_weight=3e3, seed=24),
]

# Fixed recipes a first reading might settle on; none of them fits every variant.
FIXED = {
    "no scaling, all fp16": Recipe(),
    "GradScaler defaults": Recipe(init_scale=2.0**16),
    "GradScaler defaults, fp32 loss": Recipe(init_scale=2.0**16, fp32={"loss"}),
    "static 2**16, fp32 loss": Recipe(init_scale=2.0**16, growth_factor=1.0, backoff_factor=1.0, fp32={"loss"}),
}


def unseen() -> list[Variant]:
    """The grader's variants, each with ``name`` and ``spec`` (its seed in ``spec["seed"]``)."""
    return [make_variant(spec) for spec in UNSEEN_SPECS]


def gap(variant: Variant, recipe: Recipe) -> float:
    """(fp16 loss - fp32 loss) / fp32 loss on the variant's seed (nan when the fp16 run ends non-finite)."""
    seed = variant.spec["seed"]
    l32 = train_fp16(variant, None, seed).val_loss
    l16 = train_fp16(variant, recipe, seed).val_loss
    return (l16 - l32) / abs(l32) if math.isfinite(l16) else math.nan


def report() -> None:
    """The fixed recipes' gaps on every variant (``python -m autograder.banks report fp16``): for choosing variants."""
    from trainkit.labs.lab05_mixed_precision.fp16_runs import load_visible_variants

    for where, variants in [("visible", load_visible_variants()), ("unseen", unseen())]:
        for v in variants:
            cells = "  ".join(f"{name}: {gap(v, r):+8.3f}" for name, r in FIXED.items())
            print(f"{where:8s} {v.name:14s} seed {v.spec['seed']:2d}  {cells}", flush=True)
