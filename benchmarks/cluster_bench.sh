#!/usr/bin/env bash
# The cluster's figures (issue 13), all measured in one run on one machine:
#
#   a. keyed starts (http_load keyed-start, bench.noop, 32 connections)
#      against one `durin serve` alone (the baseline; also with 8 shards),
#      one cluster node, and three cluster nodes with the load spread over
#      them: throughput, its ratio to the baseline, p50/p99, the share of
#      requests forwarded (the nodes' /metrics before and after), p50/p99
#      of local and forwarded answers in the same run, the servers' CPU per
#      start and the cores the nodes use while idle;
#   b. GET /v1/runs/{id} through one node of three, of a run in a shard that
#      node serves and of one in a shard another node serves: requests/s and
#      p50/p99 of both;
#   c. kill -9 of a node to the first 503 for a run in one of its shards,
#      polled through another node;
#   d. restart of that node to the first 200 for the same run.
#
#   benchmarks/cluster_bench.sh BUILD [SECONDS] [ROUNDS]
#   benchmarks/cluster_bench.sh BUILD [SECONDS] [ROUNDS] replication [KILLS]
#
# The second form measures replication (issue 14) instead: two nodes with
# --replicas 1 and with --replicas 2, keyed starts (bench.noop) and
# 10-step flows (bench.ten-steps, waited) through both nodes: throughput,
# p50/p99 and the ratios R=2 / R=1 per round; the replication lag (the
# largest lagWrites of GET /v1/cluster, sampled once a second under both
# keyed loads, and the mean round trip of a replicated write and the mean
# backup fsync, from the nodes' histograms);
# then KILLS (default 10) kill -9s of a primary of three nodes under a
# light keyed load, each timed to the first 200 for a run in one of its
# shards through another node (the distribution: min, p50, p99, max).
# With DURIN_BENCH_PERF=DIR set, each keyed-start and 10-step load leaves a
# `perf record -g` profile of every node in DIR.
#
# BUILD holds bin/durin and benchmarks/http_load (-DDURIN_BENCHMARKS=ON);
# SECONDS (default 4) is each load's length; ROUNDS (default 3) how often
# each load and each kill is repeated. The loads take turns within a round,
# so a machine that drifts moves every case alike, and each round starts
# fresh data dirs and fresh clusters. The script starts its own etcd (free
# ports on 127.0.0.1, a temp dir), stops every process it started, by pid,
# and removes its files on exit. Every node, etcd and the load generator
# share the machine's cores: on 2 cores three nodes cannot scale, and the
# figures say what the cluster costs there, not what it gains on three
# machines.
set -euo pipefail

# The figure lines are "name=value" fields; value(name) reads one as a
# number (0 when absent). Shared by the awk reports here and in
# replication_cases.sh.
value_awk='
  function value(name,   i) {
    for (i = 1; i <= NF; ++i) {
      if (index($i, name "=") == 1) { return substr($i, length(name) + 2) + 0 }
    }
    return 0
  }
'

if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD [SECONDS] [ROUNDS]" >&2
  exit 2
fi
build="$(cd "$1" && pwd)"
seconds="${2:-4}"
rounds="${3:-3}"
mode="${4:-cluster}"
kills="${5:-10}"
durin="$build/bin/durin"
load="$build/benchmarks/http_load"
etcd_bin="${ETCD:-etcd}"
shards=8
connections="${DURIN_BENCH_CONNECTIONS:-32}"  # http_load connections a load
# etcd's raft timing as issue 13 asks (one member on loopback: fast
# elections); the node lease at its minimum (2 s), so that a lost node's
# shards are given up soon.
etcd_timing=(--heartbeat-interval 100 --election-timeout 1000)
lease=(--lease-ttl-s 2)

work="$(mktemp -d)"
lines="$work/lines"
etcd_pid=""
declare -A node_pid node_port node_dir node_args
background=()  # pollers started in the background

alive() {  # an exited child stays a zombie until waited for: not alive
  local state
  state="$(ps -o stat= -p "$1" 2>/dev/null || true)"
  [ -n "$state" ] && [ "${state:0:1}" != Z ]
}

