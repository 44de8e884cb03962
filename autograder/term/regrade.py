"""Regrade a lab with its tests as they are now, keep every grade and comment given by hand, and say what changed.

    python -m autograder.term.regrade LAB --reason TEXT [--course-dir DIR] [--student S ...] [make grade's options]
    python -m autograder.term.regrade LAB --release [FOLDER]

``LAB`` is the lab's folder name in ``solutions/`` or its number (``05``). The first form:
1. snapshots every student's grades of the lab from the gradebook: each graded cell's auto score, manual score, extra
   credit and max, each comment given by hand, the totals, and the answers that were graded by hand (from
   ``autograded/``). It goes to ``grades/regrade-<lab>-<time>/before.json`` before anything is graded, so a regrade
   stopped half way can still be undone by hand;
2. regrades the lab's submissions with the grading pipeline of ``make grade`` (``autograder.grade.main``, which always
   regrades, nbgrader's ``force``), with the lab's source notebook as it is now. Options it does not know itself
   (``--jobs``, ``--no-sandbox``, ``--cell-timeout``...) are passed on to it;
3. puts back every manual grade, extra credit and comment the regrade changed. ``make grade`` keeps a written
   answer's manual grade only while the answer is unchanged, and resets any grade given by hand to a test cell (an
   override of the autograder) to "needs grading". A manual grade is dropped only where the student's answer itself
   changed since it was graded (a resubmission): that answer waits for grading again, and the report says so;
4. compares before and after and writes, in the same folder: ``<student>.txt`` for every regraded student (each cell
   whose autograded score changed, old -> new, the total, the manual grades kept), ``summary.txt`` (students
   changed, up or down, the largest change, the distribution, the cells that changed and for how many students),
   ``changes.csv`` (one row per changed cell), ``summary.json`` and ``after.json``;
5. adds a note to the feedback of every student whose score changed (``feedback/<student>/<lab>/*.html``): what
   changed, cell by cell, and ``--reason``.

Nothing is released: the new feedback stays in ``feedback/`` for the instructor to read, and students' copies in the
exchange are untouched. The second form (``--release``) releases the feedback of the students that regrade changed
(nbgrader's ``release_feedback``, per student), from the latest regrade folder of the lab or the one named. A later
``make grade`` regenerates the feedback without the note; ``--release`` puts the note back where the student's grades
are still what the regrade left, and refuses, saying why, where they changed (a resubmission, a grade by hand).

Exit status: make grade's (0 every submission was regraded, 1 some failed, 2 nothing to regrade, 3 no sandbox), 4 for
an unknown lab or a release that found nothing to release.
"""
from __future__ import annotations

import argparse
import csv
import html
import io
import json
import os
import re
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

from autograder import grade
from autograder.feedback import label

NOTE_MARK = "<!-- regrade-note -->"
EPS = 1e-9


def resolve_lab(course: Path, lab: str) -> str | None:
    """The lab's folder name in solutions/: given in full, or by its number or any unique prefix."""
    folder = course / "solutions"
    labs = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")) if folder.is_dir() else []
    if lab in labs:
        return lab
    matches = [name for name in labs if name.startswith(lab)]
    return matches[0] if len(matches) == 1 else None


# ---------------------------------------------------------------------------------------------------
# The snapshot: everything of a lab's grades that a regrade may change, per student, as plain JSON.
# ---------------------------------------------------------------------------------------------------
def snapshot(course: Path, lab: str, students: list[str]) -> dict:
    """{student: {"timestamp", "score", "max_score", "cells": {"nb/cell": {...}}, "comments": {"nb/cell": {...}},
    "answers": {"nb/cell": source}}} of every student in ``students`` the gradebook has a submission of ``lab`` for."""
    from nbgrader.api import MissingEntry

    out = {}
    with grade.gradebook(course) as gb:
        for student in students:
            try:
                sub = gb.find_submission(lab, student)
            except MissingEntry:
                continue
            cells, comments = {}, {}
            for nb in sub.notebooks:
                solutions = {c.name for c in nb.notebook.solution_cells}
                for g in nb.grades:
                    cells[f"{nb.name}/{g.name}"] = {
                        "notebook": nb.name, "cell": g.name, "type": g.cell.cell_type, "solution": g.name in solutions,
                        "auto": g.auto_score, "manual": g.manual_score, "extra": g.extra_credit,
                        "needs_manual": bool(g.needs_manual_grade), "max": float(g.max_score),
                        "score": float(g.score or 0.0)}
                for c in nb.comments:
                    comments[f"{nb.name}/{c.name}"] = {"manual": c.manual_comment, "auto": c.auto_comment}
            out[student] = {"timestamp": str(sub.timestamp) if sub.timestamp else None,
                            "score": float(sub.score or 0.0), "max_score": float(sub.max_score or 0.0),
                            "cells": cells, "comments": comments, "answers": graded_answers(course, lab, student)}
    return out


