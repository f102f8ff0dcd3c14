#!/usr/bin/env bash
# A rolling restart of a whole parameter-server cluster under load, from outside, as an operator
# does it (docs/DEPLOYING.md section 6): 2 shards x 3 `bx ps serve` replicas with 2 s leases in
# etcd, on loopback, and two verifying trainers. Shard by shard, each backup is stopped
# (SIGTERM), started again and waited for until it is back in the set; then the primary is
# stopped (SIGTERM: it hands its shard over) and started again. Then the trainers are replaced
# by new ones. With --old-bx OLD the cluster and the first trainers run OLD (an earlier build)
# and every restart starts BX: an upgrade, one process at a time (`make test-upgrade` builds
# OLD from UPGRADE_FROM).
#
# With --old-bx, once shard 0 is upgraded one of its backups is rolled back to OLD and forward
# again (an operator backing out one host): the OLD replica catches up from a BX primary, which
# writes it a snapshot in the format version OLD reads (ps.Join; docs/DEPLOYING.md "Upgrades").
#
# Checks: 0 acknowledged pushes lost or doubled (every trainer), no request refused for a
# version reason (no "version" in any log, but for the one line a version 1 tcp:// peer logs
# when it drops a version 2 Hello, after which the connecting side offers version 1: counted
# as "tcp offers dropped"), every replica back in the set at the end, and every shard still
# taking pushes.
#
#   rolling_restart.sh BX [--old-bx OLD] [--transport tcp|rdma]
#
# Exits 1 on a failed check, 77 when etcd is missing.
set -euo pipefail

BX=$(realpath "$1")
shift
OLD=$BX
TRANSPORT=tcp
while (($#)); do
  case $1 in
    --old-bx) OLD=$(realpath "$2"); shift 2 ;;
    --transport) TRANSPORT=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/loopback_cluster.sh"
LEASE_MS=2000

# Two shards of three replicas: twelve more loopback ports.
read -r -a CLUSTER_PORTS < <(python3 "$FREE_PORTS" 12)
(umask 077 && head -c 32 /dev/urandom | base64 >"$WORK/cluster.secret")
python3 - "$WORK/cluster.json" "$TRANSPORT" "${CLUSTER_PORTS[@]}" <<'PY'
import json, sys
path, transport, *ports = sys.argv[1:]
shards = [{"replicas": [{"rdma": f"rdma://127.0.0.1:{ports[6 * s + 2 * r]}",
                         "tcp": f"tcp://127.0.0.1:{ports[6 * s + 2 * r + 1]}"} for r in range(3)]}
          for s in range(2)]
json.dump({"version": 1, "transport": transport, "secret_file": "cluster.secret",
           "tables": [{"id": 1, "name": "verify", "kind": "embedding", "dim": 8,
                       "optimizer": {"kind": "sgd", "learning_rate": 1}}],
           "shards": shards}, open(path, "w"), indent=1)
PY

loopback_start_etcd
declare -A REPLICA_PID REPLICA_LOG
start_replica() {  # binary shard replica
  local log="$WORK/s$2r$3.$(date +%s%N).log"
  "$1" ps serve --cluster "$WORK/cluster.json" --shard "$2" --replica "$3" --etcd "$ETCD_URL" \
    --lease-ms "$LEASE_MS" --probe-interval-ms 100 >"$log" 2>&1 &
  PIDS+=($!)
  REPLICA_PID[$2.$3]=$!
  REPLICA_LOG[$2.$3]=$log
}
stop_replica() {  # shard replica
  kill -TERM "${REPLICA_PID[$1.$2]}"
  wait "${REPLICA_PID[$1.$2]}" 2>/dev/null || true
}
# The roles as the replicas report them: "shard replica role" lines.
roles() {
  "$BX" ps stat --cluster "$WORK/cluster.json" --interval 0 --json 2>/dev/null |
    python3 -c '
import json, sys
for r in json.load(sys.stdin):
    print(r["shard"], r["replica"], r.get("role", "none"))' || true
}
primary_of() {  # shard
  roles | awk -v s="$1" '$1 == s && $3 == "primary" { print $2 }'
}
# A restarted replica is back once its log says it joined the set (or it was made primary).
wait_back() {  # shard replica
  wait_for_line "${REPLICA_LOG[$1.$2]}" "joined the set of epoch\|now primary of epoch" 90 ||
    { echo "FAIL: shard $1 replica $2 did not come back" >&2; exit 1; }
}