# Stops processes we started, by pid: SIGTERM, then SIGKILL for any still
# up after 10 s (a node that cannot leave cleanly must not stall the run;
# the note says it happened).
stop_pids() {
  local pid
  for pid in "$@"; do kill "$pid" 2>/dev/null || true; done
  for _ in $(seq 100); do
    local up=0
    for pid in "$@"; do alive "$pid" && up=1; done
    [ "$up" = 0 ] && break
    sleep 0.1
  done
  for pid in "$@"; do
    if alive "$pid"; then
      echo "note: pid $pid still up 10 s after SIGTERM; killed" >&2
      kill -9 "$pid" 2>/dev/null || true
    fi
    local status=0
    wait "$pid" 2>/dev/null || status=$?
    report_crash "$pid" "$status"
  done
}

# A node that died of a signal we did not send (SIGTERM 143, SIGKILL 137)
# crashed: the tail of its log says where, before the run's files go.
report_crash() {
  local pid="$1" status="$2" name
  [ "$status" -gt 128 ] && [ "$status" != 143 ] && [ "$status" != 137 ] ||
    return 0
  for name in "${!node_pid[@]}"; do
    if [ "${node_pid[$name]}" = "$pid" ]; then
      echo "node $name (pid $pid) died of signal $((status - 128)); its log:" >&2
      tail -n 40 "${node_dir[$name]}.log" >&2 || true
    fi
  done
}

