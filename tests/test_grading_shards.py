"""Past one machine: the gradebook on a PostgreSQL server, and two `make grade` shards at once on disjoint students.

A throw-away PostgreSQL server (Debian's `postgresql` package: initdb, pg_ctl; run as the `postgres` account when
the test runs as root) on a unix socket in a scratch folder, no TCP. The course's nbgrader_config.py points
`c.CourseDirectory.db_url` at it (psycopg, pinned). Two shards (`python -m autograder.grade --shard K/2`, as
grading nodes would run them, one Kubernetes Job each) grade half the class each, at the same time, into the same
course folder and database. The gradebook they leave must be exactly the one that a single run on SQLite leaves:
every grade, score and comment of every submission, and the same grades.csv.
"""
from __future__ import annotations

import csv
import glob
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from autograder import notebooks as nbu
from course import FASTEST_LAB, first_bug, light_release, light_source, make_course, submit

LAB = FASTEST_LAB
STUDENTS = ("ada", "bo", "cy", "di")


def test_a_new_gradebook_gets_the_schema_revision_nbgrader_itself_would_give_it():
    """make grade reads the revision in its own process (autograder.grade.alembic_head); nbgrader asks an `alembic`
    process, which must say the same."""
    from autograder.grade import alembic_head

    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    by_nbgrader = subprocess.run([sys.executable, "-c", "from nbgrader.api import get_alembic_version as v; print(v())"],
                                 env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert by_nbgrader and alembic_head() == by_nbgrader


def postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or [shutil.which("initdb") or ""]
    return Path(found[-1]).parent if found[-1] else None


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server for this module: yields the SQLAlchemy URL of an empty database."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries (Debian: apt-get install postgresql)")
    run_as: list[str] = []
    if os.geteuid() == 0:   # PostgreSQL refuses to run as root
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root, and there is no `postgres` account to run the server as")
        run_as = ["runuser", "-u", "postgres", "--"]
    base = Path(tempfile.mkdtemp(prefix="gradebook-pg-"))
    base.chmod(0o755)
    data, sockets = base / "data", base / "sockets"
    sockets.mkdir()
    if run_as:
        shutil.chown(base, "postgres")
        shutil.chown(sockets, "postgres")
    user = "postgres" if run_as else pwd.getpwuid(os.geteuid()).pw_name
    subprocess.run([*run_as, str(bin_dir / "initdb"), "-D", str(data), "-U", user, "--auth=trust", "-E", "UTF8"],
                   check=True, capture_output=True)
    subprocess.run([*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(base / "server.log"), "-w", "start",
                    "-o", f"-k {sockets} -c listen_addresses=''"], check=True, capture_output=True)
    try:
        subprocess.run([*run_as, str(bin_dir / "createdb"), "-h", str(sockets), "-U", user, "gradebook"],
                       check=True, capture_output=True)
        yield f"postgresql+psycopg://{user}@/gradebook?host={sockets}"
    finally:
        subprocess.run([*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def class_course(tmp: Path, db_url: str | None) -> Path:
    """Four submissions of the fastest lab: two reference answers, the first catalogued bug, the untouched release."""
    tmp.mkdir()
    course = make_course(tmp, light_lab=True)
    if db_url:
        with open(course / "nbgrader_config.py", "a", encoding="utf-8") as config:
            config.write(f"\nc.CourseDirectory.db_url = {db_url!r}\n")
    release, reference = light_release(), nbu.reference_answers(light_source())
    answers = {"ada": reference, "bo": {**reference, **first_bug(LAB)[1]}, "cy": {}, "di": reference}
    for student in STUDENTS:
        submit(course, student, LAB, nbu.fill(release, answers[student]))
    return course


def grade(course: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "autograder.grade", "--course-dir", str(course), "--jobs", "1",
                             *args], cwd=course, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def gradebook(db_url: str) -> dict:
    """Everything grading writes into a gradebook, keyed by what it belongs to (ids and times left out)."""
    from nbgrader.api import Gradebook

    rows = {}
    with Gradebook(db_url) as gb:
        for student in STUDENTS:
            sub = gb.find_submission(LAB, student)
            for nb in sub.notebooks:
                rows[student, nb.name, "penalty"] = nb.late_submission_penalty
                for g in nb.grades:
                    rows[student, nb.name, g.name] = (g.auto_score, g.manual_score, g.needs_manual_grade, g.max_score)
                for c in nb.comments:
                    rows[student, nb.name, "comment", c.name] = (c.auto_comment, c.manual_comment)
            rows[student, "score"] = (sub.score, sub.max_score, sub.needs_manual_grade)
    return rows


def grades_csv(course: Path) -> list[dict]:
    drop = {"timestamp"}
    return sorted(({k: v for k, v in row.items() if k not in drop}
                   for row in csv.DictReader((course / "grades" / "grades.csv").open())), key=lambda r: r["student_id"])


def test_two_shards_on_postgresql_leave_exactly_the_gradebook_of_one_run(postgres, tmp_path):
    single = class_course(tmp_path / "single", None)
    sharded = class_course(tmp_path / "sharded", postgres)

    started = time.monotonic()
    shards = [grade(sharded, "--shard", f"{k}/2") for k in range(2)]   # at the same time, as two grading nodes
    outputs = [shard.communicate(timeout=600)[0] for shard in shards]
    sharded_s = time.monotonic() - started
    for shard, out, mine in zip(shards, outputs, (("ada", "cy"), ("bo", "di"))):
        assert shard.returncode == 0, out
        assert sorted(line.split()[0].split("/")[0] for line in out.splitlines() if line.endswith(": graded")) == \
            list(mine), f"shard K/2 grades every second student from the K-th, in name order:\n{out}"
    one = grade(single)
    out = one.communicate(timeout=600)[0]
    assert one.returncode == 0, out

    assert not (sharded / "gradebook.db").exists(), "the shards wrote a SQLite gradebook, not the server's"
    by_shards, by_one = gradebook(postgres), gradebook(f"sqlite:///{single / 'gradebook.db'}")
    assert by_shards == by_one, {k: (by_shards.get(k), by_one.get(k)) for k in set(by_shards) | set(by_one)
                                 if by_shards.get(k) != by_one.get(k)}
    scores = {s: by_one[s, "score"][0] for s in STUDENTS}
    assert scores["ada"] == scores["di"] > scores["bo"] > scores["cy"] == 0, scores   # the class is graded, not empty
    assert grades_csv(sharded) == grades_csv(single)
    for student in STUDENTS:
        assert list((sharded / "feedback" / student / LAB).glob("*.html")), f"no feedback for {student}"
    print(f"two shards at once: {sharded_s:.1f} s")


def test_the_kubernetes_job_runs_as_many_shards_as_it_has_pods():
    """The manifest the docs hand an instructor: N pods at once, each `--shard <its index>/N`, never as root."""
    import yaml

    from autograder.grade import shard_spec
    from course import ROOT

    job = yaml.safe_load((ROOT / "publish" / "jupyterhub" / "grading-shards.yaml").read_text())
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    command = pod["containers"][0]["command"][-1]
    shards = int(command.split("--shard ${JOB_COMPLETION_INDEX}/")[1].split()[0])
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == shards
    assert shard_spec(f"{shards - 1}/{shards}") == (shards - 1, shards)
    assert pod["securityContext"]["runAsUser"] != 0 and "-m autograder.grade" in command
