#!/usr/bin/env bash
# Build Kueue (sigs.k8s.io/kueue) from the Go module proxy into
#   ${QOSMOS_KUEUE_CACHE:-$HOME/.cache/qosmos/kueue}/<version>/
#     bin/kueue                          the full manager (cmd/kueue)
#     bin/performance-scheduler-runner   Kueue's scalability runner (test/performance/scheduler/runner)
#     bin/minimalkueue                   core controllers + scheduler only (test/performance/scheduler/minimalkueue)
#     bin/checker.test                   the runner's checker (test/performance/scheduler/checker, go test -c)
#     src/                               the module's source, kept: the runner is started from here (its
#                                        test utilities look for the Makefile) and the CRDs are read from
#                                        src/config/components/crd/bases
# Idempotent: exits at once when every binary and a matching stamp are there. Never vendored into the
# repository. Force a rebuild with QOSMOS_KUEUE_REBUILD=1 (or --force).
set -euo pipefail

KUEUE_VERSION=v0.17.0
MODULE=sigs.k8s.io/kueue

CACHE="${QOSMOS_KUEUE_CACHE:-$HOME/.cache/qosmos/kueue}"
ROOT="$CACHE/$KUEUE_VERSION"
BIN="$ROOT/bin"
SRC="$ROOT/src"
STAMP="$BIN/.stamp"
BINARIES=(kueue performance-scheduler-runner minimalkueue checker.test)
STAMP_TEXT="kueue=$KUEUE_VERSION go=$(PATH="$PATH:/usr/local/go/bin" go env GOVERSION 2>/dev/null || echo none)"

FORCE="${QOSMOS_KUEUE_REBUILD:-0}"
[[ "${1:-}" == "--force" ]] && FORCE=1

all_present() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$BIN/$b" ]] || return 1; done
  [[ -f "$SRC/Makefile" && -d "$SRC/config/components/crd/bases" ]] || return 1
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_TEXT" ]]
}

if [[ "$FORCE" != 1 ]] && all_present; then
  echo "[kueue-build] up to date in $BIN ($STAMP_TEXT)"
  exit 0
fi

STEP="setup"
trap 'rc=$?; if [[ $rc -ne 0 ]]; then echo "[kueue-build] FAILED at step: $STEP (exit $rc)" >&2; fi' EXIT
log() { echo "[kueue-build] $(date +%H:%M:%S) $*"; }

export PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || { echo "[kueue-build] go not found on PATH" >&2; exit 2; }
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:--buildvcs=false}"
export GOMAXPROCS="${GOMAXPROCS:-2}"
PAR="${QOSMOS_KUEUE_BUILD_P:-2}"

mkdir -p "$BIN"
rm -f "$STAMP"
START=$SECONDS

# The module itself (its go.mod and go.sum pin every dependency, as Kueue's own `make build` does):
# downloaded through the module proxy, then copied out of the read-only module cache.
STEP="download $MODULE@$KUEUE_VERSION"
log "downloading $MODULE@$KUEUE_VERSION"
MODDIR="$(cd "$(mktemp -d)" && go mod download -json "$MODULE@$KUEUE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -n "$MODDIR" && -f "$MODDIR/go.mod" ]] || { echo "[kueue-build] go mod download gave no module directory" >&2; exit 1; }
STEP="copy the module source"
rm -rf "$SRC.tmp" && cp -r "$MODDIR" "$SRC.tmp" && chmod -R u+w "$SRC.tmp"
rm -rf "$SRC" && mv "$SRC.tmp" "$SRC"

# -X as the Makefile's LD_FLAGS (GIT_TAG and GIT_COMMIT come from git there; a module has no .git).
BUILD_DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
LDF="-s -w -X $MODULE/pkg/version.GitVersion=$KUEUE_VERSION -X $MODULE/pkg/version.BuildDate=$BUILD_DATE"

build() {  # build <output> <package>
  STEP="build $1"
  log "building $1 ($2)"
  (cd "$SRC" && go build -trimpath -p "$PAR" -ldflags "$LDF" -o "$BIN/$1" "$2")
  log "built $1 ($(( SECONDS - START ))s elapsed)"
}
build kueue ./cmd/kueue
build minimalkueue ./test/performance/scheduler/minimalkueue
build performance-scheduler-runner ./test/performance/scheduler/runner
STEP="build checker.test"
log "building checker.test (go test -c ./test/performance/scheduler/checker)"
(cd "$SRC" && go test -c -trimpath -p "$PAR" -o "$BIN/checker.test" ./test/performance/scheduler/checker)

STEP="verify"
for b in "${BINARIES[@]}"; do [[ -x "$BIN/$b" ]] || { echo "[kueue-build] missing $BIN/$b" >&2; exit 1; }; done
"$BIN/kueue" --help >/dev/null 2>&1 || { echo "[kueue-build] $BIN/kueue --help failed" >&2; exit 1; }
echo "$STAMP_TEXT" > "$STAMP"
log "done in $(( SECONDS - START ))s: $BIN ($(du -sh "$BIN" | cut -f1))"
