#!/usr/bin/env bash
# Everything a real kubelet node needs on this machine, cached and idempotent:
#   * Debian packages: containerd, runc, CNI plugins, iproute2, iptables, iperf3, debootstrap
#   * a kubelet built from the same Go wrapper-module approach as hack/k8s/build.sh
#   * a pause image (static Go binary in a scratch image) and a small Debian image
#     (debootstrap minbase + iperf3), both written as OCI archives for `ctr images import`
# into ${QOSMOS_NODE_CACHE:-$HOME/.cache/qosmos/node}/<k8s-version>/. Each part has its own
# stamp; a second run with everything present does nothing. QOSMOS_NODE_REBUILD=1 forces all.
# Parts can be picked: build.sh [packages] [kubelet] [images] (default: all).
set -euo pipefail

K8S_VERSION=v1.34.4            # same k8s.io/kubernetes as hack/k8s/build.sh
DEBIAN_SUITE=bookworm
PACKAGES=(containerd runc containernetworking-plugins iproute2 iptables iperf3 debootstrap)

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# the mirror this machine's apt already uses (or $QOSMOS_DEBIAN_MIRROR): no host is written here
DEBIAN_MIRROR="$(python3 "$HERE/../debian_mirror.py" "$DEBIAN_SUITE")"
CACHE="${QOSMOS_NODE_CACHE:-$HOME/.cache/qosmos/node}/$K8S_VERSION"
K8S_CACHE="${QOSMOS_K8S_CACHE:-$HOME/.cache/qosmos/k8s}/$K8S_VERSION"
FORCE="${QOSMOS_NODE_REBUILD:-0}"
PARTS=("$@")
[[ ${#PARTS[@]} -eq 0 ]] && PARTS=(packages kubelet images)

log() { echo "[node-build] $(date +%H:%M:%S) $*"; }
STEP="setup"
trap 'rc=$?; if [[ $rc -ne 0 ]]; then echo "[node-build] FAILED at step: $STEP (exit $rc)" >&2; fi' EXIT
mkdir -p "$CACHE/bin" "$CACHE/images"
export PATH="$PATH:/usr/local/go/bin"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:--buildvcs=false}" GOMAXPROCS="${GOMAXPROCS:-2}"

fresh() {  # fresh <stamp-file> <text>: true when the stamp matches (and not forced)
  [[ "$FORCE" != 1 && -f "$1" && "$(cat "$1")" == "$2" ]]
}

want() { local p; for p in "${PARTS[@]}"; do [[ "$p" == "$1" ]] && return 0; done; return 1; }

# ------------------------------------------------------------------ Debian packages
if want packages; then
  STEP="packages"
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    [[ $(id -u) -eq 0 ]] || { echo "[node-build] need root to install: ${missing[*]}" >&2; exit 2; }
    log "apt-get install ${missing[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  else
    log "packages present"
  fi
fi

# ------------------------------------------------------------------ kubelet
if want kubelet; then
  STEP="kubelet"
  STAMP="$CACHE/bin/.kubelet-stamp"
  if fresh "$STAMP" "kubelet=$K8S_VERSION" && [[ -x "$CACHE/bin/kubelet" ]]; then
    log "kubelet $K8S_VERSION up to date"
  else
    command -v go >/dev/null || { echo "[node-build] go not found on PATH" >&2; exit 2; }
    SRC="$CACHE/src/kubelet"
    rm -rf "$SRC" && mkdir -p "$SRC"
    cp "$HERE/kubelet/go.mod" "$HERE/kubelet/tools.go" "$SRC/"
    [[ -s "$HERE/kubelet/go.sum" ]] && cp "$HERE/kubelet/go.sum" "$SRC/"
    # Reuse the control plane's resolved go.sum lines (same kubernetes version) to save downloads.
    [[ -s "$K8S_CACHE/src/k8s/go.sum" && ! -s "$SRC/go.sum" ]] && cp "$K8S_CACHE/src/k8s/go.sum" "$SRC/go.sum"
    log "kubelet $K8S_VERSION: go mod tidy"
    (cd "$SRC" && go mod tidy)
    MAJOR="${K8S_VERSION#v}"; MAJOR="${MAJOR%%.*}"
    MINOR="${K8S_VERSION#v*.}"; MINOR="${MINOR%%.*}"
    LDF="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      LDF+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$MAJOR -X $pkg.gitMinor=$MINOR"
      LDF+=" -X $pkg.gitTreeState=clean"
    done
    log "building kubelet (slow on 2 cores)"
    (cd "$SRC" && go build -trimpath -p "${QOSMOS_K8S_BUILD_P:-2}" -ldflags "$LDF" -o "$CACHE/bin/kubelet.new" k8s.io/kubernetes/cmd/kubelet)
    mv "$CACHE/bin/kubelet.new" "$CACHE/bin/kubelet"
    "$CACHE/bin/kubelet" --version
    echo "kubelet=$K8S_VERSION" > "$STAMP"
  fi
fi

# ------------------------------------------------------------------ images
if want images; then
  STEP="pause image"
  PSTAMP="$CACHE/images/.pause-stamp"
  PTEXT="pause=$(sha256sum "$HERE/pause/main.go" | cut -c1-16)"
  if fresh "$PSTAMP" "$PTEXT" && [[ -s "$CACHE/images/pause.oci.tar" ]]; then
    log "pause image up to date"
  else
    command -v go >/dev/null || { echo "[node-build] go not found on PATH" >&2; exit 2; }
    tmp="$(mktemp -d)"
    cp "$HERE/pause/main.go" "$tmp/" && printf 'module qosmos/pause\n\ngo 1.22\n' > "$tmp/go.mod"
    (cd "$tmp" && go build -trimpath -ldflags "-s -w" -o "$tmp/pause" .)
    python3 "$HERE/ociimage.py" --name qosmos.local/pause:3.10 --entrypoint /pause \
      --file "$tmp/pause:/pause" --out "$CACHE/images/pause.oci.tar"
    rm -rf "$tmp"
    echo "$PTEXT" > "$PSTAMP"
    log "pause image: $CACHE/images/pause.oci.tar"
  fi

  STEP="debian image"
  DSTAMP="$CACHE/images/.debian-stamp"
  DTEXT="debian=$DEBIAN_SUITE minbase+iperf3,procps $(sha256sum "$HERE/ociimage.py" | cut -c1-16)"
  if fresh "$DSTAMP" "$DTEXT" && [[ -s "$CACHE/images/debian.oci.tar" ]]; then
    log "debian image up to date"
  else
    [[ $(id -u) -eq 0 ]] || { echo "[node-build] debootstrap needs root" >&2; exit 2; }
    ROOTFS="$CACHE/rootfs"
    if [[ ! -x "$ROOTFS/usr/bin/iperf3" || "$FORCE" == 1 ]]; then
      rm -rf "$ROOTFS"
      log "debootstrap $DEBIAN_SUITE (minbase + iperf3) from $DEBIAN_MIRROR"
      debootstrap --variant=minbase --include=iperf3,procps "$DEBIAN_SUITE" "$ROOTFS" "$DEBIAN_MIRROR" \
        > "$CACHE/debootstrap.log" 2>&1 || { tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
      rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/usr/share/doc \
        "$ROOTFS"/usr/share/man "$ROOTFS"/usr/share/locale
    fi
    python3 "$HERE/ociimage.py" --name qosmos.local/debian:"$DEBIAN_SUITE" --entrypoint /bin/sh \
      --rootfs "$ROOTFS" --out "$CACHE/images/debian.oci.tar"
    echo "$DTEXT" > "$DSTAMP"
    log "debian image: $CACHE/images/debian.oci.tar ($(du -sh "$CACHE/images/debian.oci.tar" | cut -f1))"
  fi
fi
log "done: $CACHE"
