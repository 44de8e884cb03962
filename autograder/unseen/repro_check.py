"""Instructor side of lab 7's pairs of runs: which pairs show their cause, the grader's unseen pairs, the stored banks.

``shows_cause(pair)`` is the banks' quality bar, not a diagnosis: it knows the planted cause and checks, with margins,
that the two logs show it (a racy reduction that never raced in either run is not graded as non-determinism; a
reshuffle that falls after the last step is not graded as another data order). It lives here, not in ``trainkit``
(which students have), for the same reason as ``runbank_check``: with it a student could try each label and keep the
one it accepts.

The unseen pairs (``unseen_specs``) are unlike the visible ones: other seeds, widths, depths, minibatch sizes, the
regression task, dropout, code changes that act at other steps, racy reductions that race more or less often, and
kinds the visible pairs never show (``UNSEEN_PLANTS``): a seed that moves the data order too (so the manifest's first
difference is the data's), an order that a reshuffle setting nobody records changes, a code change from another
commit, a clip added in one of two dirty trees, two dirty trees whose different changes touch nothing the run
executes, a fine-tune's dropout seed that no manifest records, races in two trees with harmless edits (in training and
evaluation, or in evaluation only), and a code change in runs that could also race.

    python -m autograder.banks build repro     # retrain the visible and the unseen pairs, store both

The visible pairs (trainkit/labs/lab07_monitoring_reproducibility/repro_visible.json) go to students; the unseen ones (autograder/unseen/repro_unseen.json,
instructor-only like this module) are what lab 7's hidden tests grade ``why_not_reproducible`` on.
tests/test_repro_runs.py retrains a sample of each and checks that the stored pairs are the runs of their specs.

Exercise 7's runs to reproduce are not stored: bit for bit is decided by the grading machine's own arithmetic, so
``unseen_targets`` trains them where they are graded (``unseen_target_specs``, ``UNSEEN_TARGET_KINDS``: other tasks,
sizes, lengths and seeds than ``trainkit.labs.lab07_monitoring_reproducibility.repro_runs.visible_target_specs``, and manifests wrong or silent in ways the
visible runs never show). tests/test_repro_runs.py proves that the reference reproduces every one of them.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from trainkit.labs.lab07_monitoring_reproducibility import repro_runs as rr
from trainkit.labs.lab07_monitoring_reproducibility.repro_runs import (
    code_diff, fine_tune_settings, mask_settings, plant_side, racy_sides)

UNSEEN_FILE = Path(__file__).with_name("repro_unseen.json")

UNSEEN_PLANTS = {
    **rr.PLANTS,
    ("seed", "seed_and_order"): lambda sp: (plant_side(), plant_side({"init_seed": sp["seed"] + 3, "order_seed": sp["seed"] + 3})),
    ("data_order", "reshuffle_unrecorded"): lambda sp: (plant_side(), plant_side({"reshuffle": False}, told={"reshuffle": True})),
    ("code_change", "commit"): lambda sp: (plant_side(), plant_side({"head_gain": 2.0}, git_sha=rr.text_sha(f"commit {sp['seed']}")[:40])),
    ("code_change", "clip"): lambda sp: (plant_side(diff=code_diff("log grad norm", sp["seed"])),
                                         plant_side({"max_norm": 0.3}, diff=code_diff("clip 0.3", sp["seed"]))),
    ("reproducible", "other_diffs"): lambda sp: (plant_side(diff=f"--- a/plots.py\n+++ b/plots.py\n@@ {sp['seed']}"),
                                                 plant_side(diff=f"--- a/README.md\n+++ b/README.md\n@@ {sp['seed']}")),
    ("seed", "dropout_unrecorded"): lambda sp: (plant_side(mask_settings(sp, 0), records_seeds=False),
                                                plant_side(mask_settings(sp, 2), records_seeds=False)),
    ("nondeterministic", "race_two_edits"): lambda sp: racy_sides(sp, {"race": sp["race"], "eval_race": sp["eval_race"]},
                                                             diffs=(code_diff("a docstring", sp["seed"]),
                                                                    code_diff("a log line's wording", sp["seed"]))),
    ("nondeterministic", "eval_race_comment"): lambda sp: racy_sides(sp, {"eval_race": sp["eval_race"]},
                                                                diffs=(code_diff("a comment", sp["seed"]), None)),
    ("code_change", "head_init_racy_runs"): lambda sp: (plant_side(deterministic=False),
                                                        plant_side({"head_gain": 0.5}, diff=code_diff("head init x0.5", sp["seed"]),
                                                              deterministic=False)),
}
NUMBERS = ("grad_norm", "lr", "train/loss", "val/loss")     # the logged numbers ("batch" is a fingerprint)


def _first_difference(pair: rr.Pair):
    """(step, key, relative size) of the first logged value that differs between the two runs, or None."""
    for row_a, row_b in zip(pair.a.log, pair.b.log):
        for key in NUMBERS:
            x, y = row_a.get(key), row_b.get(key)
            if x != y:
                return row_a["step"], key, abs(x - y) / max(abs(x), abs(y), 1e-12)
    return None


def shows_cause(pair: rr.Pair) -> bool:
    """Whether the two logs show the planted cause with a clear margin (pairs that do not are never graded)."""
    first = _first_difference(pair)
    if pair.label == "reproducible":
        return first is None and len(pair.a.log) == len(pair.b.log)
    if first is None:
        return False
    step, key, size = first
    val_a, val_b = pair.a.log[0]["val/loss"], pair.b.log[0]["val/loss"]
    start_gap = abs(val_a - val_b) / abs(val_a)      # measured before any update: other initial weights move it
    other_batches = [r.get("batch") for r in pair.a.log] != [r.get("batch") for r in pair.b.log]
    can_race = not (pair.a.manifest["deterministic"] or pair.b.manifest["deterministic"])
    if pair.label == "seed":                          # other initial weights, or (same weights) other dropout masks
        return start_gap > 1e-4 or (start_gap == 0 and not other_batches and size > 1e-3)
    if pair.label == "data_order":
        return start_gap == 0 and other_batches and size > 1e-3
    if pair.label == "nondeterministic":
        return can_race and start_gap < 1e-5 and not other_batches and size < 1e-5
    if pair.label == "code_change":                   # where a race could also be, far larger than a race
        code = [(r.manifest["git_sha"], r.manifest["git_diff_sha256"]) for r in (pair.a, pair.b)]
        return code[0] != code[1] and not other_batches and (not can_race or size > 1e-3)
    raise ValueError(pair.label)


def unseen_specs() -> list[dict]:
    """The grader's pairs: every visible and hidden kind on three settings unlike the visible ones, and three more
    racy pairs."""
    settings = [dict(seed=5, width=48, depth=2, at=12, race=0.03, eval_race=0.4),
                dict(seed=6, task="regression", width=32, dropout=0.05, at=28, race=0.06, eval_race=0.7),
                dict(seed=7, task="regression", width=64, depth=2, batch_size=32, lr=1e-2, at=6, race=0.1,
                     eval_race=0.25)]
    races = [dict(seed=8, width=48, race=0.02), dict(seed=9, task="regression", depth=2, race=0.15),
             dict(seed=10, width=64, batch_size=32, dropout=0.2, race=0.05)]  # races are rarer than other causes: more
    return ([{"cause": cause, "kind": kind, **setting} for (cause, kind) in UNSEEN_PLANTS for setting in settings]
            + [{"cause": "nondeterministic", "kind": kind, **setting}
               for kind in ("race", "eval_race", "race_comment") for setting in races])


def _store(path: Path, pairs: list[rr.Pair]) -> None:
    path.write_text(json.dumps({"version": 1, "pairs": [rr.to_record(p) for p in pairs]}, separators=(",", ":")) + "\n")


def build_visible(path: Path = rr.VISIBLE_FILE) -> list[rr.Pair]:
    """Train the visible pairs and store them; refuses to store a pair whose logs do not show its cause."""
    pairs = [rr.make_pair(spec) for spec in rr.visible_specs()]
    unclear = [p.spec for p in pairs if not shows_cause(p)]
    if unclear:
        raise SystemExit(f"these pairs do not show their cause clearly; change their settings: {unclear}")
    _store(path, pairs)
    return pairs


def build_unseen(path: Path = UNSEEN_FILE) -> list[rr.Pair]:
    """Train the unseen pairs and store those that show their cause; refuses if more than a tenth do not."""
    specs = unseen_specs()
    pairs = [p for p in (rr.make_pair(spec, UNSEEN_PLANTS) for spec in specs) if shows_cause(p)]
    if len(pairs) < 0.9 * len(specs):
        raise SystemExit(f"only {len(pairs)} of {len(specs)} unseen pairs show their cause; change their settings")
    _store(path, pairs)
    return pairs


def unseen() -> list[rr.Pair]:
    """The grader's unseen pairs (stored by ``build_unseen``), with their causes."""
    return rr.load_pairs(UNSEEN_FILE)


