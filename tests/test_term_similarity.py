"""Similarity (autograder/term/similarity.py): near-copies rank first; what the course dictates is never evidence.

A synthetic class of lab 2: honest answers to exercise 1 written ten ways, a pair of near-copies (renamed variables,
reordered lines, other comments) and a pair that submitted only the starter code. Seconds: no notebook is run.
"""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import nbformat
import numpy as np
import pytest

from autograder.term import similarity as sim
from course import load_catalogue

ROOT = Path(__file__).resolve().parents[1]
LAB = "02_lr_schedules"
NB = f"{LAB}.ipynb"
CELL = "warmup_cosine_lr"
HEAD = ('def warmup_cosine_lr(step: int, max_lr: float, min_lr: float, warmup_steps: int, total_steps: int) -> float:\n'
        '    """Linear warmup to max_lr, cosine decay to min_lr at total_steps, then min_lr."""\n')

HONEST = [
    load_catalogue(LAB).WC_OK.split(":\n", 1)[1],    # the catalogue's correct one, its body

    """    checks = [step < 0, warmup_steps < 0, total_steps <= warmup_steps, min_lr < 0, min_lr > max_lr]
    if any(checks):
        raise ValueError(f"bad schedule {step} {warmup_steps} {total_steps}")
    s = min(step, total_steps)
    if s >= warmup_steps:
        t = (s - warmup_steps) / float(total_steps - warmup_steps)
        return float(min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(t * math.pi)))
    return float(max_lr) * (s + 1) / (warmup_steps + 1)
""",
    """    if step < 0:
        raise ValueError("step must be >= 0")
    if warmup_steps < 0:
        raise ValueError("warmup must be >= 0")
    if total_steps <= warmup_steps:
        raise ValueError("total_steps must exceed warmup_steps")
    if min_lr < 0 or min_lr > max_lr:
        raise ValueError("need 0 <= min_lr <= max_lr")
    lr = min_lr
    if step < warmup_steps:
        lr = max_lr * (step + 1) / (warmup_steps + 1)
    elif step <= total_steps:
        cosine = math.cos(math.pi * (step - warmup_steps) / (total_steps - warmup_steps))
        lr = min_lr + (max_lr - min_lr) * (cosine + 1) / 2
    return float(lr)
""",
    """    ok = step >= 0 and warmup_steps >= 0 and total_steps > warmup_steps and 0 <= min_lr <= max_lr
    if not ok:
        raise ValueError
    decay_len = total_steps - warmup_steps
    if step >= total_steps:
        return min_lr * 1.0
    elif step >= warmup_steps:
        angle = math.pi * (step - warmup_steps) / decay_len
        return min_lr + (max_lr - min_lr) * (0.5 + 0.5 * math.cos(angle))
    else:
        return (step + 1) * max_lr / (warmup_steps + 1)
""",
    """    import numpy as np
    if min(step, warmup_steps) < 0 or total_steps - warmup_steps < 1 or not (0 <= min_lr <= max_lr):
        raise ValueError("invalid")
    warm = max_lr * (step + 1.0) / (warmup_steps + 1.0)
    frac = np.clip((step - warmup_steps) / (total_steps - warmup_steps), 0.0, 1.0)
    decayed = min_lr + (max_lr - min_lr) * 0.5 * (1 + np.cos(np.pi * frac))
    return float(warm if step < warmup_steps else decayed)
""",
    """    for name, bad in (("step", step < 0), ("warmup_steps", warmup_steps < 0),
                      ("total_steps", total_steps <= warmup_steps), ("min_lr", not 0 <= min_lr <= max_lr)):
        if bad:
            raise ValueError(name)
    def cos_decay(s):
        return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * s))
    if step < warmup_steps:
        return float((step + 1) / (warmup_steps + 1) * max_lr)
    return float(cos_decay(min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))))
""",
    """    assert_ok = lambda cond, msg: None if cond else (_ for _ in ()).throw(ValueError(msg))
    assert_ok(step >= 0, "negative step")
    assert_ok(warmup_steps >= 0, "negative warmup")
    assert_ok(total_steps > warmup_steps, "no decay phase")
    assert_ok(0 <= min_lr <= max_lr, "floor out of range")
    span = max(0, min(step, total_steps) - warmup_steps) / (total_steps - warmup_steps)
    ramp = min(1.0, (step + 1) / (warmup_steps + 1))
    return float(ramp * max_lr) if step < warmup_steps else float(min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * span)) / 2)
""",
    """    W, T, s = warmup_steps, total_steps, step
    if s < 0 or W < 0 or T <= W:
        raise ValueError("steps out of range")
    if not 0 <= min_lr <= max_lr:
        raise ValueError("min_lr out of range")
    if s > T:
        s = T
    if s < W:
        out = max_lr * (s + 1) / (W + 1)
    else:
        out = min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * (s - W) / (T - W))) * 0.5
    return float(out)
""",
]

