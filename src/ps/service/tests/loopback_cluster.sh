# One shard of three `bx ps serve` replicas with leases in etcd, on loopback, for the scripts
# that run the parameter server from outside (catch_up_load.sh, large_push_failover.sh).
#
#   BX=... TRANSPORT=tcp|rdma; source loopback_cluster.sh
#   loopback_start_etcd; loopback_cluster_file DENSE_ROWS DENSE_LR; loopback_start_server R SUFFIX
#
# Sets WORK (removed at exit, its logs printed first when the script failed), PIDS (killed at
# exit), ETCD_URL, SERVER[r] (pid of replica r), DIM (the dense table's), and exports the simnic
# fabric directory so that rdma:// works between the processes.

WORK=$(mktemp -d /tmp/bx-loopback.XXXXXX)
PIDS=()
declare -A SERVER
DIM=256

loopback_cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if ((rc != 0 && rc != 77)); then
    for f in "$WORK"/*.log; do
      echo "== $(basename "$f")"
      grep -v "^raft\|^20[0-9][0-9]-" "$f" | tail -n 25
    done
  fi
  rm -rf "$WORK"
}
trap loopback_cleanup EXIT

command -v etcd >/dev/null || { echo "etcd is missing (tools/install-deps.sh)" >&2; exit 77; }

# Free loopback ports: etcd's two and two per replica (rdma:// listens on a TCP port too).
# free_ports.py takes them from below the ephemeral range (why: its comment).
FREE_PORTS="$(dirname "${BASH_SOURCE[0]}")/free_ports.py"
read -r -a PORTS < <(python3 "$FREE_PORTS" 8)

export BX_SIM_FABRIC_DIR="$WORK/fabric" BX_VERBS=sim
mkdir -p "$BX_SIM_FABRIC_DIR"

loopback_start_etcd() {
  ETCD_URL="http://127.0.0.1:${PORTS[0]}"
  etcd --name default --data-dir "$WORK/etcd" --listen-client-urls "$ETCD_URL" \
    --advertise-client-urls "$ETCD_URL" --listen-peer-urls "http://127.0.0.1:${PORTS[1]}" \
    --initial-advertise-peer-urls "http://127.0.0.1:${PORTS[1]}" \
    --initial-cluster "default=http://127.0.0.1:${PORTS[1]}" >"$WORK/etcd.log" 2>&1 &
  PIDS+=($!)
  until etcdctl --endpoints "$ETCD_URL" endpoint health >/dev/null 2>&1; do sleep 0.2; done
}

# A three-member etcd cluster on loopback: ETCD_MEMBER_URL[i] each member's client URL,
# ETCD_URLS all of them with commas (what --etcd and etcdctl --endpoints take), ETCD_PID[i].
loopback_start_etcd3() {
  read -r -a ETCD_PORTS < <(python3 "$FREE_PORTS" 6)
  local initial="" i
  ETCD_URLS=""
  for i in 0 1 2; do
    ETCD_MEMBER_URL[i]="http://127.0.0.1:${ETCD_PORTS[2 * i]}"
    ETCD_PEER_URL[i]="http://127.0.0.1:${ETCD_PORTS[2 * i + 1]}"
    initial+="${initial:+,}e$i=${ETCD_PEER_URL[i]}"
    ETCD_URLS+="${ETCD_URLS:+,}${ETCD_MEMBER_URL[i]}"
  done
  ETCD_INITIAL_CLUSTER=$initial
  for i in 0 1 2; do loopback_start_etcd_member "$i" new; done
  until etcdctl --endpoints "$ETCD_URLS" endpoint health >/dev/null 2>&1; do sleep 0.2; done
}

loopback_start_etcd_member() {  # index new|existing
  etcd --name "e$1" --data-dir "$WORK/etcd$1" --listen-client-urls "${ETCD_MEMBER_URL[$1]}" \
    --advertise-client-urls "${ETCD_MEMBER_URL[$1]}" --listen-peer-urls "${ETCD_PEER_URL[$1]}" \
    --initial-advertise-peer-urls "${ETCD_PEER_URL[$1]}" \
    --initial-cluster "$ETCD_INITIAL_CLUSTER" --initial-cluster-state "$2" \
    >>"$WORK/etcd$1.log" 2>&1 &
  PIDS+=($!)
  ETCD_PID[$1]=$!
}

# The index of the etcd leader among the members that answer (-1 when none does). etcdctl
# fails when any member is down, but still prints the others' status.
loopback_etcd_leader() {
  local status
  status=$(etcdctl --endpoints "$ETCD_URLS" endpoint status -w json 2>/dev/null || true)
  python3 -c '
import json, sys
urls = sys.argv[1].split(",")
try:
    statuses = json.loads(sys.argv[2])
except ValueError:
    statuses = []
for status in statuses:
    s = status["Status"]
    if s["leader"] == s["header"]["member_id"]:
        print(urls.index(status["Endpoint"])); break
else:
    print(-1)' "$ETCD_URLS" "$status"
}

# The cluster file: table 1 for `bx ps train --verify` (SGD lr 1), table 2 dense, DIM wide.
loopback_cluster_file() {  # dense-rows dense-learning-rate
  (umask 077 && head -c 32 /dev/urandom | base64 >"$WORK/cluster.secret")
  python3 - "$WORK/cluster.json" "$TRANSPORT" "$1" "$DIM" "$2" "${PORTS[@]:2}" <<'PY'
import json, sys
path, transport, rows, dim, lr, *ports = sys.argv[1:]
replicas = [{"rdma": f"rdma://127.0.0.1:{ports[2 * r]}", "tcp": f"tcp://127.0.0.1:{ports[2 * r + 1]}"}
            for r in range(3)]
json.dump({"version": 1, "transport": transport, "secret_file": "cluster.secret",
           "tables": [{"id": 1, "name": "verify", "kind": "embedding", "dim": 8,
                       "optimizer": {"kind": "sgd", "learning_rate": 1}},
                      {"id": 2, "name": "dense", "kind": "dense", "dim": int(dim),
                       "rows": int(rows), "optimizer": {"kind": "sgd", "learning_rate": float(lr)}}],
           "shards": [{"replicas": replicas}]}, open(path, "w"), indent=1)
PY
}

loopback_start_server() {  # replica log-suffix
  "$BX" ps serve --cluster "$WORK/cluster.json" --shard 0 --replica "$1" \
    --etcd "${SERVER_ETCD:-$ETCD_URL}" --lease-ms "${LEASE_MS:-2000}" --probe-interval-ms 100 \
    >"$WORK/r$1$2.log" 2>&1 &
  PIDS+=($!)
  SERVER[$1]=$!
}

wait_for_line() {  # file pattern timeout-seconds
  local deadline=$((SECONDS + $3))
  until grep -q "$2" "$1" 2>/dev/null; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

now_ms() { date +%s%3N; }

# Python with the built module (the Python client pushes what `bx ps train` cannot).
loopback_python() {
  PYTHONPATH="${BX_PYTHON_DIR:-$(dirname "$BX")/../python}" \
    /usr/bin/python3 "$@"
}

# Two verifying trainers (bx ps train --verify) for `seconds`; their pids in TRAINERS.
loopback_start_trainers() {  # seconds
  TRAINERS=()
  for t in 0 1; do
    "$BX" ps train --cluster "$WORK/cluster.json" --verify --threads 2 --duration "$1" \
      --key-base $((t * 1000000)) --push-timeout-ms 20000 >"$WORK/trainer$t.json" \
      2>"$WORK/trainer$t.log" &
    PIDS+=($!)
    TRAINERS+=($!)
  done
}

# Ends the trainers' pushes before their --duration (SIGTERM: each finishes the push in flight,
# then fetches and checks as at the end of its run); loopback_wait_trainers still waits for them.
loopback_stop_trainers() {
  kill -TERM "${TRAINERS[@]}" 2>/dev/null || true
}

# Waits for the trainers (in this shell: they are its children).
loopback_wait_trainers() {
  for t in "${TRAINERS[@]}"; do wait "$t" || true; done
}

# After loopback_wait_trainers: "lost doubled acked p99_ms longest_stall_ms" over both.
loopback_trainer_results() {
  python3 - "$WORK"/trainer*.json <<'PY'
import json, sys
runs = [json.load(open(p)) for p in sys.argv[1:]]
print(sum(r["lost"] for r in runs), sum(r["doubled"] for r in runs), sum(r["acked"] for r in runs),
      max(r["push_p99_ms"] for r in runs), max(r["longest_stall_ms"] for r in runs))
PY
}
