"""Moved to trainkit.labs.lab05_mixed_precision.fp16_runs; this name stays for one term (students' own copies of the labs import it)."""
import sys

import trainkit.labs.lab05_mixed_precision.fp16_runs as _moved

sys.modules[__name__] = _moved
