"""Moved to trainkit.labs.lab03_gradient_clipping.unstable_runs; this name stays for one term (students' own copies of the labs import it)."""
import sys

import trainkit.labs.lab03_gradient_clipping.unstable_runs as _moved

sys.modules[__name__] = _moved
