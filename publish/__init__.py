"""Publishing the course (instructor-only): the labs from the solutions (`make labs`), the student edition, the
lessons as a site, and the class on JupyterHub (`make hub`). Grading is autograder/; none of this ships to students
or is visible to a grading kernel."""
