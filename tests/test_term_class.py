"""One fixture class through a whole term's bookkeeping (issue 41's proof): twelve students of lab 2 (perfect, blank,
partial, late by minutes, hours and days, with and without an extension and late days, a forged timestamp, a student
missing from the roster, two near-copies), put in a gradebook through nbgrader's API as autograde leaves it (no
kernel: tests/test_term_policy.py grades one submission through `make grade` itself), then every term tool on the
same class: the course file's penalties, the feedback's lateness line, the Canvas and plain exports, the item
analysis and the similarity report. Seconds."""
from __future__ import annotations

import csv
import datetime as dt
import shutil

import nbformat
import pytest

from autograder.grade import gradebook
from autograder.term import canvas, items, policy
from autograder.term import similarity as sim
from course import ROOT, bookkeeping_gradebook
from test_term_similarity import HONEST, NEAR_COPY, ORIGINAL, with_answer

LAB1, LAB2 = "01_signal_propagation", "02_lr_schedules"
NB2 = f"{LAB2}.ipynb"
DUE1, DUE2 = dt.datetime(2025, 10, 6, 22, 59), dt.datetime(2025, 10, 13, 22, 59)    # UTC
TERM = f"""version = 1
[policy]
grace_minutes = 15
penalty_per_hour = 0.05
cap = 0.5
cutoff_days = 3
late_days = 1
[labs]
{LAB1} = 2025-10-06T23:59:00+01:00
{LAB2} = 2025-10-13T23:59:00+01:00
[[extension]]
student = "extended"
lab = "{LAB2}"
hours = 72
note = "a doctor's note"
"""
ONE_MORE_HONEST = """    if step < 0 or warmup_steps < 0 or total_steps <= warmup_steps or not 0 <= min_lr <= max_lr:
        raise ValueError(f"invalid schedule arguments: {(step, warmup_steps, total_steps, min_lr, max_lr)}")
    if step >= total_steps:
        return float(min_lr)
    if step < warmup_steps:
        return float(max_lr * (step + 1) / (warmup_steps + 1))
    done = (step - warmup_steps) / (total_steps - warmup_steps)
    return float(min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * done)))
"""
# student: (lab 2's submission time relative to its due date, what they wrote, their score)
LATE = dt.timedelta
CLASS = {
    "perfect": (LATE(hours=-30), HONEST[0], "all"),
    "blank": (LATE(hours=-2), None, "none"),               # the released notebook as fetched
    "partial": (LATE(days=-1), HONEST[1], "half"),        # missing from the roster
    "minutes": (LATE(minutes=10), HONEST[2], "all"),       # within the grace period
    "hours": (LATE(hours=5), HONEST[3], "all"),            # his one late day covers it
    "hours_no_days": (LATE(hours=5), HONEST[4], "all"),    # spent her late day on lab 1
    "days": (LATE(days=2), HONEST[5], "all"),              # one late day, then a day late: the cap
    "cutoff": (LATE(days=5), HONEST[6], "all"),            # past the cut-off even with the late day: 0
    "extended": (LATE(hours=60), HONEST[7], "all"),        # 72 h extension: on time
    "forged": (LATE(days=2), ONE_MORE_HONEST, "all"),      # claims in the notebook to be on time
    "copy_a": (LATE(hours=-5), ORIGINAL, "all"),
    "copy_b": (LATE(hours=-4), NEAR_COPY, "all"),
}
NOT_IN_ROSTER, NOT_IN_CLASS = "partial", "zed"


def exchange_time(when: dt.datetime) -> str:
    """As nbgrader's exchange writes timestamp.txt."""
    return f"{when:%Y-%m-%d %H:%M:%S}.000000 UTC"


def lab2_cells() -> list[tuple[str, float, str, str]]:
    """(grade id, points, cell type, source) of lab 2's graded cells, in notebook order, from its source notebook."""
    nb = nbformat.read(ROOT / "solutions" / LAB2 / NB2, as_version=4)
    return [(c.metadata.nbgrader["grade_id"], float(c.metadata.nbgrader["points"]), c.cell_type, c.source)
            for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]


