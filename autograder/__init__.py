"""The grading pipeline: check helpers for lab test cells, the nbgrader preprocessor that keeps a
harmless warning from zeroing a test cell, notebook utilities, and the CLI behind ``make grade``.

``autograder/unseen/`` holds the grader's unseen variants, one module per judgement exercise (with its data): the
whole folder is instructor-only, never in a student edition, and the grading sandbox hides it whole
(``autograder.lending`` lends a module to the test cell that loads it). Its modules keep their names
(``autograder.setups_check``): the folder is on this package's search path.
"""
import os as _os

UNSEEN_DIR = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "unseen")
__path__.append(UNSEEN_DIR)  # noqa: F821 (a package's own search path)
