#!/usr/bin/env bash
# The images the e2e tier (tests/e2e) installs with Helm on the node tier's real kubelet, built
# without Docker and without a registry, cached by content under
# ${QOSMOS_IMAGE_CACHE:-$HOME/.cache/qosmos/image}/:
#
#   base.oci.tar            debootstrap bookworm minbase + Debian's python3, python3-venv
#                           (the Dockerfile's ARG BASE; qosmos.local/python:3.11-bookworm)
#   wheels-<key>/           the wheels of requirements.lock (hack/image/lock.sh: dependencies, gpu extra, build
#                           requirements; hash-checked), pip download here: pods and the build stay offline
#   qosmos.oci.tar          the repository's Dockerfile built by buildah (vfs storage, chroot
#                           isolation) from that base, PIP_ARGS="--no-index --find-links /src/wheels"
#   kube-scheduler.oci.tar  the locally built kube-scheduler (hack/k8s) in a scratch image
#   images.json             {name: {ref, archive, bytes, key}}: what tests/e2e imports into containerd
#
# Each part is a no-op when its key matches: the qosmos image's key is a sha256 over the Dockerfile,
# .dockerignore, pyproject.toml, the build context (hack/image/context.py hash), the base's and the
# wheels' keys. QOSMOS_IMAGE_REBUILD=1 forces all. Root only (debootstrap, buildah's chroot).
set -euo pipefail

K8S_VERSION=v1.34.4            # same k8s.io/kubernetes as hack/k8s/build.sh
DEBIAN_SUITE=bookworm
BASE_PACKAGES=python3,python3-venv
BASE_REF=qosmos.local/python:3.11-bookworm

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# the mirror this machine's apt already uses (or $QOSMOS_DEBIAN_MIRROR): no host is written here
DEBIAN_MIRROR="$(python3 "$HERE/../debian_mirror.py" "$DEBIAN_SUITE")"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${QOSMOS_IMAGE_CACHE:-$HOME/.cache/qosmos/image}"
K8S_BIN="${QOSMOS_K8S_CACHE:-$HOME/.cache/qosmos/k8s}/$K8S_VERSION/bin"
FORCE="${QOSMOS_IMAGE_REBUILD:-0}"
OCIIMAGE="$ROOT/hack/node/ociimage.py"

log() { echo "[image-build] $(date +%H:%M:%S) $*"; }
STEP="setup"
trap 'rc=$?; if [[ $rc -ne 0 ]]; then echo "[image-build] FAILED at step: $STEP (exit $rc)" >&2; fi' EXIT
[[ $(id -u) -eq 0 ]] || { echo "[image-build] needs root (debootstrap, buildah)" >&2; exit 2; }
mkdir -p "$CACHE"
sha() { sha256sum "$@" | cut -c1-64; }
fresh() {  # fresh <stamp-file> <text>: true when the stamp matches (and not forced)
  [[ "$FORCE" != 1 && -f "$1" && "$(cat "$1")" == "$2" ]]
}

# ------------------------------------------------------------------ tools (Debian packages)
STEP="packages"
missing=()
for p in buildah debootstrap; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  log "apt-get install ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# ------------------------------------------------------------------ base: debootstrap + python3
STEP="base image"
BASE_TEXT="base=$DEBIAN_SUITE minbase+$BASE_PACKAGES $(sha "$OCIIMAGE" | cut -c1-16)"
if fresh "$CACHE/.base-stamp" "$BASE_TEXT" && [[ -s "$CACHE/base.oci.tar" ]]; then
  log "base image up to date"
