#!/usr/bin/env bash
# The shape of the paper's Table 2 on the simnic: perftest's ib_send_bw between two processes over
# RC (64 KiB messages, which the NIC segments) and over UD (one MTU per message, as UD must), at
# MTU 1024 (the `roce` device profile) and 4096 (the default profile). Prints Gbit/s and UD/RC,
# or JSON with --json. Each cell is the median of --rounds runs (default 5, interleaved: one run
# of every cell per round), with their range: a single run here moves by a factor of two.
#
# What it shows is per-message cost against bytes: UD pays the per-message work once per MTU,
# RC once per 64 KiB. The simnic's costs are a host's, not a NIC's (it copies on a core and has no
# link rate), so the figures are not the paper's; the ratio's direction and its move with the
# MTU are what compare.
#
#   tools/rc_ud_bench.sh build/lib/libbx_simnic.so [--json] [--iterations N] [--rounds R]
set -uo pipefail
simnic=$(realpath "${1:?usage: rc_ud_bench.sh path/to/libbx_simnic.so [--json] [--iterations N]}")
shift
json=0 iterations=20000 rounds=5
while (($# > 0)); do
  case $1 in
    --json) json=1 ;;
    --iterations) iterations=${2:?}; shift ;;
    --rounds) rounds=${2:?}; shift ;;
    *) echo "rc_ud_bench: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
command -v ib_send_bw >/dev/null || { echo "rc_ud_bench: ib_send_bw missing (perftest)" >&2; exit 1; }
work=$(mktemp -d /tmp/bx-rc-ud.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
export LD_PRELOAD=$simnic

# One ib_send_bw run between two processes; prints the client's average MB/s (empty on failure).
send_bw() {  # profile connection size
  local port
  port=$((20000 + RANDOM % 20000))
  while ss -Htan "( sport = :$port )" | grep -q .; do port=$((port + 1)); done
  local args=(-d bxsim0 -x 0 -c "$2" -s "$3" -n "$iterations" -p "$port")
  BX_SIM_PROFILE=$1 timeout 120 ib_send_bw "${args[@]}" >"$work/server.log" 2>&1 &
  local server=$!
  for _ in $(seq 200); do
    ss -Hltn "sport = :$port" | grep -q . && break
    sleep 0.05
  done
  BX_SIM_PROFILE=$1 timeout 120 ib_send_bw "${args[@]}" localhost >"$work/client.log" 2>&1
  local client_rc=$?
  wait $server
  ((client_rc == 0)) || return 0
  sed -n '/^ *#bytes/,$p' "$work/client.log" | grep -E '^ *[0-9]+ +[0-9]+' | awk '{print $4}'
}

declare -A runs  # "mtu connection" -> MB/s of each round, space-separated
failed=0
specs=("roce 1024" "default 4096")
for ((round = 1; round <= rounds; ++round)); do
  for spec in "${specs[@]}"; do
    read -r profile mtu <<<"$spec"
    for connection in RC UD; do
      size=65536
      [[ $connection == UD ]] && size=$mtu
      mbps=$(send_bw "$profile" "$connection" "$size")
      if [[ -z $mbps ]]; then
        failed=1
        echo "rc_ud_bench: ib_send_bw -c $connection failed at MTU $mtu" >&2
        continue
      fi
      runs["$mtu $connection"]+="$mbps "
    done
  done
done

# "median min max" in Gbit/s of a cell's runs.
gbps() {
  tr ' ' '\n' <<<"${runs[$1]:-}" | grep . | sort -g |
    awk '{v[NR] = $1 * 8 / 1000} END {if (NR == 0) {print "0 0 0"; exit}
         m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
         printf "%.2f %.2f %.2f", m, v[1], v[NR]}'
}
rows=()
for spec in "${specs[@]}"; do
  read -r profile mtu <<<"$spec"
  read -r rc rc_lo rc_hi <<<"$(gbps "$mtu RC")"
  read -r ud ud_lo ud_hi <<<"$(gbps "$mtu UD")"
  ratio=$(awk -v r="$rc" -v u="$ud" 'BEGIN { printf "%.2f", (r > 0 ? u / r : 0) }')
  rows+=("$mtu $rc $rc_lo $rc_hi $ud $ud_lo $ud_hi $ratio")
done

if ((json)); then
  printf '{"benchmark": "rc_ud", "iterations": %d, "rounds": %d, "rows": [' "$iterations" "$rounds"
  sep=""
  for row in "${rows[@]}"; do
    read -r mtu rc rc_lo rc_hi ud ud_lo ud_hi ratio <<<"$row"
    printf '%s{"mtu": %d, "rc_gbps": %s, "rc_range": [%s, %s], "ud_gbps": %s, "ud_range": [%s, %s], "ud_over_rc": %s}' \
      "$sep" "$mtu" "$rc" "$rc_lo" "$rc_hi" "$ud" "$ud_lo" "$ud_hi" "$ratio"
    sep=", "
  done
  printf ']}\n'
else
  printf '%-6s %22s %22s %7s\n' mtu "rc_gbps (range)" "ud_gbps (range)" ud/rc
  for row in "${rows[@]}"; do
    read -r mtu rc rc_lo rc_hi ud ud_lo ud_hi ratio <<<"$row"
    printf '%-6s %22s %22s %7s\n' "$mtu" "$rc ($rc_lo-$rc_hi)" "$ud ($ud_lo-$ud_hi)" "$ratio"
  done
  echo "(ib_send_bw, two processes over the simnic: RC with 64 KiB messages, UD with one MTU each;"
  echo " medians of $rounds rounds of $iterations messages)"
fi
exit $failed
