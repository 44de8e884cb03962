"""The capstone's training loop, split by step: ``trainer`` (the loop and lab 8's hooks) and its components.

``python -m trainkit.train`` is the command line over these modules, and ``trainkit.train`` exports their names.
Nothing is imported here, so that each module loads alone (no import cycles, no torch.distributed for the model).
"""