def graded_answers(course: Path, lab: str, student: str) -> dict[str, str]:
    """{"nb/cell": source} of the answers graded by hand in the student's autograded copy (what make grade compares to
    keep a manual grade)."""
    folder = course / "autograded" / student / lab
    return {f"{path.stem}/{gid}": src for path in sorted(folder.glob("*.ipynb"))
            for gid, src in grade._manual_cells(path).items()}


# ---------------------------------------------------------------------------------------------------
# Putting back what the regrade reset.
# ---------------------------------------------------------------------------------------------------
def restore(course: Path, lab: str, before: dict) -> dict[str, list[str]]:
    """Put back every manual grade, extra credit and manual comment of ``before`` that the regrade changed; a manual
    grade of an answer the student changed since is left to be graded again. {student: [what was done]}."""
    from nbgrader.api import MissingEntry

    done: dict[str, list[str]] = {}
    with grade.gradebook(course) as gb:
        for student, old in before.items():
            try:
                sub = gb.find_submission(lab, student)
            except MissingEntry:
                continue
            answers = graded_answers(course, lab, student)
            notes = done.setdefault(student, [])
            for nb in sub.notebooks:
                for g in nb.grades:
                    key = f"{nb.name}/{g.name}"
                    was = old["cells"].get(key)
                    if was is None:
                        continue
                    if was["manual"] is not None:
                        if key in old["answers"] and key in answers and old["answers"][key] != answers[key]:
                            notes.append(f"dropped {key}: manual grade {was['manual']:g} not kept, the answer changed "
                                         f"since it was graded (it awaits grading again)")
                        elif g.manual_score is None or abs(g.manual_score - was["manual"]) > EPS:
                            g.manual_score, g.needs_manual_grade = was["manual"], was["needs_manual"]
                            notes.append(f"restored {key}: manual grade {was['manual']:g}")
                        else:
                            notes.append(f"kept {key}: manual grade {was['manual']:g}")
                    if was["extra"] is not None and g.extra_credit != was["extra"]:
                        g.extra_credit = was["extra"]
                        notes.append(f"restored {key}: extra credit {was['extra']:g}")
                for c in nb.comments:
                    key = f"{nb.name}/{c.name}"
                    was = old["comments"].get(key)
                    if was and was["manual"] and c.manual_comment != was["manual"]:
                        c.manual_comment = was["manual"]
                        notes.append(f"restored {key}: comment")
                    elif was and was["manual"]:
                        notes.append(f"kept {key}: comment")
        gb.db.commit()
    return done


# ---------------------------------------------------------------------------------------------------
# The diff.
# ---------------------------------------------------------------------------------------------------
def cell_label(cell: dict) -> str:
    return label(cell["cell"], cell["type"], cell["solution"])


def _num(x) -> str:
    return "-" if x is None else f"{x:g}"


def diff(before: dict, after: dict) -> dict:
    """Per student: {"changes": [cell rows whose auto score or max changed], "score": (old, new), "max": (old, new),
    "delta", "new": first graded now, "gone": no grade now}."""
    out = {}
    for student in sorted(set(before) | set(after)):
        old, new = before.get(student), after.get(student)
        entry = {"changes": [], "new": old is None, "gone": new is None,
                 "score": (old and old["score"], new and new["score"]),
                 "max": (old and old["max_score"], new and new["max_score"])}
        if old and new:
            for key, cell in new["cells"].items():
                was = old["cells"].get(key)
                if was is None or abs((was["auto"] or 0) - (cell["auto"] or 0)) > EPS or was["max"] != cell["max"] \
                        or (was["auto"] is None) != (cell["auto"] is None) or abs(was["score"] - cell["score"]) > EPS:
                    entry["changes"].append({
                        "notebook": cell["notebook"], "cell": cell["cell"], "label": cell_label(cell),
                        "auto_old": was and was["auto"], "auto_new": cell["auto"],
                        "score_old": was and was["score"], "score_new": cell["score"],
                        "max_old": was and was["max"], "max_new": cell["max"], "manual": cell["manual"]})
            entry["delta"] = new["score"] - old["score"]
        else:
            entry["delta"] = None
        entry["changed"] = bool(entry["changes"]) or (entry["delta"] is not None and abs(entry["delta"]) > EPS) \
            or entry["new"] or entry["gone"]
        out[student] = entry
    return out


