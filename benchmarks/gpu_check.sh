#!/usr/bin/env bash
# The GPU check (benchmarks/gpu_check.py) on a GPU machine that has python3 with a CUDA PyTorch but no package index
# and no .venv: it installs the course's other packages from a wheelhouse, then runs the check with that python3.
#
#   here, once:          make gpu-wheels            (builds .whl/, about 45 MiB; see benchmarks/gpu_wheels.py)
#   on the GPU machine:  bash benchmarks/gpu_check.sh [gpu_check.py's options]      (.whl/ carried along)
#
# The wheels go into python3's own environment (a throw-away machine): a kernel in the grading sandbox sees only the
# interpreter's environment, not a PYTHONPATH. The course's two packages are put on its path with a .pth file, as an
# editable install would. Results go to $OUT (when set) or build/gpu-check/. Without a GPU it says so and exits 0.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 WANDB_MODE=offline
if ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "gpu_check.sh: the GPU check needs a CUDA GPU and a Python with PyTorch; $PY has no torch: nothing was run" \
       "(on a course machine: make test-gpu)"
  exit 0
fi
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  exec "$PY" benchmarks/gpu_check.py "$@"   # it says that it needs a GPU and exits 0 (or names what is missing)
fi
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  echo "installing $(ls .whl/*.whl | wc -l) wheels from .whl/ into $("$PY" -c 'import sys; print(sys.prefix)')"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
    --root-user-action=ignore .whl/*.whl || { echo "gpu_check.sh: installing the wheels failed" >&2; exit 1; }
fi
site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
[ -w "$site" ] && echo "$PWD" > "$site/training_infra_course.pth"
"$PY" -m pip check --disable-pip-version-check 2>&1 | sed 's/^/pip check: /' | head -40
exec "$PY" benchmarks/gpu_check.py "$@"
