#!/usr/bin/env bash
# Regenerate requirements.lock: every package the image installs (pyproject's dependencies, the gpu
# extra, the build requirements), pinned with the sha256 of each file PyPI serves for it. The
# Dockerfile installs it with --require-hashes; hack/image/build.sh downloads the wheels from it.
# Run after changing dependencies in pyproject.toml (tests/unit/test_image_lock.py says when).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
python3 -m pip install -q --disable-pip-version-check "pip-tools>=7.4"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
python3 "$ROOT/hack/image/context.py" requirements > "$tmp/image.in"
# the image's Python is Debian bookworm's 3.11 on x86_64 (hack/image/build.sh), as this machine's
cd "$tmp" && CUSTOM_COMPILE_COMMAND="bash hack/image/lock.sh" pip-compile --quiet --generate-hashes \
  --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links --resolver=backtracking -o "$ROOT/requirements.lock" image.in
