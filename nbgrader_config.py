"""nbgrader configuration for this course (read by every nbgrader command run from this folder)."""
import os

from autograder.preprocessors import SafeExecute, StderrToStdout
from nbgrader.preprocessors import AssignLatePenalties, CheckCellMetadata, LimitOutput, SaveAutoGrades
from nbconvert.preprocessors import ClearMetadataPreprocessor

c = get_config()  # noqa: F821 (injected by nbgrader)
HERE = os.path.dirname(os.path.abspath(__file__))

c.CourseDirectory.root = HERE
c.CourseDirectory.course_id = "training-infra"
c.CourseDirectory.source_directory = "solutions"   # nbgrader "source": instructor notebooks
c.CourseDirectory.release_directory = "labs"       # nbgrader "release": generated student notebooks
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(HERE, "gradebook.db")
c.Exchange.root = os.path.join(HERE, ".nbgrader_exchange")  # local only; nothing is shared over a network

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
