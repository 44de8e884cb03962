"""Moved to trainkit.capstone.gpt; this name stays for one term (students' own copies of the labs import it)."""
import sys
from trainkit.capstone import gpt as _moved
sys.modules[__name__] = _moved
