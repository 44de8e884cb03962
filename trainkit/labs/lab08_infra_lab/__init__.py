"""Lab 8, the capstone (infra lab): what its exercises run on (see the modules of this folder)."""
