"""Check helpers for lab test cells: one way to compare a student's result with PyTorch's.

Every failure raises AssertionError with a sentence a student can act on: what was checked, what was
expected, what came out, and (when given) a hint. Tolerances are explicit at every call.
"""
from __future__ import annotations

import json
import math
import os
from contextlib import contextmanager
from typing import Callable

import torch


def expect(condition: bool, message: str) -> None:
    """Fail with ``message`` unless ``condition`` holds."""
    if not condition:
        raise AssertionError(message)


def _as_tensor(x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach()
    return torch.as_tensor(x)


def expect_close(actual, expected, what: str, rtol: float = 1e-5, atol: float = 1e-8, hint: str = "") -> None:
    """Compare numbers or tensors: ``|actual - expected| <= atol + rtol * |expected|`` everywhere.

    Shapes must match exactly; NaN counts as equal only where the expected value is NaN too.
    """
    hint = f" Hint: {hint}" if hint else ""
    if actual is None:
        raise AssertionError(f"{what}: got None; did you forget to return a value?{hint}")
    a, e = _as_tensor(actual), _as_tensor(expected)
    if a.shape != e.shape:
        raise AssertionError(f"{what}: expected shape {tuple(e.shape)}, got {tuple(a.shape)}.{hint}")
    a64 = a.to("cpu", torch.float64)
    e64 = e.to("cpu", torch.float64)
    ok = torch.isclose(a64, e64, rtol=rtol, atol=atol, equal_nan=True)
    if bool(ok.all()):
        return
    bad = (~ok).nonzero()[0].tolist() if a64.dim() else []
    where = f" at index {tuple(bad)}" if bad else ""
    got, want = a64[tuple(bad)].item() if bad else a64.item(), e64[tuple(bad)].item() if bad else e64.item()
    n_bad = int((~ok).sum())
    many = f" ({n_bad} of {ok.numel()} entries differ)" if ok.numel() > 1 else ""
    raise AssertionError(f"{what}: expected {want:.6g}, got {got:.6g}{where}{many}; "
                         f"tolerance rtol={rtol:g}, atol={atol:g}.{hint}")


def expect_raises(exc_type: type[BaseException], fn: Callable[[], object], what: str) -> None:
    """``fn()`` must raise ``exc_type`` (e.g. ValueError for bad input).

    Returns None on purpose: a test cell's last expression becomes its output, and nbgrader reads a
    numeric output as partial credit.
    """
    try:
        fn()
    except exc_type:
        return
    except Exception as exc:  # noqa: BLE001 -- wrong type: say which
        raise AssertionError(f"{what}: expected {exc_type.__name__}, got {type(exc).__name__}: {exc}") from None
    raise AssertionError(f"{what}: expected {exc_type.__name__}, but nothing was raised.")


def expect_std(t: torch.Tensor, expected_std: float, what: str, rel: float = 0.03, hint: str = "") -> None:
    """Sample standard deviation within ``rel`` (relative) of ``expected_std``; use large tensors."""
    std = float(_as_tensor(t).double().std())
    hint = f" Hint: {hint}" if hint else ""
    if not math.isclose(std, expected_std, rel_tol=rel):
        raise AssertionError(f"{what}: expected std ≈ {expected_std:.5g} (within {rel:.0%}), got {std:.5g}.{hint}")


def preview(check: Callable[..., object], *args, **kwargs) -> None:
    """Run a band's check on the visible variants and say how far the answer is, without failing the cell.

    A judgement exercise gives points in bands (say 60 %, 80 %, 95 % of the variants), and only the grader's unseen
    variants decide them. Its first band's cell asserts on the visible variants too: an answer that does not work at
    all fails a visible test. The higher bands' cells call this instead: passing every visible test is then the bar
    of the first band, not a promise of full marks, and the printed sentence says how far the higher bands are. A
    visible pass prints nothing, as every passing test cell does.
    """
    try:
        check(*args, **kwargs)
    except AssertionError as exc:
        print(f"Not reached yet on the visible variants (this cell does not fail for it; the grader's unseen variants "
              f"decide its points): {exc}")


# Where a graded kernel writes which variants of a judgement exercise passed (set by make grade only; see
# record_outcomes). The grader reads the file after the notebook ran: autograder/term/variants.py.
OUTCOMES_ENV = "TRAINKIT_OUTCOMES_FILE"


def record_outcomes(exercise: str, what: str, outcomes) -> None:
    """At grading, note which of ``what``'s variants passed, for the instructor's item analysis; elsewhere nothing.

    ``outcomes``: (a variant's name, whether it passed) per variant, in order. A judgement exercise's band check calls
    this with what it has just judged, so the report can show the pass rate of each unseen variant (a variant nobody
    passes points at the variant, not at the class). It never fails the cell it runs in and never counts for points.
    """
    path = os.environ.get(OUTCOMES_ENV)
    if not path:
        return
    try:
        rows = [{"name": str(name)[:200], "passed": bool(ok)} for name, ok in outcomes]
        try:
            with open(path, encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, ValueError):
            record = {}
        record.setdefault(str(exercise), {})[str(what)] = rows
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f)
    except Exception:  # noqa: BLE001 -- a note for the instructor must never change a student's grade
        pass


@contextmanager
def substitute(namespace: dict, **replacements):
    """Temporarily replace names in ``namespace`` (a notebook's ``globals()``), restoring them after.

    Test cells of an exercise that builds on an earlier one grade it with PyTorch's version of the
    earlier function substituted, so one mistake is not counted twice.
    """
    missing = object()
    saved = {name: namespace.get(name, missing) for name in replacements}
    namespace.update(replacements)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is missing:
                namespace.pop(name, None)
            else:
                namespace[name] = value


# In a notebook, a failing check shows the test cell's line and the check's sentence, not the frames of this
# module: the failure is the student's code, not the grader's. IPython hides frames marked __tracebackhide__
# except the one that raised, which is always one of the functions above, so AssertionErrors get a handler that
# drops this module's frames (and contextlib's, for ``substitute``) before IPython formats the traceback.
_HIDDEN_FILES = frozenset({__file__, contextmanager.__code__.co_filename})


def _show_without_check_frames(shell, etype, value, tb, tb_offset=None):
    frames, current = [], tb
    while current is not None:
        if current.tb_frame.f_code.co_filename not in _HIDDEN_FILES:
            frames.append(current)
        current = current.tb_next
    if frames:
        for earlier, later in zip(frames, frames[1:]):
            earlier.tb_next = later
        frames[-1].tb_next = None
        tb = frames[0]
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset)


def _install_ipython_handler() -> None:
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and not shell.custom_exceptions:  # never replace a handler someone else installed
        shell.set_custom_exc((AssertionError,), _show_without_check_frames)


_install_ipython_handler()