cleanup() {
  local pids=()
  for name in "${!node_pid[@]}"; do pids+=("${node_pid[$name]}"); done
  for pid in "${background[@]}"; do kill "$pid" 2>/dev/null || true; done
  # Nodes before etcd: a node leaves through etcd.
  [ ${#pids[@]} -gt 0 ] && stop_pids "${pids[@]}"
  [ -n "$etcd_pid" ] && stop_pids "$etcd_pid"
  rm -rf "$work"
}
trap cleanup EXIT

# A port nothing listens on now (a refused connect). Another process may
# take it before we bind it; the run then fails, and is run again.
free_port() {
  local port
  while :; do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
}

start_etcd() {
  local client peer
  client="$(free_port)"
  peer="$(free_port)"
  while [ "$peer" = "$client" ]; do peer="$(free_port)"; done
  etcd_url="http://127.0.0.1:$client"
  "$etcd_bin" --name bench --data-dir "$work/etcd" \
    --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
    --listen-peer-urls "http://127.0.0.1:$peer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "bench=http://127.0.0.1:$peer" \
    "${etcd_timing[@]}" >"$work/etcd.log" 2>&1 &
  etcd_pid=$!
  for _ in $(seq 300); do
    curl -sf "$etcd_url/health" 2>/dev/null | grep -q true && return
    sleep 0.1
  done
  echo "etcd did not become healthy; its log:" >&2
  cat "$work/etcd.log" >&2
  exit 1
}

# Starts `durin serve --bench-flows` as NAME on data dir DIR with the extra
# arguments; sets node_pid, node_port (from "listening on" in its output).
# A restart reuses the name, the dir and the arguments.
start_node() {
  local name="$1" dir="$2"
  shift 2
  node_dir[$name]="$dir"
  node_args[$name]="$*"
  "$durin" serve --bench-flows --data-dir "$dir" --listen 127.0.0.1:0 "$@" \
    >"$dir.log" 2>&1 &
  node_pid[$name]=$!
  node_port[$name]=""
  for _ in $(seq 600); do
    # The log may not exist yet: the child opens it after the fork.
    node_port[$name]="$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\)$/\1/p' \
      "$dir.log" 2>/dev/null || true)"
    [ -n "${node_port[$name]}" ] && return
    alive "${node_pid[$name]}" || break
    sleep 0.05
  done
  echo "node $name did not start; its log:" >&2
  cat "$dir.log" >&2
  exit 1
}

restart_node() {
  local name="$1"
  # shellcheck disable=SC2086  # the arguments were words when first given
  start_node "$name" "${node_dir[$name]}" ${node_args[$name]}
}

stop_nodes() {
  local pids=() name
  for name in "$@"; do pids+=("${node_pid[$name]}"); done
  stop_pids "${pids[@]}"
  for name in "$@"; do unset "node_pid[$name]"; done
}

url() { echo "http://127.0.0.1:${node_port[$1]}"; }

admin_key() { cat "${node_dir[$1]}/admin.key"; }

get() {  # NAME PATH: the body, with the admin key
  curl -sf --max-time 5 -H "Authorization: Bearer $(admin_key "$1")" \
    "$(url "$1")$2"
}

wait_ready() {  # NAME: /readyz answers 200
  for _ in $(seq 600); do
    curl -sf --max-time 2 "$(url "$1")/readyz" >/dev/null 2>&1 && return
    sleep 0.05
  done
  echo "node $1 never became ready" >&2
  exit 1
}

# Waits until NAME's view of the cluster has COUNT nodes and every shard
# owned by the node it is placed on: the cluster is whole again.
wait_cluster() {
  local name="$1" count="$2" view
  for _ in $(seq 600); do
    view="$(get "$name" /v1/cluster 2>/dev/null || true)"
    if [ -n "$view" ] && python3 -c '
import json, sys
view = json.loads(sys.argv[1])
whole = len(view["nodes"]) == int(sys.argv[2]) and all(
    s["owner"] is not None and s["owner"] == s["placedOn"]
    for s in view["shards"])
sys.exit(0 if whole else 1)' "$view" "$count"; then
      return
    fi
    sleep 0.1
  done
  echo "cluster never became whole; last view: $view" >&2
  exit 1
}

shards_of() {  # ENTRY NODE_ID: the shards NODE_ID owns, "0,3,5" ("-": none)
  get "$1" /v1/cluster | python3 -c '
import json, sys
view = json.load(sys.stdin)
mine = [str(s["id"]) for s in view["shards"] if s["owner"] == sys.argv[1]]
print(",".join(mine) or "-")' "$2"
}

metric() {  # NAME METRIC: the value on NAME's /metrics
  get "$1" /metrics | awk -v m="$2" '$1 == m { print $2 }'
}

# The sum of METRIC over the nodes named.
metric_sum() {
  local m="$1" total=0 name
  shift
  local v
  for name in "$@"; do
    v="$(metric "$name" "$m")"
    total=$((total + ${v:-0}))  # a metric a node does not export counts 0
  done
  echo "$total"
}

field() {  # LINE NAME: the value of NAME= in an http_load line
  sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1" | head -1
}

now_us() { date +%s%6N; }

# CPU seconds (user + system) a process has used: fields 14 and 15 of
# /proc/PID/stat, in clock ticks. Its command name has no spaces here.
cpu_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"
}

# The context switches of the named nodes' threads so far (voluntary and
# not): on a virtual machine each one costs more than most of a request's
# own work, so a load's switches a request say where its CPU went.
switches() {
  local name total=0 n
  for name in "$@"; do
    n="$(cat /proc/"${node_pid[$name]}"/task/*/status 2>/dev/null |
      awk '/ctxt_switches/ { s += $2 } END { print s + 0 }')"
    total=$((total + n))
  done
  echo "$total"
}

# The cores the named nodes use together while nothing is asked of them,
# over 2 s: what a node costs before any request (lease keepalives, the
# actor schedulers' threads, timers).
idle_cores() {
  local before=0 after=0 name
  for name in "$@"; do before="$(awk -v a="$before" -v b="$(cpu_seconds "${node_pid[$name]}")" 'BEGIN { print a + b }')"; done
  sleep 2
  for name in "$@"; do after="$(awk -v a="$after" -v b="$(cpu_seconds "${node_pid[$name]}")" 'BEGIN { print a + b }')"; done
  awk -v a="$before" -v b="$after" 'BEGIN { printf "%.3f", (b - a) / 2 }'
}

