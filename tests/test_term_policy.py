"""Deadlines, the late policy and extensions (autograder/term/policy.py): the bookkeeping, on nbgrader's own gradebook
and its AssignLatePenalties, with no kernel. Seconds, not minutes."""
from __future__ import annotations

import csv
import datetime as dt
import re
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook
from nbgrader.preprocessors import AssignLatePenalties
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from autograder import grade
from autograder.feedback import FeedbackLabels
from autograder.term import policy
from course import ROOT

LAB1, LAB2 = "01_signal_propagation", "02_lr_schedules"
NB = "lab"
# Lab 1 is due 22:59 UTC on 6 Oct, lab 2 at 22:59 UTC on 13 Oct.
HOURLY = """version = 1
[policy]
grace_minutes = 15
penalty_per_hour = 0.05
cap = 0.5
cutoff_days = 3
[labs]
01_signal_propagation = 2025-10-06T23:59:00+01:00
02_lr_schedules = 2025-10-13T23:59:00+01:00
"""
BANK = """version = 1
[policy]
penalty_per_day = 0.1
late_days = 2
[labs]
01_signal_propagation = 2025-10-06T22:59:00Z
02_lr_schedules = 2025-10-13T22:59:00Z
"""


def utc(text: str) -> str:
    """A time as nbgrader's exchange writes timestamp.txt."""
    return f"{text}.000000 UTC"


@pytest.fixture
def course(tmp_path):
    for lab in (LAB1, LAB2):
        (tmp_path / "solutions" / lab).mkdir(parents=True)
    grade.read_alembic_head_in_process()
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:
        for lab in (LAB1, LAB2):
            gb.add_assignment(lab)
            gb.add_notebook(NB, lab)
            gb.add_grade_cell("q", NB, lab, max_score=10, cell_type="code")
    return tmp_path


def write_term(course, text: str) -> policy.Term:
    (course / policy.COURSE_FILE).write_text(text, encoding="utf-8")
    return policy.load(course)


