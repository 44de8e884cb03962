"""SIGTERM and SIGINT: what the capstone does when a cluster pre-empts it or a person presses Ctrl-C.

``Interrupted`` is what every stop raises (fit() and the command line alike); the handlers that turn a signal into it
belong to the loop (``Trainer._stop_on_signals``) and to the command line (``trainkit.train.main``).
"""
from __future__ import annotations

import contextlib
import signal


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT arrived (``signum`` says which). After one, the step in progress finished and latest.pt
    was written: ``saved_at == step``. A second one stops at once, but never in the middle of a checkpoint write (the
    file in hand is finished first): ``saved_at`` is then the step latest.pt holds (None: this run wrote none), and
    ``step`` None when training had not started. The message says which."""

    def __init__(self, signum: int, step: int | None, saved_at: int | None = None):
        self.signum, self.step, self.saved_at = signum, step, saved_at
        name = signal.Signals(signum).name
        if step is None:
            message = f"stopped by {name} before training started: no step ran and no checkpoint was written"
        elif saved_at == step:
            message = f"stopped by {name} after {step} steps: latest.pt written"
        elif saved_at is None:
            message = f"stopped by {name} after {step} steps (a second signal), before latest.pt was written"
        else:
            message = f"stopped by {name} after {step} steps (a second signal): latest.pt holds step {saved_at}"
        super().__init__(message)


@contextlib.contextmanager
def stop_signals_to(handler):
    """SIGTERM and SIGINT go to ``handler`` while the block runs; the handlers they had are back after it."""
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
