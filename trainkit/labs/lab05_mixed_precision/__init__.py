"""Lab 5, mixed precision: what its exercises run on (see the modules of this folder)."""
