"""Your own copies of the labs, which nothing in the course ever overwrites.

    python -m trainkit.workspace sync                   # copy every released lab you have no copy of yet
    python -m trainkit.workspace reset LAB [EXERCISE]   # start a lab (or one exercise in it) afresh
    python -m trainkit.workspace exercises LAB          # the exercise names of a lab (for EXERCISE)

The released labs in ``labs/NN_topic/`` belong to the course: a course update replaces them. You work in
``my-work/NN_topic/`` (git-ignored, so ``git pull`` never touches it). ``make lab`` runs ``sync`` first:
a lab you have not started yet is copied there; a copy you already have is never written to, even when
the course has since updated that lab (you are told, and ``reset`` takes the new version when you want
it). ``reset`` never deletes: the old copy is moved to ``my-work/backups/`` with the time in its name.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import shutil
import sys
import time
from pathlib import Path

RELEASED = "labs"
WORK = "my-work"
BACKUPS = "backups"
RECORD = ".released.json"  # in my-work/: the hash of each released file when it was copied


def sha256(path: Path) -> str:
    """A file's hash, as the records of released files hold it (here and in publish/release.py)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def released_files(root: Path) -> list[Path]:
    """Every file of every released lab, relative to labs/ (hidden folders such as checkpoints skipped)."""
    labs = root / RELEASED
    if not labs.is_dir():
        return []
    return sorted(p.relative_to(labs) for p in labs.rglob("*")
                  if p.is_file() and not any(part.startswith(".") for part in p.relative_to(labs).parts))


def _read_record(root: Path) -> dict[str, str]:
    path = root / WORK / RECORD
    return json.loads(path.read_text()) if path.is_file() else {}


def _write_record(root: Path, record: dict[str, str]) -> None:
    path = root / WORK / RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(sorted(record.items())), indent=1) + "\n")


