"""The helper package: self-check logic, synthetic data, device choice, models, check helpers."""
from __future__ import annotations

import math
import warnings

import pytest
import torch

import trainkit
from trainkit.checks import expect, expect_close, expect_raises, expect_std, substitute
from trainkit import selfcheck
from trainkit.data import MarkovSource, uniform_loss
from trainkit.models import TinyGPTConfig, TinyGPT, mlp


def test_selfcheck_hides_and_checks_answers(capsys):
    token = selfcheck.encode("b")
    assert "b" != token and selfcheck.decode(token) == "b"
    # The older form (encoded strings in the call) keeps working.
    q = selfcheck.choice("?", ["x", "y", "z"], answer=token, explanation=selfcheck.encode("because"))
    assert not q.check("a") and "Not quite" in capsys.readouterr().out
    assert q.check("B") and "because" in capsys.readouterr().out
    n = selfcheck.number("?", answer=selfcheck.encode("0.0255"), rel_tol=0.05)
    assert n.check(0.026) and not n.check(0.044) and not n.check("not a number")
    assert "0.0255" in n.reveal()


def test_selfcheck_reads_answers_from_the_answer_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(selfcheck, "ANSWERS", tmp_path)
    selfcheck.store("42.1", "c", "because c")
    selfcheck.store("42.2", "0.5")
    assert "because c" not in (tmp_path / "42.json").read_text()  # stored encoded, not in plain sight
    q = selfcheck.choice("1. ?", ["x", "y", "z"], key="42.1")
    assert q.check("c") and "because c" in capsys.readouterr().out
    assert selfcheck.number("2. ?", key="42.2").check("0.501")
    with pytest.raises(KeyError, match="selfcheck set 42.3"):
        selfcheck.number("3. ?", key="42.3")
    with pytest.raises(ValueError, match="NN.n"):
        selfcheck.number("?", key="42.0")


def test_selfcheck_never_counts_an_empty_answer():
    q = selfcheck.choice("1. ?", ["x", "y"], answer=selfcheck.encode("a"))
    for empty in (None, "", "  ", "q"):  # nothing chosen, nothing typed, not an option
        ok, text = q._feedback(empty)
        assert not ok and "attempt" not in text
    assert q.attempts == 0
    assert q._feedback("b") == (False, "Not quite (attempt 1): think again, or press Reveal.")
    n = selfcheck.number("2. ?", answer=selfcheck.encode("3"))
    for empty in (None, "", "three"):
        assert not n._feedback(empty)[0]
    assert n.attempts == 0 and n._feedback("3.0")[0] and n.attempts == 1


def test_selfcheck_shows_a_widget_live_and_a_reveal_in_static_html(monkeypatch):
    import ipywidgets
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, raw=False: shown.append((obj, raw)))
    n = selfcheck.number("1. How many?", answer=selfcheck.encode("3"), explanation=selfcheck.encode("three"))
    n._ipython_display_()
    (bundle, raw), = shown
    assert raw and "application/vnd.jupyter.widget-view+json" in bundle  # JupyterLab: the live widget
    html = bundle["text/html"]                                         # a static page: question + reveal
    assert "<details>" in html and "Show answer" in html and "three" in html and "1. How many?" in html
    assert "How many?" in bundle["text/plain"]
    entry = n._widget_input(ipywidgets)
    assert isinstance(entry, ipywidgets.Text) and entry.value == ""  # starts empty, not at 0


def test_every_lesson_self_check_reads_its_answer_file_numbered_from_1():
    import ast
    import json
    from pathlib import Path

    import nbformat
    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.glob("lessons/*_lesson.ipynb")):
        nn = path.name[:2]
        keys = []
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "code" or "selfcheck." not in cell.source:
                continue
            for call in ast.walk(ast.parse(cell.source)):
                if isinstance(call, ast.Call) and getattr(call.func, "attr", "") in ("choice", "number") \
                        and getattr(call.func.value, "id", "") == "selfcheck":
                    kw = {k.arg: k.value for k in call.keywords}
                    assert "key" in kw and "answer" not in kw and "explanation" not in kw, (
                        f"{path.name}: self-checks name their answer by key='{nn}.n' (answer file), "
                        f"not by encoded strings in the cell")
                    key = ast.literal_eval(kw["key"])
                    prompt = ast.literal_eval(call.args[0])
                    keys.append(key)
                    n = len(keys)
                    assert key == f"{nn}.{n}", f"{path.name}: question {n} should have key '{nn}.{n}', got {key!r}"
                    assert prompt.startswith(f"{n}. "), f"{path.name}: question {n}'s prompt should start '{n}. '"
                    args = [ast.literal_eval(a) for a in call.args] + \
                           [ast.literal_eval(v) for k, v in kw.items() if k != "key"]
                    getattr(selfcheck, call.func.attr)(*args[:2] if call.func.attr == "choice" else args[:1],
                                                       key=key)  # well-formed: decodes, valid letter or number
        stored = json.loads((selfcheck.ANSWERS / f"{nn}.json").read_text())
        assert sorted(stored, key=int) == [k.split(".")[1] for k in keys], (
            f"trainkit/answers/{nn}.json should hold exactly the answers of {path.name}'s questions")


