#!/usr/bin/env bash
# qosmos on kind, for machines with Docker (Linux): the same pieces as `qosmos dev up`, with
# kind's control plane instead of binaries built by hack/k8s/build.sh.
#
#   kind cluster (kind-config.yaml)        the API server, the default scheduler, controllers
#   container <name>-qosmos-scheduler      kube-scheduler with the qosmos-scheduler profile
#   container <name>-kwok                  KWOK with dev/kwok-config.yaml, dev/kwok-stages.yaml
#   host: qosmos extender serve            plaintext on 127.0.0.1 (loopback only)
#   host: qosmos operator run              when this version of qosmos has it
#   fake GPU nodes                         `qosmos dev nodes` (4 x 8 V100M32, pools a and b)
#
# The two containers use host networking: they reach kind's API server and the extender on the
# host's 127.0.0.1, and nothing listens beyond it. Stop everything with hack/kind/down.sh.
#
# Settings (environment): QOSMOS_KIND_NAME (qosmos), QOSMOS_KIND_DIR (<repo>/qkind), NODES (4;
# with NODE_LIST, that many spread over the list), GPUS_PER_NODE (8), GPU_MODEL (V100M32),
# NODE_LIST (an openb node CSV naming the nodes), POOLS (a,b), EXTENDER_PORT (8888),
# SCHEDULER_PORT (10359), KWOK_PORT (10247).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
NAME="${QOSMOS_KIND_NAME:-qosmos}"
DIR="${QOSMOS_KIND_DIR:-$ROOT/qkind}"
NODES="${NODES:-}"
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
GPU_MODEL="${GPU_MODEL:-V100M32}"
NODE_LIST="${NODE_LIST:-}"
POOLS="${POOLS:-a,b}"
EXTENDER_PORT="${EXTENDER_PORT:-8888}"
SCHEDULER_PORT="${SCHEDULER_PORT:-10359}"
KWOK_PORT="${KWOK_PORT:-10247}"
KWOK_VERSION=v0.8.0            # as hack/k8s/build.sh
KWOK_IMAGE="registry.k8s.io/kwok/kwok:$KWOK_VERSION"
KWOK_POD_CIDR=10.250.0.0/16    # apart from kind's pod subnet 10.244.0.0/16
CONFIG="$HERE/kind-config.yaml"
# The kube-scheduler image matches the Kubernetes version of the kind node image.
K8S_VERSION="$(grep -o 'kindest/node:v[0-9.]*' "$CONFIG" | head -1 | cut -d: -f2)"
SCHEDULER_IMAGE="registry.k8s.io/kube-scheduler:$K8S_VERSION"
PY=(python3 -P)  # -P: the checkout's operator/ folder never shadows the standard library

log() { echo "[qosmos-kind] $*"; }
die() { echo "[qosmos-kind] error: $*" >&2; exit 2; }

for tool in docker kind kubectl python3; do
  command -v "$tool" >/dev/null || die "$tool not found on PATH"
done
[[ "$(uname -s)" == Linux ]] || log "warning: host networking (docker run --network host) is meant for Linux hosts"
"${PY[@]}" -c 'import qosmos.dev' 2>/dev/null || die "qosmos is not installed: pip install -e $ROOT"
[[ -n "$K8S_VERSION" ]] || die "no kindest/node:vX.Y.Z image in $CONFIG"
if kind get clusters 2>/dev/null | grep -qx "$NAME"; then
  die "a kind cluster named $NAME exists already; hack/kind/down.sh removes it"
fi

mkdir -p "$DIR/logs"
KUBECONFIG_FILE="$DIR/kubeconfig"
KC=(--kubeconfig "$KUBECONFIG_FILE")

# wait_http URL [what]: poll until URL answers 200 (TLS not verified: loopback health probes only).
wait_http() {
  "${PY[@]}" - "$1" "${2:-$1}" <<'EOF'
import ssl, sys, time, urllib.request
url, what = sys.argv[1], sys.argv[2]
ctx = ssl.create_default_context()
ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
            if r.status == 200:
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.5)
sys.exit(f"[qosmos-kind] error: {what} not ready after 120 s at {url}")
EOF
}

log "kind cluster $NAME (Kubernetes $K8S_VERSION)"
kind create cluster --name "$NAME" --config "$CONFIG" --kubeconfig "$KUBECONFIG_FILE" --wait 120s