ORIGINAL = """    # validate the arguments first
    if total_steps <= warmup_steps:
        raise ValueError(f"total_steps={total_steps} must be > warmup_steps={warmup_steps}")
    if step < 0 or warmup_steps < 0:
        raise ValueError(f"negative step={step} or warmup_steps={warmup_steps}")
    if min_lr > max_lr or min_lr < 0:
        raise ValueError(f"min_lr={min_lr} must lie in [0, max_lr]")
    phase_len = total_steps - warmup_steps
    clipped = min(step, total_steps)
    # the ramp, then the half cosine
    if clipped < warmup_steps:
        result = max_lr * (clipped + 1) / (warmup_steps + 1)
    else:
        position = (clipped - warmup_steps) / phase_len
        result = min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * position)) / 2
    return float(result)
"""
# the same code: other names, the two independent checks and the two independent assignments swapped, other comments
NEAR_COPY = """    if step < 0 or warmup_steps < 0:
        raise ValueError(f"negative step={step} or warmup_steps={warmup_steps}")
    # check everything
    if total_steps <= warmup_steps:
        raise ValueError(f"total_steps={total_steps} must be > warmup_steps={warmup_steps}")
    if min_lr > max_lr or min_lr < 0:
        raise ValueError(f"min_lr={min_lr} must lie in [0, max_lr]")
    s = min(step, total_steps)
    n_decay = total_steps - warmup_steps
    # warmup part
    if s < warmup_steps:
        value = max_lr * (s + 1) / (warmup_steps + 1)
    else:  # decay part
        where = (s - warmup_steps) / n_decay
        value = min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * where)) / 2
    return float(value)
"""


def release():
    return nbformat.read(str(ROOT / "labs" / LAB / NB), as_version=4)


def with_answer(body: str | None):
    nb = copy.deepcopy(release())
    if body is not None:
        (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == CELL]
        cell.source = HEAD + body
    return nb


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    course = tmp_path_factory.mktemp("course")
    for folder in ("labs", "solutions"):
        (course / folder / LAB).mkdir(parents=True)
        shutil.copy(ROOT / folder / LAB / NB, course / folder / LAB / NB)
    answers = {f"honest{i}": body for i, body in enumerate(HONEST)}
    answers |= {"copy_a": ORIGINAL, "copy_b": NEAR_COPY, "starter_a": None, "starter_b": None}
    for student, body in answers.items():
        (course / "submitted" / student / LAB).mkdir(parents=True)
        nbformat.write(with_answer(body), str(course / "submitted" / student / LAB / NB))
    return course


@pytest.fixture(scope="module")
def result(course):
    return sim.analyse(course, LAB)


def test_near_copies_rank_first_and_stand_out(result):
    assert len(result.students) == 12 and len(result.pairs) == 66
    top = result.pairs[0]
    assert {top.a, top.b} == {"copy_a", "copy_b"}, [(p.a, p.b, round(p.similarity, 2)) for p in result.pairs[:5]]
    assert top.flagged and top.similarity > 0.6 and top.z >= 3.5
    second = result.pairs[1]
    assert top.similarity - second.similarity > 0.3, "the copies should stand well clear of the honest pairs"
    assert [p for p in result.pairs if p.flagged] == [top], "only the near-copies stand out"


def test_starter_code_alone_is_not_evidence(result):
    starter = next(p for p in result.pairs if {p.a, p.b} == {"starter_a", "starter_b"})
    assert starter.similarity == 0 and not starter.flagged and not starter.cells
    # the same two notebooks compared raw (nothing left out) are identical: the exclusions are what clears them
    code = sim.answer_cells(release())[CELL]
    raw_a, raw_b = sim.fingerprint(code, 25), sim.fingerprint(code, 25)
    _, (s_a, s_b), _ = sim.compare_files(raw_a, raw_b)
    assert s_a == s_b == 1.0


def test_dictated_lines_are_left_out():
    lines = sim.dictated_lines([release()], [])
    kept = sim.strip_dictated(HEAD + "    # YOUR CODE HERE\n    raise NotImplementedError()\n    x = 1\n", lines)
    assert kept == "    x = 1"


def test_z_is_against_the_class_not_an_absolute_bar():
    # a lab where every pair is 0.8 similar (dictated code) flags nobody; one pair far above its class does
    z, med, _ = sim.class_z(np.array([0.8] * 20 + [0.82]), floor=0.05)
    assert med == 0.8 and z.max() < 1
    z, _, _ = sim.class_z(np.array([0.1, 0.12, 0.08, 0.11, 0.09] * 6 + [0.7]), floor=0.05)
    assert z.argmax() == 30 and z.max() > 3.5


def test_cli_writes_the_report_and_no_grade(course, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        sim.main(["--help"])
    assert exit_.value.code == 0 and "never a grade" in capsys.readouterr().out
    assert sim.main(["02", "--course", str(course), "--out", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out
    assert "copy_a / copy_b" in printed and "not a grade" in printed
    page = (tmp_path / "report" / "similarity.html").read_text()
    assert "not a verdict and not a grade" in page and "<script" not in page and "http" not in page
    assert "<mark>" in page and "copy_b" in page
    rows = (tmp_path / "report" / "pairs.csv").read_text().splitlines()
    assert len(rows) == 67 and rows[1].startswith("copy_a,copy_b,")
    assert not (course / "gradebook.db").exists() and not (course / "grades").exists()
