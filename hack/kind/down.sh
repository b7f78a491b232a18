#!/usr/bin/env bash
# Undo hack/kind/up.sh: the extender and operator it started on the host (by the pids it
# recorded, checked against their command lines), its two containers and the kind cluster.
# Safe to run again.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
NAME="${QOSMOS_KIND_NAME:-qosmos}"
DIR="${QOSMOS_KIND_DIR:-$ROOT/qkind}"

log() { echo "[qosmos-kind] $*"; }

# stop_pid FILE: SIGTERM the recorded process if it is still a qosmos process, SIGKILL after 10 s.
stop_pid() {
  local file="$1" pid
  [[ -f "$file" ]] || return 0
  pid="$(cat "$file")"
  if [[ "$pid" =~ ^[0-9]+$ ]] && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "-m qosmos"; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null && log "$(basename "$file" .pid) needed SIGKILL"
  fi
  rm -f "$file"
}

stop_pid "$DIR/operator.pid"
stop_pid "$DIR/extender.pid"
for c in "$NAME-qosmos-scheduler" "$NAME-kwok"; do
  docker rm -f "$c" >/dev/null 2>&1 && log "removed container $c"
done
if command -v kind >/dev/null && kind get clusters 2>/dev/null | grep -qx "$NAME"; then
  kind delete cluster --name "$NAME" --kubeconfig "$DIR/kubeconfig"
fi
log "down (logs kept in $DIR/logs)"