def submit(course, student: str, lab: str, when: str, score: float = 10.0) -> None:
    """A submission as the exchange and collect leave it (submitted/<student>/<lab>/timestamp.txt), graded
    ``score`` out of 10 as autograde records it."""
    folder = course / "submitted" / student / lab
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "timestamp.txt").write_text(utc(when))
    with grade.nbgrader_quiet(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        gb.update_or_create_student(student)
        sub = gb.update_or_create_submission(lab, student, timestamp=utc(when))
        for nb in sub.notebooks:
            for g in nb.grades:
                g.auto_score = score
        gb.db.commit()


def synced(course) -> dict[tuple[str, str], tuple[float | None, dt.timedelta | None]]:
    """Sync the course file into the gradebook as `make grade` does; {(student, lab): (penalty, extension)}."""
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        policy.sync(gb, policy.load(course), course)
        return {(sub.student.id, a.name): (sub.notebooks[0].late_submission_penalty, sub.extension)
                for a in gb.assignments for sub in a.submissions}


@pytest.mark.parametrize("when, penalty, words", [
    ("2025-10-06 22:00:00", None, "On time: no penalty."),
    ("2025-10-06 23:09:00", 0.0, "10 min late, within the 15-minute grace period: no penalty."),
    ("2025-10-07 01:29:00", 1.5, "2 h 30 min late: 15 % of the score, a penalty of 1.5 points."),
    ("2025-10-07 18:59:00", 5.0, "20 h late: 50 % of the score, a penalty of 5 points."),   # the cap
    ("2025-10-10 22:59:00", 10.0, "4 days late, past the cut-off of 3 days: the score is 0"),
])
def test_the_penalty_follows_the_policy_from_the_exchanges_time(course, when, penalty, words):
    write_term(course, HOURLY)
    submit(course, "ada", LAB1, when)
    assert synced(course)[("ada", LAB1)] == (penalty, None)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        note = policy.lateness_note(gb, "ada", LAB1, policy.load(course))
        assert gb.find_assignment(LAB1).duedate == dt.datetime(2025, 10, 6, 22, 59), "stored as nbgrader does: UTC"
    assert note.startswith("Due Mon 6 Oct 2025, 23:59 (UTC+01:00). Submitted "), note
    assert words in note, note


def test_feedback_that_withholds_tests_names_the_share_lost_not_the_points(course):
    write_term(course, HOURLY)
    submit(course, "ada", LAB1, "2025-10-07 01:29:00", score=7.0)
    submit(course, "bob", LAB1, "2025-10-10 22:59:00", score=7.0)
    synced(course)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        ada, bob = (policy.lateness_note(gb, s, LAB1, policy.load(course), points=False) for s in ("ada", "bob"))
    assert ada.endswith("2 h 30 min late: 15 % of the score, taken off the final score."), ada
    assert bob.endswith("past the cut-off of 3 days: the score is 0."), bob
    assert "1.05" not in ada and "7" not in bob.split("Submitted")[1], "the points would tell the whole score"


def test_an_extension_moves_that_students_deadline_only(course):
    write_term(course, HOURLY + """
[[extension]]
student = "ada"
lab = "01_signal_propagation"
until = 2025-10-10T23:59:00+01:00

[[extension]]
student = "bob"
lab = "01_signal_propagation"
hours = 48
""")
    for student in ("ada", "bob", "cy"):
        submit(course, student, LAB1, "2025-10-09 23:59:00")      # 3 days and 1 h after the due date
    got = synced(course)
    assert got["ada", LAB1] == (None, dt.timedelta(days=4)), "on time by her extension"
    assert got["bob", LAB1] == (5.0, dt.timedelta(hours=48)), "25 h past his extended deadline: the cap"
    assert got["cy", LAB1] == (10.0, None), "no extension: past the 3-day cut-off"
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        note = policy.lateness_note(gb, "ada", LAB1, policy.load(course))
    assert "your extension moved it to Fri 10 Oct 2025, 23:59 (UTC+01:00)" in note and "On time" in note, note


def test_late_days_are_drawn_from_one_bank_in_submission_order(course):
    write_term(course, BANK)
    # ada submits lab 2 a day late first, then lab 1 nine days late: lab 2 draws first, lab 1 gets what is left.
    submit(course, "ada", LAB2, "2025-10-14 12:00:00")
    submit(course, "ada", LAB1, "2025-10-15 20:00:00")
    # bob, with his own bank: lab 1 a day and a half late (2 days drawn), then lab 2 a day late (the bank is empty).
    submit(course, "bob", LAB1, "2025-10-08 10:59:00")
    submit(course, "bob", LAB2, "2025-10-14 12:00:00")
    got = synced(course)
    assert got["ada", LAB2] == (None, dt.timedelta(days=1))
    assert got["ada", LAB1] == (8.0, dt.timedelta(days=1)), "8 started days past the day left: 80 %"
    assert got["bob", LAB1] == (None, dt.timedelta(days=2))
    assert got["bob", LAB2] == (1.0, None)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        note = policy.lateness_note(gb, "ada", LAB1, policy.load(course))
    assert "1 of your late days moved it to" in note and "Late days left for the term: 0 of 2." in note, note


def test_a_time_written_in_the_notebook_is_ignored(course):
    write_term(course, HOURLY)
    folder = course / "submitted" / "ada" / LAB1
    folder.mkdir(parents=True)
    forged = nbformat.v4.new_notebook()
    forged.metadata["nbgrader"] = {"timestamp": utc("2025-10-01 09:00:00")}
    forged.metadata["submitted_at"] = "2025-10-01T09:00:00Z"
    nbformat.write(forged, str(folder / f"{NB}.ipynb"))
    (folder / "timestamp.txt").write_text(utc("2025-10-07 01:29:00"))     # the exchange's: 2 h 30 min late
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assert policy.submission_times(course, gb) == {("ada", LAB1): dt.datetime(2025, 10, 7, 1, 29)}
    # nbgrader reads the same file when it grades: what autograde records from it is charged.
    submit(course, "ada", LAB1, "2025-10-07 01:29:00")
    assert synced(course)["ada", LAB1] == (1.5, None)


def test_grading_again_recomputes_after_a_changed_deadline_and_a_new_extension(course):
    write_term(course, BANK)
    submit(course, "ada", LAB1, "2025-10-08 10:59:00")     # 1.5 days late: both late days
    submit(course, "ada", LAB2, "2025-10-14 12:00:00")     # 13 h late: the bank is empty
    assert synced(course) == {("ada", LAB1): (None, dt.timedelta(days=2)), ("ada", LAB2): (1.0, None)}
    # Lab 1's deadline moves a day later: it needs one late day, which leaves one for lab 2, not regraded.
    write_term(course, BANK.replace("2025-10-06T22:59:00Z", "2025-10-07T22:59:00Z"))
    assert synced(course) == {("ada", LAB1): (None, dt.timedelta(days=1)), ("ada", LAB2): (None, dt.timedelta(days=1))}
    # A new extension for lab 1 covers it: both late days go to lab 2, which needs one.
    write_term(course, BANK + '[[extension]]\nstudent = "ada"\nlab = "01_signal_propagation"\nhours = 48\n')
    assert synced(course) == {("ada", LAB1): (None, dt.timedelta(hours=48)), ("ada", LAB2): (None, dt.timedelta(days=1))}
    # A manual grade changes the score: the next sync charges the new one.
    write_term(course, HOURLY)
    submit(course, "ada", LAB1, "2025-10-07 01:29:00", score=6.0)
    assert synced(course)["ada", LAB1] == (0.9, None)


def test_nbgraders_assign_late_penalties_uses_the_plugin_from_the_students_deadline(course):
    """What `make grade` does in each scratch copy: the student's deadline is in the gradebook, nbgrader's
    AssignLatePenalties counts the seconds past it and asks the plugin, as nbgrader_config.py wires it."""
    write_term(course, HOURLY + '[[extension]]\nstudent = "ada"\nlab = "01_signal_propagation"\nhours = 2\n')
    submit(course, "ada", LAB1, "2025-10-07 01:29:00")      # 30 min past her extended deadline
    url = f"sqlite:///{course / 'gradebook.db'}"
    with grade.nbgrader_quiet(), Gradebook(url) as gb:      # what make_template and grade_one put there
        gb.update_or_create_assignment(LAB1, duedate=dt.datetime(2025, 10, 6, 22, 59))
        gb.update_or_create_submission(LAB1, "ada", extension=dt.timedelta(hours=2))
    config = Config()
    config.AssignLatePenalties.plugin_class = policy.TermLatePenalty
    config.TermLatePenalty.course_file = str(course / policy.COURSE_FILE)
    resources = {"nbgrader": {"notebook": NB, "assignment": LAB1, "student": "ada", "db_url": url}}
    AssignLatePenalties(config=config).preprocess(nbformat.v4.new_notebook(), resources)
    with Gradebook(url) as gb:
        assert gb.find_submission_notebook(NB, LAB1, "ada").late_submission_penalty == 0.5    # 1 started hour: 5 %
    assert synced(course)["ada", LAB1] == (0.5, dt.timedelta(hours=2)), "sync charges the same"

    feedback = FeedbackLabels(course_file=str(course / policy.COURSE_FILE))
    resources = {"nbgrader": {"notebook": NB, "assignment": LAB1, "student": "ada", "db_url": url}}
    feedback.preprocess(nbformat.v4.new_notebook(), resources)
    assert "30 min late: 5 % of the score, a penalty of 0.5 points." in resources["nbgrader"]["lateness"]


def test_nbgrader_config_wires_the_plugin_and_the_feedback_to_the_course_file():
    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    assert config.AssignLatePenalties.plugin_class is policy.TermLatePenalty
    assert config.TermLatePenalty.course_file == config.FeedbackLabels.course_file == str(ROOT / "term.toml")
    template = (ROOT / "autograder/templates/course_feedback/index.html.j2").read_text(encoding="utf-8")
    assert "resources.nbgrader.lateness" in template


@pytest.mark.parametrize("text, key", [
    ("[labs]\n01_signal_propagation = 2025-10-06T23:59:00Z\n", "version"),
    ("version = 2\n", "version"),
    ("version = 1\n[labs]\n01_signal_propagation = 2025-10-06T23:59:00\n", "labs.01_signal_propagation"),
    ("version = 1\n[labs]\n01_signal_propagation = 2025-10-06\n", "labs.01_signal_propagation"),
    ("version = 1\n[labs]\n99_nonexistent = 2025-10-06T23:59:00Z\n", "labs.99_nonexistent"),
    ("version = 1\n[policy]\ngrace = 10\n", "policy.grace"),
    ("version = 1\n[policy]\ncap = 1.5\n", "policy.cap"),
    ("version = 1\n[policy]\npenalty_per_hour = 0.1\npenalty_per_day = 0.1\n", "policy.penalty_per_hour"),
    ("version = 1\n[policy]\nlate_days = 1.5\n", "policy.late_days"),
    ("version = 1\n[labs]\n01_signal_propagation = 2025-10-06T23:59:00Z\n[[extension]]\nstudent = \"ada\"\n"
     "lab = \"02_lr_schedules\"\nhours = 4\n", "extension #1.lab"),
    ("version = 1\n[labs]\n01_signal_propagation = 2025-10-06T23:59:00Z\n[[extension]]\nstudent = \"ada\"\n"
     "lab = \"01_signal_propagation\"\nuntil = 2025-10-05T23:59:00Z\n", "extension #1.until"),
    ("version = 1\n[labs\n", "not valid TOML"),
    ("version = 1\n[policy]\nfinal = \"best\"\n", "policy.final"),
    ("version = 1\n[on_submit]\nper_hour = 0\n", "on_submit.per_hour"),
    ("version = 1\n[on_submit]\nper_hour = 2\n[on_submit.labs]\n01_signal_propagation = \"visible\"\n",
     "on_submit.labs.01_signal_propagation"),                                   # no due date
    ("version = 1\n[labs]\n01_signal_propagation = 2025-10-06T23:59:00Z\n[on_submit]\nper_hour = 2\n"
     "[on_submit.labs]\n01_signal_propagation = \"all\"\n", "on_submit.labs.01_signal_propagation"),
    ("version = 1\n[on_submit]\nper_hour = 2\nshow = \"visible\"\n", "on_submit.show"),
])
def test_a_malformed_course_file_is_refused_in_one_sentence_that_names_the_key(tmp_path, text, key):
    for lab in (LAB1, LAB2):
        (tmp_path / "solutions" / lab).mkdir(parents=True, exist_ok=True)
    (tmp_path / policy.COURSE_FILE).write_text(text, encoding="utf-8")
    with pytest.raises(policy.TermFileError) as caught:
        policy.load(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{policy.COURSE_FILE}: ") and key in message, message
    assert message.endswith(".") and not re.search(r"[.!?]\s+[A-Z]", message) and "\n" not in message, message


def test_make_grade_refuses_a_malformed_course_file_before_grading(tmp_path, capsys):
    (tmp_path / "nbgrader_config.py").write_text((ROOT / "nbgrader_config.py").read_text())
    (tmp_path / "submitted" / "ada" / LAB1).mkdir(parents=True)
    (tmp_path / policy.COURSE_FILE).write_text("version = 1\n[policy]\ncap = 2\n", encoding="utf-8")
    assert grade.main(["--course-dir", str(tmp_path), "--no-sandbox"]) == 2
    err = capsys.readouterr().err
    assert "make grade stopped, nothing was graded: term.toml: policy.cap must be a number between 0 and 1" in err
    assert not (tmp_path / "gradebook.db").exists() and not (tmp_path / "autograded").exists()


def test_released_labs_carry_their_due_date_and_no_extension(tmp_path):
    for lab in (LAB1, LAB2):
        (tmp_path / "solutions" / lab).mkdir(parents=True)
        (tmp_path / "labs" / lab).mkdir(parents=True)
    write_term(tmp_path, HOURLY + '[[extension]]\nstudent = "ada"\nlab = "01_signal_propagation"\nhours = 48\n'
                                  'note = "illness"\n')
    written = policy.write_due_notes(tmp_path)
    assert written == [tmp_path / "labs" / lab / policy.DUE_NOTE for lab in (LAB1, LAB2)]
    note = written[0].read_text(encoding="utf-8")
    assert note.splitlines()[0] == ("01_signal_propagation is due Mon 6 Oct 2025, 23:59 (UTC+01:00), that is "
                                    "2025-10-06 22:59 UTC."), "the line `make validate` prints"
    assert "15 minutes' grace; then 5 % of the score per started hour late, at most 50 %" in note
    assert "ada" not in note and "illness" not in note and "48" not in note, "no student's extension ships"
    assert "graded when you submit" not in note


def test_make_labs_knows_its_own_due_notes_from_a_hand_edited_one(tmp_path, monkeypatch):
    """make labs' check of hand edits (publish/release.py) regenerates into a scratch copy, due notes included: the
    DUE.md it wrote is its own, an edited one is a person's, and a DUE.md of an older course file that the last make
    labs wrote (its record) is still its own."""
    import json
    import shutil
    import subprocess

    from publish import release

    for folder in ("solutions", "labs"):
        shutil.copytree(ROOT / folder / LAB2, tmp_path / folder / LAB2)
    (tmp_path / "solutions" / LAB1).mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path)
    write_term(tmp_path, HOURLY)
    policy.write_due_notes(tmp_path)

    def generate(scratch, names, capture):   # nbgrader's output is the committed release (test_packaging holds that)
        for name in names:
            shutil.copytree(ROOT / "labs" / name, scratch / "labs" / name)
        return subprocess.CompletedProcess([], 0, "", "")

    monkeypatch.setattr(release, "_generate", generate)
    due = Path("labs") / LAB2 / policy.DUE_NOTE
    assert release.hand_edited(tmp_path) == [], "the due note make labs writes is its own"
    text = (tmp_path / due).read_text()
    (tmp_path / due).write_text(text.replace("5 %", "1 %"))
    assert release.hand_edited(tmp_path) == [due], "an edited due note is a hand edit"
    (tmp_path / due).write_text(text)
    (tmp_path / release.RECORD).write_text(json.dumps({rel.as_posix(): release.sha256(tmp_path / rel)
                                                      for rel in release.released_files(tmp_path)}))
    write_term(tmp_path, HOURLY.replace("penalty_per_hour = 0.05", "penalty_per_hour = 0.1"))
    assert release.hand_edited(tmp_path) == [], "written by the last make labs: regenerated with the new course file"


def test_a_students_own_deadlines_name_their_extension_and_no_one_elses(course):
    term = write_term(course, HOURLY + f'[[extension]]\nstudent = "ada"\nlab = "{LAB1}"\nhours = 48\nnote = "ill"\n'
                              f'[on_submit]\nper_hour = 3\n[on_submit.labs]\n{LAB2} = "visible"\n')
    ada, bob = (policy.deadlines_note(term, s, "training-infra") for s in ("ada", "bob"))
    assert f"- {LAB1}: due Mon 6 Oct 2025, 23:59 (UTC+01:00); your extension moves it to Wed 8 Oct 2025, 23:59 " \
           "(UTC+01:00)." in ada and "ill" not in ada
    assert f"- {LAB1}: due Mon 6 Oct 2025, 23:59 (UTC+01:00)." in bob and "moves it" not in bob
    assert "graded when you submit, 3 times an hour at most" in bob.split(LAB2)[1], "the hub's students read it here"


def test_a_lab_graded_on_submit_says_so_before_the_student_submits(tmp_path):
    for lab in (LAB1, LAB2):
        (tmp_path / "solutions" / lab).mkdir(parents=True)
        (tmp_path / "labs" / lab).mkdir(parents=True)
    write_term(tmp_path, HOURLY + f'[on_submit]\nper_hour = 2\n[on_submit.labs]\n{LAB2} = "bands"\n')
    one, two = (path.read_text(encoding="utf-8") for path in policy.write_due_notes(tmp_path))
    assert "graded when you submit" not in one
    assert "this lab is graded when you submit, 2 times an hour at most" in two
    assert policy.SHOWS["bands"] in two and "Written answers are graded by hand later" in two


def test_the_course_file_template_is_a_valid_course_file():
    term = policy.load_file(ROOT / "term.example.toml")
    labs = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and not p.name.startswith("."))
    assert sorted(term.due) == labs, "the template lists every lab"
    assert term.policy.late_days and term.policy.cutoff_hours and term.extensions


