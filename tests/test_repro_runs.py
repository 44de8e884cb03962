"""Lab 7's pairs of runs (trainkit.labs.lab07_monitoring_reproducibility.repro_runs, autograder.repro_check): every graded pair is a pair of real training
runs whose logs show their planted cause, the unseen pairs are not the visible ones, and a reading of the manifests
alone, or of the logs alone, does not reach full marks. Exercise 7's runs to reproduce (the end of this file): the
reference reproduces every visible and unseen one bit for bit, and a mapping of the manifest's fields alone does not.

Both banks are trained once (``python -m autograder.banks build repro``) and stored with every number exact: grading
compares logs bit for bit, which must not depend on the grading CPU. Here a sample of each is retrained: on this CPU
the pair shows its cause again, and its first steps agree with the stored ones to a few digits (another kernel path
rounds differently, so the stored bits need not come back).
"""
from __future__ import annotations

import copy
import functools
import hashlib
import json

import numpy as np
import pytest
import torch

from autograder.repro_check import (UNSEEN_PLANTS, UNSEEN_TARGET_KINDS, unseen_target_specs, unseen_targets,
                                    unseen, shows_cause, unseen_specs)
from course import load_catalogue, source_nb
from trainkit.labs.lab07_monitoring_reproducibility import repro_runs as rr

VISIBLE = rr.load_visible()
UNSEEN = unseen()
CATALOGUE = load_catalogue("07_monitoring_reproducibility")


def _answers(source: str, pairs) -> list[str]:
    """The labels a why_not_reproducible written as notebook source gives each pair (on copies, as the grader does)."""
    namespace = {"np": np, "RunRecord": rr.RunRecord, "VISIBLE_PAIRS": VISIBLE}
    exec(source, namespace)
    fn = namespace["why_not_reproducible"]
    return [fn(copy.deepcopy(p.a), copy.deepcopy(p.b)) for p in pairs]


def _accuracy(source: str, pairs) -> float:
    return float(np.mean([got == p.label for got, p in zip(_answers(source, pairs), pairs)]))


