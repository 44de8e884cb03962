"""Grade on submit (autograder/on_submit.py): the time from Submit to released feedback per lab, and a class's queue.

    python benchmarks/grade_on_submit.py                        # every lab once, then a queue of 30 of lab 5
    python benchmarks/grade_on_submit.py --labs 02 05 --queue 0
    python benchmarks/grade_on_submit.py --queue 30 --queue-lab 01 --jobs 2

In a throw-away copy of the course with its own exchange, the service is run as on the hub (the real grading
pipeline: collect, the sandbox, feedback as the lab's mode says, its release); submissions (the reference solution)
are put in the exchange's inbound as Submit leaves them. Per lab: one submission, from its appearance to its
feedback released. The queue: N students' submissions of one lab at once, until the last one's feedback, and how
many did not end "graded". One account here, so collect accepts the folders it owns (accept_own_folders); the
JupyterHub around it (tests/test_hub.py) adds the 2-second poll. Wall times depend on the machine and on what else
runs on it: a script, not a test.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import nbformat  # noqa: E402

from autograder import notebooks as nbu  # noqa: E402
from autograder import on_submit  # noqa: E402
from autograder.grade import put_venv_on_path  # noqa: E402
from course import ASSIGNMENTS, make_course, notebook_name, release_nb, source_nb  # noqa: E402


def lab_named(prefix: str) -> str:
    (lab,) = [a for a in ASSIGNMENTS if a.startswith(prefix)]
    return lab


def course_with_exchange(tmp: Path, labs: list[str], jobs: int) -> tuple[Path, Path, on_submit.Service]:
    tmp.mkdir(parents=True)
    course = make_course(tmp)
    exchange = tmp / "exchange"
    with open(course / "nbgrader_config.py", "a", encoding="utf-8") as fh:
        fh.write(f"\nc.Exchange.root = {str(exchange)!r}\nc.OwnerCheckedCollect.accept_own_folders = True\n")
    due = "\n".join(f"{lab} = 2099-01-01T00:00:00Z" for lab in labs)
    shown = "\n".join(f'{lab} = "visible"' for lab in labs)
    (course / "term.toml").write_text(f"version = 1\n[labs]\n{due}\n[on_submit]\nper_hour = 100\n"
                                      f"[on_submit.labs]\n{shown}\n")
    service = on_submit.Service(course, exchange, jobs=jobs)
    (exchange / service.course_id / "inbound").mkdir(parents=True)
    service.step()      # the labs are turned on before anything is submitted
    return course, exchange, service


def hand_in(exchange: Path, course_id: str, student: str, lab: str, nb) -> str:
    """A submission folder as nbgrader's Submit leaves it in the exchange."""
    stamp = f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M:%S.%f} UTC"
    folder = exchange / course_id / "inbound" / f"{student}+{lab}+{stamp}+bench{student}"
    folder.mkdir()
    nbformat.write(nb, str(folder / notebook_name(lab)))
    (folder / "timestamp.txt").write_text(stamp)
    (folder / "submission_secret.txt").write_text(os.urandom(16).hex())   # feedback's key in the exchange
    return folder.name


def drain(service: on_submit.Service) -> float:
    started = time.perf_counter()
    service.run(poll=0, once=True)
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--labs", nargs="*", default=[a[:2] for a in ASSIGNMENTS], help="lab number prefixes")
    ap.add_argument("--queue", type=int, default=30, help="submissions in the queue (0: none)")
    ap.add_argument("--queue-lab", default="05")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="the service's JOBS")
    args = ap.parse_args()
    put_venv_on_path()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    answers = {}

    def reference(lab: str):
        if lab not in answers:
            answers[lab] = nbu.fill(release_nb(lab), nbu.reference_answers(source_nb(lab)))
        return answers[lab]

    print(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; service JOBS={args.jobs}")
    labs = [lab_named(p) for p in args.labs]
    with tempfile.TemporaryDirectory(prefix="bench-on-submit-") as tmp:
        course, exchange, service = course_with_exchange(Path(tmp) / "labs", labs, args.jobs)
        print(f"\n{'lab':<30} {'Submit to feedback':>20}  state")
        for lab in labs:
            name = hand_in(exchange, service.course_id, "ann", lab, reference(lab))
            seconds = drain(service)
            (row,) = service.queue.rows("name = ?", name)
            print(f"{lab:<30} {seconds:>18.1f} s  {row['state']} {row['score'] or 0:g} / {row['max_score'] or 0:g}")

    if args.queue:
        lab = lab_named(args.queue_lab)
        with tempfile.TemporaryDirectory(prefix="bench-on-submit-") as tmp:
            course, exchange, service = course_with_exchange(Path(tmp) / "queue", [lab], args.jobs)
            for i in range(args.queue):
                hand_in(exchange, service.course_id, f"student{i:03d}", lab, reference(lab))
            seconds = drain(service)
            rows = service.queue.rows()
            states = {}
            for row in rows:
                states[row["state"]] = states.get(row["state"], 0) + 1
            print(f"\nqueue: {args.queue} submissions of {lab} at once, drained in {seconds:.0f} s "
                  f"({seconds / args.queue:.1f} s each, {60 * args.queue / seconds:.1f} a minute); states: {states}")


if __name__ == "__main__":
    main()