def test_make_grade_applies_the_course_file_through_nbgrader_end_to_end(tmp_path):
    """One light submission, graded by `make grade`'s CLI: the student's extension reaches nbgrader's penalty in the
    scratch copy, and the gradebook, the CSV and the feedback say the same."""
    from course import FASTEST_LAB, light_source, make_course, run_grade
    from course import submit as place

    from autograder import sandbox

    course = make_course(tmp_path, light_lab=True)
    (course / policy.COURSE_FILE).write_text(HOURLY.split("[labs]")[0] + f"""[labs]
{FASTEST_LAB} = 2025-10-06T23:59:00+01:00
[[extension]]
student = "bob"
lab = "{FASTEST_LAB}"
hours = 2
""", encoding="utf-8")
    path = place(course, "bob", FASTEST_LAB, light_source())
    (path.parent / "timestamp.txt").write_text(utc("2025-10-07 01:29:00"))     # 30 min past his extended deadline
    proc = run_grade(course, "--jobs", "1", *([] if sandbox.available()[0] else ["--no-sandbox"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = (course / "autograded" / "_logs" / f"autograde_bob_{FASTEST_LAB}.log").read_text(encoding="utf-8")
    assert "is 1800.0 seconds late" in log, "nbgrader counted from his extended deadline in the scratch copy"
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        sub = gb.find_submission(FASTEST_LAB, "bob")
        score, penalty = sub.score, sub.late_submission_penalty
    assert penalty == pytest.approx(0.05 * score) and score > 0, (score, penalty)
    row = next(ln for ln in proc.stdout.splitlines() if ln.split()[:2] == ["bob", FASTEST_LAB])
    assert f" -{penalty:g} " in row, f"make grade's table names the penalty: {row}"
    assert f"Late submission penalty: {penalty:g}" in log
    (row,) = list(csv.DictReader(open(course / "grades" / "grades.csv", encoding="utf-8")))
    assert float(row["late_submission_penalty"]) == pytest.approx(penalty) and row["duedate"] == "2025-10-06 22:59:00"
    (page,) = (course / "feedback" / "bob" / FASTEST_LAB).glob("*.html")
    html = page.read_text(encoding="utf-8")
    assert "your extension moved it to Tue 7 Oct 2025, 01:59 (UTC+01:00)" in html
    assert f"30 min late: 5 % of the score, a penalty of {penalty:g} points." in html


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
