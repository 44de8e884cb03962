"""Lab 2, learning-rate schedules: what its exercises run on (see the modules of this folder)."""