# The shard of a run id: its last two characters, Crockford base32 (high,
# low), modulo the shard count, as services/shard_map.cpp computes it.
crockford=0123456789ABCDEFGHJKMNPQRSTVWXYZ
digit() {
  local before="${crockford%%"$1"*}"
  echo "${#before}"
}
shard_of() {
  local id="$1"
  echo $((($(digit "${id: -2:1}") * 32 + $(digit "${id: -1}")) % shards))
}

in_list() {  # SHARD LIST
  [[ ",$2," == *",$1,"* ]]
}

# DURIN_BENCH_PERF=DIR: a call-graph profile of each node NAME under a
# load (perf record, the load's length but its first second), for perf
# report; wait_profiles waits for them once the load is over.
profiles=()
start_profiles() {  # LABEL ROUND NAME...
  local label="$1" round="$2" name
  shift 2
  profiles=()
  [ -n "${DURIN_BENCH_PERF:-}" ] || return 0
  mkdir -p "$DURIN_BENCH_PERF"
  for name in "$@"; do
    (sleep 1 && perf record -q -g -p "${node_pid[$name]}" \
      -o "$DURIN_BENCH_PERF/$label-$round-$name.data" \
      -- sleep "$((seconds > 2 ? seconds - 2 : 1))" >/dev/null 2>&1) &
    profiles+=($!)
  done
}
wait_profiles() {
  local pid
  for pid in "${profiles[@]}"; do wait "$pid" || true; done
  profiles=()
}

keyed_start() {  # LABEL ROUND NAME...: a keyed-start load spread over NAMEs
  local label="$1" round="$2"
  shift 2
  local args=(--workload keyed-start --flow bench.noop
    --connections "$connections" --seconds "$seconds"
    --api-key "$(admin_key "$1")") name
  for name in "$@"; do
    args+=(--server "$(url "$name")" --server-pid "${node_pid[$name]}")
  done
  local clustered=0
  [[ "${node_args[$1]}" == *--etcd* ]] && clustered=1
  if [ "$clustered" = 1 ]; then
    args+=(--shard-count "$shards")
    for name in "$@"; do
      args+=(--local-shards "$(shards_of "$1" "${name%%-*}")")
    done
  fi
  local forwarded_before=0 served_before=0 applied_before=0 synced_before=0
  if [ "$clustered" = 1 ]; then
    forwarded_before="$(metric_sum durin_cluster_forwarded_total "$@")"
    served_before="$(metric_sum durin_cluster_forwards_served_total "$@")"
    applied_before="$(metric_sum durin_replication_writes_applied_total "$@")"
    synced_before="$(metric_sum durin_replication_backup_syncs_total "$@")"
  fi
  local idle line groups_before groups
  idle="$(idle_cores "$@")"
  # Group commits are fsyncs: with more shards a node's starts are split
  # over more committers, each syncing its own log.
  groups_before="$(metric_sum durin_commit_groups_total "$@")"
  local switches_before
  switches_before="$(switches "$@")"
  start_profiles "$label" "$round" "$@"
  line="$("$load" "${args[@]}")"
  wait_profiles
  groups=$(($(metric_sum durin_commit_groups_total "$@") - groups_before))
  local switched=$(($(switches "$@") - switches_before))
  local forwarded=0 served=0 applied=0 synced=0
  if [ "$clustered" = 1 ]; then
    forwarded=$(($(metric_sum durin_cluster_forwarded_total "$@") - forwarded_before))
    served=$(($(metric_sum durin_cluster_forwards_served_total "$@") - served_before))
    # A backup's writes and the fsyncs that made them durable (R > 1).
    applied=$(($(metric_sum durin_replication_writes_applied_total "$@") - applied_before))
    synced=$(($(metric_sum durin_replication_backup_syncs_total "$@") - synced_before))
  fi
  echo "case=$label round=$round $line fwd_total=$forwarded served_total=$served idle_cores=$idle fsyncs=$groups backup_writes=$applied backup_fsyncs=$synced switches=$switched" |
    tee -a "$lines"
}