def score(kind: str, cells: list[tuple[str, float, str, str]]) -> dict[str, float]:
    code = [c for c in cells if c[2] == "code"]
    if kind == "all":
        return {name: points for name, points, _, _ in code}
    if kind == "none":
        return {name: 0.0 for name, _, _, _ in code}
    return {name: (points if i < len(code) // 2 else 0.0) for i, (name, points, _, _) in enumerate(code)}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    for folder in ("labs", "solutions"):
        (root / folder / LAB2).mkdir(parents=True)
        shutil.copy(ROOT / folder / LAB2 / NB2, root / folder / LAB2 / NB2)
    (root / "solutions" / LAB1).mkdir()      # the course file may name only the course's labs
    (root / policy.COURSE_FILE).write_text(TERM, encoding="utf-8")
    cells = lab2_cells()
    with bookkeeping_gradebook(root) as gb:
        gb.add_assignment(LAB1)
        gb.update_or_create_notebook(LAB1, LAB1)
        gb.update_or_create_grade_cell("test_lab1", LAB1, LAB1, max_score=4, cell_type="code")
        gb.add_assignment(LAB2)
        gb.update_or_create_notebook(LAB2, LAB2)
        for name, points, kind, source in cells:
            gb.update_or_create_grade_cell(name, LAB2, LAB2, max_score=points, cell_type=kind)
            gb.update_or_create_source_cell(name, LAB2, LAB2, cell_type=kind, locked=True, source=source)
        for student, (late, body, kind) in CLASS.items():
            when = DUE2 + late
            folder = root / "submitted" / student / LAB2
            folder.mkdir(parents=True)
            nb = with_answer(body)
            if student == "forged":      # what a student can write: the notebook's own claims
                nb.metadata["nbgrader"] = {**nb.metadata.get("nbgrader", {}), "timestamp": exchange_time(DUE2)}
                nb.metadata["submitted_at"] = f"{DUE2:%Y-%m-%dT%H:%M:%SZ}"
            nbformat.write(nb, str(folder / NB2))
            (folder / "timestamp.txt").write_text(exchange_time(when))   # what the exchange wrote at submit
            gb.add_student(student, first_name=student.title(), last_name="Student")
            gb.add_submission(LAB2, student, timestamp=exchange_time(when))
            for name, value in score(kind, cells).items():
                grade = gb.find_grade(name, LAB2, LAB2, student)
                grade.auto_score, grade.needs_manual_grade = value, False
            written = gb.find_grade("written_extend_run", LAB2, LAB2, student)
            written.manual_score, written.needs_manual_grade = (0.0 if kind == "none" else 2.0), False
        # hours_no_days handed lab 1 in 20 hours late, before lab 2: her one late day went there
        when = DUE1 + dt.timedelta(hours=20)
        (root / "submitted" / "hours_no_days" / LAB1).mkdir(parents=True)
        (root / "submitted" / "hours_no_days" / LAB1 / "timestamp.txt").write_text(exchange_time(when))
        gb.add_submission(LAB1, "hours_no_days", timestamp=exchange_time(when))
        gb.find_grade("test_lab1", LAB1, LAB1, "hours_no_days").auto_score = 4.0
        gb.db.commit()
        policy.sync(gb, policy.load(root), root)     # what make grade does after grading
    return root


def penalties(course) -> dict[str, tuple[float, float | None, dt.timedelta | None]]:
    """{student: (lab 2 score, its late penalty, its deadline's move)}."""
    with gradebook(course) as gb:
        return {sub.student.id: (sub.score, sub.notebooks[0].late_submission_penalty, sub.extension)
                for sub in gb.find_assignment(LAB2).submissions}


def test_every_penalty_follows_the_course_file(course):
    got = penalties(course)
    full = got["perfect"][0]
    half = got["partial"][0]
    assert full == sum(p for _, p, _, _ in lab2_cells()) and 0 < half < full and got["blank"][0] == 0
    day = dt.timedelta(days=1)
    expected = {
        "perfect": (full, None, None), "blank": (0.0, None, None), "partial": (half, None, None),
        "minutes": (full, 0.0, None),                          # late, within the grace: nothing charged
        "hours": (full, None, day),                            # the late day moved his deadline
        "hours_no_days": (full, 0.25 * full, None),            # 5 started hours at 5 %
        "days": (full, 0.5 * full, day),                       # 24 h past the late day: capped at 50 %
        "cutoff": (full, full, None),                          # 5 days: past the cut-off, no late day can save it
        "extended": (full, None, dt.timedelta(hours=72)),
        "forged": (full, 0.5 * full, day),                     # the exchange's time, as "days"
        "copy_a": (full, None, None), "copy_b": (full, None, None),
    }
    assert {s: (a, pytest.approx(b) if b else b, c) for s, (a, b, c) in expected.items()} == got


def test_the_feedback_says_how_late_and_what_it_cost(course):
    term = policy.load(course)
    with gradebook(course) as gb:
        note = {student: policy.lateness_note(gb, student, LAB2, term) for student in CLASS}
    assert "On time: no penalty." in note["perfect"] and "Late days left for the term: 1 of 1." in note["perfect"]
    assert "10 min late, within the 15-minute grace period: no penalty." in note["minutes"]
    assert "1 of your late days moved it" in note["hours"] and "On time" in note["hours"]
    assert "Late days left for the term: 0 of 1." in note["hours"]
    assert "5 h late: 25 % of the score" in note["hours_no_days"]
    assert "past the cut-off of 3 days: the score is 0" in note["cutoff"]
    assert "your extension moved it to Thu 16 Oct 2025, 23:59 (UTC+01:00)" in note["extended"]
    assert "Submitted Wed 15 Oct 2025, 23:59 (UTC+01:00)" in note["forged"] and "50 % of the score" in note["forged"]
    assert all("doctor" not in text for text in note.values()), "the instructor's note is never shown"


def test_the_lms_exports_name_who_is_missing_and_charge_the_penalty(course, tmp_path):
    roster = tmp_path / "roster.csv"
    with open(roster, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["username", "Student", "ID", "SIS User ID", "SIS Login ID", "Section"])
        for i, student in enumerate(CLASS):
            if student != NOT_IN_ROSTER:
                w.writerow([student, f"Student, {student.title()}", 100 + i, f"U{i:03d}", student, "A"])
        w.writerow([NOT_IN_CLASS, "Zed, Zoe", 999, "U999", "zed", "B"])
    (tmp_path / "map.csv").write_text(f"lab,name,id\n{LAB2},Lab 2: LR schedules,7702\n")
    out = tmp_path / "canvas.csv"
    export = canvas.write_canvas(course, roster, out, assignments=tmp_path / "map.csv", labs=[LAB2])
    assert export.not_in_roster == [NOT_IN_ROSTER] and export.not_in_class == [NOT_IN_CLASS]
    rows = list(csv.reader(open(out, newline="", encoding="utf-8")))
    assert rows[0][-1] == "Lab 2: LR schedules (7702)" and rows[1][0] == "Points Possible"
    got = {row[3]: float(row[-1]) for row in rows[2:]}        # by SIS Login ID
    full = penalties(course)["perfect"][0]
    assert len(got) == 11 and NOT_IN_ROSTER not in got
    assert got["perfect"] == got["extended"] == got["hours"] == got["minutes"] == full
    assert got["hours_no_days"] == pytest.approx(0.75 * full) and got["days"] == got["forged"] == pytest.approx(full / 2)
    assert got["cutoff"] == 0 and got["blank"] == 0

    plain = tmp_path / "plain.csv"
    canvas.write_plain(course, plain, labs=[LAB2])
    students = [row[0] for row in csv.reader(open(plain, newline="", encoding="utf-8"))][1:]
    assert sorted(students) == sorted(CLASS), "the plain file has every student of the class, the unrostered too"


def test_the_item_analysis_reads_the_whole_class(course, tmp_path):
    (lab,) = items.write_report(course, tmp_path / "items", labs=[LAB2])
    assert lab.scores.shape == (12, len(lab.cells)) and lab.judgement == {"choose_schedule"}
    stats = lab.cell_stats()
    first, last = lab.cells[0], lab.cells[-1]
    assert stats[first].pass_rate == pytest.approx(11 / 12), "all but the blank pass the first cell"
    assert stats[last].pass_rate == pytest.approx(10 / 12), "the blank and the partial fail the last"
    page = (tmp_path / "items" / f"{LAB2}.html").read_text(encoding="utf-8")
    assert "choose_schedule" in page and "<script" not in page


def test_the_near_copies_stand_out_of_this_class(course):
    result = sim.analyse(course, LAB2)
    assert len(result.students) == 12
    top = result.pairs[0]
    assert {top.a, top.b} == {"copy_a", "copy_b"} and top.flagged
    assert [p for p in result.pairs if p.flagged] == [top], [(p.a, p.b, round(p.z, 1)) for p in result.pairs[:4]]
    with gradebook(course) as gb:
        assert gb.find_submission(LAB2, "copy_a").score == penalties(course)["perfect"][0], "evidence, not a grade"

