#!/usr/bin/env bash
# Multi-host failover test (docs/PS.md "Configuration and leases"): a parameter-server
# cluster of 2 shards x 2 replicas and 2 trainers, each process in its own network namespace,
# over TCP through a router namespace (one veth link per host), with the shards' configuration
# and leases in an etcd on a host of its own. Mid-run the primary of each shard is killed with
# SIGKILL; the backups must take over once the leases expire and the trainers
# (`bx ps train --verify`: unit gradients on fixed keys, counted acks, final fetch) must find
# every acknowledged push applied exactly once. The cluster file names a secret file:
# a process whose cluster file lacks it gets nothing from any replica. It also names the
# replicas' own secret, which only the servers' copy of the file carries: replication, leases
# and failover run on it, while the trainers, without it, fetch and push as before.
#
# Usage: multihost_test.sh BX_BINARY. Exit 0: passed; 77: skipped (network namespaces are not
# allowed here: not root, or no CLONE_NEWNET); anything else: failed.
set -euo pipefail

BX=${1:?usage: multihost_test.sh path/to/bx}
[[ -x $BX ]] || { echo "FAIL: $BX is not executable"; exit 1; }
# shellcheck source=netns_cluster.sh
source "$(dirname "$0")/netns_cluster.sh"
netns_require_root

# Hosts 1..4: shard s replica r is host 2*s+r+1; hosts 5, 6: trainers; host 7: etcd.
netns_hosts 7
netns_start_etcd 7

CLUSTER="$WORK/cluster.json"
(umask 077 && head -c 32 /dev/urandom | base64 >"$WORK/cluster.secret" &&
  head -c 32 /dev/urandom | base64 >"$WORK/replica.secret")
cat >"$CLUSTER" <<JSON
{
  "version": 1,
  "transport": "tcp",
  "secret_file": "cluster.secret",
  "replica_secret_file": "replica.secret",
  "config_store": "$ETCD_URL",
  "tables": [
    {"id": 1, "name": "verify", "kind": "embedding", "dim": 8,
     "optimizer": {"kind": "sgd", "learning_rate": 1}}
  ],
  "shards": [
    {"replicas": [{"tcp": "tcp://10.77.1.2:7001"}, {"tcp": "tcp://10.77.2.2:7001"}]},
    {"replicas": [{"tcp": "tcp://10.77.3.2:7001"}, {"tcp": "tcp://10.77.4.2:7001"}]}
  ]
}
JSON
# The trainers' copy: the cluster secret only.
TRAINER_CLUSTER="$WORK/trainer.json"
grep -v replica_secret_file "$CLUSTER" >"$TRAINER_CLUSTER"

declare -A SERVER_PID
start_server() {  # shard replica
  spawn $((2 * $1 + $2 + 1)) "s$1r$2" "$BX" ps serve --cluster "$CLUSTER" --shard "$1" \
    --replica "$2" --lease-ms 2000 --probe-interval-ms 100
  SERVER_PID[$1.$2]=$SPAWNED
}

START=$SECONDS
for s in 0 1; do
  start_server "$s" 1
  start_server "$s" 0
done
for s in 0 1; do
  wait_for "$WORK/s${s}r0.log" "now primary of epoch 1" 30
  wait_for "$WORK/s${s}r1.log" "following replica 0, primary of epoch 1" 30
done
echo "cluster up after $((SECONDS - START)) s: 2 shards x 2 replicas, hosts 10.77.{1..4}.2"

TRAIN_SECONDS=7
declare -a TRAINERS
for t in 0 1; do
  host=$((5 + t))
  spawn "$host" "train$t" "$BX" ps train --cluster "$TRAINER_CLUSTER" --verify --threads 4 \
    --duration "$TRAIN_SECONDS" --verify-keys 32 --key-base $((t * 1000000)) \
    --push-timeout-ms 20000
  TRAINERS+=("$SPAWNED")
done

sleep 2
echo "SIGKILL primary of shard 0 (10.77.1.2)"
kill -KILL "${SERVER_PID[0.0]}"
wait "${SERVER_PID[0.0]}" 2>/dev/null || true
sleep 1.5
echo "SIGKILL primary of shard 1 (10.77.3.2)"
kill -KILL "${SERVER_PID[1.0]}"
wait "${SERVER_PID[1.0]}" 2>/dev/null || true

