#!/usr/bin/env bash
# Side by side, in one run: durin serve vs the Restate server, the same load
# generator (benchmarks/http_load, keep-alive connections on loopback) and
# concurrency, two workloads: a no-op flow started with an idempotency key,
# and a 10-step flow (durin steps vs Restate ctx.run). Both are waited calls
# (durin "wait": true, Restate's request-response ingress). Prints both
# figures and the ratio durin/Restate, per round and for all rounds. In
# each round durin is measured first, then Restate, each server alone on
# the machine.
#
#   benchmarks/compare_restate.sh [BUILD_DIR] [SECONDS] [CONNECTIONS]
#   ROUNDS=N (default 3): turns each server takes
#
# Installs @restatedev/restate-server@1.7.12 and @restatedev/restate-sdk from
# the npm registry into $RESTATE_DIR (default /tmp/durin-restate-bench).
set -euo pipefail
build=${1:-build}
seconds=${2:-10}
connections=${3:-64}
rounds=${ROUNDS:-3}
here=$(cd "$(dirname "$0")" && pwd)
restate_dir=${RESTATE_DIR:-/tmp/durin-restate-bench}
work=$(mktemp -d)
pids=()
# Each server runs in a process group of its own (setsid), killed whole: the
# Restate launcher and the SDK service start children of their own, which a
# stale run would otherwise leave listening on Restate's ports.
cleanup() {
  for pid in "${pids[@]}"; do
    kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$restate_dir"
if [ ! -x "$restate_dir/node_modules/.bin/restate-server" ]; then
  (cd "$restate_dir" && npm init -y >/dev/null &&
   npm install --no-audit --no-fund @restatedev/restate-server@1.7.12 \
     @restatedev/restate-sdk >/dev/null)
fi
cp "$here/restate/service.js" "$restate_dir/service.js"

# A stale Restate would be measured instead of a fresh one, and would load
# the machine while durin is measured.
if curl -sf http://127.0.0.1:9070/health >/dev/null 2>&1; then
  echo "compare_restate: a Restate server already listens on 9070; stop it" \
    "first (it would be measured instead of a fresh one)" >&2
  exit 1
fi

# One server at a time: each is measured alone on the machine, so neither's
# background work (Restate's compaction and log trimming after a load, say)
# lands in the other's figures. A shared 2-core machine drifts by tens of
# percent within minutes, so the servers take turns for $rounds rounds, each
# on a fresh data directory, and the ratio is of the totals.
load="$build/benchmarks/http_load --connections $connections --seconds $seconds --workload raw-keyed"
rate() { sed -n 's/.*throughput=\([0-9]*\).*/\1/p'; }
run() {
  local name=$1; shift
  local out
  out=$("$@")
  echo "$name: $out" >&2
  echo "$out" | rate
}
stop_servers() {
  for pid in "${pids[@]}"; do
    kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  pids=()
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

measure_durin() {  # round
  local dir="$work/durin-$1"
  setsid "$build/bin/durin" serve --bench-flows --data-dir "$dir" \
    --listen 127.0.0.1:0 > "$dir.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    grep -q "listening on" "$dir.out" 2>/dev/null && break
    sleep 0.1
  done
  local port key
  port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$dir.out")
  key=$(cat "$dir/admin.key")
  d_noop=$(run "round $1 durin   noop     " $load \
    --server "http://127.0.0.1:$port" --api-key "$key" --path /v1/runs \
    --body '{"flow":"bench.noop","input":{}}')
  d_ten=$(run "round $1 durin   ten-steps" $load \
    --server "http://127.0.0.1:$port" --api-key "$key" --path /v1/runs \
    --body '{"flow":"bench.ten-steps","input":{}}')
  stop_servers
}

measure_restate() {  # round
  (cd "$work" && RESTATE_BASE_DIR="$work/restate-$1" exec setsid \
    "$restate_dir/node_modules/.bin/restate-server" \
    > "$work/restate-$1.out" 2>&1) &
  pids+=($!)
  (cd "$restate_dir" && PORT=9080 exec setsid node service.js \
    > "$work/service-$1.out" 2>&1) &
  pids+=($!)
  for _ in $(seq 300); do
    curl -sf http://127.0.0.1:9070/health >/dev/null 2>&1 && break
    sleep 0.1
  done
  sleep 1
  curl -sf -X POST http://127.0.0.1:9070/deployments \
    -H 'content-type: application/json' \
    -d '{"uri":"http://127.0.0.1:9080"}' >/dev/null
  sleep 1
  r_noop=$(run "round $1 restate noop     " $load \
    --server http://127.0.0.1:8080 --path /Bench/noop --body '{}')
  r_ten=$(run "round $1 restate ten-steps" $load \
    --server http://127.0.0.1:8080 --path /Bench/tenSteps --body '{}')
  stop_servers
  # Restate's ports are free again before the next round starts.
  for _ in $(seq 100); do
    curl -sf http://127.0.0.1:9070/health >/dev/null 2>&1 || break
    sleep 0.1
  done
}

echo "round  workload   durin/s  restate/s  durin/restate"
total_d_noop=0 total_r_noop=0 total_d_ten=0 total_r_ten=0
for round in $(seq "$rounds"); do
  measure_durin "$round"
  measure_restate "$round"
  echo "$round      noop       $d_noop  $r_noop  $(ratio "$d_noop" "$r_noop")"
  echo "$round      ten-steps  $d_ten  $r_ten  $(ratio "$d_ten" "$r_ten")"
  total_d_noop=$((total_d_noop + d_noop)) total_r_noop=$((total_r_noop + r_noop))
  total_d_ten=$((total_d_ten + d_ten)) total_r_ten=$((total_r_ten + r_ten))
done
echo "all    noop       $((total_d_noop / rounds))  $((total_r_noop / rounds))  $(ratio "$total_d_noop" "$total_r_noop")"
echo "all    ten-steps  $((total_d_ten / rounds))  $((total_r_ten / rounds))  $(ratio "$total_d_ten" "$total_r_ten")"
