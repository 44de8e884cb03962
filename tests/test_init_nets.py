"""Lab 1's judgement exercise (trainkit.labs.lab01_signal_propagation.init_nets, autograder.init_check): the unseen networks are other networks, the
reference and the catalogue's alternative pass every network with margin, first answers do not, and what judges an
initialisation refuses bad input and tampering with a reason."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from autograder import notebooks as nbu
from autograder.init_check import UNSEEN_NETS, UNSEEN_SEED
from course import load_catalogue, source_nb
from trainkit.labs.lab01_signal_propagation import init_nets as inn
from trainkit.labs.lab01_signal_propagation.init_nets import VISIBLE_NETS, Residual, build_net, check_spec, describe, judge, signal_profile

pytestmark = pytest.mark.usefixtures("one_thread")
LAB = "01_signal_propagation"
CATALOGUE = load_catalogue(LAB)
VISIBLE_ACTIVATIONS = {"relu", "tanh", "linear"}


def _answer(source: str):
    """The initialise that a cell's source defines."""
    names = {"torch": torch, "nn": nn, "math": math, "Residual": Residual}
    exec(nbu.strip_solution_markers(source), names)
    return names["initialise"]


reference = _answer(next(c.source for c in source_nb(LAB).cells if nbu.grade_id(c) == "initialise"))
skip_init = _answer(CATALOGUE.ALTERNATIVE["initialise"])
he_everywhere = _answer(CATALOGUE.VISIBLE_ONLY["initialise"])
gain_by_visible_name = _answer(CATALOGUE.BUGS["initialise_gain_by_visible_name"]["initialise"])


def _leave_as_built(model, x):
    """PyTorch's default initialisation: what a student who does nothing hands in."""


def test_the_spec_states_the_bands_and_the_run():
    spec = next(c.source for c in source_nb(LAB).cells if c.source.startswith("## Exercise 7: initialise"))
    for lo, hi in (inn.FORWARD_BAND, inn.BACKWARD_BAND):
        assert f"[{lo:g}, {hi:g}]" in spec
    lr = f"{inn.RUN_LR:.0e}".replace("e-0", "e-")
    assert f"{inn.RUN_STEPS} AdamW steps (lr {lr}) on one batch of {inn.RUN_BATCH} training examples" in spec
    assert f"{inn.RUN_TARGET:g} x log 10 = {inn.RUN_TARGET * math.log(10):.2f}" in spec
    assert f"the {len(VISIBLE_NETS)} visible networks" in spec and f"grader's {len(UNSEEN_NETS)} unseen" in spec


def test_the_unseen_networks_are_other_networks_with_other_activations():
    def key(spec):
        return tuple(sorted(spec.items()))

    assert not {key(s) for s in UNSEEN_NETS} & {key(s) for s in VISIBLE_NETS}
    assert {s["activation"] for s in VISIBLE_NETS} == VISIBLE_ACTIVATIONS
    unseen = {s["activation"] for s in UNSEEN_NETS} - VISIBLE_ACTIVATIONS
    assert len(unseen) >= 5, unseen
    assert {s["kind"] for s in UNSEEN_NETS} == {"plain", "residual"} and UNSEEN_SEED != 0
    # both kinds, with and without biases and LayerNorms, among the unseen networks of a new activation
    assert sum(s["activation"] not in VISIBLE_ACTIVATIONS for s in UNSEEN_NETS if s["kind"] == "plain") >= 4
    for spec in VISIBLE_NETS + UNSEEN_NETS:
        check_spec(spec)


def _worst_margin(fn, nets, seed):
    """The smallest factor by which any measured value of fn's networks stays inside its band, and the highest
    loss the short runs end at."""
    worst, worst_run = math.inf, 0.0
    for spec in nets:
        model = build_net(spec, seed)
        torch.manual_seed(1000 + seed)
        fn(model, inn.inputs(seed))
        forward, backward = signal_profile(model, inn.inputs(seed + 500, inn.X_PROBE_SIZE), seed)
        for values, (lo, hi) in ((forward, inn.FORWARD_BAND), (backward, inn.BACKWARD_BAND)):
            worst = min(worst, min(v / lo for v in values), min(hi / v for v in values))
        worst_run = max(worst_run, inn.short_run(model, seed)[1])
    return worst, worst_run