def student_report(student: str, lab: str, when: str, reason: str, entry: dict, restored: list[str],
                   failed: str | None, resubmitted: bool) -> str:
    lines = [f"{student}: {lab}, regraded {when}", f"reason: {reason}"]
    if failed:
        lines.append(f"FAILED in this regrade: {failed} (see make grade's output and log)")
    if entry["new"]:
        lines.append("graded for the first time by this regrade: no earlier grade to compare")
    elif entry["gone"]:
        lines.append("no grade after the regrade (see make grade's output)")
    else:
        (s0, s1), (m0, m1) = entry["score"], entry["max"]
        lines.append(f"total: {s0:g} / {m0:g} -> {s1:g} / {m1:g} ({entry['delta']:+g})")
    if resubmitted:
        lines.append("note: the student resubmitted since the last grade; some changes may come from the new "
                     "submission, not the tests")
    if entry["changes"]:
        lines.append("changed cells (autograded score, old -> new, of max):")
        for ch in entry["changes"]:
            line = (f"  {ch['notebook']} / {ch['cell']} ({ch['label']}): {_num(ch['auto_old'])} -> "
                    f"{_num(ch['auto_new'])} of {_num(ch['max_new'])}")
            if ch["max_old"] is not None and ch["max_old"] != ch["max_new"]:
                line += f" (max was {ch['max_old']:g})"
            if ch["manual"] is not None:
                line += f"; the manual grade {ch['manual']:g} is kept and counts: review it"
            lines.append(line)
    elif not (entry["new"] or entry["gone"]):
        lines.append("no change")
    if restored:
        lines.append("grades and comments given by hand:")
        lines += [f"  {r}" for r in restored]
    return "\n".join(lines) + "\n"


