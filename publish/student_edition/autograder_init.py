"""The check helpers' old home: ``autograder.checks`` is now ``trainkit.checks`` (kept for one term, so that
students' own copies of the labs still run)."""
