"""nbgrader configuration for this course (read by every nbgrader command run from this folder)."""
import os

from autograder.feedback import (BOOTSTRAP_CSS, NBGRADER_TEMPLATES, TEMPLATES, CsvWithPending, FeedbackExporter,
                                 FeedbackLabels)
from autograder.preprocessors import SafeExecute, StderrToStdout
from autograder.term.policy import TermLatePenalty
from nbgrader.preprocessors import AssignLatePenalties, CheckCellMetadata, GetGrades, LimitOutput, SaveAutoGrades
from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor

c = get_config()  # noqa: F821 (injected by nbgrader)
HERE = os.path.dirname(os.path.abspath(__file__))

c.CourseDirectory.root = HERE
c.CourseDirectory.course_id = "training-infra"
c.CourseDirectory.source_directory = "solutions"   # nbgrader "source": instructor notebooks
c.CourseDirectory.release_directory = "labs"       # nbgrader "release": generated student notebooks
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(HERE, "gradebook.db")
# nbgrader's exchange (release_assignment -> fetch_assignment -> submit -> collect -> release_feedback ->
# fetch_feedback): `make install` creates this folder world-writable with the sticky bit, as nbgrader requires
# when several local users share it. Students' own nbgrader config must name the same folder (docs/instructors.md, "Handing out and collecting through nbgrader's exchange").
c.Exchange.root = os.path.join(HERE, ".nbgrader_exchange")
# A fetched assignment lands in <the student's Jupyter folder>/training-infra/<assignment>/: their own copy,
# never labs/ or solutions/; fetching again never overwrites it (with --replace, only missing files).
c.Exchange.path_includes_course = True
# Collect (`nbgrader collect`, the Formgrader's Collect button) takes a submission as a student's only if that
# student's Unix account made it and its timestamp is not in the future; any other folder is refused, kept in
# refused/ and reported as an error (autograder/collect.py). An exchange used without an account per student (one
# account on a laptop) must opt out explicitly: c.OwnerCheckedCollect.accept_own_folders = True.
c.ExchangeFactory.collect = "autograder.collect.OwnerCheckedCollect"

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# A cell may train a small model: allow minutes, not nbgrader's default 30 s.
c.Execute.timeout = 300
# A cell that runs past the timeout is interrupted and scores 0; the cells after it still run.
c.Execute.interrupt_on_timeout = True
# Same pipeline as nbgrader's default, with two changes (see autograder/preprocessors.py): SafeExecute keeps
# grading when a kernel dies (the affected cells score 0, with the reason), and StderrToStdout replaces
# IgnorePattern so that a harmless warning in a test cell cannot zero it.
c.Autograde.autograde_preprocessors = [
    SafeExecute,
    StderrToStdout,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveAutoGrades,
    AssignLatePenalties,
    CheckCellMetadata,
]
# Due dates, the late policy and extensions: the course file term.toml (format: term.example.toml,
# docs/term_policy.md). `make grade` writes its due dates and each student's deadline into the gradebook, and
# AssignLatePenalties asks this plugin for the penalty; without the file, no penalty (nbgrader's default).
c.AssignLatePenalties.plugin_class = TermLatePenalty
c.TermLatePenalty.course_file = os.path.join(HERE, "term.toml")

# Feedback (`make grade`, `nbgrader generate_feedback`, the Formgrader's button; autograder/feedback.py): nbgrader's
# pipeline and template, plus each test cell named by its exercise, "awaiting grading" instead of 0 for an answer
# not yet graded by hand, and hidden tests' source left out (their results stay). To show it, e.g. for a lab that
# will not be reused: `nbgrader generate_feedback <lab> --FeedbackLabels.show_hidden_tests=True`.
c.GenerateFeedback.preprocessors = [GetGrades, FeedbackLabels, CSSHTMLHeaderPreprocessor]
c.GenerateFeedback.exporter_class = FeedbackExporter
c.FeedbackExporter.template_name = "course_feedback"
c.FeedbackExporter.extra_template_basedirs = [TEMPLATES, NBGRADER_TEMPLATES]
c.FeedbackExporter.extra_template_paths = [NBGRADER_TEMPLATES, BOOTSTRAP_CSS]  # nbgrader's template, its CSS
c.FeedbackLabels.show_hidden_tests = False
c.FeedbackLabels.course_file = os.path.join(HERE, "term.toml")   # the feedback's line on due date and lateness
# grades.csv (`make grade`, `nbgrader export`): nbgrader's columns plus manual_grading ("pending" or empty).
c.ExportApp.plugin_class = CsvWithPending
