"""Running a term: deadlines and late policy, LMS export, item analysis, regrade, similarity (instructor-only)."""
