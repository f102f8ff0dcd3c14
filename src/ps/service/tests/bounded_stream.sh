#!/usr/bin/env bash
# Bounded tables from outside (docs/PS.md "Bounded tables"): one shard of two `bx ps serve`
# replicas with leases in etcd, on loopback, and a table of max_bytes --mib MiB. `bx ps train
# --stream-keys` pushes --keys distinct ids, each once; once the table is full, the primary is
# killed (SIGKILL) and restarted, so the backup takes over and the old primary joins again by
# catch-up (a snapshot) while the stream goes on.
#
#   bounded_stream.sh BX [--keys 10000000] [--mib 64] [--rss-mib 640] [--transport tcp|rdma]
#                        [--ttl-seconds S]
#
# --ttl-seconds gives the table a ttl too (docs/PS.md "Expiry and admission"): rows also expire
# (the kill waits for the first eviction or expiry), the digests then cover every row's push
# stamp, and rows + evicted + expired must equal the ids.
# Checks: every push acknowledged; each server's peak RSS (VmRSS, sampled every 0.1 s) below
# --rss-mib; both replicas at one lsn with the same rows (count and a digest of every key and
# value, `bx ps stat --digest`), the same evictions, within the bound; evictions counted.
# Prints one JSON line. Exits 1 otherwise, 77 without etcd.
set -euo pipefail

BX=$(realpath "$1")
shift
KEYS=10000000
MIB=64
RSS_MIB=640
TRANSPORT=tcp
TTL=0
while (($#)); do
  case $1 in
    --keys) KEYS=$2; shift 2 ;;
    --mib) MIB=$2; shift 2 ;;
    --rss-mib) RSS_MIB=$2; shift 2 ;;
    --transport) TRANSPORT=$2; shift 2 ;;
    --ttl-seconds) TTL=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/loopback_cluster.sh"
loopback_start_etcd

# Table 1, dim 8, SGD from zeros: a row is 8 + 8 * 4 = 40 bytes, so MIB MiB hold MIB * 26214 rows.
(umask 077 && head -c 32 /dev/urandom | base64 >"$WORK/cluster.secret")
python3 - "$WORK/cluster.json" "$TRANSPORT" "$MIB" "$TTL" "${PORTS[@]:2}" <<'PY'
import json, sys
path, transport, mib, ttl, *ports = sys.argv[1:]
replicas = [{"rdma": f"rdma://127.0.0.1:{ports[2 * r]}", "tcp": f"tcp://127.0.0.1:{ports[2 * r + 1]}"}
            for r in range(2)]
json.dump({"version": 1, "transport": transport, "secret_file": "cluster.secret",
           "tables": [{"id": 1, "name": "stream", "kind": "embedding", "dim": 8,
                       "max_bytes": int(mib) * 1024 * 1024,
                       "optimizer": {"kind": "sgd", "learning_rate": 1},
                       **({"ttl_seconds": int(ttl)} if int(ttl) else {})}],
           "shards": [{"replicas": replicas}]}, open(path, "w"), indent=1)
PY
ROW_LIMIT=$((MIB * 1024 * 1024 / 40))

for r in 0 1; do loopback_start_server $r ""; done
wait_for_line "$WORK/r0.log" "primary of epoch" 60 || { echo "no primary" >&2; exit 1; }
wait_for_line "$WORK/r1.log" "following replica" 60 || { echo "replica 1 idle" >&2; exit 1; }

source "$(dirname "$0")/rss_peak.sh"

stat_json() {  # extra bx ps stat flags
  "$BX" ps stat --cluster "$WORK/cluster.json" --interval 0 --json "$@" 2>>"$WORK/stat.log"
}
# The primary's evictions and expiries of table 1 (empty when no primary answered).
primary_evictions() {
  stat_json | python3 -c '
import json, sys
for r in json.load(sys.stdin):
    if r.get("role") == "primary":
        print(r["tables"][0]["evicted"] + r["tables"][0].get("expired", 0))' 2>/dev/null || true
}

start=$(now_ms)
"$BX" ps train --cluster "$WORK/cluster.json" --stream-keys "$KEYS" --stream-batch 4096 \
  --threads 2 --push-timeout-ms 60000 >"$WORK/stream.json" 2>"$WORK/stream.log" &
