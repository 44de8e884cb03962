"""The grading pipeline: check helpers for lab test cells, the nbgrader preprocessor that keeps a
harmless warning from zeroing a test cell, notebook utilities, and the CLI behind ``make grade``."""