def summarise(lab: str, when: str, reason: str, grade_rc: int, entries: dict, restored: dict, failed: dict,
              noted: list[str], folder: Path, release_cmd: str) -> str:
    compared = {s: e for s, e in entries.items() if not (e["new"] or e["gone"])}
    changed = {s: e for s, e in compared.items() if e["changes"] or abs(e["delta"]) > EPS}
    up = [s for s, e in changed.items() if e["delta"] > EPS]
    down = [s for s, e in changed.items() if e["delta"] < -EPS]
    cell_changes = [(s, ch) for s, e in changed.items() for ch in e["changes"]]
    lines = [f"regrade of {lab} at {when}", f"reason: {reason}",
             f"make grade's exit status: {grade_rc} (0: every submission regraded, 1: some failed)",
             f"students regraded: {len(entries)}; changed: {len(changed)} (up {len(up)}, down {len(down)}, "
             f"same total {len(changed) - len(up) - len(down)}); unchanged: {len(compared) - len(changed)}"]
    firsts = [s for s, e in entries.items() if e["new"]]
    if firsts:
        lines.append(f"graded for the first time (no earlier grade): {', '.join(firsts)}")
    lines.append(f"cell changes: {len(cell_changes)}")
    per_cell: dict[str, Counter] = {}
    for _, ch in cell_changes:
        per_cell.setdefault(f"{ch['notebook']} / {ch['cell']}", Counter())[
            f"{_num(ch['auto_old'])} -> {_num(ch['auto_new'])}"] += 1
    for cell, moves in sorted(per_cell.items()):
        lines.append(f"  {cell}: {sum(moves.values())} student(s) ("
                     + ", ".join(f"{m}: {n}" for m, n in sorted(moves.items())) + ")")
    if changed:
        biggest = max(changed, key=lambda s: (abs(changed[s]["delta"]), s))
        e = changed[biggest]
        lines.append(f"largest change: {biggest} {e['delta']:+g} ({e['score'][0]:g} -> {e['score'][1]:g} of "
                     f"{e['max'][1]:g})")
        dist = Counter(round(e["delta"], 6) for e in compared.values())
        lines.append("distribution of the change in total: "
                     + ", ".join(f"{d:+g}: {n}" for d, n in sorted(dist.items())))
    kept = sum(1 for notes in restored.values() for n in notes if n.startswith(("kept", "restored")))
    back = sum(1 for notes in restored.values() for n in notes if n.startswith("restored"))
    dropped = [n for notes in restored.values() for n in notes if n.startswith("dropped")]
    lines.append(f"grades and comments given by hand: {kept} kept, of which {back} put back after the regrade had "
                 f"reset them; {len(dropped)} dropped because the answer changed since")
    overridden = [f"{s}: {ch['cell']}" for s, ch in cell_changes if ch["manual"] is not None]
    if overridden:
        lines.append("autograded score changed under a manual grade (kept; review): " + ", ".join(overridden))
    if failed:
        lines.append("FAILED in this regrade (see make grade's output): " + ", ".join(sorted(failed)))
    lines.append(f"per student: {folder}/<student>.txt; every changed cell: {folder / 'changes.csv'}")
    lines.append(f"feedback with a regrade note (in feedback/, NOT released): {len(noted)} student(s)"
                 + (f": {', '.join(noted)}" if noted else ""))
    if noted:
        lines.append(f"release it, once reviewed: {release_cmd}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------
# The note in the feedback.
# ---------------------------------------------------------------------------------------------------
def note_html(when: str, reason: str, entry: dict, restored: list[str]) -> str:
    (s0, s1), (m0, m1) = entry["score"], entry["max"]
    items = "".join(
        f"<li>{html.escape(ch['label'])}: {_num(ch['score_old'])} &rarr; {_num(ch['score_new'])} of "
        f"{_num(ch['max_new'])}</li>" for ch in entry["changes"] if abs((ch["score_old"] or 0) - ch["score_new"]) > EPS
        or ch["max_old"] != ch["max_new"])
    dropped = any(n.startswith("dropped") for n in restored)
    return (f'{NOTE_MARK}<div class="alert alert-info regrade-note" id="regrade-note">'
            f"<h4>This lab was regraded ({html.escape(when)})</h4>"
            f"<p>Why: {html.escape(reason)}</p>"
            f"<p>Your score: {s0:g} / {m0:g} &rarr; {s1:g} / {m1:g}.</p>"
            + (f"<p>What changed:</p><ul>{items}</ul>" if items else "")
            + "<p>Grades and comments given by hand were kept"
            + (", except for an answer you changed since it was graded: it awaits grading again" if dropped else "")
            + ".</p></div>")


def add_note(page: Path, note: str) -> None:
    """Put the note at the top of a feedback page (once: an earlier regrade's note is replaced)."""
    text = page.read_text(encoding="utf-8")
    text = re.sub(re.escape(NOTE_MARK) + r'<div class="alert alert-info regrade-note".*?</div>', "", text, flags=re.S)
    for anchor in ('<div class="container">', "<body>"):
        if anchor in text:
            text = text.replace(anchor, anchor + note, 1)
            break
    else:
        text = note + text
    page.write_text(text, encoding="utf-8")


# ---------------------------------------------------------------------------------------------------
# The commands.
# ---------------------------------------------------------------------------------------------------
class _Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy (make grade's progress lines name the submissions that FAILED)."""

    def __init__(self, stream):
        self.stream, self.copy = stream, io.StringIO()

    def write(self, text):
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self):
        self.stream.flush()


def regrade(course: Path, lab: str, reason: str, students: list[str] | None, grade_args: list[str]) -> int:
    subs = grade.find_submissions(course, [lab], students)
    names = [s for s, _ in subs]
    if not names:
        print(f"Nothing to regrade: no submission of {lab} under {course / 'submitted'}")
        return 2
    when = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    folder = course / "grades" / f"regrade-{lab}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    n = 1
    while folder.exists():
        n += 1
        folder = folder.with_name(f"{folder.name.split('.')[0]}.{n}")
    folder.mkdir(parents=True)
    before = snapshot(course, lab, names)
    (folder / "before.json").write_text(json.dumps(before, indent=1), encoding="utf-8")

    argv = ["--course-dir", str(course), "--assignment", lab, *[a for s in names for a in ("--student", s)],
            *grade_args]
    print(f"regrading {lab} for {len(names)} student(s) (make grade's pipeline); snapshot: {folder / 'before.json'}")
    tee, stdout = _Tee(sys.stdout), sys.stdout
    sys.stdout = tee
    try:
        rc = grade.main(argv)
    finally:
        sys.stdout = stdout
        restored = restore(course, lab, before)     # whatever happened, put back what was given by hand
    if rc in (2, 3):
        print(f"nothing was regraded (make grade's exit status {rc}); the grades are as they were")
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()
        return rc
    failed = {m.group(1): "FAILED" for m in re.finditer(rf"^\s+(\S+)/{re.escape(lab)}: FAILED$", tee.copy.getvalue(),
                                                          re.M)}

    # make grade wrote the feedback and the CSV before the manual grades were put back: write both again where needed.
    logs = course / "autograded" / "_logs"
    again = [s for s, notes in restored.items() if any(n.startswith("restored") for n in notes) and s not in failed]
    grade.in_workers(grade.feedback_one, [dict(course=course, student=s, assignment=lab,
                                               log=logs / f"feedback_{s}_{lab}.log") for s in again], _jobs(grade_args))
    if again:
        with grade.shared_course_lock(course):
            grade.export_grades(course, course / "grades" / "grades.csv", log=logs / "export.log")

    after = snapshot(course, lab, names)
    (folder / "after.json").write_text(json.dumps(after, indent=1), encoding="utf-8")
    entries = diff(before, after)
    noted = []
    for student, entry in entries.items():
        resubmitted = bool(before.get(student) and after.get(student)
                           and before[student]["timestamp"] != after[student]["timestamp"])
        (folder / f"{student}.txt").write_text(
            student_report(student, lab, when, reason, entry, restored.get(student, []), failed.get(student),
                           resubmitted), encoding="utf-8")
        visible = entry["changes"] and not (entry["new"] or entry["gone"]) and student not in failed and (
            abs(entry["delta"]) > EPS or any(abs((c["score_old"] or 0) - c["score_new"]) > EPS
                                             or c["max_old"] != c["max_new"] for c in entry["changes"]))
        pages = sorted((course / "feedback" / student / lab).glob("*.html"))
        if visible and pages:
            note = note_html(when, reason, entry, restored.get(student, []))
            for page in pages:
                add_note(page, note)
            noted.append(student)
    with open(folder / "changes.csv", "w", newline="", encoding="utf-8") as fh:
        fields = ["student", "notebook", "cell", "label", "auto_old", "auto_new", "score_old", "score_new", "max_old",
                  "max_new", "manual_kept"]
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        for student, entry in entries.items():
            for ch in entry["changes"]:
                writer.writerow({"student": student, **{k: ch[k] for k in fields[1:-1]}, "manual_kept": ch["manual"]})
    release_cmd = f"make release-regrade LAB={lab} (python -m autograder.term.regrade {lab} --release {folder})"
    summary = summarise(lab, when, reason, rc, entries, restored, failed, noted, folder, release_cmd)
    (folder / "summary.txt").write_text(summary, encoding="utf-8")
    (folder / "summary.json").write_text(json.dumps({
        "lab": lab, "when": when, "reason": reason, "grade_exit_status": rc, "noted": noted, "failed": sorted(failed),
        "restored": restored, "students": {s: {k: e[k] for k in ("delta", "changes", "new", "score", "max")}
                                           for s, e in entries.items()}}, indent=1), encoding="utf-8")
    print("\n" + summary, end="")
    return rc


def _jobs(grade_args: list[str]) -> int:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--jobs", type=int, default=None)
    jobs = ap.parse_known_args(grade_args)[0].jobs
    return jobs or int(os.environ.get("JOBS") or os.cpu_count() or 1)


def latest_regrade(course: Path, lab: str) -> Path | None:
    found = sorted((course / "grades").glob(f"regrade-{lab}-*/summary.json"), key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


def release(course: Path, lab: str, folder: Path | None) -> int:
    """Release (nbgrader release_feedback) the feedback of the students a regrade changed, once its note is there."""
    folder = folder or latest_regrade(course, lab)
    if folder is None or not (folder / "summary.json").is_file():
        print(f"no regrade of {lab} to release under {course / 'grades'} (regrade-{lab}-*/summary.json)")
        return 4
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    if summary["lab"] != lab:
        print(f"{folder} is a regrade of {summary['lab']}, not {lab}")
        return 4
    logs = course / "autograded" / "_logs"
    released, refused = [], []
    after = json.loads((folder / "after.json").read_text(encoding="utf-8")) if (folder / "after.json").is_file() else {}
    for student in summary["noted"]:
        pages = sorted((course / "feedback" / student / lab).glob("*.html"))
        if not pages:
            refused.append(f"{student} (no feedback to release under {course / 'feedback' / student / lab})")
            continue
        if not all(NOTE_MARK in p.read_text(encoding="utf-8") for p in pages):
            # a later `make grade` wrote the feedback again, without the note: it still holds while the grades do
            why = note_again(course, lab, student, summary, after, pages)
            if why:
                refused.append(f"{student} (its feedback was regenerated since the regrade and {why}: the note no "
                               f"longer describes it; read it, then `nbgrader release_feedback {lab} --student "
                               f"{student}`, or regrade again)")
                continue
        missing = [f for f in ("timestamp.txt", "submission_secret.txt") if not (pages[0].parent / f).is_file()]
        if missing:     # release_feedback files feedback under the secret nbgrader submit wrote
            refused.append(f"{student} (no {' or '.join(missing)} beside its feedback: the submission did not come "
                           f"through the exchange, so there is nowhere to release it to)")
            continue
        grade.put_venv_on_path()
        if grade.nbgrader_in_process(course, "release_feedback", lab, student,
                                     log=logs / f"release_feedback_{student}_{lab}.log"):
            released.append(student)
        else:
            refused.append(f"{student} (release_feedback failed: {logs / f'release_feedback_{student}_{lab}.log'})")
    record = {"when": datetime.now().strftime("%Y-%m-%d %H:%M:%S"), "released": released, "not_released": refused}
    with open(folder / "released.json", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
    print(f"released the regraded feedback of {lab} to {len(released)} student(s)"
          + (f": {', '.join(released)}" if released else ""))
    for why in refused:
        print(f"not released: {why}")
    return 0 if not refused else 1


def note_again(course: Path, lab: str, student: str, summary: dict, after: dict, pages: list[Path]) -> str:
    """Put a regrade's note back into feedback written again since, where the student's grades are still what the
    regrade left (scores, manual grades, comments, the submission's time); '' when put back, else why not."""
    now = snapshot(course, lab, [student]).get(student)
    then = after.get(student)
    entry = summary.get("students", {}).get(student, {})
    if now is None or then is None or "score" not in entry:
        return "the regrade's record of it is incomplete"
    if now["timestamp"] != then["timestamp"]:
        return "the student submitted again"
    if {k: now[k] for k in ("score", "max_score", "cells", "comments")} != \
            {k: then[k] for k in ("score", "max_score", "cells", "comments")}:
        return "its grades changed"
    note = note_html(summary["when"], summary["reason"], entry, summary.get("restored", {}).get(student, []))
    for page in pages:
        add_note(page, note)
    return ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lab", help="the lab: its folder name in solutions/ or its number (05)")
    ap.add_argument("--course-dir", type=Path, default=Path.cwd(), help="course root (holds nbgrader_config.py)")
    ap.add_argument("--reason", help="why the lab is regraded: goes into every report and each changed feedback")
    ap.add_argument("--student", action="append", help="regrade only this student (repeatable)")
    ap.add_argument("--release", nargs="?", const="", metavar="FOLDER",
                    help="release the feedback a regrade changed (the lab's latest regrade folder, or FOLDER)")
    args, grade_args = ap.parse_known_args(argv)
    course = args.course_dir.resolve()
    lab = resolve_lab(course, args.lab)
    if lab is None:
        print(f"no lab {args.lab!r} (or more than one) in {course / 'solutions'}")
        return 4
    if args.release is not None:
        return release(course, lab, Path(args.release).resolve() if args.release else None)
    if not args.reason:
        ap.error("say why the lab is regraded: --reason TEXT (it goes into the students' feedback)")
    return regrade(course, lab, args.reason, args.student, grade_args)


if __name__ == "__main__":
    sys.exit(main())
