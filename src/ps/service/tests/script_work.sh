# Scaffolding of the scripts that start their own `bx ps serve` clusters (checkpoint_restore.sh,
# serving_sync.sh): `script_work NAME` makes WORK (removed at exit, the tail of its logs printed
# first when the script failed), PIDS (killed at exit), a simnic fabric directory for rdma://
# between the processes and WORK/cluster.secret; FREE_PORTS is the port picker (free_ports.py).
FREE_PORTS="$(dirname "${BASH_SOURCE[0]}")/free_ports.py"

script_work() {  # name
  WORK=$(mktemp -d "/tmp/bx-$1.XXXXXX")
  PIDS=()
  trap script_work_cleanup EXIT
  export BX_SIM_FABRIC_DIR="$WORK/fabric" BX_VERBS=sim
  mkdir -p "$BX_SIM_FABRIC_DIR"
  (umask 077 && head -c 32 /dev/urandom | base64 >"$WORK/cluster.secret")
}

script_work_cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if ((rc != 0)); then
    for f in "$WORK"/*.log; do
      [[ -e $f ]] || continue
      echo "== $(basename "$f")"
      tail -n 15 "$f"
    done
  fi
  rm -rf "$WORK"
}
