#!/usr/bin/env bash
# Build a Kubernetes control plane (kube-apiserver, kube-scheduler,
# kube-controller-manager, kubectl), etcd, helm and kwok from Go modules into
#   ${QOSMOS_K8S_CACHE:-$HOME/.cache/qosmos/k8s}/<k8s-version>/bin/
# Idempotent: exits at once when every binary and a matching stamp are there.
# Force a rebuild with QOSMOS_K8S_REBUILD=1 (or --force).
set -euo pipefail

K8S_VERSION=v1.34.4          # k8s.io/kubernetes; staging modules at v0.34.4
ETCD_VERSION=v3.6.16         # go.etcd.io/etcd/server/v3
HELM_VERSION=v3.22.0         # helm.sh/helm/v3
KWOK_VERSION=v0.8.0          # sigs.k8s.io/kwok

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${QOSMOS_K8S_CACHE:-$HOME/.cache/qosmos/k8s}"
ROOT="$CACHE/$K8S_VERSION"
BIN="$ROOT/bin"
STAMP="$BIN/.stamp"
BINARIES=(kube-apiserver kube-scheduler kube-controller-manager kubectl etcd helm kwok)
STAMP_TEXT="kubernetes=$K8S_VERSION etcd=$ETCD_VERSION helm=$HELM_VERSION kwok=$KWOK_VERSION"

FORCE="${QOSMOS_K8S_REBUILD:-0}"
[[ "${1:-}" == "--force" ]] && FORCE=1

all_present() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$BIN/$b" ]] || return 1; done
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_TEXT" ]]
}

if [[ "$FORCE" != 1 ]] && all_present; then
  echo "[k8s-build] up to date in $BIN ($STAMP_TEXT)"
  exit 0
fi

STEP="setup"
trap 'rc=$?; if [[ $rc -ne 0 ]]; then echo "[k8s-build] FAILED at step: $STEP (exit $rc)" >&2; fi' EXIT
log() { echo "[k8s-build] $(date +%H:%M:%S) $*"; }

export PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || { echo "[k8s-build] go not found on PATH" >&2; exit 2; }
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:--buildvcs=false}"
export GOMAXPROCS="${GOMAXPROCS:-2}"
PAR="${QOSMOS_K8S_BUILD_P:-2}"

mkdir -p "$BIN" "$ROOT/src"
rm -f "$STAMP"
START=$SECONDS
BUILD_DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

# prepare_module <name>: copy the wrapper module into the cache and tidy it.
prepare_module() {
  local name="$1" dst="$ROOT/src/$1"
  rm -rf "$dst" && mkdir -p "$dst"
  cp "$HERE/$name"/go.mod "$HERE/$name"/*.go "$dst/"
  [[ -f "$HERE/$name/go.sum" ]] && cp "$HERE/$name/go.sum" "$dst/"
  if [[ ! -s "$dst/go.sum" ]]; then
    log "go mod tidy ($name): downloading modules"
    (cd "$dst" && go mod tidy)
  else
    (cd "$dst" && go mod download)
  fi
}

STEP="kubernetes modules"
log "kubernetes $K8S_VERSION: preparing wrapper module"
prepare_module k8s
MAJOR="${K8S_VERSION#v}"; MAJOR="${MAJOR%%.*}"
MINOR="${K8S_VERSION#v*.}"; MINOR="${MINOR%%.*}"
LDF="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDF+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$MAJOR -X $pkg.gitMinor=$MINOR"
  LDF+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$BUILD_DATE"
done
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  STEP="build $cmd"
  log "building $cmd (this is the slow part)"
  (cd "$ROOT/src/k8s" && go build -trimpath -p "$PAR" -ldflags "$LDF" -o "$BIN/$cmd" "k8s.io/kubernetes/cmd/$cmd")
  log "built $cmd ($(( SECONDS - START ))s elapsed)"
done

STEP="build etcd"
log "etcd $ETCD_VERSION"
prepare_module etcd
(cd "$ROOT/src/etcd" && go build -trimpath -p "$PAR" -ldflags "-s -w" -o "$BIN/etcd" .)

STEP="install helm"
log "helm $HELM_VERSION"
GOBIN="$BIN" go install -trimpath -p "$PAR" \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"

STEP="install kwok"
log "kwok $KWOK_VERSION"
GOBIN="$BIN" go install -trimpath -p "$PAR" \
  -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
  "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"

STEP="verify"
for b in "${BINARIES[@]}"; do [[ -x "$BIN/$b" ]] || { echo "[k8s-build] missing $BIN/$b" >&2; exit 1; }; done
"$BIN/kubectl" version --client >/dev/null
echo "$STAMP_TEXT" > "$STAMP"
log "done in $(( SECONDS - START ))s: $BIN ($(du -sh "$BIN" | cut -f1))"
