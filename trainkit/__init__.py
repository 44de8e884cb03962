"""trainkit: the course's small helper package.

Device choice, seeding, plotting style, the self-check widget, small models and synthetic data, and the
capstone's GPT, corpus and reference training loop (``trainkit.gpt``, ``trainkit.corpus``, ``trainkit.train``).
It holds no exercise answers: everything a lab asks students to write stays in the lab.
"""
from trainkit.device import by_device, pick_device, seed_everything, setup_notebook

# The capstone's names, imported on first use (``trainkit.train`` is also run as ``python -m trainkit.train``,
# which must not find it imported already).
_LAZY = {"GPT": "trainkit.gpt", "GPTConfig": "trainkit.gpt", "param_counts": "trainkit.gpt",
         "ByteTokenizer": "trainkit.corpus", "TokenData": "trainkit.corpus", "unigram_loss": "trainkit.corpus",
         "Trainer": "trainkit.train", "TrainConfig": "trainkit.train"}

__all__ = ["by_device", "pick_device", "seed_everything", "setup_notebook", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trainkit' has no attribute {name!r}")
