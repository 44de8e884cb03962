"""Build the wheelhouse `make test-gpu` needs on a GPU machine that has Python and a CUDA PyTorch but no package index.

    .venv/bin/python benchmarks/gpu_wheels.py                # -> .whl/ (git-ignored through .git/info/exclude)
    .venv/bin/python benchmarks/gpu_wheels.py --out DIR --python-version 3.12 --limit-mib 58

What goes in: every pin of pyproject.toml (``pinned_roots``: a new pin travels by default) but the instructor's
tools the check never runs (NOT_RUN_BY_THE_CHECK), and everything they need, at the versions installed in this checkout's .venv (= pyproject.toml's
pins and what pip resolved for them), as binary wheels for CPython ``--python-version`` on Linux x86-64. What stays
out: torch and what it brings (the GPU machine's own CUDA build is the one to test), the instructor-only hub packages
(jupyterhub, the proxy, psycopg), and every distribution the GPU machine's image already has (DEVICE_IMAGE; names from
the device notes, read 2026-11), and the few distributions those roots require that the check never imports
(NOT_NEEDED: JupyterLab's front end, the debugger, tab completion): the image's packages run at the image's versions, which the check's log prints (pip list) so that a
version difference is visible. The wheels are fetched one by one with ``pip download --no-deps --only-binary=:all:``
for the target platform, and MANIFEST.txt lists them with their sizes. The device call carries the folder (64 MiB in
all with the working tree, about 5 MiB of it the course) and benchmarks/gpu_check.sh installs it with
``pip install --no-index --no-deps``. Exits 1 if the folder is over ``--limit-mib``.
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]

# Every pin of pyproject.toml is a root, except the instructor's tools that the GPU check never runs (below): a pin
# added later travels by default (a hand-kept list of roots once left out latex2mathml, and every lab's grading failed
# on the first GPU machine for want of it).
NOT_RUN_BY_THE_CHECK = {"ruff", "copydetect", "jupytext"}   # make test's linter, the similarity report, make labs


def pinned_roots() -> list[str]:
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return [Requirement(d).name for d in deps if norm(Requirement(d).name) not in NOT_RUN_BY_THE_CHECK]


# Never carried: the device's own PyTorch stack, and packages only the hub uses.
NEVER = {"torch", "triton", "sympy", "mpmath", "networkx", "filelock", "fsspec", "jinja2", "setuptools",
         "jupyterhub", "configurable-http-proxy", "psycopg", "psycopg-binary"}
NEVER_PREFIXES = ("nvidia-", "cuda-")
# Required by the roots' metadata but never imported by the GPU check: the student's JupyterLab front end (jupyterlab,
# notebook and their servers and extensions, babel for their translations), the debugger (debugpy) and tab
# completion (jedi, parso). Checked by running a lesson under nbval and grading a lab with these imports refused.
# About 45 MiB, which would not fit the carry limit.
NOT_NEEDED = {"jupyterlab", "notebook", "jupyterlab-server", "babel", "jedi", "parso", "debugpy", "widgetsnbextension",
              "jupyterlab-widgets", "jupyter-builder", "jupyter-lsp", "json5", "async-lru", "notebook-shim"}
# The GPU machine's image (the device notes' package list): these are used as they are there.
DEVICE_IMAGE = set("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax
opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks
pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy
seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy
tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())
PLATFORMS = ["manylinux_2_39_x86_64", "manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64",
             "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64"]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: list[str], python_version: str) -> dict[str, str]:
    """{distribution: version} of the roots and everything they require, with the extras a requirement asks for
    (``bleach[css]`` brings tinycss2), from the installed metadata, markers evaluated for CPython
    ``python_version`` on Linux x86-64."""
    env = default_environment()
    env.update(python_version=python_version, python_full_version=f"{python_version}.0", sys_platform="linux",
               platform_system="Linux", platform_machine="x86_64", os_name="posix",
               implementation_name="cpython", platform_python_implementation="CPython")
    found: dict[str, str] = {}
    extras_done: dict[str, set[str]] = {}
    todo: list[tuple[str, set[str]]] = [(r, set()) for r in roots]
    while todo:
        raw, extras = todo.pop()
        name = norm(raw)
        if name in NEVER or name in NOT_NEEDED or name.startswith(NEVER_PREFIXES):
            continue
        new = ({""} | extras) - extras_done.get(name, set())
        if not new:
            continue
        extras_done.setdefault(name, set()).update(new)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            raise SystemExit(f"{name} is not installed in this environment: run `make install` first")
        found[name] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None and "" in new or req.marker is not None and any(
                    req.marker.evaluate({**env, "extra": extra}) for extra in new):
                todo.append((req.name, set(req.extras)))
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / ".whl"))
    ap.add_argument("--python-version", default="3.12", help="the GPU machine's Python (its python3: 3.12)")
    ap.add_argument("--limit-mib", type=float, default=58.0, help="the carry limit left for wheels (64 MiB in all)")
    ap.add_argument("--dry-run", action="store_true", help="list what would be fetched, fetch nothing")
    args = ap.parse_args(argv)
    need = closure(pinned_roots(), args.python_version)
    carry = {n: v for n, v in sorted(need.items()) if n not in DEVICE_IMAGE}
    print(f"{len(need)} distributions needed, {len(need) - len(carry)} already on the GPU image, {len(carry)} to carry")
    if args.dry_run:
        for n, v in carry.items():
            print(f"  {n}=={v}")
        return 0
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    abi = args.python_version.replace(".", "")
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, version in carry.items():
            cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                   "--python-version", args.python_version, "--implementation", "cp", "--abi", f"cp{abi}",
                   "--abi", "abi3", "--abi", "none", *plat, "-d", tmp, f"{name}=={version}"]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                failed.append(f"{name}=={version}: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
        for wheel in Path(tmp).glob("*.whl"):
            shutil.move(str(wheel), out / wheel.name)
    wheels = sorted(out.glob("*.whl"), key=lambda p: -p.stat().st_size)
    total = sum(p.stat().st_size for p in wheels)
    lines = [f"{p.stat().st_size / 2**20:7.2f} MiB  {p.name}" for p in wheels]
    (out / "MANIFEST.txt").write_text(
        f"# benchmarks/gpu_wheels.py for CPython {args.python_version}, Linux x86-64: {len(wheels)} wheels, "
        f"{total / 2**20:.1f} MiB\n" + "\n".join(lines) + "\n")
    print("\n".join(lines[:12]) + (f"\n  ... {len(lines) - 12} smaller" if len(lines) > 12 else ""))
    print(f"{len(wheels)} wheels, {total / 2**20:.1f} MiB in {out} (limit {args.limit_mib} MiB)")
    for f in failed:
        print(f"not fetched: {f}", file=sys.stderr)
    if failed:
        return 1
    if total > args.limit_mib * 2**20:
        print(f"over the limit: {total / 2**20:.1f} MiB > {args.limit_mib} MiB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