status=0
for t in 0 1; do
  wait "${TRAINERS[$t]}" || status=$?
done

# The checker itself must be able to fail: a second verifying trainer on trainer 0's keys finds
# them already holding trainer 0's pushes, i.e. more applied than it pushed ("doubled").
ip netns exec "${TAG}h5" "$BX" ps train --cluster "$TRAINER_CLUSTER" --verify --threads 1 --duration 0.3 \
  --verify-keys 32 --key-base 0 >"$WORK/selfcheck.out" 2>"$WORK/selfcheck.log" &&
  fail "the exactly-once check passed on keys that already held other pushes"
grep -q '"doubled":[1-9]' "$WORK/selfcheck.out" || fail "checker self-test: no doubled pushes reported"
echo "checker self-test: a second trainer on the same keys is rejected (doubled pushes detected)"

# A ranker with the cluster's addresses but not its secret: refused at connect, it gets no
# answer and stops at once with one line that says so, instead of running its
# duration to report zero answers.
grep -v replica_secret_file "$CLUSTER" |
  sed 's/"secret_file": "cluster.secret"/"insecure": true/' >"$WORK/stranger.json"
ip netns exec "${TAG}h6" "$BX" ps rank --cluster "$WORK/stranger.json" --threads 1 --duration 1 \
  --json >"$WORK/stranger.out" 2>"$WORK/stranger.log" &&
  fail "a client without the cluster's secret exited 0: $(cat "$WORK/stranger.out")"
grep -q '"requests"' "$WORK/stranger.out" &&
  fail "a client without the cluster's secret ran its workload: $(cat "$WORK/stranger.out")"
grep -q "authentication refused" "$WORK/stranger.log" ||
  fail "the stranger was not told it failed authentication: $(cat "$WORK/stranger.log")"
grep -q "peer failed authentication" "$WORK/s0r1.log" "$WORK/s1r1.log" ||
  fail "the replicas did not log the stranger's refused connections"
echo "a ranker without the cluster's secret got no answer: $(cat "$WORK/stranger.log")"

for s in 0 1; do
  grep -q "now primary of epoch 2" "$WORK/s${s}r1.log" ||
    fail "replica 1 of shard $s did not take over"
  kill -TERM "${SERVER_PID[$s.1]}"
  wait "${SERVER_PID[$s.1]}" || fail "replica 1 of shard $s exited with an error"
  pushes=$(sed -n 's/.*stopping: fetches [0-9]*, pushes \([0-9]*\) .*/\1/p' "$WORK/s${s}r1.log")
  [[ -n $pushes && $pushes -gt 0 ]] ||
    fail "replica 1 of shard $s acknowledged no pushes after taking over"
  forwards=$(sed -n 's/.*stopping: .*, forwards \([0-9]*\),.*/\1/p' "$WORK/s${s}r1.log")
  [[ -n $forwards && $forwards -gt 0 ]] ||
    fail "replica 1 of shard $s applied no forwards (the replica secret did not open ps.Forward)"
  echo "shard $s: replica 1 applied $forwards forwards, then was promoted to epoch 2 and" \
    "acknowledged $pushes pushes as primary"
done

for t in 0 1; do
  out="$WORK/train$t.log"
  grep -q '^{' "$out" || fail "trainer $t printed no result"
  echo "trainer $t: $(grep -m1 '^{' "$out")"
  read -r ok failed lost doubled acked failovers \
    <<<"$(fields_over "max:ok max:failed max:lost max:doubled max:acked max:push_failovers" "$out")"
  [[ $ok == True ]] || fail "trainer $t: a push was lost or applied twice"
  [[ $failed == 0 ]] || fail "trainer $t: pushes failed (workload did not continue)"
  [[ $lost == 0 && $doubled == 0 ]] || fail "trainer $t: lost/doubled"
  [[ $acked -gt 0 ]] || fail "trainer $t: nothing acknowledged"
  [[ $failovers -gt 0 ]] || fail "trainer $t: never failed over"
done
check_sanitizer_reports "$WORK/*.log"
((status == 0)) || fail "a trainer exited with status $status"
echo "PASS: multi-host failover, every acknowledged push applied exactly once ($((SECONDS - START)) s)"
