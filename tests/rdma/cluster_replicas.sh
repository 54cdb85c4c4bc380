#!/usr/bin/env bash
# cluster_replicas (rdma suite): replicated shards (docs/cluster.md
# "Replication") through scripts/cluster: etcd + 3 kvd --replicas 1.
#
#   tests/rdma/cluster_replicas.sh REPO BUILD   (meson test `cluster_replicas`, via scripts/softroce exec)
#
# Checks, each with a generous deadline and none on speed:
#  - once the map names a backup for every shard, writes through a client of
#    the cluster (SETs eager and by rendezvous, DELs, TTLs, INCRs) reach the
#    backups: the members' repl_applied add up to one record per write;
#  - kill -9 of a member right after its writes were acknowledged: once the
#    map dropped it (its backups promoted), every acknowledged write reads
#    back byte-exact from the members left (cluster_replicas.py);
#  - the map names new backups for the shards the victim owned: once the
#    second member caught its new backups up (a walk of its store sent as
#    records), kill -9 of it too: the last member alone reads back every
#    acknowledged write;
#  - bad input: --replicas beyond the maximum or without --cluster, and an
#    unknown --ack, are refused (exit 2).
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 REPO BUILD" >&2; exit 2; }
REPO=$1 BUILD=$2
fail() { echo "cluster_replicas: FAILED: $*" >&2; exit 1; }
[ -n "${SOFTROCE_ADDR:-}" ] || fail "SOFTROCE_ADDR is not set (run through scripts/softroce exec)"
[ -d "$BUILD/python/rkv" ] || fail "no Python package in $BUILD (configure with -Dpython=enabled)"
work=$(mktemp -d) || fail "mktemp"
trap 'rm -rf "$work"' EXIT
py=$BUILD/tests/python/python_sanitized
[ -x "$py" ] || py=python3

# shellcheck disable=SC2016  # expanded by the inner shell
"$REPO/scripts/cluster" --build "$BUILD" 3 --replicas 1 --lease-ttl 5 --log-level warn -- bash -c '
  set -u
  build=$1 repo=$2 py=$3 work=$4 B=$1/apps
  fail() { echo "cluster_replicas: FAILED: $*" >&2; exit 1; }
  export PYTHONPATH=$build/python
  out=$("$py" "$repo/tests/rdma/cluster_replicas.py" write) || exit 1
  echo "$out"
  writes=$(echo "$out" | sed -n "s/.*(\([0-9]*\) writes)$/\1/p")
  # One record per write, each to the one backup of its shard.
  applied=0
  for n in $("$B/rkv" stats --server "$RKV_CLUSTER" | sed -n "s/^repl_applied //p"); do applied=$((applied + n)); done
  [ "$applied" -ge "${writes:-1}" ] || fail "the backups applied $applied records, not the ${writes:-?} writes"
  echo "cluster_replicas: the backups applied $applied records"
  # The victim is the kvd started last. Known bug (docs/cluster.md, "What
  # it does not have yet"): the member that joined last backs no shard, so
  # when another dies, the planner balances primaries by moving some to it
  # although it holds none of them, and those shards then serve empty. The
  # last joiner dying leaves only swaps with backups.
  IFS=, read -r -a servers <<<"$RKV_SERVERS"
  set -- $RKV_KVD_PIDS
  victim=${servers[2]} victim_pid=$3
  second=${servers[0]} second_pid=$1
  third=${servers[1]}
  stat() { "$B/rkv" stats --server "$1" | awk -v n="$2" "\$1 == n { print \$2 }"; }
  # kvload --verify at depth 32 (values of 100 B to 64 KiB: eager and
  # rendezvous) runs across the kill: ops that were on the victim when it
  # died, or sent to it before the map moved its shards, are placed again
  # (ShardSet::place_again) and none may fail; its longest op is about the
  # time the clients took to resume.
  "$B/kvload" gen --keys 300 --ops 6000 --sizes 100:4,8k:2,64k:1 --prefix fo- --seed 7 -o "$work/failover.txt" ||
    fail "kvload gen"
  "$B/kvload" --server "$RKV_CLUSTER" --file "$work/failover.txt" --depth 32 --verify -q --ack-log "$work/acks" \
    >"$work/failover.out" 2>&1 &
  load=$!
  t0=$SECONDS
  until [ "$(wc -l <"$work/acks" 2>/dev/null || echo 0)" -ge 1000 ]; do
    kill -0 "$load" 2>/dev/null || fail "kvload ended before the kill: $(cat "$work/failover.out")"
    [ $((SECONDS - t0)) -lt 120 ] || fail "kvload acknowledged under 1000 writes in 120 s"
    sleep 0.1
  done
  kill -9 "$victim_pid"
  wait "$load" || fail "kvload --verify across the kill of $victim: $(cat "$work/failover.out")"
  echo "cluster_replicas: kvload --verify at depth 32 across the kill of $victim (max: the longest op):"
  grep -E "^(op|SET|GET|total)" "$work/failover.out" | sed "s/^/  /"
  "$py" "$repo/tests/rdma/cluster_replicas.py" check "$victim" || exit 1
  # What kvload wrote reads back too (each key its last SET).
  awk "\$1 == \"SET\" { print \"GET \" \$2 }" "$work/failover.txt" | sort -u >"$work/reads.txt"
  "$B/kvload" --server "$RKV_CLUSTER" --file "$work/reads.txt" --expect "$work/failover.txt" --depth 32 -q \
    >"$work/reads.out" 2>&1 || fail "reading back what kvload wrote, after the kill: $(cat "$work/reads.out")"
  # The map gave the shards the victim owned a new backup among the two
  # left, which their primaries catch up (a walk of the store sent as
  # records). Once both members follow that map, their walks ended and every
  # record of them was applied, kill -9 the second too: the last member
  # must then hold every acknowledged write.
  epoch=$("$B/rkv" cluster status --server "$RKV_CLUSTER" | awk "\$2 == \"map\" { print \$4 }")
  t0=$SECONDS
  for m in "$second" "$third"; do
    until [ "$(stat "$m" repl_map_epoch)" -ge "$epoch" ] && [ "$(stat "$m" repl_catching_up)" = 0 ] &&
          [ "$(stat "$m" repl_catch_up_in_flight)" = 0 ]; do
      [ $((SECONDS - t0)) -lt 120 ] || fail "$m did not catch its new backups up by map $epoch: $("$B/rkv" stats --server "$m" | grep "^repl_")"
      sleep 0.5
    done
    echo "cluster_replicas: $m sent $(stat "$m" repl_catch_up_records) catch-up record(s) in all"
  done
  kill -9 "$second_pid"
  "$py" "$repo/tests/rdma/cluster_replicas.py" check "$second" || exit 1
' _ "$BUILD" "$REPO" "$py" "$work"
rc=$?
[ "$rc" = 0 ] || fail "the command over the cluster failed (status $rc)"

# Bad input: clear errors, exit status 2.
"$BUILD/apps/kvd" --port 0 --replicas 1 >/dev/null 2>&1
[ $? = 2 ] || fail "kvd --replicas without --cluster was not refused with status 2"
"$BUILD/apps/kvd" --port 0 --cluster etcd://127.0.0.1:1/x --replicas 9 >/dev/null 2>&1
[ $? = 2 ] || fail "kvd --replicas 9 was not refused with status 2"
"$BUILD/apps/kvd" --port 0 --cluster etcd://127.0.0.1:1/x --ack maybe >/dev/null 2>&1
[ $? = 2 ] || fail "kvd --ack maybe was not refused with status 2"
echo "cluster_replicas: ok"
