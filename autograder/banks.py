"""The judgement exercises' banks from the instructor's side (``trainkit.labs.BANKS``): load the unseen variants, and
rebuild a stored bank.

    python -m autograder.banks list                # every bank: its lab, how many visible and unseen variants
    python -m autograder.banks build runbank       # retrain and store one bank (minutes to an hour; see its module)
    python -m autograder.banks report fp16         # a bank's own report, where its module has one (report())
"""
from __future__ import annotations

import argparse
import importlib

from trainkit.labs import BANKS, Bank


def bank(name: str) -> Bank:
    for b in BANKS:
        if b.name == name:
            return b
    raise SystemExit(f"no bank {name!r}; the banks are {', '.join(b.name for b in BANKS)}")


def load_unseen(b: Bank) -> list:
    module, function = b.unseen.split(":")
    return getattr(importlib.import_module(module), function)()


def grader_module(b: Bank):
    return importlib.import_module(b.unseen.split(":")[0])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m autograder.banks", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("list", "build", "report"))
    parser.add_argument("name", nargs="?", help="a bank's name (python -m autograder.banks list)")
    args = parser.parse_args(argv)
    if args.command == "list":
        for b in BANKS:
            print(f"{b.name:14s} lab {b.lab:30s} {len(b.load_visible()):3d} visible  {len(load_unseen(b)):3d} unseen"
                  f"{'  (stored)' if b.stored else ''}")
        return
    if not args.name:
        parser.error(f"{args.command} needs a bank's name")
    chosen = bank(args.name)
    function = getattr(grader_module(chosen), args.command, None)
    if function is None or (args.command == "build" and not chosen.stored):
        raise SystemExit(f"the {args.name} bank has no {args.command} (its variants are defined in code: nothing to "
                         f"{args.command})")
    function()


if __name__ == "__main__":
    main()
