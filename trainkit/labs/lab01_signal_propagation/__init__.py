"""Lab 1, signal propagation and initialisation: what its exercises run on (see the modules of this folder)."""