else
  ROOTFS="$CACHE/base-rootfs"
  rm -rf "$ROOTFS"
  log "debootstrap $DEBIAN_SUITE (minbase + $BASE_PACKAGES) from $DEBIAN_MIRROR"
  debootstrap --variant=minbase --include="$BASE_PACKAGES" "$DEBIAN_SUITE" "$ROOTFS" "$DEBIAN_MIRROR" \
    > "$CACHE/debootstrap.log" 2>&1 || { tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
  rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/usr/share/doc \
    "$ROOTFS"/usr/share/man "$ROOTFS"/usr/share/locale
  python3 "$OCIIMAGE" --name "$BASE_REF" --entrypoint /usr/bin/python3 --rootfs "$ROOTFS" \
    --out "$CACHE/base.oci.tar"
  rm -rf "$ROOTFS"
  echo "$BASE_TEXT" > "$CACHE/.base-stamp"
  log "base image: $CACHE/base.oci.tar ($(du -sh "$CACHE/base.oci.tar" | cut -f1))"
fi

# ------------------------------------------------------------------ wheels (offline pip install)
STEP="wheels"
PYVER=3.11   # bookworm's python3
# exactly the files of requirements.lock (hack/image/lock.sh), each checked against its sha256
WKEY="$( (cat "$ROOT/requirements.lock"; echo "python=$PYVER") | sha | cut -c1-16)"
WHEELS="$CACHE/wheels-$WKEY"
if [[ "$FORCE" != 1 && -f "$WHEELS/.complete" ]]; then
  log "wheels up to date ($WHEELS)"
else
  rm -rf "$WHEELS" && mkdir -p "$WHEELS"
  log "pip download (python $PYVER wheels of requirements.lock) into $WHEELS"
  python3 -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version "$PYVER" \
    --require-hashes --no-deps --dest "$WHEELS" -r "$ROOT/requirements.lock"
  touch "$WHEELS/.complete"
fi
for old in "$CACHE"/wheels-*; do [[ "$old" == "$WHEELS" ]] || rm -rf "$old"; done

# ------------------------------------------------------------------ qosmos: the Dockerfile, by buildah
STEP="qosmos image"
TREE="$(python3 "$HERE/context.py" hash)"
KEY="$( { sha "$ROOT/Dockerfile" "$ROOT/.dockerignore" "$ROOT/pyproject.toml" "$ROOT/requirements.lock"; echo "$TREE $BASE_TEXT $WKEY"; } | sha)"
TAG="0.1.0-${KEY:0:12}"
REF="qosmos.local/qosmos:$TAG"
if fresh "$CACHE/.qosmos-stamp" "$KEY" && [[ -s "$CACHE/qosmos.oci.tar" ]]; then
  log "qosmos image up to date ($REF)"
else
  CTX="$CACHE/context"
  STORE="$CACHE/buildah"    # a private store: nothing in /var/lib/containers, removed afterwards
  rm -rf "$STORE"
  python3 "$HERE/context.py" stage "$CTX"
  cp -al "$WHEELS" "$CTX/wheels" 2>/dev/null || cp -a "$WHEELS" "$CTX/wheels"
  BUILDAH=(buildah --root "$STORE/root" --runroot "$STORE/run" --storage-driver vfs)
  log "buildah bud $REF (BASE=oci-archive:base.oci.tar, offline wheels)"
  t0=$SECONDS
  # chroot isolation: no user namespace or overlay needed; the RUN steps use the host's network
  # only for apt-get (Debian's iproute2), pip stays offline (--no-index)
  "${BUILDAH[@]}" bud --isolation chroot --layers=false --pull-never \
    --build-arg "BASE=oci-archive:$CACHE/base.oci.tar" \
    --build-arg "PIP_ARGS=--no-index --find-links /src/wheels" \
    -f "$CTX/Dockerfile" -t "$REF" "$CTX" > "$CACHE/buildah.log" 2>&1 \
    || { tail -40 "$CACHE/buildah.log" >&2; exit 1; }
  rm -f "$CACHE/qosmos.oci.tar"
  "${BUILDAH[@]}" push "$REF" "oci-archive:$CACHE/qosmos.oci.tar:$REF" >> "$CACHE/buildah.log" 2>&1
  "${BUILDAH[@]}" rm --all >/dev/null 2>&1 || true
  rm -rf "$STORE" "$CTX"
  echo "$KEY" > "$CACHE/.qosmos-stamp"
  log "qosmos image $REF in $(( SECONDS - t0 ))s: $CACHE/qosmos.oci.tar ($(du -sh "$CACHE/qosmos.oci.tar" | cut -f1))"
fi

# ------------------------------------------------------------------ kube-scheduler: the local binary
STEP="kube-scheduler image"
[[ -x "$K8S_BIN/kube-scheduler" ]] || { echo "[image-build] $K8S_BIN/kube-scheduler missing: run hack/k8s/build.sh" >&2; exit 2; }
SREF="qosmos.local/kube-scheduler:$K8S_VERSION"
SKEY="$(sha "$K8S_BIN/kube-scheduler" "$OCIIMAGE" | sha)"
if fresh "$CACHE/.kube-scheduler-stamp" "$SKEY" && [[ -s "$CACHE/kube-scheduler.oci.tar" ]]; then
  log "kube-scheduler image up to date ($SREF)"
else
  python3 "$OCIIMAGE" --name "$SREF" --entrypoint /usr/local/bin/kube-scheduler \
    --file "$K8S_BIN/kube-scheduler:/usr/local/bin/kube-scheduler" --out "$CACHE/kube-scheduler.oci.tar"
  echo "$SKEY" > "$CACHE/.kube-scheduler-stamp"
  log "kube-scheduler image $SREF: $CACHE/kube-scheduler.oci.tar"
fi

STEP="images.json"
python3 - "$CACHE" "$REF" "$KEY" "$SREF" "$SKEY" <<'EOF'
import json, os, sys
cache, ref, key, sref, skey = sys.argv[1:]
doc = {
    "qosmos": {"ref": ref, "archive": f"{cache}/qosmos.oci.tar", "key": key},
    "kube-scheduler": {"ref": sref, "archive": f"{cache}/kube-scheduler.oci.tar", "key": skey},
}
for v in doc.values():
    v["bytes"] = os.path.getsize(v["archive"])
tmp = f"{cache}/images.json.tmp"
with open(tmp, "w") as f:
    json.dump(doc, f, indent=1)
os.replace(tmp, f"{cache}/images.json")
EOF
log "done: $CACHE/images.json"
