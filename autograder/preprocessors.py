"""nbgrader preprocessors used by nbgrader_config.py."""
from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor


class StderrToStdout(NbGraderPreprocessor):
    """Turn stderr text into stdout text after execution, before grading.

    nbgrader gives 0 points to a test cell that wrote anything to stderr, so a harmless library
    warning (a DeprecationWarning, a tqdm bar) would zero a correct answer. Real failures are
    ``error`` outputs, not stderr text, so grading still sees them; the warning text stays visible
    in the feedback, marked as such.
    """

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type == "code":
            for output in cell.get("outputs", []):
                if output.get("output_type") == "stream" and output.get("name") == "stderr":
                    output["name"] = "stdout"
                    output["text"] = "[stderr] " + output.get("text", "")
        return cell, resources
