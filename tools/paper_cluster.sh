#!/usr/bin/env bash
# A paper-shaped parameter-server cluster on one host: etcd, SERVERS shards x
# REPLICAS `bx ps serve` processes and WORKERS worker processes (`bx ps rank` and `bx ps train`,
# half each by default), every worker with a key on every shard, over rdma:// (the simnic's
# inter-process fabric) and then over tcp://, each transport on a fresh cluster.
#
#   paper_cluster.sh BX [--servers 16] [--replicas 2] [--workers 16] [--rankers N]
#                       [--threads 1] [--seconds 20] [--transport rdma|tcp|both]
#                       [--heartbeat-timeout-ms 5000] [--stagger-ms 0] [--json]
#
# Reports per transport: requests/s (sum over workers), fetch and push P50/P99 (the worst
# worker's: the workers report percentiles, not histograms, so no merge is possible), host CPU
# per request (all bx processes' CPU over the run / requests), I/O threads per process, RC QPs
# per process against the peers it has, and the time to connect everything (first server
# started -> every worker has had a fetch answered by every shard). Exits 1 when a transport
# produced no figures or the cluster did not come up, 77 without etcd; a worker that saw errors
# (it exits 1) is counted in worker_failures, and its figures are kept.
set -euo pipefail

BX=$(realpath "$1")
shift
SERVERS=16
REPLICAS=2
WORKERS=16
RANKERS=-1 # -1: half the workers
THREADS=1
RUN_SECONDS=20
TRANSPORTS=both
# A connection silent this long is dead to a worker. The RPC client's default, 500 ms, is for a
# host with a core to spare: ~50 processes on 2 cores leave a process unscheduled for longer,
# and at 500 ms the workers' connections flapped (down, reconnect) all through the run.
HEARTBEAT_TIMEOUT_MS=5000
# Between two workers' starts (0: all at once; their clocks start together either way, once all
# are connected). All at once, 16 workers open ~1,000 connections together, which on a busy
# 2-core host starved etcd until leases were lost (CLUSTER_STAGGER_MS in the Makefile).
export STAGGER_MS=0
JSON=0
while (($#)); do
  case $1 in
    --servers) SERVERS=$2; shift 2 ;;
    --replicas) REPLICAS=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --rankers) RANKERS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --seconds) RUN_SECONDS=$2; shift 2 ;;
    --transport) TRANSPORTS=$2; shift 2 ;;
    --heartbeat-timeout-ms) HEARTBEAT_TIMEOUT_MS=$2; shift 2 ;;
    --stagger-ms) STAGGER_MS=$2; shift 2 ;;
    --json) JSON=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
((RANKERS >= 0)) || RANKERS=$((WORKERS / 2))
case $TRANSPORTS in
  both) TRANSPORTS="rdma tcp" ;;
  rdma | tcp) ;;
  *) echo "--transport rdma|tcp|both" >&2; exit 2 ;;
esac
command -v etcd >/dev/null || { echo "etcd is missing (tools/install-deps.sh)" >&2; exit 77; }

