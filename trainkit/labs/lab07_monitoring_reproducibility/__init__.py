"""Lab 7, monitoring and reproducibility: what its exercises run on (see the modules of this folder)."""
