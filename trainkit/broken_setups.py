"""Moved to trainkit.labs.lab06_debugging_protocol.broken_setups; this name stays for one term (students' own copies of the labs import it)."""
import sys

import trainkit.labs.lab06_debugging_protocol.broken_setups as _moved

sys.modules[__name__] = _moved
