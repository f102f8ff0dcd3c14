# Shared by the multi-host tests (sourced, not run): hosts as network namespaces behind one
# router namespace, an etcd on one of them (or a three-member etcd on three), processes that die
# with the test, and the checks' small helpers. Host i is 10.77.i.2 on its own veth link to the
# router (10.77.i.1).
#
#   source netns_cluster.sh; netns_require_root; netns_hosts 9; netns_start_etcd 9
#   (or netns_hosts 12; netns_start_etcd3 10 11 12)
#
# Sets TAG, WORK, NAMESPACES, PIDS; the EXIT trap kills every process started through `spawn`,
# deletes the namespaces and prints the logs of a failed run (KEEP_WORK=1 keeps them all).

TAG="bx$(basename "$0" .sh | tr -dc 'a-z' | head -c 4)$$"
WORK=$(mktemp -d /tmp/bx-netns.XXXXXX)
NAMESPACES=()
PIDS=()

netns_cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do kill -CONT "$pid" 2>/dev/null || true; done  # paused ones too
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  [[ -n ${ETCD_DATA:-} ]] && rm -rf "$ETCD_DATA"
  [[ -n ${ETCD3_DATA:-} ]] && rm -rf "$ETCD3_DATA"
  if ((rc != 0)) && [[ -z ${KEEP_QUIET:-} ]]; then
    echo "---- logs ($WORK) ----"
    for f in "$WORK"/*.log; do
      [[ -e $f ]] || continue
      echo "== $(basename "$f")"
      tail -n 40 "$f"
    done
  fi
  if [[ -n ${KEEP_WORK:-} ]]; then echo "logs kept in $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap netns_cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "FAIL: $*"
  exit 1
}

# Exit 77 (ctest's skip) where namespaces cannot be made; a missing tool is a failure.
netns_require_root() {
  command -v ip >/dev/null 2>&1 || fail "'ip' (iproute2) is missing; tools/install-deps.sh installs it"
  local probe="${TAG}probe"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "SKIP: this machine does not allow network namespaces ('ip netns add' failed; needs root)"
    exit 77
  fi
  ip netns del "$probe"
}

ROUTER=""
netns_hosts() {  # count
  ROUTER="${TAG}r"
  ip netns add "$ROUTER"
  NAMESPACES+=("$ROUTER")
  ip -n "$ROUTER" link set lo up
  ip netns exec "$ROUTER" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'
  local i ns
  for ((i = 1; i <= $1; i++)); do
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
}

# Runs "$@" in host $1's namespace in the background, logging to $WORK/$2.log; sets SPAWNED.
spawn() {  # host name command...
  local host=$1 name=$2
  shift 2
  ip netns exec "${TAG}h$host" "$@" >"$WORK/$name.log" 2>&1 &
  SPAWNED=$!
  PIDS+=("$SPAWNED")
}

wait_for() {  # file pattern seconds
  local deadline=$((SECONDS + $3))
  until grep -q "$2" "$1" 2>/dev/null; do
    ((SECONDS < deadline)) || fail "timed out waiting for '$2' in $(basename "$1")"
    sleep 0.1
  done
}

# Over the first JSON object line of each file (trainers' results): for each "sum:FIELD" or
# "max:FIELD" of $1, that field's sum or maximum, space-separated. One interpreter for them all
# (an interpreter a field cost a chaos scenario ~15 s: pyenv's shim starts in 0.3-0.5 s).
fields_over() {  # "op:field ..." file...
  python3 - "$@" <<'PY'
import json, sys
runs = []
for path in sys.argv[2:]:
    with open(path) as f:
        runs.append(json.loads(next(line for line in f if line.startswith("{"))))
out = []
for spec in sys.argv[1].split():
    op, name = spec.split(":")
    values = [run[name] for run in runs]
    out.append(sum(values) if op == "sum" else max(values))
print(*out)
PY
}

# etcd on host $1 (client port 2379); data on tmpfs so that its fsyncs do not stall leases on a
# busy disk. Sets ETCD_HOST, ETCD_URL, ETCD_DATA and ETCD_PID.
netns_start_etcd() {
  command -v etcd >/dev/null 2>&1 || fail "etcd is missing; tools/install-deps.sh installs etcd-server"
  ETCD_HOST=$1
  ETCD_DATA=$(mktemp -d /dev/shm/bx-etcd.XXXXXX)
  ETCD_URL="http://10.77.$1.2:2379"
  spawn_etcd etcd
  wait_for_etcd
}

# Kills etcd (SIGKILL, no shutdown) and starts it again on the same data directory; returns
# once it has started (not once it is healthy: callers time what follows).
netns_restart_etcd() {
  kill -KILL "$ETCD_PID"
  { wait "$ETCD_PID"; } 2>/dev/null || true
  spawn_etcd etcd-again
}

spawn_etcd() {  # log-name
  local ip="10.77.$ETCD_HOST.2"
  spawn "$ETCD_HOST" "$1" etcd --name default --data-dir "$ETCD_DATA" \
    --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
    --listen-peer-urls "http://$ip:2380" --initial-advertise-peer-urls "http://$ip:2380" \
    --initial-cluster "default=http://$ip:2380"
  ETCD_PID=$SPAWNED
}

wait_for_etcd() {
  local deadline=$((SECONDS + 30))
  until etcdctl_in "$ETCD_HOST" endpoint health >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "etcd did not become healthy"
    sleep 0.2
  done
}

# A three-member etcd, member i on host ${ETCD3_HOST[i]} (data on tmpfs, as above).
# ETCD3_URL[i] is member i's client URL, ETCD3_URLS all three with commas (what `bx ps serve
# --etcd` and etcdctl take), ETCD3_PID[i] its process.
netns_start_etcd3() {  # host0 host1 host2
  command -v etcd >/dev/null 2>&1 || fail "etcd is missing; tools/install-deps.sh installs etcd-server"
  ETCD3_HOST=("$@")
  ETCD3_DATA=$(mktemp -d /dev/shm/bx-etcd3.XXXXXX)
  ETCD3_URLS="" ETCD3_INITIAL=""
  local i
  for i in 0 1 2; do
    ETCD3_URL[i]="http://10.77.${ETCD3_HOST[i]}.2:2379"
    ETCD3_URLS+="${ETCD3_URLS:+,}${ETCD3_URL[i]}"
    ETCD3_INITIAL+="${ETCD3_INITIAL:+,}e$i=http://10.77.${ETCD3_HOST[i]}.2:2380"
  done
  for i in 0 1 2; do etcd3_start_member "$i" new; done
  etcd3_wait_healthy 0 1 2
}

etcd3_start_member() {  # index new|existing — on its data directory, logging to etcd3-<i>.log
  local ip="10.77.${ETCD3_HOST[$1]}.2"
  ip netns exec "${TAG}h${ETCD3_HOST[$1]}" etcd --name "e$1" --data-dir "$ETCD3_DATA/e$1" \
    --listen-client-urls "${ETCD3_URL[$1]}" --advertise-client-urls "${ETCD3_URL[$1]}" \
    --listen-peer-urls "http://$ip:2380" --initial-advertise-peer-urls "http://$ip:2380" \
    --initial-cluster "$ETCD3_INITIAL" --initial-cluster-state "$2" \
    >>"$WORK/etcd3-$1.log" 2>&1 &
  ETCD3_PID[$1]=$!
  PIDS+=($!)
}

# Kills member i (SIGKILL, no shutdown) and waits for the process to be gone.
etcd3_kill() {  # index
  kill -KILL "${ETCD3_PID[$1]}"
  { wait "${ETCD3_PID[$1]}"; } 2>/dev/null || true
}

etcd3_restart() {  # index — killed or not, back on its data directory
  kill -0 "${ETCD3_PID[$1]}" 2>/dev/null && etcd3_kill "$1"
  etcd3_start_member "$1" existing
}

etcd3_pause() { kill -STOP "${ETCD3_PID[$1]}"; }
etcd3_resume() { kill -CONT "${ETCD3_PID[$1]}"; }

# etcdctl from the router namespace, which reaches every member even while one is cut off from
# the others (partitions are routes on the hosts).
etcd3ctl() {  # args...
  ETCDCTL_API=3 ip netns exec "$ROUTER" etcdctl --dial-timeout 1s --command-timeout 3s "$@"
}

# Until each given member answers a health check (a linearizable read: it has a leader).
etcd3_wait_healthy() {  # index...
  local i deadline=$((SECONDS + 30))
  for i in "$@"; do
    until etcd3ctl --endpoints "${ETCD3_URL[i]}" endpoint health >/dev/null 2>&1; do
      ((SECONDS < deadline)) || fail "etcd member $i did not become healthy"
      sleep 0.2
    done
  done
}

# "LEADER TERM IDS": the index of the leader of the highest term among the members that answer
# (-1 when none names itself), that term, and the members' ids in hex, comma-separated (- for
# one that does not answer). etcdctl fails when a member is down but prints the others.
etcd3_status() {
  local status
  status=$(etcd3ctl --endpoints "$ETCD3_URLS" endpoint status -w json 2>/dev/null || true)
  python3 -c '
import json, sys
urls = sys.argv[1].split(",")
try:
    statuses = json.loads(sys.argv[2])
except ValueError:
    statuses = []
leader, term, ids = -1, 0, ["-"] * len(urls)
for status in statuses:  # proto3 JSON leaves out zeros: no "leader" while there is none
    s, i = status["Status"], urls.index(status["Endpoint"])
    me, its_term = s["header"]["member_id"], s.get("raftTerm", 0)
    ids[i] = format(me, "x")
    if s.get("leader") == me and its_term >= term:
        leader, term = i, its_term
    term = max(term, its_term)
print(leader, term, ",".join(ids))' "$ETCD3_URLS" "$status"
}

# Waits until a leader other than `not` (-1: any) is elected; sets ETCD3_LEADER, ETCD3_TERM.
etcd3_wait_leader() {  # not seconds
  local deadline=$((SECONDS + $2)) ids
  while :; do
    read -r ETCD3_LEADER ETCD3_TERM ids < <(etcd3_status)
    ((ETCD3_LEADER >= 0 && ETCD3_LEADER != $1)) && return 0
    ((SECONDS < deadline)) || fail "etcd elected no leader (but member $1) within $2 s"
    sleep 0.2
  done
}

# Makes member i the leader (etcdctl move-leader, sent to the current leader).
etcd3_move_leader() {  # index
  local leader term ids
  read -r leader term ids < <(etcd3_status)
  ((leader >= 0)) || fail "etcd has no leader to hand over from"
  if ((leader != $1)); then
    IFS=, read -ra ids <<<"$ids"
    etcd3ctl --endpoints "${ETCD3_URL[leader]}" move-leader "${ids[$1]}" >/dev/null ||
      fail "etcd move-leader to member $1 failed"
  fi
  local deadline=$((SECONDS + 10))
  until read -r leader term ids < <(etcd3_status) && ((leader == $1)); do
    ((SECONDS < deadline)) || fail "etcd member $1 did not become leader"
    sleep 0.2
  done
}

etcdctl_in() {  # host args...
  local host=$1
  shift
  ETCDCTL_API=3 ip netns exec "${TAG}h$host" etcdctl --endpoints "$ETCD_URL" \
    --dial-timeout 2s --command-timeout 5s "$@"
}

# Processes killed by the test never exit, so a sanitizer's report would go unnoticed: fail on
# one in any log matching the glob.
check_sanitizer_reports() {  # glob
  local reports
  reports=$(grep -lE "WARNING: ThreadSanitizer|ERROR: AddressSanitizer|runtime error:" $1 2>/dev/null || true)
  [[ -z $reports ]] || fail "sanitizer reports in: $reports"
}
