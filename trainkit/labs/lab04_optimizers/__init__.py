"""Lab 4, optimisers (AdamW, Lion) and tuning: what its exercises run on (see the modules of this folder)."""
