#!/usr/bin/env bash
# The JAX training image for tests that run a DLJob's gang on the node tier's real kubelet: the base
# image (hack/image/build.sh's base.oci.tar: bookworm + Debian's python3 3.11) plus CPU JAX and
# hack/image/jax/train.py, built offline without Docker and cached by content under
# ${QOSMOS_IMAGE_CACHE:-$HOME/.cache/qosmos/image}/:
#
#   jax-wheels-<key>/   pip download of the pinned wheels below (cp311, manylinux x86_64, hash-checked)
#   jax.oci.tar         qosmos.local/jax-train:<jax version>-<key12>, one layer (hack/node/ociimage.py):
#                       the base's layer + /opt/jax (pip --target, on sys.path by a .pth file)
#                       + /opt/qosmos-train/train.py, the entrypoint
#   jax.json            {ref, archive, bytes, key, build_s}
#
# The key is a sha256 over base.oci.tar, the pins, train.py, this script and ociimage.py; a run with
# it unchanged is a no-op. QOSMOS_IMAGE_REBUILD=1 forces. Root only (the rootfs keeps root's files,
# compileall runs chrooted in it). Run hack/image/build.sh first: it makes base.oci.tar.
set -euo pipefail

JAX_VERSION=0.10.2
PYVER=3.11   # bookworm's python3
REF_NAME=qosmos.local/jax-train
# jax's whole dependency closure for cp311 (pip download --no-deps --require-hashes): a new pin here
# changes the key. The sha256 are PyPI's files for manylinux x86_64 / pure python.
PINS="$(cat <<'EOF'
jax==0.10.2 --hash=sha256:724d73c4678d8b06f6a6ab4db1b8a2fea8cd4f1e2c2564f99601634ec7b8d1c6
jaxlib==0.10.2 --hash=sha256:1faca3c5d4662cb4a6130a68105d68bb520764817e165d6eebfd6786c0d1f30f
ml_dtypes==0.6.0 --hash=sha256:6c8e39b53e90afda8ce52859c93de4dba3e02b76d85dcf091cc469f9184c6dae
numpy==2.4.6 --hash=sha256:89cd468399cfd2504718f0ba50e410dca55a170b61a02ad92bb18c8a65186e93
opt_einsum==3.4.0 --hash=sha256:69bb92469f86a1565195ece4ac0323943e83477171b91d24c35afe028a90d7cd
scipy==1.17.1 --hash=sha256:43af8d1f3bea642559019edfe64e9b11192a8978efbd1539d7bc2aaa23d92de4
EOF
)"
# the target interpreter's tags, whatever python3 runs pip here (pip takes each manylinux tag literally:
# jaxlib's is 2_27; bookworm's glibc 2.36 runs all of them). jax 0.10.2 is the last with cp311 wheels:
# 0.11.0 requires Python >= 3.12
PIP_TARGET_ARGS=(--only-binary=:all: --python-version "$PYVER" --implementation cp --abi "cp${PYVER/./}")
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014; do PIP_TARGET_ARGS+=(--platform "${tag}_x86_64"); done

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
CACHE="${QOSMOS_IMAGE_CACHE:-$HOME/.cache/qosmos/image}"
FORCE="${QOSMOS_IMAGE_REBUILD:-0}"
OCIIMAGE="$ROOT/hack/node/ociimage.py"
TRAIN="$HERE/train.py"
BASE="$CACHE/base.oci.tar"
OUT="$CACHE/jax.oci.tar"
JSON="$CACHE/jax.json"

log() { echo "[jax-image] $(date +%H:%M:%S) $*"; }
STEP="setup"
trap 'rc=$?; if [[ $rc -ne 0 ]]; then echo "[jax-image] FAILED at step: $STEP (exit $rc)" >&2; fi' EXIT
[[ $(id -u) -eq 0 ]] || { echo "[jax-image] needs root (the rootfs's owners, chroot)" >&2; exit 2; }
[[ -s "$BASE" ]] || { echo "[jax-image] $BASE missing: run hack/image/build.sh (root) first" >&2; exit 2; }
command -v strip >/dev/null || { log "apt-get install binutils (strip)"; apt-get update -q;
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends binutils; }
mkdir -p "$CACHE"
sha() { sha256sum "$@" | cut -c1-64; }

# ------------------------------------------------------------------ key: a no-op when unchanged
STEP="key"
WKEY="$( (echo "$PINS"; echo "python=$PYVER") | sha | cut -c1-16)"
KEY="$( { sha "$BASE" "$TRAIN" "$HERE/build.sh" "$OCIIMAGE"; echo "$WKEY"; } | sha)"
REF="$REF_NAME:$JAX_VERSION-${KEY:0:12}"
if [[ "$FORCE" != 1 && -s "$OUT" && -f "$CACHE/.jax-stamp" && "$(cat "$CACHE/.jax-stamp")" == "$KEY" ]] \
  && grep -q "\"$KEY\"" "$JSON" 2>/dev/null; then
  log "jax image up to date ($REF)"
  exit 0