# Node names are ID-ROUND (a-1, b-1 ...): the node id before the dash.
start_cluster() {  # NAME ROUND ID...: `cluster init`, then a node per id
  local cluster="$1" round="$2"
  shift 2
  local ids
  ids="$(IFS=,; echo "$*")"
  "$durin" cluster init --etcd "$etcd_url" --cluster "$cluster" \
    --shards "$shards" --nodes "$ids" --replicas "${replicas:-1}" >/dev/null
  local id
  for id in "$@"; do
    start_node "$id-$round" "$work/$cluster-$id" --etcd "$etcd_url" \
      --cluster "$cluster" --node-id "$id" --peer-listen 127.0.0.1:0 \
      "${lease[@]}"
  done
  for id in "$@"; do wait_ready "$id-$round"; done
  wait_cluster "$1-$round" "$#"
}

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "   durin $durin; $connections connections, $seconds s a load, $rounds rounds, $shards shards"
start_etcd

if [ "$mode" = replication ]; then
  # shellcheck source=benchmarks/replication_cases.sh
  source "$(dirname "$0")/replication_cases.sh"
  exit 0
fi

echo "== a. keyed starts (bench.noop, \"wait\": false)"
for round in $(seq "$rounds"); do
  # The baseline: one node alone, its default single shard.
  start_node "alone-$round" "$work/alone-$round"
  wait_ready "alone-$round"
  keyed_start alone "$round" "alone-$round"
  stop_nodes "alone-$round"
  # Alone with the cluster's shard count: what shards cost apart from
  # the cluster.
  start_node "alone8-$round" "$work/alone8-$round" --shards "$shards"
  wait_ready "alone8-$round"
  keyed_start alone8 "$round" "alone8-$round"
  stop_nodes "alone8-$round"
  start_cluster "one-$round" "$round" a
  keyed_start one "$round" "a-$round"
  stop_nodes "a-$round"
  start_cluster "three-$round" "$round" a b c
  keyed_start three "$round" "a-$round" "b-$round" "c-$round"
  stop_nodes "a-$round" "b-$round" "c-$round"
done

echo "== b. GET /v1/runs/{id} through node a: a run in a shard a serves, one in a shard c serves"
start_cluster fail 0 a b c
a_shards="$(shards_of a-0 a)"
c_shards="$(shards_of a-0 c)"
local_run=""
remote_run=""
for i in $(seq 200); do
  id="$(curl -sf -X POST -H "Authorization: Bearer $(admin_key a-0)" \
    -H "Idempotency-Key: pick-$i" -H 'Content-Type: application/json' \
    -d '{"flow":"bench.noop","wait":false}' "$(url a-0)/v1/runs" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')"
  shard="$(shard_of "$id")"
  if [ -z "$local_run" ] && in_list "$shard" "$a_shards"; then local_run="$id"; fi
  if [ -z "$remote_run" ] && in_list "$shard" "$c_shards"; then remote_run="$id"; fi
  [ -n "$local_run" ] && [ -n "$remote_run" ] && break
done
echo "   a serves shards $a_shards, c serves $c_shards; local run $local_run (shard $(shard_of "$local_run")), forwarded run $remote_run (shard $(shard_of "$remote_run"))"
get_run() {  # LABEL ROUND RUN
  local before after line
  before="$(metric a-0 durin_cluster_forwarded_total)"
  line="$("$load" --server "$(url a-0)" --api-key "$(admin_key a-0)" \
    --workload get-run --run-id "$3" --connections "$connections" \
    --seconds "$seconds" --server-pid "${node_pid[a-0]}" \
    --server-pid "${node_pid[b-0]}" --server-pid "${node_pid[c-0]}")"
  after="$(metric a-0 durin_cluster_forwarded_total)"
  echo "case=$1 round=$2 $line fwd_total=$((after - before))" | tee -a "$lines"
}
for round in $(seq "$rounds"); do
  get_run get-local "$round" "$local_run"
  get_run get-forwarded "$round" "$remote_run"
done