def test_markov_source_entropy_rate_matches_sampled_loss():
    source = MarkovSource(vocab_size=16, sharpness=2.0, seed=1)
    x, y = source.sample(256, 256, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (256, 256) and torch.equal(x[:, 1:], y[:, :-1])
    nll = -torch.log(source.P[x, y]).mean().item()  # the true model's loss on its own samples
    assert nll == pytest.approx(source.entropy_rate(), rel=0.02)
    assert source.entropy_rate() < uniform_loss(16) == pytest.approx(math.log(16))


def test_device_helpers(monkeypatch):
    monkeypatch.setenv("TRAINKIT_FORCE_CPU", "1")
    assert trainkit.pick_device().type == "cpu"
    assert trainkit.by_device(cpu=1, gpu=2) == 1
    assert trainkit.by_device(cpu=1, gpu=2, device=torch.device("cuda")) == 2


def test_setup_notebook_strict_mode_turns_warnings_into_errors(monkeypatch):
    monkeypatch.setenv("TRAINKIT_STRICT_WARNINGS", "1")
    with warnings.catch_warnings():
        trainkit.setup_notebook(seed=0)
        with pytest.raises(UserWarning):
            warnings.warn("x")
    with warnings.catch_warnings():
        trainkit.setup_notebook(seed=0, quiet_warnings=True)  # labs: quiet even in strict mode
        warnings.warn("x")


def test_models_run_and_tie():
    model = TinyGPT(TinyGPTConfig(tie_weights=True))
    assert model.lm_head.weight is model.transformer.wte.weight
    logits, loss = model(torch.zeros(2, 8, dtype=torch.long), torch.zeros(2, 8, dtype=torch.long))
    assert logits.shape == (2, 8, 64) and loss.ndim == 0
    assert mlp(4, 8, 2, 3)(torch.randn(5, 4)).shape == (5, 3)


def test_check_helpers_fail_with_clear_messages():
    expect_close(torch.ones(3), torch.ones(3), "ones")
    with pytest.raises(AssertionError, match=r"lr at step 0: expected 0, got 0.0003"):
        expect_close(3e-4, 0.0, "lr at step 0", atol=1e-12)
    with pytest.raises(AssertionError, match="expected shape"):
        expect_close(torch.ones(2), torch.ones(3), "shape")
    with pytest.raises(AssertionError, match="forget to return"):
        expect_close(None, 1.0, "value")
    with pytest.raises(AssertionError, match="expected ValueError, but nothing was raised"):
        expect_raises(ValueError, lambda: None, "f()")
    with pytest.raises(AssertionError, match="expected ValueError, got KeyError"):
        expect_raises(ValueError, lambda: {}["k"], "f()")
    assert expect_raises(ValueError, lambda: int("x"), "int('x')") is None
    with pytest.raises(AssertionError, match="expected std"):
        expect_std(torch.randn(10_000), 2.0, "w")
    with pytest.raises(AssertionError, match="boom"):
        expect(False, "boom")
    ns = {"f": 1}
    with substitute(ns, f=2, g=3):
        assert ns == {"f": 2, "g": 3}
    assert ns == {"f": 1}


def test_log_axes_draw_without_font_messages_when_the_font_list_lacks_matplotlibs_fonts():
    """A font list without matplotlib's STIX and Computer Modern fonts (a cache written by another installation)
    made a log axis print ~20 'findfont: ... not found' lines to stderr; the course's subplots() prevents it."""
    import subprocess
    import sys
    script = (
        "import io, sys\n"
        "import matplotlib\n"
        "matplotlib.use('agg')\n"
        "from matplotlib import font_manager as fm\n"
        "fm.fontManager.ttflist = [f for f in fm.fontManager.ttflist if not f.name.startswith(('STIX', 'cm'))]\n"
        "fm.fontManager._findfont_cached.cache_clear()\n"
        "import matplotlib.pyplot as plt\n"
        "from trainkit.plotting import label, subplots\n"
        "fig, ax = plt.subplots() if sys.argv[1] == 'plain' else subplots()\n"
        "ax.plot([1, 2, 3], [1e-3, 1e-1, 0.5], label='x')\n"
        "label(ax, 'error', 'k', 'relative error', logy=True)\n"
        "fig.savefig(io.BytesIO(), format='png')\n"
    )
    runs = {how: subprocess.run([sys.executable, "-c", script, how], capture_output=True, text=True, timeout=120)
            for how in ["plain", "course"]}
    assert runs["plain"].returncode == 0 and "findfont: Font family ['STIXGeneral'] not found" in runs["plain"].stderr, \
        "the reproduction no longer reproduces: matplotlib changed how mathtext finds its fonts"
    assert runs["course"].returncode == 0 and runs["course"].stderr == "", runs["course"].stderr[-2000:]
