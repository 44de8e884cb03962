"""Moved to trainkit.labs.lab01_signal_propagation.init_nets; this name stays for one term (students' own copies of the labs import it)."""
import sys

import trainkit.labs.lab01_signal_propagation.init_nets as _moved

sys.modules[__name__] = _moved