# --- exercise 7: the runs the grader reproduces --------------------------------------------------------------------
# Other tasks, widths, depths, dropout, minibatch sizes, lengths and seeds than the visible runs, and kinds the visible
# runs never show: a manifest whose seed is not the one the run used, a fine-tune that records no seed, a learning rate
# set somewhere the manifest does not see, an lr drop in a pipeline that records no seeds. Built (trained) when loaded:
# a few seconds.

UNSEEN_TARGET_KINDS = {
    **rr.TARGET_KINDS,
    "seed_unrecorded": lambda sp: plant_side(told={"init_seed": sp["told"]}),
    "fine_tune_unrecorded": lambda sp: plant_side(fine_tune_settings(sp), records_seeds=False),
    "lr_unrecorded": lambda sp: plant_side(told={"lr": sp["told"]}),
    "lr_drop_old": lambda sp: plant_side({"lr_drop_at": sp["at"]}, diff=code_diff(f"lr x0.3 from step {sp['at']}", sp["seed"]),
                                    records_seeds=False),
}


def unseen_target_specs() -> list[dict]:
    """The grader's runs to reproduce: every visible kind in other settings, and the kinds only the grader has."""
    return [
        {"kind": "recorded", "seed": 123, "order_seed": 77, "task": "regression", "width": 48, "depth": 2, "eval_every": 6},
        {"kind": "recorded", "seed": 9, "width": 64, "batch_size": 32, "steps": 36, "dropout": 0.1, "weight_decay": 0.01},
        {"kind": "old_pipeline", "seed": 512, "order_seed": 8, "task": "regression", "depth": 2, "steps": 26},
        {"kind": "old_pipeline", "seed": 999, "order_seed": 998, "width": 48, "batch_size": 128, "steps": 25,
         "reshuffle": False},
        {"kind": "old_pipeline", "seed": 250, "dropout": 0.1, "eval_every": 3, "lr": 1e-2},
        {"kind": "order_unrecorded", "seed": 4, "order_seed": 640, "told": 4, "task": "regression", "batch_size": 32},
        {"kind": "reshuffle_unrecorded", "seed": 31, "task": "regression", "width": 16, "steps": 35},
        {"kind": "reshuffle_unrecorded", "seed": 66, "batch_size": 96, "steps": 24},
        {"kind": "lr_drop", "seed": 17, "task": "regression", "at": 6, "lr": 1e-2},
        {"kind": "lr_drop", "seed": 300, "order_seed": 301, "at": 27, "depth": 2, "eval_every": 8, "steps": 32},
        {"kind": "fine_tune", "seed": 555, "mask_seed": 7, "task": "regression", "dropout": 0.05},
        {"kind": "fine_tune", "seed": 808, "mask_seed": 91, "width": 48, "steps": 24},
        {"kind": "seed_unrecorded", "seed": 137, "told": 0},
        {"kind": "seed_unrecorded", "seed": 46, "told": 45, "task": "regression", "width": 64},
        {"kind": "seed_unrecorded", "seed": 720, "told": 72, "dropout": 0.1, "batch_size": 32},
        {"kind": "fine_tune_unrecorded", "seed": 33, "mask_seed": 444, "order_seed": 12},
        {"kind": "fine_tune_unrecorded", "seed": 901, "mask_seed": 2, "task": "regression", "dropout": 0.1},
        {"kind": "lr_unrecorded", "seed": 8, "told": 3e-3, "lr": 6e-3},
        {"kind": "lr_unrecorded", "seed": 60, "order_seed": 61, "told": 1e-2, "task": "regression"},
        {"kind": "lr_drop_old", "seed": 401, "order_seed": 13, "at": 15, "eval_every": 4},
    ]


def unseen_targets() -> list[rr.Target]:
    """The grader's runs to reproduce, trained now (about 0.15 s a run), with their true settings."""
    return [rr.make_target(spec, UNSEEN_TARGET_KINDS) for spec in unseen_target_specs()]


def build() -> None:
    """Retrain and store the visible and the unseen pairs (``python -m autograder.banks build repro``)."""
    torch.set_num_threads(1)
    made = build_visible()
    print(f"stored {len(made)} pairs in {rr.VISIBLE_FILE}")
    made = build_unseen()
    print(f"stored {len(made)} of {len(unseen_specs())} pairs in {UNSEEN_FILE} (the others do not show their cause)")
