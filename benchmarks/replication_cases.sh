# The replication cases of benchmarks/cluster_bench.sh (its "replication"
# mode), sourced by it after its helpers and etcd are up: see its header.
# Not run alone.

# The largest lagWrites of any copy, as NAME's GET /v1/cluster says (0
# without replicas). It runs under the load it samples, so it spawns no
# interpreter: a python3 start costs about 0.4 s of CPU on a 2-core VM,
# and at five samples a second it took a core from the load measured.
max_lag() {
  get "$1" /v1/cluster | grep -o '"lagWrites":[0-9]*' |
    awk -F: 'BEGIN { m = 0 } $2 > m { m = $2 } END { print m }'
}

# Until every shard's backups are in step (R=2) on NAME's view.
wait_in_step() {
  local view
  for _ in $(seq 600); do
    view="$(get "$1" /v1/cluster 2>/dev/null || true)"
    if [ -n "$view" ] && python3 -c '
import json, sys
view = json.loads(sys.argv[1])
sys.exit(0 if all(s["owner"] is not None and len(s["inSync"]) == len(s["backups"])
                  for s in view["shards"]) else 1)' "$view"; then
      return
    fi
    sleep 0.1
  done
  echo "backups never came in step; last view: $view" >&2
  exit 1
}

# LABEL ROUND: 10-step flows, each start waited for, through a and b.
ten_steps() {
  local line switched groups applied synced
  switched="$(switches "a-$2" "b-$2")"
  groups="$(metric_sum durin_commit_groups_total "a-$2" "b-$2")"
  applied="$(metric_sum durin_replication_writes_applied_total "a-$2" "b-$2")"
  synced="$(metric_sum durin_replication_backup_syncs_total "a-$2" "b-$2")"
  start_profiles "$1" "$2" "a-$2" "b-$2"
  line="$("$load" --workload raw-keyed --path /v1/runs \
    --body '{"flow":"bench.ten-steps"}' --connections "$connections" \
    --seconds "$seconds" --api-key "$(admin_key "a-$2")" \
    --server "$(url "a-$2")" --server-pid "${node_pid[a-$2]}" \
    --server "$(url "b-$2")" --server-pid "${node_pid[b-$2]}")"
  wait_profiles
  switched=$(($(switches "a-$2" "b-$2") - switched))
  groups=$(($(metric_sum durin_commit_groups_total "a-$2" "b-$2") - groups))
  applied=$(($(metric_sum durin_replication_writes_applied_total "a-$2" "b-$2") - applied))
  synced=$(($(metric_sum durin_replication_backup_syncs_total "a-$2" "b-$2") - synced))
  echo "case=$1 round=$2 $line fsyncs=$groups backup_writes=$applied backup_fsyncs=$synced switches=$switched" |
    tee -a "$lines"
}

# The mean replicated write's round trip on its primary (ship to every
# in-sync backup having it) and the mean backup fsync, in ms, over both
# loads of a round (each round's cluster is fresh): the nodes' histograms'
# _sum / _count.
replication_times() {  # NAME...
  local name rt_sum=0 rt_count=0 sync_sum=0 sync_count=0
  for name in "$@"; do
    rt_sum="$rt_sum+$(metric "$name" durin_replication_round_trip_seconds_sum)"
    rt_count="$rt_count+$(metric "$name" durin_replication_round_trip_seconds_count)"
    sync_sum="$sync_sum+$(metric "$name" durin_replication_backup_sync_seconds_sum)"
    sync_count="$sync_count+$(metric "$name" durin_replication_backup_sync_seconds_count)"
  done
  awk "BEGIN {
    rt = $rt_count; sync = $sync_count
    printf \"round_trip_ms=%.2f backup_sync_ms=%.2f\", rt ? ($rt_sum) * 1000 / rt : 0,
      sync ? ($sync_sum) * 1000 / sync : 0 }"
}

echo "== e. keyed starts and 10-step flows, 2 nodes, --replicas 1 vs 2"
for round in $(seq "$rounds"); do
  for r in 1 2; do
    replicas=$r start_cluster "r$r-$round" "$round" a b
    [ "$r" = 2 ] && wait_in_step "a-$round"
    # The lag, sampled once a second under the keyed load. R = 1 runs the
    # same sampler (its copies have no lag) so that both loads pay its CPU.
    : >"$work/lag-$r-$round"
    (for _ in $(seq "$seconds"); do
      sleep 1
      max_lag "a-$round" >>"$work/lag-$r-$round" 2>/dev/null || true
    done) &
    sampler=$!
    background+=("$sampler")
    keyed_start "keyed-r$r" "$round" "a-$round" "b-$round"
    wait "$sampler"
    background=()
    ten_steps "steps-r$r" "$round"
    if [ "$r" = 2 ]; then
      echo "case=lag round=$round max=$(sort -n "$work/lag-$r-$round" | tail -1) samples=$(wc -l <"$work/lag-$r-$round") $(replication_times "a-$round" "b-$round")" |
        tee -a "$lines"
    fi
    stop_nodes "a-$round" "b-$round"
  done
done

