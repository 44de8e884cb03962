"""trainkit: the course's small helper package.

Device choice, seeding, plotting style, the self-check widget, small models and synthetic data.
It holds no exercise answers: everything a lab asks students to write stays in the lab.
"""
from trainkit.device import by_device, pick_device, seed_everything, setup_notebook

__all__ = ["by_device", "pick_device", "seed_everything", "setup_notebook"]
