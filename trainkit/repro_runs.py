"""Moved to trainkit.labs.lab07_monitoring_reproducibility.repro_runs; this name stays for one term (students' own copies of the labs import it)."""
import sys

import trainkit.labs.lab07_monitoring_reproducibility.repro_runs as _moved

sys.modules[__name__] = _moved
