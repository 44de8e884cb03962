"""Lab 3, gradient clipping and skip-on-NaN: what its exercises run on (see the modules of this folder)."""
