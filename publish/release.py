"""`make labs` (instructor): regenerate labs/ from solutions/, but never over a notebook a person changed.

    python -m publish.release            # check, then nbgrader generate_assignment "*" --force
    python -m publish.release --force    # overwrite hand edits too (`make labs FORCE=1`)

labs/ is nbgrader's release folder: generated, never edited by hand. Before regenerating, every file
under labs/ must be one of: unchanged since the last commit (git), exactly what the last `make labs`
wrote (a record in .labs_generated.json, git-ignored), or exactly what solutions/ generates now (checked
by generating the suspicious assignments into a temporary folder). Anything else is a person's edit
(a student who filled in a lab in place, an instructor who fixed a typo in the release instead of the
source): the command stops, names the files and says how to proceed, and overwrites nothing.

With a course file (term.toml, autograder/term/policy.py), each released lab it lists also gets DUE.md: its due date
and the late policy, the same for every student (no extension), which ships with the lab and which `make validate`
prints. A malformed course file stops it before anything is generated.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from autograder.term import policy
from trainkit import workspace
from trainkit.workspace import sha256

RELEASE = workspace.RELEASED   # labs/: what students copy (trainkit.workspace)
SOURCE = "solutions"
RECORD = ".labs_generated.json"


def released_files(course: Path) -> list[Path]:
    """Every file under labs/, relative to the course folder (hidden folders skipped): the files students copy."""
    return [Path(RELEASE) / rel for rel in workspace.released_files(course)]


def _git_changed(course: Path) -> set[Path] | None:
    """Files under labs/ that differ from the last commit (modified or untracked); None without git."""
    proc = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--no-renames", "-z", "--",
                           RELEASE], cwd=course, capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=course, capture_output=True, text=True)
    top_dir = Path(top.stdout.strip()).resolve()
    changed = set()
    for entry in proc.stdout.split("\0"):
        if len(entry) > 3:
            changed.add((top_dir / entry[3:]).resolve().relative_to(course.resolve()))
    return changed


def _record(course: Path) -> dict[str, str]:
    path = course / RECORD
    return json.loads(path.read_text()) if path.is_file() else {}


def _generate(course: Path, assignments: list[str] | str, capture: bool) -> subprocess.CompletedProcess:
    names = [assignments] if isinstance(assignments, str) else assignments
    # nbgrader runs `alembic` by name when it creates a gradebook: this interpreter's bin/ comes first on PATH.
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    proc = None
    for name in names:
        proc = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force"],
                              cwd=course, capture_output=capture, text=True, env=env)
        if proc.returncode != 0:
            return proc
    return proc


def hand_edited(course: Path | str) -> list[Path]:
    """Files under labs/ that are neither committed, nor the last generated output, nor the current one."""
    course = Path(course)
    changed = _git_changed(course)
    record = _record(course)
    suspects = [rel for rel in released_files(course)
                if (changed is None or rel in changed) and record.get(rel.as_posix()) != sha256(course / rel)]
    if not suspects:
        return []
    # Last check: is it simply what solutions/ generates now? Generate those assignments in a scratch copy.
    assignments = sorted({rel.parts[1] for rel in suspects if len(rel.parts) > 2})
    with tempfile.TemporaryDirectory(prefix="make-labs-") as tmp:
        scratch = Path(tmp)
        shutil.copy(course / "nbgrader_config.py", scratch)
        (scratch / SOURCE).mkdir()
        for name in assignments:
            if (course / SOURCE / name).is_dir():
                shutil.copytree(course / SOURCE / name, scratch / SOURCE / name)
        present = [name for name in assignments if (scratch / SOURCE / name).is_dir()]
        if present:
            proc = _generate(scratch, present, capture=True)
            if proc.returncode != 0:
                raise SystemExit(f"make labs: nbgrader could not generate {present} for the check:\n{proc.stderr[-3000:]}")
            policy.write_due_notes(course, RELEASE, into=scratch)    # and the due notes make labs writes beside them
        return [rel for rel in suspects
                if not (scratch / rel).is_file() or (scratch / rel).read_bytes() != (course / rel).read_bytes()]


REFUSAL = """\
make labs stopped: nothing was overwritten. These files in labs/ were changed by hand (they are neither the
committed version, nor what the last `make labs` wrote, nor what solutions/ generates now):
{files}
labs/ is generated from solutions/ and every `make labs` rewrites it.
- Student? Do not run `make labs`: work in my-work/ (`make lab` copies each lab there, and nothing overwrites it).
  Save the edited notebooks above into my-work/ (or anywhere outside labs/) before anything else.
- Instructor? Make the change in the source notebook in solutions/ instead (`git diff -- labs/` shows the edits),
  then run `make labs` again; or overwrite the hand edits with `make labs FORCE=1`. (Files you generated
  yourself with `nbgrader generate_assignment` from an older solutions/ look like this too: FORCE=1 is safe.)"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m publish.release", description=__doc__.split("\n\n")[0])
    parser.add_argument("--course-dir", default=".", help="the course folder (default: the current one)")
    parser.add_argument("--force", action="store_true", help="overwrite hand-edited files in labs/ too")
    args = parser.parse_args(argv)
    course = Path(args.course_dir)
    try:
        policy.load(course)
    except policy.TermFileError as exc:
        print(f"make labs stopped, nothing was generated: {exc}", file=sys.stderr)
        return 2
    if not args.force:
        edited = hand_edited(course)
        if edited:
            print(REFUSAL.format(files="\n".join(f"  {rel.as_posix()}" for rel in edited)), file=sys.stderr)
            return 2
    proc = _generate(course, "*", capture=False)
    if proc.returncode != 0:
        return proc.returncode
    policy.write_due_notes(course, RELEASE)
    (course / RECORD).write_text(json.dumps({rel.as_posix(): sha256(course / rel)
                                             for rel in released_files(course)}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
