#!/usr/bin/env bash
# One device call refreshes the GPU-measured profiles (issue 23 §4): ten minutes at most.
#
#   OUT=/some/dir bash hack/gpu/run.sh          # writes $OUT/measured/{training,inference}.csv, env.json, log.txt
#
# Needs PyTorch (torchvision for the image models) and a CUDA GPU; no network, no install of qosmos.
# numpy, which qosmos's profiler needs and a PyTorch-only machine may lack, is installed from
# hack/gpu/.wheels when present (fill it with `bash hack/gpu/run.sh --fetch-wheels` on a machine
# with PyPI, and carry it to the GPU machine).
set -uo pipefail
export PYTHONSAFEPATH=1  # the checkout's operator/ folder must not shadow the stdlib module
cd "$(dirname "$0")/../.."
PY=${PYTHON:-$(command -v python3 || command -v python)}
if [[ ${1:-} == --fetch-wheels ]]; then
    for v in 311 312 313; do
        pip download -q --only-binary=:all: --no-deps --python-version "$v" --platform manylinux2014_x86_64 \
            --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d hack/gpu/.wheels "numpy>=1.26"
    done
    exit
fi
OUT=${OUT:-/tmp/qosmos-gpu}
mkdir -p "$OUT/measured"
{ date -u; nvidia-smi; "$PY" --version; } > "$OUT/measured/nvidia-smi.txt" 2>&1
if ! "$PY" -c "import numpy" 2>/dev/null; then
    "$PY" -m pip install -q --no-index --find-links hack/gpu/.wheels --target /tmp/qosmos-gpu-numpy numpy \
        && export PYTHONPATH="/tmp/qosmos-gpu-numpy${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" -c "import sys, numpy, torch; print(sys.version.split()[0], 'numpy', numpy.__version__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
exec "$PY" hack/gpu/profile.py --out "$OUT/measured" --deadline "${DEADLINE:-420}" "$@"