WORK=$(mktemp -d /tmp/bx-paper-cluster.XXXXXX)
PIDS=()
cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if ((rc != 0 && rc != 77)); then
    for f in "$WORK"/*/*.log; do
      [[ -e $f ]] || continue
      echo "== $f" >&2
      grep -v "^raft\|^20[0-9][0-9]-" "$f" | tr '\r' '\n' | tail -n 8 >&2
    done
  fi
  # PAPER_CLUSTER_KEEP=1 keeps the logs and samples (to look into a run).
  if [[ ${PAPER_CLUSTER_KEEP:-0} == 1 ]]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# The simnic's inter-process fabric (rdma:// between processes); every rdma transport of a
# process on one set of I/O threads, as they share one NIC (`bx ps` asks for that already).
export BX_SIM_FABRIC_DIR="$WORK/fabric" BX_VERBS=sim BX_SHARE_IO_THREADS=1
mkdir -p "$BX_SIM_FABRIC_DIR"
# I/O threads a process may have, by transport and role: TransportOptions::io_threads (1) per
# set. Over rdma every transport of a process shares one set. tcp has no sharing: a server has
# its listener's and its clients' (replication, failover; `bx ps serve` gives them one), a worker
# one transport for all its shards.
io_threads_limit() { # transport role
  if [[ $1 == tcp && $2 == server ]]; then echo 2; else echo 1; fi
}

now_ms() { date +%s%3N; }

wait_for_line() { # file pattern timeout-seconds
  local deadline=$((SECONDS + $3))
  until grep -q "$2" "$1" 2>/dev/null; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

# Free loopback ports below the kernel's ephemeral range: ports taken from inside it and let go
# were handed out again before their owner listened (a server's /metrics on port 0 got another
# replica's rdma:// port at 16x2, and thousands of outgoing connections draw from it too).
free_ports() { # count
  python3 - "$1" <<'PY'
import random, socket, sys
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
count, ports = int(sys.argv[1]), []
port = random.randrange(10000, max(10001, low - 4 * count))
while len(ports) < count and port < low:
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        ports.append(port)
    except OSError:
        pass
    finally:
        s.close()
    port += 1
if len(ports) < count:
    sys.exit("not enough free ports below the ephemeral range")
print(" ".join(map(str, ports)))
PY
}

# One transport's run in $WORK/$1: fresh etcd and servers, the workers, and the figures in
# $WORK/$1/result.json.
run_transport() { # transport
  local transport=$1 dir="$WORK/$1"
  mkdir -p "$dir"
  local -a ports
  # etcd's two, two per replica (rdma:// listens on a TCP port too), then one /metrics each for
  # the replicas and the workers.
  read -r -a ports < <(free_ports $((2 + 3 * SERVERS * REPLICAS + WORKERS)))
  local metrics_base=$((2 + 2 * SERVERS * REPLICAS))
  local etcd_url="http://127.0.0.1:${ports[0]}"
  etcd --name default --data-dir "$dir/etcd" --listen-client-urls "$etcd_url" \
    --advertise-client-urls "$etcd_url" --listen-peer-urls "http://127.0.0.1:${ports[1]}" \
    --initial-advertise-peer-urls "http://127.0.0.1:${ports[1]}" \
    --initial-cluster "default=http://127.0.0.1:${ports[1]}" >"$dir/etcd.log" 2>&1 &
  local etcd_pid=$!
  PIDS+=("$etcd_pid")
  until etcdctl --endpoints "$etcd_url" endpoint health >/dev/null 2>&1; do sleep 0.2; done

  # Small tables: one embedding table (id 1, dim 64, the `bx demo` workloads' shape); rows exist
  # only once pushed, so a server holds what the trainers pushed to its shard (a few MiB).
  (umask 077 && head -c 32 /dev/urandom | base64 >"$dir/cluster.secret")
  python3 - "$dir/cluster.json" "$transport" "$SERVERS" "$REPLICAS" \
    "${ports[@]:2:$((2 * SERVERS * REPLICAS))}" <<'PY'
import json, sys
path, transport, shards, replicas, *ports = sys.argv[1:]
shards, replicas = int(shards), int(replicas)
# Only this run's transport's address: replication (forwards to backups, pings) then goes over
# it too, and nothing falls back to the other one unseen.
def replica(s, r):
    i = 2 * (s * replicas + r)
    return {transport: f"{transport}://127.0.0.1:{ports[i if transport == 'rdma' else i + 1]}"}
json.dump({"version": 1, "transport": transport, "secret_file": "cluster.secret",
           "tables": [{"id": 1, "name": "embedding", "kind": "embedding", "dim": 64,
                       "init": {"kind": "normal", "mean": 0, "stddev": 0.01, "seed": 7},
                       "optimizer": {"kind": "adagrad", "learning_rate": 0.05}}],
           "shards": [{"replicas": [replica(s, r) for r in range(replicas)]}
                      for s in range(shards)]}, open(path, "w"), indent=1)
PY

  local t0 s r w
  t0=$(now_ms)
  : >"$dir/servers"
  for ((s = 0; s < SERVERS; s++)); do
    for ((r = 0; r < REPLICAS; r++)); do
      # A 10 s lease, the configuration read every 500 ms: 32 replicas at the defaults (2 s,
      # 100 ms) kept one etcd on 2 busy cores past the replicas' fixed 1 s deadline, leases were
      # lost and primaries stepped down before the workers started.
      "$BX" ps serve --cluster "$dir/cluster.json" --shard $s --replica $r --etcd "$etcd_url" \
        --lease-ms 10000 --probe-interval-ms 500 \
        --metrics-port "${ports[metrics_base + s * REPLICAS + r]}" >"$dir/s$s-r$r.log" 2>&1 &
      PIDS+=($!)
      echo "$! server s$s-r$r" >>"$dir/servers"
    done
  done
  # Served: every shard's replica 0 primary, its other replicas following it.
  for ((s = 0; s < SERVERS; s++)); do
    wait_for_line "$dir/s$s-r0.log" "now primary of epoch" 120 ||
      { echo "$transport: shard $s has no primary" >&2; return 1; }
    for ((r = 1; r < REPLICAS; r++)); do
      wait_for_line "$dir/s$s-r$r.log" "following replica" 120 ||
        { echo "$transport: shard $s replica $r is not following" >&2; return 1; }
    done
  done
  local t_served
  t_served=$(now_ms)

  local -a workers=()
  : >"$dir/workers"
  # One sampler for the whole run (a Python start costs a second and more on a loaded host).
  sampler "$dir" &
  local sampler=$!
  PIDS+=("$sampler")
  for ((w = 0; w < WORKERS; w++)); do
    local role=train
    ((w < RANKERS)) && role=rank
    "$BX" ps $role --cluster "$dir/cluster.json" --threads "$THREADS" --duration "$RUN_SECONDS" \
      --heartbeat-timeout-ms "$HEARTBEAT_TIMEOUT_MS" --start-file "$dir/go" --json \
      --metrics-port "${ports[metrics_base + SERVERS * REPLICAS + w]}" >"$dir/w$w.json" \
      2>"$dir/w$w.log" &
    PIDS+=($!)
    workers+=($!)
    echo "$! $role w$w" >>"$dir/workers"
    ((STAGGER_MS == 0)) || sleep "$(printf '%d.%03d' $((STAGGER_MS / 1000)) $((STAGGER_MS % 1000)))"
  done
  # Connected: every worker's warm-up fetch (a key on every shard) answered. Then $dir/go starts
  # all their clocks together; the servers' CPU is counted from then to the last one's end.
  local t_first=0 connected=0 deadline=$((SECONDS + 300))
  while ((connected < WORKERS)); do
    connected=$(cat "$dir"/w*.log 2>/dev/null | tr '\r' '\n' | grep -c "^connected:" || true)
    for ((w = 0; w < WORKERS; w++)); do
      kill -0 "${workers[w]}" 2>/dev/null || grep -q "^connected:" "$dir/w$w.log" ||
        { echo "$transport: worker $w ended before connecting" >&2; return 1; }
    done
    ((SECONDS < deadline)) || { echo "$transport: $connected of $WORKERS workers connected" >&2; return 1; }
    ((connected == WORKERS)) || sleep 0.1
  done
  # Connected: the latest wall-clock stamp on the workers' lines (not when this loop saw them).
  local t_connected
  t_connected=$(cat "$dir"/w*.log | tr '\r' '\n' | sed -n 's/^connected: .*, at \([0-9]*\)$/\1/p' |
    sort -n | tail -1)
  t_first=$(now_ms)
  touch "$dir/mark-start" "$dir/go"
  local failed=0
  for w in "${workers[@]}"; do wait "$w" || failed=$((failed + 1)); done
  local t_end
  t_end=$(now_ms)
  touch "$dir/mark-end"
  wait "$sampler" || { echo "$transport: the sampler failed" >&2; return 1; }
  # The servers, then etcd: this transport's processes are gone before the next one starts.
  while read -r pid _; do kill -TERM "$pid" 2>/dev/null || true; done <"$dir/servers"
  while read -r pid _; do wait "$pid" 2>/dev/null || true; done <"$dir/servers"
  kill -TERM "$etcd_pid" 2>/dev/null || true
  wait "$etcd_pid" 2>/dev/null || true
  summarise "$dir" "$transport" "$t0" "$t_served" "$t_first" "$t_connected" "$t_end" "$failed" \
    "$(io_threads_limit "$transport" server)" "$(io_threads_limit "$transport" worker)" \
    >"$dir/result.json"
}

# $1/samples.json: every bx process's CPU (utime+stime) and the simnic's share of it, when
# $1/mark-start appears and when $1/mark-end does; in between, about twice a second, the most
# I/O threads (by thread name), threads, RC QPs (its /metrics), RPC connections, descriptors and
# resident memory each process had.
sampler() { # dir
  exec python3 - "$1" <<'PY'
import json, os, re, sys, time, urllib.request
from concurrent.futures import ThreadPoolExecutor
d = sys.argv[1]
parent = os.getppid()
tick = os.sysconf("SC_CLK_TCK")
def one(line):
    pid, role, name = line.split()
    proc = f"/proc/{pid}"
    try:
        fields = open(f"{proc}/stat").read().rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            return None
        names = []
        for tid in os.listdir(f"{proc}/task"):
            try:
                names.append(open(f"{proc}/task/{tid}/comm").read().strip())
            except OSError:
                pass
        entry = {"role": role, "cpu_s": (int(fields[11]) + int(fields[12])) / tick,
                 "threads": len(names), "fds": len(os.listdir(f"{proc}/fd")),
                 "rss_mib": int(re.search(r"VmRSS:\s+(\d+)", open(f"{proc}/status").read())[1]) / 1024,
                 "rdma_io_threads": sum(n.startswith("bx-rdma-io") for n in names),
                 "tcp_io_threads": sum(n.startswith("bx-tcp-io") for n in names),
                 "other_io_threads": sum(n.startswith("bx-io") for n in names)}
    except (OSError, TypeError):
        return None  # it ended
    port = re.search(r"metrics: http://127.0.0.1:(\d+)/metrics",
                     open(os.path.join(d, f"{name}.log"), errors="replace").read())
    if port:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port[1]}/metrics",
                                          timeout=5).read().decode()
            sums = {}
            for m in re.finditer(r"^(bx_process_rc_qps|bx_process_simnic_cpu_seconds_total|"
                                 r"bx_rpc_server_connections_total|"
                                 r"bx_rpc_client_connections_opened_total)(\{[^}]*\})? (\S+)$",
                                 text, re.M):
                sums[m[1]] = sums.get(m[1], 0) + float(m[3])
            entry["qps"] = sums.get("bx_process_rc_qps")
            entry["simnic_cpu_s"] = sums.get("bx_process_simnic_cpu_seconds_total")
            entry["rpc_connections"] = (sums.get("bx_rpc_server_connections_total", 0) +
                                        sums.get("bx_rpc_client_connections_opened_total", 0))
        except OSError:
            pass
    return name, entry
def snapshot(pool):
    lines = [l for f in ("servers", "workers") for l in open(os.path.join(d, f))]
    return dict(e for e in pool.map(one, lines) if e is not None)
out = {"start": None, "end": None, "peak": {}, "samples": 0}
with ThreadPoolExecutor(max_workers=64) as pool:  # /metrics answers take ~0.2 s: all at once
    while True:
        started = os.path.exists(os.path.join(d, "mark-start"))
        ending = os.path.exists(os.path.join(d, "mark-end"))
        snap = snapshot(pool)
        if started and out["start"] is None:
            out["start"] = snap
        if started:
            out["samples"] += 1
            for name, e in snap.items():
                peak = out["peak"].setdefault(name, {"role": e["role"]})
                for k, v in e.items():
                    if isinstance(v, (int, float)) and k not in ("cpu_s", "simnic_cpu_s"):
                        peak[k] = max(peak.get(k, v), v)
        if ending:
            out["end"] = snap
            break
        if os.getppid() != parent:
            sys.exit(1)  # the script is gone
        time.sleep(0.5)
json.dump(out, open(os.path.join(d, "samples.json"), "w"))
PY
}

# One transport's figures as JSON, from the workers' JSON and the samples.
summarise() { # dir transport t0 t_served t_first t_connected t_end failed
  python3 - "$@" "$SERVERS" "$REPLICAS" "$WORKERS" <<'PY'
import json, os, sys
d, transport = sys.argv[1:3]
t0, t_served, t_first, t_connected, t_end, failed, limit_server, limit_worker = \
    map(int, sys.argv[3:11])
servers, replicas, workers = map(int, sys.argv[11:14])
samples = json.load(open(os.path.join(d, "samples.json")))
start, mid, end = samples["start"], samples["peak"], samples["end"]
runs = {}
for line in open(os.path.join(d, "workers")):
    pid, role, name = line.split()
    try:
        runs[name] = (role, json.load(open(os.path.join(d, f"{name}.json"))))
    except (OSError, ValueError):
        pass
requests = sum(r["requests"] for _, r in runs.values())
errors = sum(r["errors"] for _, r in runs.values())
# CPU over the run: the servers' from /proc between the workers' common start ($dir/go) and the
# last one's end; each worker's own over its clock (it reports it, having exited by then).
server_names = [n for n, e in end.items() if e["role"] == "server"]
server_cpu = sum(end[n]["cpu_s"] - start[n]["cpu_s"] for n in server_names if n in start)
server_simnic = sum((end[n].get("simnic_cpu_s") or 0) - (start[n].get("simnic_cpu_s") or 0)
                    for n in server_names if n in start)
worker_cpu = sum(r["process_cpu_ms"] for _, r in runs.values()) / 1e3
worker_simnic = sum(r["simnic_cpu_ms"] for _, r in runs.values()) / 1e3
worker_compute = sum(r["compute_cpu_ms"] for _, r in runs.values()) / 1e3
total_cpu = server_cpu + worker_cpu
per_req = lambda s: round(s * 1e6 / requests, 1) if requests else None
def worst(role, key):
    values = [r[key] for rl, r in runs.values() if (role is None or rl == role) and r["requests"]]
    return round(max(values) / 1e3, 3) if values else None
def proc(role, limit):
    es = [e for e in mid.values() if e["role"] in role]
    if not es:
        return {"io_threads_limit": limit}
    io = [e["rdma_io_threads"] + e["tcp_io_threads"] + e["other_io_threads"] for e in es]
    qps = [e.get("qps") for e in es if e.get("qps") is not None]
    return {"processes": len(es), "io_threads_limit": limit, "io_threads_max": max(io), "io_threads_mean": round(sum(io) / len(io), 2),
            "rdma_io_threads_max": max(e["rdma_io_threads"] for e in es),
            "tcp_io_threads_max": max(e["tcp_io_threads"] for e in es),
            "threads_max": max(e["threads"] for e in es),
            "qps_max": max(qps) if qps else None,
            "rpc_connections_max": max((e.get("rpc_connections") or 0) for e in es),
            "fds_max": max(e["fds"] for e in es),
            "rss_mib_max": round(max(e["rss_mib"] for e in es), 1)}
out = {
    "transport": transport, "servers": servers, "replicas": replicas, "workers": workers,
    "worker_processes_ok": len(runs) - failed, "worker_failures": failed,
    "requests": requests, "errors": errors,
    # The sum of the workers' own rates (each over its own clock).
    "requests_per_s": round(sum(r["requests_per_sec"] for _, r in runs.values()), 1),
    "fetch_p50_ms_rankers": worst("rank", "fetch_p50_us"),
    "fetch_p99_ms_rankers": worst("rank", "fetch_p99_us"),
    "fetch_p50_ms_trainers": worst("train", "fetch_p50_us"),
    "fetch_p99_ms_trainers": worst("train", "fetch_p99_us"),
    "fetch_p50_ms": worst(None, "fetch_p50_us"), "fetch_p99_ms": worst(None, "fetch_p99_us"),
    "push_p50_ms": worst("train", "push_p50_us"), "push_p99_ms": worst("train", "push_p99_us"),
    "cpu_s": {"servers": round(server_cpu, 2), "workers": round(worker_cpu, 2),
              "simnic": round(server_simnic + worker_simnic, 2),
              "trainer_compute": round(worker_compute, 2)},
    # All bx processes' CPU per request; and without the simnic's hardware work (a real NIC's)
    # and the trainers' stand-in compute (the same over both transports).
    "host_cpu_us_per_request": per_req(total_cpu),
    "host_cpu_us_per_request_without_nic_and_compute":
        per_req(total_cpu - server_simnic - worker_simnic - worker_compute),
    "server": proc(("server",), limit_server), "worker": proc(("rank", "train"), limit_worker),
    # A server talks to the workers and its shard's other replicas; a worker to every replica.
    "server_peers": workers + replicas - 1, "worker_peers": servers * replicas,
    "servers_served_ms": t_served - t0, "stagger_ms": int(os.environ.get("STAGGER_MS", "0")),
    "connect_ms": t_connected - t0,
    "workers_connect_ms": t_connected - t_served,
    "run_window_s": round((t_end - t_first) / 1e3, 1),
}
out["io_threads_within_limit"] = all(out[side].get("io_threads_max", 0) <= out[side]["io_threads_limit"]
                                    for side in ("server", "worker"))
print(json.dumps(out))
PY
}

for transport in $TRANSPORTS; do
  run_transport "$transport"
done

python3 - "$JSON" "$WORK" $TRANSPORTS <<'PY'
import json, os, sys
as_json, work, *transports = sys.argv[1:]
res = {t: json.load(open(os.path.join(work, t, "result.json"))) for t in transports}
out = {"transports": res}
if "rdma" in res and "tcp" in res:
    r, t = res["rdma"], res["tcp"]
    ratio = lambda a, b: round(a / b, 3) if a is not None and b else None
    # > 1: rdma better for requests/s; < 1: rdma better for latencies, CPU and connect time.
    out["rdma_over_tcp"] = {k: ratio(r[k], t[k]) for k in (
        "requests_per_s", "fetch_p50_ms", "fetch_p99_ms", "fetch_p99_ms_rankers",
        "fetch_p99_ms_trainers", "push_p50_ms", "push_p99_ms", "host_cpu_us_per_request",
        "host_cpu_us_per_request_without_nic_and_compute", "connect_ms")}
if as_json == "1":
    print(json.dumps(out, indent=1))
    sys.exit(0)
first = res[transports[0]]
print(f"paper cluster: {first['servers']} shards x {first['replicas']} replicas, "
      f"{first['workers']} workers (rankers and trainers), one host")
rows = [("requests/s (sum)", "requests_per_s"), ("requests", "requests"), ("errors", "errors"),
        ("fetch P50 ms (worst worker)", "fetch_p50_ms"), ("fetch P99 ms (worst worker)", "fetch_p99_ms"),
        ("  rankers' fetch P99 ms", "fetch_p99_ms_rankers"),
        ("  trainers' fetch P99 ms", "fetch_p99_ms_trainers"),
        ("push P50 ms (worst trainer)", "push_p50_ms"), ("push P99 ms (worst trainer)", "push_p99_ms"),
        ("host CPU us/request (all)", "host_cpu_us_per_request"),
        ("  without simnic, compute", "host_cpu_us_per_request_without_nic_and_compute"),
        ("servers served (ms)", "servers_served_ms"), ("connect everything (ms)", "connect_ms")]
print(f"{'':34}" + "".join(f"{t:>14}" for t in transports)
      + (f"{'rdma/tcp':>12}" if "rdma_over_tcp" in out else ""))
for label, key in rows:
    line = f"{label:34}" + "".join(f"{str(res[t][key]):>14}" for t in transports)
    if "rdma_over_tcp" in out and key in out["rdma_over_tcp"]:
        line += f"{str(out['rdma_over_tcp'][key]):>12}"
    print(line)
for side in ("server", "worker"):
    for label, key in (("I/O threads limit", "io_threads_limit"),
                       ("I/O threads max", "io_threads_max"), ("I/O threads mean", "io_threads_mean"),
                       ("  rdma / tcp I/O threads max", None), ("threads max", "threads_max"),
                       ("RC QPs max", "qps_max"), ("RPC connections max", "rpc_connections_max"),
                       ("fds max", "fds_max"), ("RSS MiB max", "rss_mib_max")):
        if key is None:
            cells = "".join(f"{str(res[t][side].get('rdma_io_threads_max')) + ' / ' + str(res[t][side].get('tcp_io_threads_max')):>14}"
                            for t in transports)
        else:
            cells = "".join(f"{str(res[t][side].get(key)):>14}" for t in transports)
        print(f"{side + ' ' + label:34}{cells}")
print(f"peers: a server has {first['server_peers']} (workers + its shard's other replicas), a worker "
      f"{first['worker_peers']} (every replica). I/O threads: 1 per transport, all rdma ones of a "
      f"process sharing one; within the limit: "
      + ", ".join(f"{t} {res[t]['io_threads_within_limit']}" for t in transports))
print("latencies: the worst worker's percentile (workers report percentiles, not histograms); "
      "CPU: all bx processes, servers from /proc over the run, workers their own over their clock")
PY
for transport in $TRANSPORTS; do
  python3 - "$WORK/$transport/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(1 if r["worker_failures"] or not r["requests"] else 0)
PY
done