for s in 0 1; do for r in 0 1 2; do start_replica "$OLD" $s $r; done; done
for s in 0 1; do
  wait_for_line "${REPLICA_LOG[$s.0]}" "primary of epoch" 60 || { echo "no primary" >&2; exit 1; }
done

TRAINERS=()
start_trainers() {  # binary generation seconds
  for t in 0 1; do
    "$1" ps train --cluster "$WORK/cluster.json" --verify --threads 2 --duration "$3" \
      --key-base $(($2 * 10000000 + t * 1000000)) --push-timeout-ms 20000 \
      >"$WORK/trainer$2.$t.json" 2>"$WORK/trainer$2.$t.log" &
    PIDS+=($!)
    TRAINERS+=($!)
  done
}
start_trainers "$OLD" 0 600
sleep 2
for s in 0 1; do
  primary=$(primary_of $s)
  [[ -n $primary ]] || { echo "FAIL: shard $s has no primary" >&2; exit 1; }
  for r in 0 1 2; do
    ((r == primary)) && continue
    stop_replica $s $r
    start_replica "$BX" $s $r
    wait_back $s $r
    echo "shard $s backup $r restarted and back in the set"
  done
  stop_replica $s "$primary"
  start_replica "$BX" $s "$primary"
  wait_back $s "$primary"
  echo "shard $s primary $primary stopped (SIGTERM), restarted and back in the set"
  if [[ $OLD != "$BX" && $s == 0 ]]; then
    new_primary=$(primary_of 0)
    backup=$(( (new_primary + 1) % 3 ))
    stop_replica 0 $backup
    start_replica "$OLD" 0 $backup
    wait_back 0 $backup
    grep -q "snapshot for replica $backup .* in format 2" "${REPLICA_LOG[0.$new_primary]}" ||
      { echo "FAIL: the rolled-back replica got no version 2 snapshot" >&2; exit 1; }
    stop_replica 0 $backup
    start_replica "$BX" 0 $backup
    wait_back 0 $backup
    echo "shard 0 backup $backup rolled back to the old build, caught up, and forward again"
  fi
done
# The trainers last: the old ones end (SIGTERM: they check what they pushed), new ones run.
kill -TERM "${TRAINERS[@]}"
for t in "${TRAINERS[@]}"; do wait "$t" || true; done
TRAINERS=()
start_trainers "$BX" 1 5
for t in "${TRAINERS[@]}"; do wait "$t" || true; done

read -r lost doubled acked longest_ms < <(python3 - "$WORK"/trainer*.json <<'PY'
import json, sys
runs = [json.load(open(p)) for p in sys.argv[1:]]
print(sum(r["lost"] for r in runs), sum(r["doubled"] for r in runs),
      sum(r["acked"] for r in runs), max(r["longest_stall_ms"] for r in runs))
PY
)
probe="tcp handshake: peer speaks version 2, this build speaks 1"
offers_dropped=$(cat "$WORK"/s*.log "$WORK"/trainer*.log | grep -c "$probe" || true)
version_refusals=$(cat "$WORK"/s*.log "$WORK"/trainer*.log | grep -v "$probe" |
  grep -ci "version" || true)
# Members of each shard's committed set, as etcd holds it.
in_set=0
for s in 0 1; do
  n=$(etcdctl --endpoints "$ETCD_URL" get --print-value-only "/bexpress/ps/shard/$s/config" |
    python3 -c 'import json, sys; print(len(json.load(sys.stdin)["members"]))')
  in_set=$((in_set + n))
done
echo "rolling_restart: transport=$TRANSPORT from $( [[ $OLD == "$BX" ]] && echo "the same build" || echo "$OLD"); acked $acked," \
  "lost $lost, doubled $doubled, longest push $longest_ms ms; version refusals $version_refusals" \
  "(tcp offers dropped $offers_dropped);" \
  "replicas in the sets at the end $in_set of 6"
fail=0
((lost == 0 && doubled == 0)) || { echo "FAIL: $lost lost, $doubled doubled" >&2; fail=1; }
((acked > 0)) || { echo "FAIL: no push acknowledged" >&2; fail=1; }
((version_refusals == 0)) || { echo "FAIL: a version refusal" >&2; fail=1; }
((in_set == 6)) || { echo "FAIL: $in_set of 6 replicas in the sets at the end" >&2; fail=1; }
exit $fail