STREAM=$!
PIDS+=($STREAM)
# Peak VmRSS (kB) of every server process, until the file "$WORK/stop-sampling" exists.
rss_peak_sampler "$WORK/rss-peak" "$WORK/stop-sampling" 0.1 "${SERVER[@]}" &
PIDS+=($!)

# The table full and evicting: kill the primary, restart it (it catches up from replica 1).
killed=0
while kill -0 "$STREAM" 2>/dev/null; do
  evicted=$(primary_evictions)
  if ((${evicted:-0} > 0)); then
    kill -KILL "${SERVER[0]}"
    wait "${SERVER[0]}" 2>/dev/null || true
    loopback_start_server 0 -restarted
    killed=1
    break
  fi
  sleep 0.2
done
stream_ok=1
wait "$STREAM" || stream_ok=0
seconds=$(python3 -c "print(($(now_ms) - $start) / 1000)")
rejoined=0
((killed)) && wait_for_line "$WORK/r0-restarted.log" "joined the set" 120 && rejoined=1
touch "$WORK/stop-sampling"
sleep 0.3
rss_mib=$(($(cat "$WORK/rss-peak") / 1024))

# Both replicas at the same position: every forward applied (the stream is over).
deadline=$((SECONDS + 30))
while :; do
  stat_json --digest >"$WORK/stat.json" || true
  python3 - "$WORK/stat.json" <<'PY' && break
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if len(r) == 2 and all("error" not in x for x in r) and r[0]["lsn"] == r[1]["lsn"] else 1)
PY
  ((SECONDS < deadline)) || break
  sleep 0.5
done
python3 - "$WORK/stat.json" "$WORK/stream.json" "$KEYS" "$ROW_LIMIT" "$MIB" "$rss_mib" \
  "$RSS_MIB" "$seconds" "$stream_ok" "$killed" "$rejoined" "$TRANSPORT" "$TTL" <<'PY'
import json, sys
stat_path, stream_path, keys, limit, mib, rss, rss_bound, seconds, stream_ok, killed, rejoined, \
    transport, ttl = sys.argv[1:]
replicas = json.load(open(stat_path))
stream = json.load(open(stream_path)) if open(stream_path).read().strip() else {}
tables = [r.get("tables", [{}])[0] for r in replicas]
same = (len(replicas) == 2 and all("error" not in r for r in replicas) and
        replicas[0]["lsn"] == replicas[1]["lsn"] and
        all(tables[0].get(k) == tables[1].get(k)
            for k in ("rows", "digest", "evicted", "expired")))
out = {"transport": transport, "keys": int(keys), "max_bytes_mib": int(mib),
       "row_limit": int(limit), "ttl_seconds": int(ttl), "seconds": float(seconds),
       "keys_per_second": stream.get("keys_per_second"), "pushed_keys": stream.get("keys"),
       "pushes_failed": stream.get("pushes_failed"), "primary_killed": int(killed),
       "rejoined": int(rejoined), "peak_rss_mib": int(rss), "rss_bound_mib": int(rss_bound),
       "replicas": [{"role": r.get("role"), "lsn": r.get("lsn"), "rows": t.get("rows"),
                     "bytes": t.get("bytes"), "evicted": t.get("evicted"),
                     "expired": t.get("expired"),
                     "digest": t.get("digest")} for r, t in zip(replicas, tables)],
       "replicas_identical": same}
ok = (stream_ok == "1" and stream.get("keys") == int(keys) and killed == "1" and
      rejoined == "1" and same and int(rss) < int(rss_bound) and
      all(t.get("rows", 1 << 62) <= int(limit) and t.get("bytes", 1 << 62) <= int(mib) << 20 and
          t.get("evicted", 0) + t.get("expired", 0) > 0 for t in tables) and
      (int(ttl) != 0 or all(t.get("expired") == 0 for t in tables)) and
      tables[0].get("rows", 0) + tables[0].get("evicted", 0) + tables[0].get("expired", 0) ==
      int(keys))
out["ok"] = ok
print(json.dumps(out))
sys.exit(0 if ok else 1)
PY
