"""Item analysis (autograder/term/items.py): the statistics against hand-computed values, and the HTML report, on a
small class built directly in a gradebook (no kernel, no grading run)."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from autograder.grade import gradebook
from autograder.term import items, variants
from course import bookkeeping_gradebook

LAB = "01_demo"
STUDENTS = range(1, 13)          # student i; a higher i does better on most cells
UNSEEN_LOADER = ("UNSEEN = []\n### BEGIN HIDDEN TESTS\nfrom autograder.demo_check import unseen\nUNSEEN = unseen()\n"
                 "### END HIDDEN TESTS\n")
# Each test cell worth points: (max score, score of student i), in notebook order.
CELLS = {
    "test_alpha": (1, lambda i: float(i > 4)),
    "test_beta__a": (1, lambda i: float(i > 2)),
    "test_beta__b": (2, lambda i: 2.0 if i > 6 else 1.0 if i > 4 else 0.0),   # partial points for 5 and 6
    "test_easy": (1, lambda i: 1.0),                                          # everyone passes
    "test_trap": (1, lambda i: float(i <= 3)),                                # only the weakest pass
    "test_judge__band_60": (1, lambda i: float(i % 2 == 0)),
}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    with bookkeeping_gradebook(root) as gb:
        gb.add_assignment(LAB)
        gb.update_or_create_notebook(LAB, LAB)
        # notebook order, with a 0-point cell that loads the unseen variants and a written answer: neither counts
        layout = [("test_alpha", 1, "code"), ("test_beta__a", 1, "code"), ("test_beta__b", 2, "code"),
                  ("written_why", 2, "markdown"), ("test_easy", 1, "code"), ("test_trap", 1, "code"),
                  ("test_judge__unseen", 0, "code"), ("test_judge__band_60", 1, "code")]
        for name, points, kind in layout:
            gb.update_or_create_grade_cell(name, LAB, LAB, max_score=points, cell_type=kind)
            source = UNSEEN_LOADER if name == "test_judge__unseen" else "expect(True, '')"
            gb.update_or_create_source_cell(name, LAB, LAB, cell_type=kind, locked=True, source=source)
        for i in STUDENTS:
            student = f"s{i:02d}"
            gb.add_student(student)
            gb.add_submission(LAB, student)
            for name, (_, score) in CELLS.items():
                gb.find_grade(name, LAB, LAB, student).auto_score = score(i)
            gb.find_grade("written_why", LAB, LAB, student).manual_score = 2.0
        gb.db.commit()
    # What the graded kernels recorded (trainkit.checks.record_outcomes): student 5's file is not a record (dropped),
    # and "ghost" has a record but no grade (not counted)
    for i in [*STUDENTS, "ghost"]:
        student = i if i == "ghost" else f"s{i:02d}"
        unseen = [{"name": n, "passed": i == "ghost" or bool(ok(i))} for n, ok in VARIANTS.items()]
        record = {"judge": {"the grader's unseen variants": unseen,
                            "the visible variants": [{"name": "seen", "passed": True}]}}
        if i == 5:
            record = {"judge": {"the grader's unseen variants": [{"name": "v-easy", "passed": "yes"}]}}
        variants.keep(root, student, LAB, record)
    return root


VARIANTS = {"v-easy": lambda i: True, "v-mid": lambda i: i > 6, "v-nobody": lambda i: False,
            "v-$\\nosuchcommand{$": lambda i: True}   # a name matplotlib would read as TeX, and fail on


def by_hand_point_biserial(passed: list[bool], rest: list[float]) -> float:
    """(M1 - M0) / s * sqrt(p q), with s the population standard deviation of the rest: the textbook formula."""
    n = len(rest)
    m1 = sum(r for r, p in zip(rest, passed) if p) / sum(passed)
    m0 = sum(r for r, p in zip(rest, passed) if not p) / (n - sum(passed))
    mean = sum(rest) / n
    s = math.sqrt(sum((r - mean) ** 2 for r in rest) / n)
    p = sum(passed) / n
    return (m1 - m0) / s * math.sqrt(p * (1 - p))


def test_the_statistics_of_a_small_case_by_hand():
    s = items.item_stats(np.array([1, 1, 0, 0]), 1.0, np.array([3, 2, 1, 0]))
    assert (s.pass_rate, s.mean, s.strong_pass_rate, s.weak_pass_rate, s.flags) == (0.5, 0.5, 1.0, 0.0, [])
    assert s.discrimination == pytest.approx(2 / math.sqrt(5))            # cov 0.5 / (0.5 * sqrt(1.25))
    reverse = items.item_stats(np.array([1, 1, 0, 0]), 1.0, np.array([0, 1, 2, 3]))
    assert reverse.discrimination == pytest.approx(-2 / math.sqrt(5))
    assert reverse.flags == ["strong students fail"]               # the top quarter (rest 3) fails, the bottom passes
    assert items.item_stats(np.ones(50), 1.0, np.arange(50.0)).flags == ["everyone passes"]
    assert items.item_stats(np.zeros(50), 1.0, np.arange(50.0)).flags == ["nobody passes"]
    hard = items.item_stats(np.array([0, 0, 0, 1]), 1.0, np.arange(4.0))   # hard, but the strong pass most
    assert hard.flags == [] and hard.strong_pass_rate == 1.0
    assert items.item_stats(np.ones(4), 1.0, np.arange(4.0)).discrimination is None   # passing does not vary


def test_the_gradebook_class_against_hand_computed_values(course):
    with gradebook(course) as gb:
        lab = items.read_lab(gb, LAB)
    assert lab.cells == list(CELLS)                       # notebook order; no written answer, no 0-point cell
    assert lab.judgement == {"judge"}                      # its 0-point cell loads unseen variants
    assert lab.scores.shape == (12, len(CELLS))
    cells = lab.cell_stats()
    totals = {i: sum(score(i) for _, score in CELLS.values()) for i in STUDENTS}
    for name, (points, score) in CELLS.items():
        passed = [score(i) == points for i in STUDENTS]
        assert cells[name].pass_rate == pytest.approx(sum(passed) / 12), name
        assert cells[name].mean == pytest.approx(sum(score(i) for i in STUDENTS) / 12), name
        if 0 < sum(passed) < 12:
            rest = [totals[i] - score(i) for i in STUDENTS]
            assert cells[name].discrimination == pytest.approx(by_hand_point_biserial(passed, rest)), name
    assert cells["test_beta__b"].mean == pytest.approx(14 / 12)   # six 2s and two 1s
    assert cells["test_easy"].flags == ["everyone passes"] and cells["test_easy"].discrimination is None
    assert cells["test_trap"].flags == ["strong students fail"] and cells["test_trap"].discrimination < 0
    assert not cells["test_alpha"].flags and cells["test_alpha"].discrimination > 0.5
    exercises = lab.exercise_stats()
    assert list(exercises) == ["alpha", "beta", "easy", "trap", "judge"]
    assert exercises["beta"].pass_rate == pytest.approx(6 / 12)   # both parts full: students 7 to 12
    assert exercises["beta"].max_score == 3
    assert exercises["beta"].mean == pytest.approx((10 + 14) / 12)


def test_the_report_is_self_contained_and_shows_the_flags(course):
    out = course / "items"
    assert items.main(["--course-dir", str(course), "--out", str(out)]) == 0
    index, page = (out / "index.html").read_text(), (out / f"{LAB}.html").read_text()
    assert f"href='{LAB}.html'" in index
    for html in (index, page):
        assert "<script" not in html.lower() and "http://" not in html and "https://" not in html
        assert not re.search(r"""(src|href)=['"](?!data:|#|[\w.-]+\.html)""", html)   # only inline images, local pages
    images = re.findall(r"<img [^>]*src='([^']*)'", page)
    assert len(images) == 3 and all(src.startswith("data:image/png;base64,") for src in images)   # + the variants'
    assert "strong students fail" in page and "everyone passes" in page
    assert "Records from 11 of 12 submissions" in page            # student 5's is not a record; "ghost" has no grade
    rows = dict(re.findall(r"<tr><td class=name>(v-[a-z]+)</td><td>1</td><td>(\d+) %", page))
    assert rows == {"v-easy": "100", "v-mid": str(round(100 * 6 / 11)), "v-nobody": "0"}, rows
    assert re.search(r"v-nobody</td>.*?<td class=flag>nobody passes</td>", page)
    assert "the visible variants (1 variants" in page
    text = re.sub(r"data:image/png;base64,[^']*", "", page)
    assert not re.search(r"\bs\d\d\b", text)                      # summaries, not rows per student


def test_the_variants_of_each_exercise_by_hand(course):
    with gradebook(course) as gb:
        lab = items.read_lab(gb, LAB)
    lab.outcomes = variants.load(course, LAB, set(lab.students))
    assert sorted(lab.outcomes) == [f"s{i:02d}" for i in STUDENTS if i != 5]
    stats = items.variant_stats(lab)
    assert list(stats) == [("judge", "the grader's unseen variants"), ("judge", "the visible variants")]
    mid = stats["judge", "the grader's unseen variants"]["v-mid"]
    passed = [i > 6 for i in STUDENTS if i != 5]
    totals = [float(sum(score(i) for _, score in CELLS.values())) for i in STUDENTS if i != 5]
    assert mid.n == 11 and mid.pass_rate == pytest.approx(6 / 11)
    assert mid.discrimination == pytest.approx(by_hand_point_biserial(passed, totals))


def test_a_kernels_record_is_kept_only_when_it_is_one(tmp_path):
    good = {"ex": {"the grader's unseen variants": [{"name": "a", "passed": True}]}}
    for bad in ([], {"ex": []}, {"ex": {"w": [{"name": "a", "passed": 1}]}}, {"ex": {"w": [{"name": "a"}]}},
                {"": {"w": []}}, {"ex": {"w": [{"name": "a" * 201, "passed": True}]}},
                {f"e{i}": {} for i in range(variants.MAX_EXERCISES + 1)}):
        assert not variants.well_formed(bad), bad
    assert variants.well_formed(good)
    outbox = tmp_path / variants.FILE
    outbox.write_text("not json")
    assert variants.read_outbox(outbox) is None
    outbox.write_text(" " * (variants.MAX_BYTES + 1))
    assert variants.read_outbox(outbox) is None
    outbox.unlink()
    outbox.symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_text('{"ex": {}}')
    assert variants.read_outbox(outbox) is None                       # a link is no record
    outbox = tmp_path / "scratch" / "challenge" / variants.FILE        # what SafeExecute does after each test cell
    outbox.parent.mkdir(parents=True)
    outbox.write_text(json.dumps(good))
    variants.take(outbox)
    outbox.write_text(json.dumps({"ex": {"the visible variants": [{"name": "b", "passed": False}]}}))
    variants.take(outbox)
    assert not outbox.exists()
    assert variants.read_outbox(tmp_path / "scratch" / variants.FILE) == {"ex": {**good["ex"], "the visible variants": [
        {"name": "b", "passed": False}]}}
    variants.keep(tmp_path, "ann", "lab", good)
    assert variants.load(tmp_path, "lab") == {"ann": good}
    variants.keep(tmp_path, "ann", "lab", None)                       # regraded, nothing recorded: the old one goes
    assert variants.load(tmp_path, "lab") == {}


def test_a_band_check_records_its_outcomes_only_at_grading_and_never_fails_its_cell(tmp_path, monkeypatch):
    from trainkit import checks

    assert checks.OUTCOMES_ENV == variants.OUTCOMES_ENV
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(checks.OUTCOMES_ENV, raising=False)
    checks.record_outcomes("ex", "the visible variants", [("a", True)])      # a student's own run: nothing written
    assert list(tmp_path.iterdir()) == []
    out = tmp_path / variants.FILE
    monkeypatch.setenv(checks.OUTCOMES_ENV, str(out))
    checks.record_outcomes("ex", "the grader's unseen variants", [("a", True), ("b", 0)])
    checks.record_outcomes("ex", "the grader's unseen variants", [("a", True), ("b", 0)])    # a band cell again
    checks.record_outcomes("ex2", "the visible variants", iter([("c", False)]))
    assert variants.read_outbox(out) == {
        "ex": {"the grader's unseen variants": [{"name": "a", "passed": True}, {"name": "b", "passed": False}]},
        "ex2": {"the visible variants": [{"name": "c", "passed": False}]}}
    checks.record_outcomes("ex", "w", [1, 2])                                  # not pairs: no error, nothing changed
    assert "w" not in variants.read_outbox(out)["ex"]
    monkeypatch.setenv(checks.OUTCOMES_ENV, str(tmp_path / "no" / "such" / "folder" / variants.FILE))
    checks.record_outcomes("ex", "w", [("a", True)])                           # cannot write: no error either
