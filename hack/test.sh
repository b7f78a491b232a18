#!/usr/bin/env bash
# The one test command (README and .ci/run both call it): installs the package with its
# test extras, builds the Kubernetes control plane for the integration tier (cached in
# ~/.cache/qosmos/k8s, a no-op when already built), checks the layers, then runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# The repository root holds the component folder operator/: with the root on sys.path (python -m from
# here) it would shadow the standard library's operator module. -P for every Python started below.
export PYTHONSAFEPATH=1

# ray: the sweep's Ray test; profile: PyTorch for `qosmos profile run`'s tests (real steps on the CPU, torchrun's
# gloo ranks), about 5 GB with the CUDA libraries PyPI's default wheel brings
python3 -m pip install -q --disable-pip-version-check -e ".[test,ray,profile]"

if command -v go >/dev/null 2>&1; then
  bash hack/k8s/build.sh
  bash hack/kueue/build.sh  # Kueue v0.17.0 for tests/integration/test_bench_kueue.py (cached, ~10 min the first time)
elif [ -n "${CI:-}" ]; then
  echo "CI: Go toolchain missing, cannot build the Kubernetes control plane for integration tests" >&2
  exit 1
else
  echo "Go toolchain absent: integration tests that need Kubernetes will be skipped" >&2
fi

# --- node tier (tests/node, marker "node"; sidecar/hack/node owner) ---------------------------
# A real kubelet node needs Debian's containerd/runc/CNI/iperf3, a kubelet and two local images
# (hack/node/README.md; cached, a no-op when present). Root only: elsewhere tests/node skips.
if [ "$(id -u)" -eq 0 ] && command -v go >/dev/null 2>&1; then
  bash hack/node/build.sh
fi
# ----------------------------------------------------------------------------------------------

# --- e2e tier (tests/e2e, marker "e2e"; issue 14) ---------------------------------------------
# The qosmos image (the Dockerfile, by buildah from a debootstrap python3 base, offline wheels) and
# a kube-scheduler image from hack/k8s's binary, for helm install on the node tier's kubelet
# (hack/image/build.sh; cached by content hash, a no-op when nothing it copies changed). Root only.
if [ "$(id -u)" -eq 0 ] && command -v go >/dev/null 2>&1; then
  bash hack/image/build.sh
  bash hack/image/jax/build.sh  # JAX on CPU for tests/e2e/test_training_e2e.py (a real framework in the gang pods)
fi
# ----------------------------------------------------------------------------------------------

# Layers (issue 9 §6; pyproject.toml [tool.importlinter], [tool.mypy]): a broken contract or type error fails the run.
python3 hack/layers.py imports  # core <- predictors <- simulator; no k8s/RPC/HTTP there; no qosmos.testing in production
python3 hack/layers.py types    # mypy --strict on the whole package

set +e
pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: treating as a failure" >&2
  exit 1
fi
exit "$rc"
