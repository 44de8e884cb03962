"""Check helpers for the labs' test cells (``autograder.checks``): each failure says what is wrong in a sentence."""
