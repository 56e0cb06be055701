#!/usr/bin/env bash
# A/B of the HTTP gateway: two builds of `durin serve` (A, the baseline, and
# B) take turns for ROUNDS rounds on the same machine, each alone on a fresh
# data dir, under the same http_load workloads (from B's build). Prints each
# run's line and, per workload, B's total throughput over A's: the ratio a
# change is judged by (noise: the spread of the per-round ratios).
#
#   benchmarks/ab_http.sh BUILD_A BUILD_B [ROUNDS] [SECONDS]
set -euo pipefail
a="$1"
b="$2"
rounds="${3:-3}"
seconds="${4:-4}"
load="$b/benchmarks/http_load"
work="$(mktemp -d)"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT

run_side() {
  local side="$1" build="$2" round="$3"
  local data="$work/$side-$round"
  mkdir -p "$data"
  "$build/bin/durin" serve --bench-flows --data-dir "$data" \
    --listen 127.0.0.1:0 >"$data.log" 2>&1 &
  pid=$!
  local port=""
  for _ in $(seq 100); do
    port="$(grep -o 'listening on 127.0.0.1:[0-9]*' "$data.log" | cut -d: -f2 || true)"
    [ -n "$port" ] && break
    sleep 0.1
  done
  local common=(--server "http://127.0.0.1:$port" --api-key "$(cat "$data/admin.key")"
    --connections 32 --seconds "$seconds" --server-pid "$pid")
  for workload in keyed-start waited-noop waited-ten replay get-run; do
    local args=(--workload "$workload")
    case "$workload" in
      keyed-start) args=(--workload keyed-start --flow bench.noop) ;;
      waited-noop) args=(--workload raw-keyed --path /v1/runs --body '{"flow":"bench.noop"}') ;;
      waited-ten) args=(--workload raw-keyed --path /v1/runs --body '{"flow":"bench.ten-steps"}') ;;
    esac
    local line
    line="$("$load" "${common[@]}" "${args[@]}")"
    echo "$side round=$round $workload $line"
  done
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=""
}

out="$work/lines"
for round in $(seq "$rounds"); do
  run_side A "$a" "$round" | tee -a "$out"
  run_side B "$b" "$round" | tee -a "$out"
done
echo "== B/A by workload (totals over $rounds rounds; per-round ratios)"
for workload in keyed-start waited-noop waited-ten replay get-run; do
  awk -v w="$workload" '
    $3 == w { split($0, f, "throughput="); split(f[2], g, "/"); t[$1, $2] = g[1]; s[$1] += g[1] }
    END {
      per = ""
      for (key in t) { split(key, k, SUBSEP); if (k[1] == "B") { r = k[2]; per = per sprintf(" %s:%.2f", r, t["B", r] / t["A", r]) } }
      printf "%-12s A %8.0f/s  B %8.0f/s  B/A %.3f  rounds%s\n", w, s["A"] / n, s["B"] / n, s["B"] / s["A"], per
    }' n="$rounds" "$out"
done
