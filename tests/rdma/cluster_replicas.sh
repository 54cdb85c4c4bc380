#!/usr/bin/env bash
# cluster_replicas (rdma suite): replicated shards (docs/cluster.md
# "Replication") through scripts/cluster: etcd + 3 kvd --replicas 1.
#
#   tests/rdma/cluster_replicas.sh REPO BUILD   (meson test `cluster_replicas`, via scripts/softroce exec)
#
# Checks, each with a generous deadline and none on speed:
#  - once the map settled (one backup per shard, every owner in sync, each
#    primary's backups spread over the others),
#    writes through a client of the cluster (SETs eager and by rendezvous,
#    DELs, TTLs, INCRs) reach the backups: the members' repl_applied add up
#    to one record per write;
#  - kvload --read-from backups --verify, and Python reading back its
#    writes with RKV_READ_FROM=backups: every GET answered by an in-sync
#    backup (backup_gets), 0 mismatches;
#  - two kvload --verify at depth 32 (values of 100 B to 64 KiB: eager and
#    rendezvous) across kill -9 of the kvd started first: 0 errors (their
#    ops on the victim are placed again on the new primaries), and once the
#    map dropped it, every acknowledged write reads back byte-exact from
#    the members left (cluster_replicas.py); a survivor revoked its lease
#    (its node refused a connect: nothing listens on its port) rather than
#    waiting for the 5 s lease to expire, and the survivors probed it once
#    its shipping connections into them dropped;
#  - under a third kvload --verify (run again and again until the map
#    settled), the victim restarts (same id, a new
#    lease: a new incarnation, with an empty store) and rejoins as a
#    backup that is caught up and takes shards over once in sync, then a
#    4th kvd joins: once the map settled each of the 4 is the primary of
#    16 of the 64 shards, and kvload had 0 errors;
#  - the second kvd paused past its lease (cluster_fence.py with
#    REPLICAS=1): the writes sent to it meanwhile are all refused, every
#    write acknowledged before the pause reads back, and once it took
#    shards over again it serves the values written while it was away;
#  - every member paused past its lease at once (SIGSTOP of all four for
#    twice the lease): each joins again under the lease it had, and every
#    write acknowledged before reads back after;
#  - kill -9 of the second kvd; once the map settled again, the third
#    leaves (SIGTERM) under a fourth kvload --verify: it hands its
#    primaries over before it leaves (it never logs leaving anyway while
#    a primary), exits by itself, kvload has 0 errors; the two that joined
#    alone read back every acknowledged write (Python's);
#  - rkv cluster remove of the 4th: it hands its primaries over the same
#    way and exits by itself; the first kvd alone then reads back every
#    acknowledged write (Python's and the four kvload runs);
#  - bad input: --replicas beyond the maximum or without --cluster, and an
#    unknown --ack, are refused (exit 2); rkv cluster remove of no member
#    exits 1.
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
  cr() { "$py" "$repo/tests/rdma/cluster_replicas.py" "$@" || exit 1; }
  # kvload runs: NAME.txt (gen), NAME.out, NAME.acks (acknowledged writes).
  gen() { "$B/kvload" gen --keys 300 --ops "$2" --sizes 100:4,8k:2,64k:1 --prefix "$1-" --seed "$3" \
    -o "$work/$1.txt" || fail "kvload gen $1"; }
  run() { "$B/kvload" --server "$RKV_CLUSTER" --file "$work/$1.txt" --depth 32 --verify -q \
    --ack-log "$work/$1.acks" >"$work/$1.out" 2>&1; }
  acked() {  # NAME COUNT PID: until kvload NAME acknowledged COUNT writes
    local t0=$SECONDS
    until [ "$(cat "$work/$1.acks" 2>/dev/null | wc -l)" -ge "$2" ]; do
      kill -0 "$3" 2>/dev/null || fail "kvload $1 ended too early: $(cat "$work/$1.out")"
      [ $((SECONDS - t0)) -lt 120 ] || fail "kvload $1 acknowledged under $2 writes in 120 s"
      sleep 0.1
    done
  }
  finished() {  # NAME PID WHAT
    wait "$2" || fail "kvload $1 --verify across $3: $(cat "$work/$1.out")"
    echo "cluster_replicas: kvload $1 --verify at depth 32 across $3 (max: the longest op):"
    grep -E "^(op|SET|GET|total)" "$work/$1.out" | sed "s/^/  /"
  }
  summed() {  # NAME: the NAME counters of the members (rkv stats) added up
    local n total=0
    for n in $("$B/rkv" stats --server "$RKV_CLUSTER" | sed -n "s/^$1 //p"); do total=$((total + n)); done
    echo "$total"
  }
  status() { "$B/rkv" cluster status --server "$RKV_CLUSTER"; }
  # ID N: column N of the line of member ID in a status read from stdin (6 primaries, 8 backups, 10 most_of_one)
  col_of() { awk -v id="$1" -v n="$2" "\$2 == id { print \$n }"; }
  primaries() { status | col_of "$1" 6; }
  map_epoch() { status | sed -n "s/.*epoch \([0-9]*\).*/\1/p" | head -1; }
  started=()
  # On a failure: the last lines of the members started here (scripts/kvds
  # shows those it started), e.g. a lease that expired.
  tails() {
    local f
    for f in "$work"/*.log; do
      [ -e "$f" ] || continue
      echo "cluster_replicas: the last lines of kvd $(basename "$f" .log):" >&2
      tail -n 8 "$f" | sed "s/^/  /" >&2
    done
  }
  trap "rc=\$?; kill -9 \${started[*]:-} 2>/dev/null; [ \$rc = 0 ] || tails" EXIT
  start_kvd() {  # PORT NAME: one more member, in the background; sets kvd_id
    "$RKV_KVD" --bind "$SOFTROCE_ADDR" --port "$1" --cluster "$RKV_CLUSTER" --replicas 1 --lease-ttl 5 \
      --log-level warn >"$work/$2.log" 2>&1 &
    started+=($!)
    local t0=$SECONDS
    kvd_id=""
    until [ -n "$kvd_id" ]; do
      kvd_id=$(sed -n "s/^kvd: listening on //p" "$work/$2.log")
      kill -0 "${started[-1]}" 2>/dev/null || fail "kvd $2 exited: $(cat "$work/$2.log")"
      [ $((SECONDS - t0)) -lt 120 ] || fail "kvd $2 did not listen in 120 s"
      sleep 0.1
    done
  }

  out=$(cr write) || exit 1
  echo "$out"
  writes=$(echo "$out" | sed -n "s/.*(\([0-9]*\) writes)$/\1/p")
  # One record per write, each to the one backup of its shard.
  applied=$(summed repl_applied)
  [ "$applied" -ge "${writes:-1}" ] || fail "the backups applied $applied records, not the ${writes:-?} writes"
  echo "cluster_replicas: the backups applied $applied records"

  # Reads from backups: every GET of a kvload --read-from backups --verify
  # run is answered by an in-sync backup (backup_gets of the members add
  # up to its GETs), and each reads what kvload acknowledged before it.
  gen rb 800 11
  gets=$(grep -c "^GET " "$work/rb.txt")
  "$B/kvload" --server "$RKV_CLUSTER" --file "$work/rb.txt" --depth 32 --verify -q --read-from backups \
    >"$work/rb.out" 2>&1 || fail "kvload --read-from backups --verify: $(cat "$work/rb.out")"
  by_backups=$(summed backup_gets)
  [ "$by_backups" = "$gets" ] || fail "backups answered $by_backups of the $gets GETs of kvload --read-from backups"
  echo "cluster_replicas: kvload --read-from backups --verify: all $gets GETs answered by in-sync backups"
  # The same through the C API (Python): RKV_READ_FROM=backups.
  out=$(RKV_READ_FROM=backups cr read) || exit 1
  echo "$out"
  py_gets=$(echo "$out" | sed -n "s/.*(\([0-9]*\) GETs)$/\1/p")
  total=$(summed backup_gets)
  [ "$((total - by_backups))" = "${py_gets:-?}" ] ||
    fail "backups answered $((total - by_backups)) of the ${py_gets:-?} GETs of Python"
  echo "cluster_replicas: Python with RKV_READ_FROM=backups: all $py_gets GETs answered by in-sync backups"

  # 1. The victim is the kvd started first: with the cluster formed by
  # joins in whatever order, its death once made the planner hand shards to
  # a member that did not hold them (fixed by the in-sync set in the map).
  # Two kvload --verify run across its kill; the longest op of each is
  # about the time the clients took to resume.
  IFS=, read -r -a servers <<<"$RKV_SERVERS"
  set -- $RKV_KVD_PIDS
  a=${servers[0]} a_pid=$1 b=${servers[1]} b_pid=$2 c=${servers[2]} c_pid=$3
  gen fo 1200 7
  gen fp 1200 8
  backed=$("$py" "$repo/tests/rdma/cluster_replicas.py" backs "$a") || exit 1
  run fo & fo_pid=$!
  run fp & fp_pid=$!
  acked fo 400 "$fo_pid"
  kill -9 "$a_pid"
  finished fo "$fo_pid" "the kill of $a"
  finished fp "$fp_pid" "the kill of $a"
  cr check "$a"
  # A survivor finds it gone when its node refuses a connect (nothing
  # listens on its port) and revokes its lease, before the 5 s lease could
  # expire: a primary it backed shards of, on reconnecting, or a backup of
  # its own shards, probing it once its shipping connection dropped (so
  # also when the planner left it backing no shard, as it may).
  probes=$(summed repl_probes)
  [ "$probes" -ge 1 ] || fail "no survivor probed $a when its shipping connections dropped"
  grep -h "member $a is gone" "$RKV_KVD_LOGS/kvd1.log" "$RKV_KVD_LOGS/kvd2.log" | head -1 | grep . ||
    fail "no survivor revoked the lease of $a (a backup of $backed shards) on finding nothing listening on its port: $(grep -h -v stats \
      "$RKV_KVD_LOGS/kvd1.log" "$RKV_KVD_LOGS/kvd2.log" | grep -E "cannot connect|gone|revok" | cut -c1-300)"
  echo "cluster_replicas: $a (a backup of $backed shards) found gone by a survivor; $probes probe(s) of it"

  # 2. Under a third kvload, the victim comes back under its id with an
  # empty store: a new incarnation (another lease), so it rejoins as a
  # backup, is caught up by the primaries and takes shards over once the
  # map marks it in sync. Then a 4th kvd joins the same way.
  cr settled "$b" "$c"
  # kvload jn runs over and over (the same file, each run --verify) until
  # the map settled over the 4, so clients write throughout, however long
  # the return and the join take.
  gen jn 1200 9
  again() {  # NAME: run NAME until NAME.stop exists; NAME.runs: how many times
    local n=0
    until [ -e "$work/$1.stop" ]; do run "$1" || return 1; n=$((n + 1)); done
    echo "$n" >"$work/$1.runs"
  }
  again jn & jn_pid=$!
  acked jn 300 "$jn_pid"
  start_kvd "${a##*:}" again
  [ "$kvd_id" = "$a" ] || fail "the victim came back as $kvd_id, not $a"
  a_pid_now=${started[-1]}
  cr settled "$a" "$b" "$c"
  echo "cluster_replicas: $a came back and, once caught up, is the primary of $(primaries "$a") shard(s)"
  start_kvd 0 fourth
  d=$kvd_id d_pid=${started[-1]}
  cr settled "$a" "$b" "$c" "$d"
  touch "$work/jn.stop"
  finished jn "$jn_pid" "the return of $a and the join of $d (its last run)"
  echo "cluster_replicas: $d joined; kvload jn ran $(cat "$work/jn.runs") time(s) until the map settled"
  st=$(status)
  backed=0
  most=""
  for m in "$a" "$b" "$c" "$d"; do
    p=$(echo "$st" | col_of "$m" 6)
    o=$(echo "$st" | col_of "$m" 10)
    [ "$p" = 16 ] || fail "$m is the primary of $p shards, not 16 of 64: $st"
    # Each primary has 16 shards, backed by the 3 others, at most 6 by one (the map is spread)
    [ "$o" -le 6 ] || fail "$m backs $o shards of one primary, more than 6 of 16: $st"
    backed=$((backed + $(echo "$st" | col_of "$m" 8)))
    most="$most$o "
  done
  [ "$backed" = 64 ] || fail "the members back $backed shards, not 64 (one backup each): $st"
  echo "cluster_replicas: each of the 4 is the primary of 16 shards; the most shards of one primary each backs: $most"

  # 3. The second kvd is paused past its lease (SIGSTOP, then SIGCONT),
  # with writes sent to it meanwhile: it acknowledges none of them, every
  # write acknowledged before the pause reads back from the new primaries,
  # and once it joined again and took shards over it serves what was
  # written while it was away (tests/rdma/cluster_fence.py).
  PAUSED_PID=$b_pid PAUSED_ID=$b REPLICAS=1 "$py" "$repo/tests/rdma/cluster_fence.py" || exit 1
  cr settled "$a" "$b" "$c" "$d"

  # 3b. Every member paused past its lease at once (SIGSTOP of all four for
  # twice the 5 s lease; as etcd cut off from all of them would do): every
  # lease lapses, and each kvd joins again under the lease it had, so the
  # map still names them and no shard is given to a member without its
  # keys. Every write acknowledged before the pause reads back after it.
  # (Before, they came back as new incarnations and every shard started
  # empty: docs/cluster.md "Membership", A lease that lapsed.)
  gen lp 1200 12
  run lp || fail "kvload lp --verify before the pause of every member: $(cat "$work/lp.out")"
  epoch_before=$(map_epoch)
  # Each member logs "the lease expired" when it finds it so: the pause
  # counts only once all four did (a lapse that did not happen proves nothing).
  logs4=("$work/again.log" "$RKV_KVD_LOGS/kvd1.log" "$RKV_KVD_LOGS/kvd2.log" "$work/fourth.log")
  lapses() { local f; for f in "${logs4[@]}"; do grep -c "the lease expired" "$f"; done; }
  lapsed_before=($(lapses))  # (no /dev/fd in the guest for <(...))
  rejoins_before=$(summed cluster_lease_rejoins)
  all_pids="$a_pid_now $b_pid $c_pid $d_pid"
  kill -STOP $all_pids
  sleep 10  # the pause itself (twice the lease), not a wait for an event
  kill -CONT $all_pids
  t0=$SECONDS
  while :; do
    lapsed_now=($(lapses))
    all=1
    for i in 0 1 2 3; do [ "${lapsed_now[$i]}" -gt "${lapsed_before[$i]}" ] || all=0; done
    [ "$all" = 1 ] && break
    [ $((SECONDS - t0)) -lt 120 ] || fail "not every member found its lease expired within 120 s of the pause: ${lapsed_before[*]} -> ${lapsed_now[*]}"
    sleep 0.2
  done
  cr settled "$a" "$b" "$c" "$d"
  # What rkv stats says of it: a rejoin counted by each member, and none
  # of them still rejoining (writes refused) once the map settled.
  rejoins=$(summed cluster_lease_rejoins)
  [ "$rejoins" -ge $((rejoins_before + 4)) ] ||
    fail "cluster_lease_rejoins went from $rejoins_before to $rejoins over a pause that lapsed all four leases"
  t0=$SECONDS
  until [ "$(summed cluster_rejoining)" = 0 ]; do
    [ $((SECONDS - t0)) -lt 120 ] || fail "a member still reports cluster_rejoining 120 s after the pause ended"
    sleep 0.2
  done
  awk "\$1 == \"SET\" { print \"GET \" \$2 }" "$work/lp.txt" | sort -u >"$work/lp-reads.txt"
  "$B/kvload" --server "$RKV_CLUSTER" --file "$work/lp-reads.txt" --expect "$work/lp.txt" --depth 32 -q \
    >"$work/lp-reads.out" 2>&1 ||
    fail "after every lease lapsed at once, the writes acknowledged before are not all there: $(cat "$work/lp-reads.out")"
  echo "cluster_replicas: every member paused past its lease at once; all $(wc -l <"$work/lp-reads.txt") keys written" \
    "before read back (map epoch $epoch_before before, $(map_epoch) after; cluster_lease_rejoins $rejoins_before -> $rejoins)"

  # 4. The two original members left go one after the other: b dies,
  # then c leaves (SIGTERM) under a fourth kvload --verify. c marks itself
  # draining and hands each of its primaries to an in-sync backup before
  # it revokes its lease, so it never logs that it left while still a
  # primary; it exits by itself, and kvload has 0 errors. The two that
  # joined then hold every acknowledged write.
  kill -9 "$b_pid"
  cr check "$b"
  cr settled "$a" "$c" "$d"
  gen dr 1200 10
  run dr & dr_pid=$!
  acked dr 300 "$dr_pid"
  kill -TERM "$c_pid"
  t0=$SECONDS
  while kill -0 "$c_pid" 2>/dev/null; do
    [ $((SECONDS - t0)) -lt 120 ] || fail "$c did not exit within 120 s of its SIGTERM"
    sleep 0.2
  done
  exited=$((SECONDS - t0))
  finished dr "$dr_pid" "the drain of $c"
  if grep -q "leaving anyway" "$RKV_KVD_LOGS/kvd2.log"; then
    fail "$c left while still a primary: $(grep -v stats "$RKV_KVD_LOGS/kvd2.log" | tail -5)"
  fi
  echo "cluster_replicas: $c drained (its primaries handed over) and exited $exited s after its SIGTERM"
  cr check "$c"

  # 5. rkv cluster remove: d, marked draining in etcd by the tool, hands
  # its primaries to a (the backup of every shard it is the primary of)
  # and exits by itself; a alone then holds every acknowledged write.
  "$B/rkv" cluster remove 192.0.2.1:1 --server "$RKV_CLUSTER" >"$work/rm.out" 2>&1
  [ $? = 1 ] || fail "rkv cluster remove of no member did not exit 1: $(cat "$work/rm.out")"
  "$B/rkv" cluster remove "$d" --server "$RKV_CLUSTER" || fail "rkv cluster remove $d"
  t0=$SECONDS
  while kill -0 "$d_pid" 2>/dev/null; do
    [ $((SECONDS - t0)) -lt 120 ] || fail "$d did not exit within 120 s of rkv cluster remove"
    sleep 0.2
  done
  if grep -q "leaving anyway" "$work/fourth.log"; then
    fail "$d left while still a primary: $(grep -v stats "$work/fourth.log" | tail -5)"
  fi
  echo "cluster_replicas: $d removed by rkv cluster remove: handed its primaries over and exited $((SECONDS - t0)) s after"
  cr check "$d"
  cr settled "$a"
  cat "$work/fo.txt" "$work/fp.txt" "$work/jn.txt" "$work/dr.txt" >"$work/all.txt"
  awk "\$1 == \"SET\" { print \"GET \" \$2 }" "$work/all.txt" | sort -u >"$work/reads.txt"
  "$B/kvload" --server "$RKV_CLUSTER" --file "$work/reads.txt" --expect "$work/all.txt" --depth 32 -q \
    >"$work/reads.out" 2>&1 || fail "reading back what kvload wrote, from $a: $(cat "$work/reads.out")"
  echo "cluster_replicas: $a alone read back all $(wc -l <"$work/reads.txt") keys kvload wrote"
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