if compgen -G "$ROOT/crds/*.yaml" >/dev/null; then
  log "CRDs from crds/"
  kubectl "${KC[@]}" apply --server-side -f "$ROOT/crds/"
  kubectl "${KC[@]}" wait --for=condition=Established --timeout=60s -f "$ROOT/crds/"
fi

log "extender on 127.0.0.1:$EXTENDER_PORT (plaintext, loopback only)"
nohup "${PY[@]}" -m qosmos extender serve --kubeconfig "$KUBECONFIG_FILE" \
  --http-host 127.0.0.1 --http-port "$EXTENDER_PORT" --grpc-port -1 --insecure \
  > "$DIR/logs/extender.log" 2>&1 &
echo $! > "$DIR/extender.pid"
wait_http "http://127.0.0.1:$EXTENDER_PORT/readyz" "the extender (log: $DIR/logs/extender.log)"

log "qosmos-scheduler ($SCHEDULER_IMAGE)"
# The production profile (qosmos.extender.schedconfig), pointing at the extender on the host.
"${PY[@]}" -c "
from qosmos.extender.schedconfig import qosmos_scheduler_config
print(qosmos_scheduler_config('http://127.0.0.1:$EXTENDER_PORT', kubeconfig='/qosmos/kubeconfig'))
" > "$DIR/qosmos-scheduler.yaml"
docker run -d --name "$NAME-qosmos-scheduler" --network host --user "$(id -u):$(id -g)" \
  -v "$DIR:/qosmos:ro" --entrypoint /usr/local/bin/kube-scheduler "$SCHEDULER_IMAGE" \
  --config=/qosmos/qosmos-scheduler.yaml \
  --authentication-kubeconfig=/qosmos/kubeconfig --authorization-kubeconfig=/qosmos/kubeconfig \
  --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" --cert-dir=/tmp/qosmos-scheduler-certs >/dev/null
wait_http "https://127.0.0.1:$SCHEDULER_PORT/readyz" "the qosmos-scheduler (docker logs $NAME-qosmos-scheduler)"

log "KWOK $KWOK_VERSION with dev/kwok-config.yaml and dev/kwok-stages.yaml"
docker run -d --name "$NAME-kwok" --network host --user "$(id -u):$(id -g)" \
  -v "$DIR/kubeconfig:/qosmos/kubeconfig:ro" -v "$ROOT/dev/kwok-stages.yaml:/qosmos/kwok-stages.yaml:ro" \
  -v "$ROOT/dev/kwok-config.yaml:/qosmos/kwok-config.yaml:ro" "$KWOK_IMAGE" \
  --kubeconfig=/qosmos/kubeconfig --config=/qosmos/kwok-config.yaml --config=/qosmos/kwok-stages.yaml \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --node-lease-duration-seconds=40 --cidr="$KWOK_POD_CIDR" \
  --server-address="127.0.0.1:$KWOK_PORT" >/dev/null
wait_http "http://127.0.0.1:$KWOK_PORT/healthz" "KWOK (docker logs $NAME-kwok)"

log "fake GPU nodes"
NODE_ARGS=(--gpus-per-node "$GPUS_PER_NODE" --gpu-model "$GPU_MODEL" --pools "$POOLS")
[[ -n "$NODE_LIST" ]] && NODE_ARGS+=(--node-list "$NODE_LIST")
[[ -n "$NODES" ]] && NODE_ARGS+=(--nodes "$NODES")
"${PY[@]}" -m qosmos dev nodes --kubeconfig "$KUBECONFIG_FILE" "${NODE_ARGS[@]}"
kubectl "${KC[@]}" wait --for=condition=Ready node -l type=fake-gpu-node --timeout=60s >/dev/null

if "${PY[@]}" -m qosmos operator run --help >/dev/null 2>&1; then
  log "operator"
  nohup "${PY[@]}" -m qosmos operator run --kubeconfig "$KUBECONFIG_FILE" > "$DIR/logs/operator.log" 2>&1 &
  echo $! > "$DIR/operator.pid"
else
  log "operator not started: this version of qosmos has no \`qosmos operator run\`"
fi

log "ready:"
echo "  kubectl --kubeconfig $KUBECONFIG_FILE get nodes"
echo "  kubectl --kubeconfig $KUBECONFIG_FILE apply -f $ROOT/examples/"
echo "  hack/kind/down.sh"
