"""Instructor side of lab 1's judgement exercise: the grader's unseen networks (``trainkit.labs.lab01_signal_propagation.init_nets``).

They differ from the visible ones in depth, width and bias, and bring activations the visible networks never show
(leaky ReLU with other slopes, ELU, GELU, SiLU, softplus, sigmoid): an initialisation that recognises the visible
activations by name (or uses ReLU's gain everywhere) misses some of them; one that reads what each module does, or
measures the signal, passes them. They are judged with ``UNSEEN_SEED`` (another draw of the weights and the inputs).
This module is instructor-only (not in the student edition), like ``setups_check``: with the unseen networks in sight
a student could tune for them instead of for the rule. Building and judging them needs no stored measurement.
"""
from __future__ import annotations

from trainkit.labs.lab01_signal_propagation.init_nets import net_spec

UNSEEN_SEED = 7
UNSEEN_NETS = [
    net_spec("plain", 12, 128, "leaky_relu", slope=0.3), net_spec("plain", 16, 64, "leaky_relu", bias=False, slope=0.1),
    net_spec("plain", 16, 96, "elu"), net_spec("plain", 10, 128, "gelu"), net_spec("plain", 14, 96, "relu"),
    net_spec("plain", 12, 192, "tanh", bias=False), net_spec("plain", 24, 48, "linear"), net_spec("plain", 8, 64, "silu"),
    net_spec("residual", 24, 64, "gelu"), net_spec("residual", 16, 96, "silu", norm=True),
    net_spec("residual", 32, 48, "sigmoid"), net_spec("residual", 12, 128, "softplus", norm=True),
    net_spec("residual", 20, 64, "elu", bias=False), net_spec("residual", 28, 64, "leaky_relu", norm=True, slope=0.3),
    net_spec("residual", 8, 192, "gelu", bias=False, norm=True), net_spec("residual", 32, 64, "silu"),
    net_spec("residual", 24, 32, "relu"), net_spec("residual", 16, 64, "tanh", norm=True),
    net_spec("residual", 12, 96, "sigmoid", bias=False, norm=True), net_spec("residual", 32, 32, "linear", bias=False),
]


def unseen() -> list[dict]:
    """The grader's networks (specs for ``build_net``), judged with ``UNSEEN_SEED``."""
    return list(UNSEEN_NETS)