def _copy_new(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst``, which must not exist: an existing file is never replaced."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as fin, open(dst, "xb") as fout:  # "x": fails rather than overwrite
        shutil.copyfileobj(fin, fout)


def sync(root: Path | str = ".", out=None) -> list[Path]:
    """Copy each released lab file that has no copy in my-work/ yet; never touch an existing copy.

    Returns the copies made (paths relative to ``root``). Prints what it did, and names every copy
    whose released lab has changed since it was made (the copy is kept as it is).
    """
    root = Path(root)
    record = _read_record(root)
    made, updated = [], []
    for rel in released_files(root):
        src, dst = root / RELEASED / rel, root / WORK / rel
        key = rel.as_posix()
        if dst.exists():
            if key in record and record[key] != sha256(src):
                updated.append(rel)
            continue
        _copy_new(src, dst)
        record[key] = sha256(src)
        made.append(Path(WORK) / rel)
    if made:
        _write_record(root, record)
    n_labs = len({rel.parts[0] for rel in released_files(root)})
    for path in made:
        print(f"new copy: {path.as_posix()}", file=out or sys.stdout)
    for rel in updated:
        lab = rel.parts[0]
        print(f"updated by the course: {RELEASED}/{rel.as_posix()}; your copy {WORK}/{rel.as_posix()} is kept "
              f"as it is. To start it afresh from the new version: make reset-lab LAB={lab}", file=out or sys.stdout)
    print(f"Your work is in {WORK}/ ({n_labs} labs; `make lab` and course updates never overwrite it).", file=out or sys.stdout)
    return made


def find_lab(root: Path, lab: str) -> str:
    """The released lab named ``lab`` or uniquely starting with it ("03" -> "03_gradient_clipping")."""
    labs = sorted(p.name for p in (root / RELEASED).iterdir() if p.is_dir() and not p.name.startswith("."))
    if lab in labs:
        return lab
    matches = [name for name in labs if name.startswith(lab)]
    if len(matches) != 1:
        raise SystemExit(f"no single lab is called {lab!r}; the labs are: {', '.join(labs)}")
    return matches[0]


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _answer_cells(nb) -> dict[str, dict]:
    return {_grade_id(c): c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("solution")}


def reset(root: Path | str, lab: str, exercise: str | None = None, out=None) -> Path:
    """Start ``lab`` afresh from its released version, or only the answer cell ``exercise`` in it.

    The current copy (if any) is first moved to my-work/backups/<lab>/ with a time stamp in its name:
    nothing is deleted. Returns the backup's path (or the new copy's, when there was no copy).
    """
    root = Path(root)
    lab = find_lab(root, lab)
    notebooks = sorted((root / RELEASED / lab).glob("*.ipynb"))
    if len(notebooks) != 1:
        raise SystemExit(f"{RELEASED}/{lab}/ holds {len(notebooks)} notebooks; expected one")
    src = notebooks[0]
    rel = src.relative_to(root / RELEASED)
    dst = root / WORK / rel
    record = _read_record(root)
    if not dst.exists():
        if exercise is not None:
            raise SystemExit(f"you have no copy of {lab} yet: `make lab` makes one")
        _copy_new(src, dst)
        record[rel.as_posix()] = sha256(src)
        _write_record(root, record)
        print(f"new copy: {dst.relative_to(root).as_posix()}", file=out or sys.stdout)
        return dst.relative_to(root)
    released = json.loads(src.read_text(encoding="utf-8"))
    if exercise is not None:
        fresh = _answer_cells(released)
        if exercise not in fresh:
            raise SystemExit(f"{lab} has no exercise {exercise!r}; its answer cells are: {', '.join(fresh)}")
        mine = json.loads(dst.read_text(encoding="utf-8"))
        cells = [c for c in mine["cells"] if _grade_id(c) == exercise]
        if not cells:
            raise SystemExit(f"your copy has no cell {exercise!r} any more: reset the whole lab with "
                             f"`make reset-lab LAB={lab}` (your copy is kept as a backup)")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup = root / WORK / BACKUPS / lab / f"{src.stem}.{stamp}{src.suffix}"
    n = 1
    while backup.exists():
        n += 1
        backup = backup.with_name(f"{src.stem}.{stamp}-{n}{src.suffix}")
    backup.parent.mkdir(parents=True, exist_ok=True)
    dst.rename(backup)
    if exercise is None:
        _copy_new(src, dst)
        record[rel.as_posix()] = sha256(src)
        _write_record(root, record)
        print(f"{dst.relative_to(root).as_posix()}: fresh copy of {RELEASED}/{rel.as_posix()}", file=out or sys.stdout)
    else:
        for cell in cells:
            cell["source"] = copy.deepcopy(fresh[exercise]["source"])
            if cell.get("cell_type") == "code":
                cell["outputs"], cell["execution_count"] = [], None
        with open(dst, "x", encoding="utf-8") as f:
            json.dump(mine, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(f"{dst.relative_to(root).as_posix()}: exercise {exercise!r} is back to its starting text; "
              f"the rest of your copy is unchanged", file=out or sys.stdout)
    print(f"your previous copy is kept in {backup.relative_to(root).as_posix()}", file=out or sys.stdout)
    return backup.relative_to(root)


def exercises(root: Path | str, lab: str, out=None) -> list[str]:
    """The names of the answer cells of ``lab`` (what ``reset LAB EXERCISE`` accepts), in order."""
    root = Path(root)
    lab = find_lab(root, lab)
    names = []
    for path in sorted((root / RELEASED / lab).glob("*.ipynb")):
        names += list(_answer_cells(json.loads(path.read_text(encoding="utf-8"))))
    print(f"exercises of {lab}: {', '.join(names)}", file=out or sys.stdout)
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainkit.workspace", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".", help="the course folder (default: the current one)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("sync", help="copy every released lab you have no copy of yet")
    p_reset = sub.add_parser("reset", help="start a lab, or one exercise in it, afresh (old copy kept as a backup)")
    p_reset.add_argument("lab", help="e.g. 03_gradient_clipping, or 03")
    p_reset.add_argument("exercise", nargs="?", help="the grade_id of one answer cell (default: the whole lab)")
    p_list = sub.add_parser("exercises", help="list the exercise names of a lab")
    p_list.add_argument("lab")
    args = parser.parse_args(argv)
    if args.command == "sync":
        sync(args.root)
    elif args.command == "exercises":
        exercises(args.root, args.lab)
    else:
        reset(Path(args.root), args.lab, args.exercise or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
