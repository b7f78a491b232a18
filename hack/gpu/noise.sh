#!/usr/bin/env bash
# Where launch-bound training samples get their noise (issue 23 §2): one device call, ~7 minutes.
#
#   OUT=/some/dir bash hack/gpu/noise.sh      # writes $OUT/noise.tar.gz (one file: the device returns 8 at most)
#
# Small models at small batches are launch-bound: the host thread issuing kernels sets the step time,
# and on the lent GPU machines one sample's windows differed by 20-78 % and sessions by up to 71 %.
# This runs the two launch-bound models ResNet18 and MobileNetV2 in separate processes ("sessions"),
# alternating the configurations so a drift of the host shows in both: pinned to one core or not,
# windows interleaved over the batch sizes or one size after another; then a pinned session of the
# other launch-bound models. Beside them it samples the host's CPU time split (steal included) and
# the GPU's clocks and power every second, to tell the host's noise from the GPU's.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/qosmos-gpu}
BUDGET=${BUDGET:-420}  # seconds for the whole matrix; each session gets what is left, the last ones first lose
RUNS="$OUT/noise"
mkdir -p "$RUNS"
t0=$SECONDS
core=$(( $(nproc) / 2 ))  # a core away from 0, where interrupts and the samplers tend to land (profile.py's default)

( while :; do echo "$(date +%s) $(head -1 /proc/stat)"; sleep 1; done ) > "$RUNS/proc_stat.txt" 2>&1 &
stat_pid=$!
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,pstate,utilization.gpu,temperature.gpu \
    --format=csv -l 1 > "$RUNS/gpu_clocks.csv" 2>&1 &
smi_pid=$!

session() {  # name, then profile.py's arguments
    local name=$1 left
    shift
    left=$(( BUDGET - (SECONDS - t0) ))
    if (( left < 40 )); then echo "skipped $name: ${left}s left" >> "$RUNS/matrix.txt"; return; fi
    echo "$(date -u +%T) $name start ($left s left): $*" >> "$RUNS/matrix.txt"
    OUT="$RUNS/$name" DEADLINE=$(( left - 10 )) bash hack/gpu/run.sh --no-inference "$@" > "$RUNS/$name.out" 2>&1
    echo "$(date -u +%T) $name rc=$? after $(( SECONDS - t0 )) s" >> "$RUNS/matrix.txt"
}

pair=ResNet18,MobileNetV2
session pinned-interleaved-1 --models $pair --cpus $core
session free-interleaved-1 --models $pair --cpus all
session pinned-sequential-1 --models $pair --cpus $core --sequential
session pinned-interleaved-2 --models $pair --cpus $core
session free-interleaved-2 --models $pair --cpus all
session pinned-interleaved-others --models EfficientNet,NeuMF,MobileNetV3 --cpus $core

kill $stat_pid $smi_pid 2>/dev/null
wait 2>/dev/null
tar -C "$OUT" -czf "$OUT/noise.tar.gz" noise
cat "$RUNS/matrix.txt"
grep -h "samples/s" "$RUNS"/*/measured/log.txt | tail -5