def _reference(grade_id: str = "why_not_reproducible") -> str:
    cell = next(c for c in source_nb("07_monitoring_reproducibility").cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return cell.source


def test_the_visible_bank_plants_every_cause_in_every_visible_way():
    assert [p.spec for p in VISIBLE] == rr.visible_specs()
    assert {(p.spec["cause"], p.spec["kind"]) for p in VISIBLE} == set(rr.PLANTS)
    assert all(p.label == p.spec["cause"] for p in VISIBLE + UNSEEN)
    assert {p.label for p in VISIBLE} == set(rr.LABELS)


@pytest.mark.parametrize("bank", ["visible", "unseen"])
def test_every_stored_pair_shows_its_cause(bank):
    pairs = VISIBLE if bank == "visible" else UNSEEN
    unclear = [p.spec for p in pairs if not shows_cause(p)]
    assert not unclear, f"stored pairs whose logs do not show their cause: {unclear}"


def test_the_unseen_pairs_are_not_the_visible_ones():
    specs = unseen_specs()
    assert [p.spec for p in UNSEEN] == [s for s in specs if s in [p.spec for p in UNSEEN]], "the build's, in order"
    assert len(UNSEEN) >= 0.9 * len(specs)
    assert not [p.spec for p in UNSEEN if p.spec in rr.visible_specs()]
    assert {(p.spec["cause"], p.spec["kind"]) for p in UNSEEN} == set(UNSEEN_PLANTS), "a kind lost every pair"
    hidden_only = set(UNSEEN_PLANTS) - set(rr.PLANTS)
    assert len(hidden_only) >= 4 and {cause for cause, _ in hidden_only} >= {"seed", "data_order", "code_change"}
    assert {p.spec.get("task", "digits") for p in UNSEEN} == {"digits", "regression"}
    seen_ids = {r.manifest["run_id"] for p in VISIBLE for r in (p.a, p.b)}
    assert not seen_ids & {r.manifest["run_id"] for p in UNSEEN for r in (p.a, p.b)}


def test_a_manifest_difference_is_not_always_the_cause():
    # reproducible pairs whose manifests differ in the code fields, and caused pairs whose manifests show no cause
    code = ("git_sha", "git_dirty", "git_diff_sha256")
    decoys = [p for p in VISIBLE if p.label == "reproducible" and any(p.a.manifest[k] != p.b.manifest[k] for k in code)]
    silent = [p for p in VISIBLE if p.label in ("seed", "data_order", "nondeterministic")
              and p.a.manifest["config"] == p.b.manifest["config"]]
    assert len(decoys) >= 2 and len(silent) >= 6
    for p in VISIBLE + UNSEEN:
        assert {k for k in p.a.manifest if p.a.manifest[k] != p.b.manifest[k]} >= {"run_id", "started_at", "host"}


def test_the_reference_names_every_pair_and_naive_readings_do_not():
    reference = _reference()
    assert _accuracy(reference, VISIBLE) == 1.0 and _accuracy(reference, UNSEEN) == 1.0
    assert _accuracy(CATALOGUE.ALTERNATIVE["why_not_reproducible"], UNSEEN) == 1.0
    first_field = CATALOGUE.REPRO_FIRST_MANIFEST_FIELD                   # the first differing manifest field
    assert _accuracy(first_field, VISIBLE) < 0.7 and _accuracy(first_field, UNSEEN) < 0.7
    hasty = CATALOGUE.VISIBLE_ONLY["why_not_reproducible"]               # a decision table from one reading
    assert _accuracy(hasty, VISIBLE) < 0.85 and _accuracy(hasty, UNSEEN) < 0.85
    logs_only = CATALOGUE.REPRO_LOGS_ONLY
    assert _accuracy(logs_only, VISIBLE) < 0.95 and _accuracy(logs_only, UNSEEN) < 0.85
    memoriser = CATALOGUE.REPRO_MEMORISES_VISIBLE
    assert _accuracy(memoriser, VISIBLE) == 1.0 and _accuracy(memoriser, UNSEEN) < 0.5


def test_the_races_and_the_other_minibatches_are_far_apart():
    # the size of the first difference: a race moves the last bits, another minibatch the loss itself (the reference's
    # threshold, 1e-5, has two orders of magnitude on either side)
    def first_gap(p):
        for row_a, row_b in zip(p.a.log, p.b.log):
            for key in ("val/loss", "train/loss", "grad_norm"):
                x, y = row_a.get(key), row_b.get(key)
                if x is not None and x != y:
                    return abs(x - y) / max(abs(x), abs(y))
    races = [first_gap(p) for p in VISIBLE + UNSEEN if p.label == "nondeterministic"]
    orders = [first_gap(p) for p in VISIBLE + UNSEEN if p.label == "data_order"]
    assert max(races) < 1e-6 < 1e-3 < min(orders)
    # where a race was possible (neither run deterministic), a code change moves far more than a race
    racy_code = [first_gap(p) for p in VISIBLE + UNSEEN if p.label == "code_change"
                 and not (p.a.manifest["deterministic"] or p.b.manifest["deterministic"])]
    assert racy_code and min(racy_code) > 1e-3


def test_the_visible_pairs_show_every_confounder_of_a_one_reading_table():
    # a harmless edit in one tree while a reduction races; a race in the first evaluation (the first validation losses
    # differ in their last bits, the first minibatch's loss does not); a seed that moves only the dropout masks (the
    # same first validation loss and the same minibatches, a large difference from the first step on)
    def batches(run):
        return [r.get("batch") for r in run.log]
    code = ("git_sha", "git_dirty", "git_diff_sha256")
    for bank, least in ((VISIBLE, 2), (UNSEEN, 4)):
        edits = [p for p in bank if p.label == "nondeterministic" and any(p.a.manifest[k] != p.b.manifest[k] for k in code)]
        first_eval = [p for p in bank if p.label == "nondeterministic" and p.a.log[0]["val/loss"] != p.b.log[0]["val/loss"]
                      and p.a.log[0]["train/loss"] == p.b.log[0]["train/loss"]]
        masks = [p for p in bank if p.label == "seed" and p.a.log[0]["val/loss"] == p.b.log[0]["val/loss"]
                 and batches(p.a) == batches(p.b)]
        assert len(edits) >= least and len(first_eval) >= 1 and len(masks) >= least
        assert all(p.a.manifest["config"]["model"]["dropout"] > 0 for p in masks)
        assert all(batches(p.a) != batches(p.b) for p in bank if p.label == "data_order")
    assert {p.spec.get("dropout", 0.0) > 0 for p in VISIBLE if p.label != "seed"} == {True, False}, "dropout alone tells"


# visible: a reproducible pair, a racy one, a race in evaluation, a seed of the dropout masks only; unseen: a
# regression reshuffle nobody records, a change from another commit
@pytest.mark.parametrize("bank,spec", [
    ("visible", {"cause": "reproducible", "kind": "same", "seed": 0}),
    ("visible", {"cause": "nondeterministic", "kind": "race", "seed": 1}),
    ("visible", {"cause": "nondeterministic", "kind": "eval_race", "seed": 0}),
    ("visible", {"cause": "seed", "kind": "dropout_only", "seed": 1}),
    ("unseen", {"cause": "data_order", "kind": "reshuffle_unrecorded", "seed": 6}),
    ("unseen", {"cause": "code_change", "kind": "commit", "seed": 5}),
])
def test_a_stored_pair_is_the_pair_of_its_spec(bank, spec):
    torch.set_num_threads(1)
    stored = next(p for p in (VISIBLE if bank == "visible" else UNSEEN) if spec.items() <= p.spec.items())
    again = rr.make_pair(stored.spec, UNSEEN_PLANTS)
    assert shows_cause(again)
    for old, new in ((stored.a, again.a), (stored.b, again.b)):
        assert {k: v for k, v in new.manifest.items() if k != "versions"} == \
            {k: v for k, v in old.manifest.items() if k != "versions"}
        assert [r["step"] for r in new.log] == [r["step"] for r in old.log]
        for key in ("train/loss", "grad_norm", "val/loss"):
            got = [r[key] for r in new.log[:10] if key in r]
            assert got == pytest.approx([r[key] for r in old.log[:10] if key in r], rel=1e-4), key


def test_the_store_keeps_every_number_exactly():
    pair = VISIBLE[-1]
    again = rr.from_record(json.loads(json.dumps(rr.to_record(pair))))
    assert again.a.log == pair.a.log and again.b.log == pair.b.log and again.a.manifest == pair.a.manifest
    assert all(isinstance(r["train/loss"], float) for r in pair.a.log if "train/loss" in r)


def test_bad_specs_and_settings_are_refused_with_the_choices():
    with pytest.raises(ValueError, match="unknown cause and kind.*'reproducible'"):
        rr.make_pair({"cause": "cosmic_ray", "kind": "race"})
    with pytest.raises(ValueError, match="unknown cause and kind"):
        rr.make_pair({"cause": "code_change", "kind": "commit"})          # a hidden kind is not in the students' module
    with pytest.raises(ValueError, match=r"unknown spec keys \['widht'\]"):
        rr.make_pair({"cause": "seed", "kind": "recorded", "widht": 8})
    with pytest.raises(ValueError, match=r"unknown run settings \['sed'\]"):
        rr.train({"sed": 1})
    with pytest.raises(ValueError, match="unknown task 'bytes'"):
        rr.train({"task": "bytes"})


# --- exercise 7: runs to reproduce from their manifest and log -----------------------------------------------------

@functools.cache
def _targets() -> dict:
    torch.set_num_threads(1)
    return {"visible": rr.load_visible_targets(), "hidden": unseen_targets()}


def _reproduced(source: str, targets) -> list[bool]:
    """Whether train(reproduce(manifest, log)) gives each target's log bit for bit, for a reproduce written as notebook
    source (on copies, as the grader does; a raise is a miss)."""
    namespace = {"hashlib": hashlib, "torch": torch, **{k: v for k, v in vars(rr).items() if not k.startswith("_")}}
    exec(source, namespace)
    out = []
    for target in targets:
        try:
            out.append(rr.train(namespace["reproduce"](copy.deepcopy(target.manifest), copy.deepcopy(target.log)))
                       == target.log)
        except Exception:   # noqa: BLE001 -- a reproduction that raises did not reproduce
            out.append(False)
    return out


def _share(source: str, targets) -> float:
    return float(np.mean(_reproduced(source, targets)))


@pytest.mark.parametrize("bank", ["visible", "hidden"])
def test_every_target_is_a_deterministic_run_of_its_settings_that_only_the_documented_settings_tell_apart(bank):
    for target in _targets()[bank]:
        s = target.settings
        assert rr.train(s) == target.log, f"{target.spec}: training its settings again gives another log"
        assert {k for k in s if s[k] != rr.SOUND[k]} <= set(rr.VARYING), target.spec   # the rest: SOUND's, as documented
        assert all(seed in rr.SEED_RANGE for seed in (s["init_seed"], s["order_seed"], s.get("mask_seed") or 0))
        assert target.manifest["deterministic"] is True
        config = target.manifest["config"]
        assert (config["task"], config["model"], config["optim"]["weight_decay"], config["batch_size"]) == \
            (s["task"], {k: s[k] for k in ("width", "depth", "dropout")}, s["weight_decay"], s["batch_size"]), \
            f"{target.spec}: the manifest must be right about what the docstring says it is right about"
        if "init_from" in config:                                   # the hash the docstring documents
            assert config["init_from"] == f"checkpoints/init-{hashlib.sha256(str(s['init_seed']).encode()).hexdigest()[:8]}.pt"
            assert s["dropout"] > 0 and s.get("mask_seed") is not None


def test_the_visible_targets_show_every_visible_kind_and_the_hidden_ones_differ():
    visible, hidden = _targets()["visible"], _targets()["hidden"]
    assert [t.spec for t in visible] == rr.visible_target_specs() and [t.spec for t in hidden] == unseen_target_specs()
    assert {t.spec["kind"] for t in visible} == set(rr.TARGET_KINDS) and 10 <= len(visible) <= 14
    assert {t.spec["kind"] for t in hidden} == set(UNSEEN_TARGET_KINDS) and 18 <= len(hidden) <= 24
    assert not [s for s in unseen_target_specs() if s in rr.visible_target_specs()]
    assert len(set(UNSEEN_TARGET_KINDS) - set(rr.TARGET_KINDS)) >= 3
    with pytest.raises(ValueError, match="unknown kind"):          # a hidden kind is not in the students' module
        rr.make_target({"kind": "seed_unrecorded"})
    # the visible runs are digits runs of one size; the hidden ones vary what the visible ones hold fixed
    assert {(t.settings["task"], t.settings["width"], t.settings["depth"], t.settings["batch_size"]) for t in visible} \
        == {("digits", 32, 1, 64)}
    for key in ("task", "width", "depth", "batch_size", "steps", "lr", "weight_decay"):
        assert len({t.settings[key] for t in hidden}) > 1, f"the hidden runs never vary {key}"
    assert any(t.settings["dropout"] > 0 and t.settings.get("mask_seed") is None for t in hidden)
    # where a manifest is wrong, it is wrong: a recorded seed, shuffle seed, reshuffle or lr that the run did not use
    for t in visible + hidden:
        config, s = t.manifest["config"], t.settings
        wrong = {("seed" in config and config["seed"] != (s["init_seed"] if s.get("mask_seed") is None else s["mask_seed"])),
                 ("data" in config and config["data"] != {"shuffle_seed": s["order_seed"], "reshuffle_each_epoch": s["reshuffle"]}),
                 config["optim"]["lr"] != s["lr"]}
        assert (True in wrong) == (t.spec["kind"] in ("order_unrecorded", "reshuffle_unrecorded", "seed_unrecorded",
                                                        "lr_unrecorded")), t.spec
    runs_ids = {t.manifest["run_id"] for t in visible}
    assert not runs_ids & {t.manifest["run_id"] for t in hidden}


def test_the_reference_reproduces_every_run_and_a_mapping_of_the_manifest_does_not():
    visible, hidden = _targets()["visible"], _targets()["hidden"]
    reference = _reference("reproduce")
    for bank in (visible, hidden):
        missed = [t.spec for t, ok in zip(bank, _reproduced(reference, bank)) if not ok]
        assert not missed, f"the reference does not reproduce {missed}"
    assert _share(CATALOGUE.ALTERNATIVE["reproduce"], hidden) == 1.0
    naive = CATALOGUE.REPRO_NAIVE_MAPPING             # the manifest's fields, recorded seeds trusted, defaults elsewhere
    assert _share(naive, visible) < 0.6 and _share(naive, hidden) < 0.5
    hasty = CATALOGUE.VISIBLE_ONLY["reproduce"]       # the log read, but every recorded seed and setting trusted
    assert 0.6 <= _share(hasty, visible) < 0.85 and _share(hasty, hidden) < 0.85


def test_bad_target_specs_are_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"unknown kind 'lost'.*'fine_tune'"):
        rr.make_target({"kind": "lost"})
    with pytest.raises(ValueError, match=r"unknown spec keys \['sead'\]"):
        rr.make_target({"kind": "recorded", "sead": 3})
