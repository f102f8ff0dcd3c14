#!/usr/bin/env bash
# Multi-host failover test (issue 8, docs/PS.md "Automatic failover"): a parameter-server
# cluster of 2 shards x 2 replicas and 2 trainers, each process in its own network namespace,
# over TCP through a router namespace (one veth link per host). Mid-run the primary of each
# shard is killed with SIGKILL; the backups must take over and the trainers
# (`bx ps train --verify`: unit gradients on fixed keys, counted acks, final fetch) must find
# every acknowledged push applied exactly once. The cluster file names a secret file (issue 19):
# a process whose cluster file lacks it gets nothing from any replica.
#
# Usage: multihost_test.sh BX_BINARY. Exit 0: passed; 77: skipped (network namespaces are not
# allowed here: not root, or no CLONE_NEWNET); anything else: failed.
set -euo pipefail

BX=${1:?usage: multihost_test.sh path/to/bx}
[[ -x $BX ]] || { echo "FAIL: $BX is not executable"; exit 1; }
if ! command -v ip >/dev/null 2>&1; then
  echo "FAIL: 'ip' (iproute2) is missing; tools/install-deps.sh installs it"
  exit 1
fi

TAG="bxmh$$"
probe="${TAG}probe"
if ! ip netns add "$probe" 2>/dev/null; then
  echo "SKIP: this machine does not allow network namespaces ('ip netns add' failed; needs root)"
  exit 77
fi
ip netns del "$probe"

WORK=$(mktemp -d /tmp/bx-multihost.XXXXXX)
NAMESPACES=()
PIDS=()
cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  if ((rc != 0)); then
    echo "---- logs ($WORK) ----"
    for f in "$WORK"/*.log; do
      echo "== $(basename "$f")"
      tail -n 40 "$f"
    done
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "FAIL: $*"
  exit 1
}

# Hosts 1..4: shard s replica r is host 2*s+r+1; hosts 5, 6: trainers. Host i is 10.77.i.2,
# linked to the router (10.77.i.1), which forwards between the links.
ROUTER="${TAG}r"
ip netns add "$ROUTER"
NAMESPACES+=("$ROUTER")
ip -n "$ROUTER" link set lo up
ip netns exec "$ROUTER" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'
for i in 1 2 3 4 5 6; do
  ns="${TAG}h$i"
  ip netns add "$ns"
  NAMESPACES+=("$ns")
  ip link add eth0 netns "$ns" type veth peer name "h$i" netns "$ROUTER"
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "10.77.$i.2/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route add default via "10.77.$i.1"
  ip -n "$ROUTER" addr add "10.77.$i.1/24" dev "h$i"
  ip -n "$ROUTER" link set "h$i" up
done

CLUSTER="$WORK/cluster.json"
(umask 077 && head -c 32 /dev/urandom | base64 >"$WORK/cluster.secret")
cat >"$CLUSTER" <<JSON
{
  "version": 1,
  "transport": "tcp",
  "secret_file": "cluster.secret",
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

declare -A SERVER_PID
start_server() {  # shard replica
  local host=$((2 * $1 + $2 + 1))
  ip netns exec "${TAG}h$host" "$BX" ps serve --cluster "$CLUSTER" --shard "$1" --replica "$2" \
    --failover-timeout-ms 1000 --probe-interval-ms 100 >"$WORK/s$1r$2.log" 2>&1 &
  PIDS+=($!)
  SERVER_PID[$1.$2]=$!
}

wait_for() {  # file pattern seconds
  local deadline=$((SECONDS + $3))
  until grep -q "$2" "$1" 2>/dev/null; do
    ((SECONDS < deadline)) || fail "timed out waiting for '$2' in $(basename "$1")"
    sleep 0.1
  done
}

START=$SECONDS
for s in 0 1; do
  start_server "$s" 1
  start_server "$s" 0
done
for s in 0 1; do
  wait_for "$WORK/s${s}r0.log" "primary of epoch 1" 15
  wait_for "$WORK/s${s}r1.log" "is primary of epoch 1; watching it" 15
done
echo "cluster up after $((SECONDS - START)) s: 2 shards x 2 replicas, hosts 10.77.{1..4}.2"

TRAIN_SECONDS=7
declare -a TRAINERS
for t in 0 1; do
  host=$((5 + t))
  ip netns exec "${TAG}h$host" "$BX" ps train --cluster "$CLUSTER" --verify --threads 4 \
    --duration "$TRAIN_SECONDS" --verify-keys 32 --key-base $((t * 1000000)) \
    --push-timeout-ms 10000 >"$WORK/train$t.out" 2>"$WORK/train$t.log" &
  PIDS+=($!)
  TRAINERS+=($!)
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
ip netns exec "${TAG}h5" "$BX" ps train --cluster "$CLUSTER" --verify --threads 1 --duration 0.3 \
  --verify-keys 32 --key-base 0 >"$WORK/selfcheck.out" 2>"$WORK/selfcheck.log" &&
  fail "the exactly-once check passed on keys that already held other pushes"
grep -q '"doubled":[1-9]' "$WORK/selfcheck.out" || fail "checker self-test: no doubled pushes reported"
echo "checker self-test: a second trainer on the same keys is rejected (doubled pushes detected)"

# A ranker with the cluster's addresses but not its secret: every call fails.
grep -v secret_file "$CLUSTER" >"$WORK/stranger.json"
ip netns exec "${TAG}h6" "$BX" ps rank --cluster "$WORK/stranger.json" --threads 1 --duration 1 \
  --json >"$WORK/stranger.out" 2>"$WORK/stranger.log" || true
grep -Eq '"requests": *0[^0-9.]' "$WORK/stranger.out" ||
  fail "a client without the cluster's secret got answers: $(cat "$WORK/stranger.out")"
grep -q "peer failed authentication" "$WORK/s0r1.log" "$WORK/s1r1.log" ||
  fail "the replicas did not log the stranger's refused connections"
echo "a ranker without the cluster's secret got no answer (refused at connect)"

for s in 0 1; do
  grep -q "promoted to primary of epoch 2" "$WORK/s${s}r1.log" ||
    fail "replica 1 of shard $s did not take over"
  kill -TERM "${SERVER_PID[$s.1]}"
  wait "${SERVER_PID[$s.1]}" || fail "replica 1 of shard $s exited with an error"
  pushes=$(sed -n 's/.*stopping: fetches [0-9]*, pushes \([0-9]*\) .*/\1/p' "$WORK/s${s}r1.log")
  [[ -n $pushes && $pushes -gt 0 ]] ||
    fail "replica 1 of shard $s acknowledged no pushes after taking over"
  echo "shard $s: replica 1 promoted to epoch 2 and acknowledged $pushes pushes as primary"
done

field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$1"; }
for t in 0 1; do
  out="$WORK/train$t.out"
  [[ -s $out ]] || fail "trainer $t printed no result"
  echo "trainer $t: $(cat "$out")"
  [[ $(field "$out" ok) == true ]] || fail "trainer $t: a push was lost or applied twice"
  [[ $(field "$out" failed) == 0 ]] || fail "trainer $t: pushes failed (workload did not continue)"
  [[ $(field "$out" lost) == 0 && $(field "$out" doubled) == 0 ]] || fail "trainer $t: lost/doubled"
  [[ $(field "$out" acked) -gt 0 ]] || fail "trainer $t: nothing acknowledged"
  [[ $(field "$out" push_failovers) -gt 0 ]] || fail "trainer $t: never failed over"
done
((status == 0)) || fail "a trainer exited with status $status"
echo "PASS: multi-host failover, every acknowledged push applied exactly once ($((SECONDS - START)) s)"