echo "== c, d. kill -9 of node c to the first 503 for run $remote_run through a; restart to the first 200"
# One connection polls through a, a request at most every 1 ms (a tight
# loop without a pause would take a core from the nodes it times). A
# request unanswered in 10 ms is given up and the next sent on a new
# connection: a forward already sent to the killed node waits for its
# deadline (30 s), so a poll without a timeout would time that deadline
# instead. 10 ms is then the resolution of the figure.
poll=(--server "$(url a-0)" --api-key "$(admin_key a-0)" --workload get-run
  --run-id "$remote_run" --connections 1 --pause-ms 1
  --request-timeout-ms 10 --seconds 120)
# Once, beside the first kill: a poller that waits for every answer, to
# see when a request caught in flight by the kill is answered.
"$load" --server "$(url a-0)" --api-key "$(admin_key a-0)" --workload get-run \
  --run-id "$remote_run" --connections 1 --pause-ms 1 --seconds 120 \
  --until-status 503 >"$work/inflight" 2>&1 &
inflight_pid=$!
background+=("$inflight_pid")
for round in $(seq "$rounds"); do
  "$load" "${poll[@]}" --until-status 503 >"$work/down-$round" 2>&1 &
  poller=$!
  background+=("$poller")
  sleep 1  # the poll is answered 200 before the kill
  killed_at="$(now_us)"
  kill -9 "${node_pid[c-0]}"
  wait "${node_pid[c-0]}" 2>/dev/null || true
  [ "$round" = 1 ] && inflight_killed_at="$killed_at"
  if ! wait "$poller"; then
    echo "round $round: no 503 within 120 s" >&2
    cat "$work/down-$round" >&2
    exit 1
  fi
  met="$(field "$(head -1 "$work/down-$round")" met_at_unix_us)"
  answer="$(sed -n 's/^met: //p' "$work/down-$round")"
  echo "case=kill round=$round ms=$(((met - killed_at) / 1000)) $(head -1 "$work/down-$round") code=$(sed -n 's/.*"code":"\([^"]*\)".*/\1/p' <<<"$answer")" |
    tee -a "$lines"
  # Restart once its lease has surely ended (TTL 2 s): the restart of a
  # node that was down, not a race with its old lease.
  sleep 3
  "$load" "${poll[@]}" --until-status 200 >"$work/up-$round" 2>&1 &
  poller=$!
  background+=("$poller")
  sleep 0.5  # the poll is answered 503 before the restart
  started_at="$(now_us)"
  restart_node c-0
  if ! wait "$poller"; then
    echo "round $round: no 200 within 120 s of the restart" >&2
    cat "$work/up-$round" >&2
    exit 1
  fi
  met="$(field "$(head -1 "$work/up-$round")" met_at_unix_us)"
  echo "case=restart round=$round ms=$(((met - started_at) / 1000)) $(head -1 "$work/up-$round")" |
    tee -a "$lines"
  wait_ready c-0
  wait_cluster a-0 3
done
# The poller caught by the first kill: answered by the forward's deadline.
if wait "$inflight_pid"; then
  met="$(field "$(head -1 "$work/inflight")" met_at_unix_us)"
  echo "case=inflight round=1 ms=$(((met - inflight_killed_at) / 1000)) $(head -1 "$work/inflight") code=$(sed -n 's/^met: .*"code":"\([^"]*\)".*/\1/p' "$work/inflight")" |
    tee -a "$lines"
else
  echo "case=inflight round=1 ms=none (no 503 within 120 s)" | tee -a "$lines"
fi
background=()
stop_nodes a-0 b-0 c-0

# One line per figure: throughputs are means over the rounds, ratios are
# of the totals (the per-round ratios show the noise), latencies and CPU
# are means of the per-round figures.
echo "== figures ($(date -u '+%H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg))"
awk -v rounds="$rounds" "$value_awk"'
  {
    split($1, c, "="); split($2, r, "="); k = c[2]; n = r[2]
    thr[k, n] = value("throughput"); tot[k] += thr[k, n]; count[k]++
    if (thr[k, n] > 0) { us[k] += 1e6 * value("server_cpu") / thr[k, n] }
    idle[k] += value("idle_cores"); fsyncs[k] += value("fsyncs")
    p50[k] += value("p50"); p99[k] += value("p99"); cpu[k] += value("server_cpu")
    ok[k] += value("ok"); fwd[k] += value("fwd_total"); srv[k] += value("served_total")
    lp50[k] += value("local_p50"); lp99[k] += value("local_p99")
    fp50[k] += value("forwarded_p50"); fp99[k] += value("forwarded_p99")
    ms[k] = ms[k] " " value("ms"); timeouts[k] += value("timeouts")
    if (k == "kill") { codes = codes " " substr($NF, 6) }
  }
  function per_round(k, base,   n, s) {
    s = ""
    for (n = 1; n <= rounds; ++n) { s = s sprintf(" %.2f", thr[k, n] / thr[base, n]) }
    return s
  }
  function keyed(k, what) {
    printf "%-44s %7.0f/s  x%.2f of alone (rounds%s)  p50 %.2f ms  p99 %.2f ms  servers %.2f cores, %.0f us CPU a start, %.2f starts an fsync, %.3f cores idle\n",
      what, tot[k] / count[k], tot[k] / tot["alone"], per_round(k, "alone"),
      p50[k] / count[k], p99[k] / count[k], cpu[k] / count[k], us[k] / count[k],
      (fsyncs[k] > 0 ? ok[k] / fsyncs[k] : 0), idle[k] / count[k]
  }
  END {
    keyed("alone", "keyed starts, 1 node alone (baseline)")
    keyed("alone8", "keyed starts, 1 node alone, 8 shards")
    keyed("one", "keyed starts, 1 cluster node")
    keyed("three", "keyed starts, 3 cluster nodes, load over 3")
    printf "%-44s %.1f%% (forwarded %d of %d answered; served for others %d)\n",
      "  forwarded share, 3 nodes", 100 * fwd["three"] / ok["three"], fwd["three"], ok["three"], srv["three"]
    printf "%-44s local p50 %.2f p99 %.2f ms; forwarded p50 %.2f p99 %.2f ms; added p50 %+.2f p99 %+.2f ms\n",
      "  local vs forwarded, same run, 3 nodes", lp50["three"] / count["three"], lp99["three"] / count["three"],
      fp50["three"] / count["three"], fp99["three"] / count["three"],
      (fp50["three"] - lp50["three"]) / count["three"], (fp99["three"] - lp99["three"]) / count["three"]
    printf "%-44s local %7.0f/s (p50 %.2f p99 %.2f ms, %.0f us CPU)  forwarded %7.0f/s (p50 %.2f p99 %.2f ms, %.0f us CPU)  forwarded/local %.2f (rounds%s)\n",
      "GET /v1/runs/{id} through a",
      tot["get-local"] / count["get-local"], p50["get-local"] / count["get-local"], p99["get-local"] / count["get-local"],
      us["get-local"] / count["get-local"],
      tot["get-forwarded"] / count["get-forwarded"], p50["get-forwarded"] / count["get-forwarded"],
      p99["get-forwarded"] / count["get-forwarded"], us["get-forwarded"] / count["get-forwarded"],
      tot["get-forwarded"] / tot["get-local"], per_round("get-forwarded", "get-local")
    printf "%-44s forwarded by a: local %d, forwarded %d (of %d and %d answered)\n", "  check",
      fwd["get-local"], fwd["get-forwarded"], ok["get-local"], ok["get-forwarded"]
    printf "%-44s ms:%s  first codes:%s  requests given up at 10 ms: %d\n",
      "kill -9 to first 503 (through another node)", ms["kill"], codes, timeouts["kill"]
    printf "%-44s ms:%s\n", "restart to first 200 (through another node)", ms["restart"]
    if (count["inflight"]) {
      printf "%-44s ms:%s\n", "a request in flight at the kill answered", ms["inflight"]
    }
  }' "$lines"