fi
t0=$SECONDS

# ------------------------------------------------------------------ wheels (offline pip install)
STEP="wheels"
WHEELS="$CACHE/jax-wheels-$WKEY"   # not wheels-*: hack/image/build.sh removes those but its own
if [[ "$FORCE" != 1 && -f "$WHEELS/.complete" ]]; then
  log "wheels up to date ($WHEELS)"
else
  rm -rf "$WHEELS" && mkdir -p "$WHEELS"
  log "pip download (python $PYVER wheels of jax $JAX_VERSION) into $WHEELS"
  python3 -m pip download -q --disable-pip-version-check "${PIP_TARGET_ARGS[@]}" \
    --require-hashes --no-deps --dest "$WHEELS" -r <(echo "$PINS")
  touch "$WHEELS/.complete"
fi
for old in "$CACHE"/jax-wheels-*; do [[ "$old" == "$WHEELS" ]] || rm -rf "$old"; done

# ------------------------------------------------------------------ rootfs: the base's layer + jax
STEP="rootfs"
ROOTFS="$CACHE/jax-rootfs"
rm -rf "$ROOTFS" && mkdir -p "$ROOTFS"
LAYER="$(python3 - "$BASE" <<'EOF'
import json, sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    index = json.load(t.extractfile("index.json"))
    blob = lambda d: f"blobs/sha256/{d.split(':', 1)[1]}"
    manifest = json.load(t.extractfile(blob(index["manifests"][0]["digest"])))
    layers = manifest["layers"]
    assert len(layers) == 1, f"base image: {len(layers)} layers, expected one"
    print(blob(layers[0]["digest"]))
EOF
)"
log "unpack base layer into $ROOTFS"
tar -xOf "$BASE" "$LAYER" | tar -x --numeric-owner -p -C "$ROOTFS"

log "pip install --target /opt/jax (offline)"
python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-index --find-links "$WHEELS" "${PIP_TARGET_ARGS[@]}" \
  --require-hashes --no-deps --no-compile --target "$ROOTFS/opt/jax" -r <(echo "$PINS")
# Debian's python3 reads .pth files in /usr/lib/python3/dist-packages: /opt/jax on sys.path, no env
echo /opt/jax > "$ROOTFS/usr/lib/python3/dist-packages/qosmos-jax.pth"
install -D -m 0644 "$TRAIN" "$ROOTFS/opt/qosmos-train/train.py"
rm -rf "$ROOTFS/opt/jax/bin"   # console scripts with this host's interpreter path
# jaxlib's libjax_common.so ships its full symbol table: 334 MB, 241 MB without (dynamic symbols kept)
strip --strip-unneeded "$ROOTFS/opt/jax/jaxlib/libjax_common.so"
# bytecode by the image's own python; unchecked-hash as ociimage.py sets every mtime to 0, which
# would make timestamp-checked .pyc files stale (recompiled at each start of each pod)
log "compileall (chroot, image's python3)"
chroot "$ROOTFS" /usr/bin/python3 -m compileall -q --invalidation-mode unchecked-hash \
  /opt/jax /opt/qosmos-train > "$CACHE/jax-compileall.log" 2>&1 || { tail -20 "$CACHE/jax-compileall.log" >&2; exit 1; }
chroot "$ROOTFS" /usr/bin/python3 -c "import jax, numpy; assert jax.__version__ == '$JAX_VERSION', jax.__version__"

# ------------------------------------------------------------------ the archive
STEP="archive"
log "ociimage $REF"
python3 "$OCIIMAGE" --name "$REF" --entrypoint "/usr/bin/python3 /opt/qosmos-train/train.py" \
  --rootfs "$ROOTFS" --out "$OUT"
UNPACKED="$(du -sh "$ROOTFS" | cut -f1)"
rm -rf "$ROOTFS"
BUILD_S=$(( SECONDS - t0 ))
python3 - "$JSON" "$REF" "$OUT" "$KEY" "$BUILD_S" <<'EOF'
import json, os, sys
path, ref, archive, key, build_s = sys.argv[1:]
doc = {"ref": ref, "archive": archive, "bytes": os.path.getsize(archive), "key": key, "build_s": int(build_s)}
with open(f"{path}.tmp", "w") as f:
    json.dump(doc, f, indent=1)
os.replace(f"{path}.tmp", path)
EOF
echo "$KEY" > "$CACHE/.jax-stamp"
log "jax image $REF in ${BUILD_S}s: $OUT ($(du -sh "$OUT" | cut -f1), rootfs $UNPACKED unpacked)"
