"""Every judgement exercise's variants in one shape (trainkit.labs.BANKS): the lab's visible() and the grader's
unseen() return lists of the same kind, a stored bank can be rebuilt by one command, and no unseen variant is a
visible one (a student who passes the previews by memorising them must not meet them again at grading)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from autograder import banks, lending
from trainkit.labs import BANKS

ROOT = Path(__file__).resolve().parents[1]
# what a variant is, for comparing visible with unseen: its settings, without its name or the numbers measured on it
MEASURED = {"name", "label", "reference_loss", "bar", "best", "floor", "best_lr", "sweep", "best_peak"}


def settings(variant) -> str:
    if hasattr(variant, "spec"):
        variant = variant.spec
    elif dataclasses.is_dataclass(variant):
        variant = dataclasses.asdict(variant)
    return json.dumps({k: v for k, v in variant.items() if k not in MEASURED}, sort_keys=True, default=str)


@pytest.mark.parametrize("bank", BANKS, ids=[b.name for b in BANKS])
def test_a_bank_has_the_one_shape(bank):
    assert (ROOT / "solutions" / bank.lab).is_dir(), f"{bank.name}: no lab {bank.lab}"
    assert bank.visible.startswith(f"trainkit.labs.lab{bank.lab}."), f"{bank.name}: visible() belongs to its lab"
    visible, unseen = bank.load_visible(), banks.load_unseen(bank)
    assert isinstance(visible, list) and isinstance(unseen, list) and visible and unseen
    assert {type(v) for v in visible} == {type(v) for v in unseen}, f"{bank.name}: visible and unseen differ in kind"
    if bank.stored:
        assert hasattr(banks.grader_module(bank), "build"), f"{bank.name}: a stored bank's module has build()"
    shown = {settings(v) for v in visible}
    again = [settings(v) for v in unseen if settings(v) in shown]
    assert not again, f"{bank.name}: unseen variants that are visible ones: {again[:3]}"


def test_every_grader_module_with_variants_is_a_bank():
    """Deny by default: a grader's module of autograder/unseen/ that defines unseen() is a bank; a new one that is not
    registered fails here (lending hides it either way)."""
    registered = {b.unseen.split(":")[0].removeprefix("autograder.") for b in BANKS}
    with_unseen = {name for name in lending.SECRET_MODULES
                   if "def unseen(" in (lending.unseen_dir() / f"{name}.py").read_text()}
    assert with_unseen == registered


def test_a_grader_module_with_build_stores_a_bank():
    for module in {banks.grader_module(b) for b in BANKS}:
        mine = [b for b in BANKS if banks.grader_module(b) is module]
        assert hasattr(module, "build") == any(b.stored for b in mine), module.__name__


def test_banks_cli_lists_and_refuses_in_words(capsys):
    banks.main(["list"])
    out = capsys.readouterr().out
    assert all(b.name in out for b in BANKS)
    with pytest.raises(SystemExit, match="no bank 'nope'"):
        banks.main(["build", "nope"])
    for name in ("init", "repro_targets"):            # defined in code; the second shares repro's module
        with pytest.raises(SystemExit, match="nothing to build"):
            banks.main(["build", name])


def test_a_renamed_copy_of_a_visible_variant_is_caught():
    """The comparison above sees through a new name and a re-measured number, so it can fail."""
    shown = BANKS[0].load_visible()[0]
    copied = dict(shown, name="another name", bar=1.0)
    assert settings(copied) == settings(shown)
    assert settings(dict(shown, depth=shown.get("depth", 0) + 1)) != settings(shown)
