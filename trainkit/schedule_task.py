"""Moved to trainkit.labs.lab02_lr_schedules.schedule_task; this name stays for one term (students' own copies of the labs import it)."""
import sys

import trainkit.labs.lab02_lr_schedules.schedule_task as _moved

sys.modules[__name__] = _moved
