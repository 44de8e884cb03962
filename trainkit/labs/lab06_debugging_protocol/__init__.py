"""Lab 6, the debugging protocol: what its exercises run on (see the modules of this folder)."""