@pytest.mark.parametrize("fn", [reference, skip_init], ids=["reference_lsuv", "alternative_skip_init"])
def test_honest_initialisations_pass_every_network_with_margin(fn):
    for nets, seed in ((VISIBLE_NETS, 0), (UNSEEN_NETS, UNSEEN_SEED)):
        worst, worst_run = _worst_margin(fn, nets, seed)
        assert worst > 1.25, f"a signal within {worst:.2f}x of its band's edge"
        assert worst_run < inn.RUN_TARGET * math.log(10) - 0.3, f"a short run ends at {worst_run:.3f}"
        assert all(judge(spec, fn, seed) == "" for spec in nets)


def test_first_answers_fail_networks():
    # PyTorch's default init: the signal of every deep plain net fades (bias noise at best)
    plain = [s for s in VISIBLE_NETS + UNSEEN_NETS if s["kind"] == "plain"]
    assert all("forward RMS" in judge(s, _leave_as_built) for s in plain)
    # He everywhere: each residual block without LayerNorms doubles the stream's variance (where the activation is
    # unbounded: a branch through tanh or sigmoid adds a bounded amount)
    residual = [s for s in VISIBLE_NETS + UNSEEN_NETS if s["kind"] == "residual" and not s["norm"]
                and s["activation"] not in ("tanh", "sigmoid")]
    assert len(residual) >= 6
    assert all("forward RMS" in judge(s, he_everywhere) for s in residual)
    # gains known by the visible activations' names only: an unseen activation's plain net fades
    unseen_plain = [s for s in UNSEEN_NETS if s["kind"] == "plain" and s["activation"] not in VISIBLE_ACTIVATIONS]
    misses = [s for s in unseen_plain if judge(s, gain_by_visible_name, UNSEEN_SEED)]
    assert len(misses) >= 3, [describe(s) for s in misses]


def test_the_measurements_are_repeatable():
    spec = VISIBLE_NETS[-1]
    profiles = []
    for _ in range(2):
        model = build_net(spec)
        reference(model, inn.inputs(0))
        profiles.append(signal_profile(model, inn.inputs(500)))
    assert profiles[0] == profiles[1]
    forward, backward = profiles[0]
    assert len(forward) == len(backward) == spec["depth"] + 1 and backward[-1] == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("spec,error", [
    ({"kind": "conv", "depth": 4, "width": 8, "activation": "relu"}, "kind"),
    ({"kind": "plain", "depth": 0, "width": 8, "activation": "relu"}, "depth"),
    ({"kind": "plain", "depth": 4, "width": 8.0, "activation": "relu"}, "width"),
    ({"kind": "plain", "depth": 4, "width": 8, "activation": "swish"}, "activation"),
    ({"kind": "plain", "depth": 4, "width": 8, "activation": "relu", "slope": 0.2}, "slope"),
    ({"kind": "plain", "depth": 4, "width": 8, "activation": "relu", "norm": True}, "norm"),
    ({"kind": "plain", "depth": 4, "width": 8, "activation": "relu", "dropout": 0.1}, "unknown"),
])
def test_a_spec_that_makes_no_sense_is_refused_with_its_reason(spec, error):
    with pytest.raises(ValueError, match=error):
        build_net(spec)


def _replaces_a_parameter(model, x):
    model[0].weight = nn.Parameter(torch.zeros_like(model[0].weight))


def _leaves_a_hook(model, x):
    model[0].register_forward_hook(lambda m, i, o: o / o.pow(2).mean().sqrt())


def _patches_forward(model, x):
    model[0].forward = lambda t: t[:, :model[0].out_features]


def _freezes(model, x):
    for p in model.parameters():
        p.requires_grad_(False)


def _raises(model, x):
    raise RuntimeError("no idea")


@pytest.mark.parametrize("fn,reason", [(_replaces_a_parameter, "replaced Parameter"), (_leaves_a_hook, "hook"),
                                       (_patches_forward, "forward"), (_freezes, "froze"), (_raises, "raised")])
def test_an_initialise_that_changes_more_than_values_fails_with_its_reason(fn, reason):
    assert reason in judge(VISIBLE_NETS[0], fn)