echo "== f. kill -9 of a primary under load, $kills times: to the first 200 for a run in one of its shards"
replicas=2 start_cluster failover 0 a b c
wait_in_step a-0
victims=(a b c)
for kill in $(seq "$kills"); do
  victim="${victims[$((kill % 3))]}-0"
  watcher="${victims[$(((kill + 1) % 3))]}-0"
  victim_shards="$(shards_of "$watcher" "${victim%%-*}")"
  if [ "$victim_shards" = "-" ]; then
    echo "kill $kill: ${victim%%-*} owns no shard; skipped" >&2
    continue
  fi
  run=""
  for i in $(seq 400); do
    id="$(curl -sf -X POST -H "Authorization: Bearer $(admin_key "$watcher")" \
      -H "Idempotency-Key: pick-$kill-$i" -H 'Content-Type: application/json' \
      -d '{"flow":"bench.noop","wait":false}' "$(url "$watcher")/v1/runs" |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')"
    if in_list "$(shard_of "$id")" "$victim_shards"; then run="$id"; break; fi
  done
  # A light keyed load on the other two nodes meanwhile.
  others=()
  for name in a-0 b-0 c-0; do
    [ "$name" != "$victim" ] && others+=(--server "$(url "$name")")
  done
  "$load" --workload keyed-start --flow bench.noop --connections 4 \
    --seconds 8 --api-key "$(admin_key "$watcher")" "${others[@]}" \
    >"$work/bg-$kill" 2>&1 &
  light=$!
  background+=("$light")
  sleep 0.5
  kill -9 "${node_pid[$victim]}"
  killed_at="$(now_us)"
  wait "${node_pid[$victim]}" 2>/dev/null || true
  # The first answer after the kill that is not a 200 (the shard gone),
  # then the first 200 again (its backup serves it).
  "$load" --server "$(url "$watcher")" --api-key "$(admin_key "$watcher")" \
    --workload get-run --run-id "$run" --connections 1 --pause-ms 1 \
    --request-timeout-ms 50 --seconds 60 --until-status 503 \
    >/dev/null 2>&1 || true
  "$load" --server "$(url "$watcher")" --api-key "$(admin_key "$watcher")" \
    --workload get-run --run-id "$run" --connections 1 --pause-ms 1 \
    --request-timeout-ms 50 --seconds 60 --until-status 200 \
    >"$work/failover-$kill" 2>&1
  met="$(field "$(head -1 "$work/failover-$kill")" met_at_unix_us)"
  echo "case=failover round=$kill ms=$(((met - killed_at) / 1000))" | tee -a "$lines"
  wait "$light" || true
  background=()
  restart_node "$victim"
  wait_ready "$victim"
  wait_in_step "$watcher"
done
stop_nodes a-0 b-0 c-0

echo "== figures ($(date -u '+%H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg))"
awk "$value_awk"'
  {
    split($1, c, "="); split($2, r, "="); k = c[2]; n = r[2]
    thr[k, n] = value("throughput"); tot[k] += thr[k, n]; count[k]++
    p50[k] += value("p50"); p99[k] += value("p99")
    # The CPU a request of the servers, and their context switches a request,
    # summed over the rounds.
    ok[k] += value("ok"); cpu[k] += value("server_cpu") * value("seconds")
    switched[k] += value("switches")
    if (k == "lag") {
      lag = lag " " value("max")
      trip = trip sprintf(" %.2f / %.2f", value("round_trip_ms"), value("backup_sync_ms"))
    }
    if (k == "failover") { ms[++kills] = value("ms") }
    if (n > rounds) { rounds = n }
  }
  function pair(what, one, two,   n, s) {
    s = ""
    for (n = 1; n <= rounds; ++n) { if (thr[one, n] > 0) { s = s sprintf(" %.2f", thr[two, n] / thr[one, n]) } }
    printf "%-30s R=1 %7.0f/s p50 %.2f p99 %.2f ms | R=2 %7.0f/s p50 %.2f p99 %.2f ms | R=2/R=1 throughput %.2f (rounds%s), p50 x%.2f\n",
      what, tot[one] / count[one], p50[one] / count[one], p99[one] / count[one],
      tot[two] / count[two], p50[two] / count[two], p99[two] / count[two],
      tot[two] / tot[one], s, (p50[two] / count[two]) / (p50[one] / count[one])
    printf "%-30s R=1 %.0f us CPU, %.1f switches a request | R=2 %.0f us CPU, %.1f switches\n", "",
      ok[one] ? cpu[one] / ok[one] * 1e6 : 0, ok[one] ? switched[one] / ok[one] : 0,
      ok[two] ? cpu[two] / ok[two] * 1e6 : 0, ok[two] ? switched[two] / ok[two] : 0
  }
  END {
    pair("keyed starts (no wait)", "keyed-r1", "keyed-r2")
    pair("10-step flows (waited)", "steps-r1", "steps-r2")
    printf "%-30s largest lag per round (writes):%s\n", "replication lag, R=2", lag
    printf "%-30s mean round trip / backup fsync per round (ms):%s\n", "", trip
    if (kills > 0) {
      # Sorted by insertion (mawk has no asort).
      n = kills
      for (i = 2; i <= n; ++i) { v = ms[i]; for (j = i - 1; j >= 1 && ms[j] > v; --j) { ms[j + 1] = ms[j] } ms[j + 1] = v }
      q = int(n * 0.99 + 0.999); if (q > n) { q = n }
      printf "%-30s %d kills: min %d p50 %d p99 %d max %d ms\n", "failover, kill -9 to 200", n,
        ms[1], ms[int((n + 1) / 2)], ms[q], ms[n]
    }
  }' "$lines"
