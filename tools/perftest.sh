#!/usr/bin/env bash
# perftest and rdma-core's example programs (Debian perftest, ibverbs-utils), unmodified, over
# the simnic between two processes, each run bounded in time: the RC latency and bandwidth tests
# at 8 B, 4 KiB, 64 KiB and 1 MiB, one at 8 MiB (with BX_PERFTEST_SWEEP=1: every size, -a), the shared-receive-queue programs
# (ib_send_bw --use-srq, also over 4 QPs; ibv_srq_pingpong, 16 QPs on one SRQ), ibv_rc_pingpong
# (also with -N, the ibv_wr_* send API), the UD programs (ibv_ud_pingpong, ib_send_lat/bw -c UD),
# UCX's ucx_perftest (UCP tag and put tests over rc_verbs), DAPL's dtest and ibv_devinfo -v
# must finish and print their figures.
#
#   tools/perftest.sh build/lib/libbx_simnic.so
set -uo pipefail
simnic=$(realpath "${1:?usage: perftest.sh path/to/libbx_simnic.so}")
# In a network namespace of its own where one may be made (root, as in CI): no concurrent test's
# listener can then take a port perftest's server was given. (ctest still runs it alone, for its
# polling threads' sake: src/simnic/tests/CMakeLists.txt.)
# (The simnic's fabric between the two processes does not go through the network.)
if [[ -z ${BX_PERFTEST_NETNS:-} ]] && unshare -n true 2>/dev/null; then
  exec env BX_PERFTEST_NETNS=1 unshare -n bash -c 'ip link set lo up && exec bash "$0" "$@"' \
    "$0" "$simnic"
fi
for program in ib_send_lat ib_write_lat ib_read_lat ib_send_bw ib_write_bw ib_read_bw \
  ibv_rc_pingpong ibv_srq_pingpong ibv_ud_pingpong ibv_devinfo ss; do
  command -v "$program" >/dev/null ||
    { echo "perftest: $program is missing (tools/install-deps.sh installs perftest, ibverbs-utils)"; exit 1; }
done
work=$(mktemp -d /tmp/bx-perftest.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
export LD_PRELOAD=$simnic
limit=60  # seconds per program run
# Ports below the kernel's ephemeral range, so that no client socket of a concurrent test holds
# the one a server is about to listen on (perftest binds without retrying).
ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range)
port=$((10000 + RANDOM % (ephemeral_low > 12000 ? ephemeral_low - 12000 : 1000)))
failed=0

# Whether the listener on port $1 is process $2 or its child (the program `timeout` runs): a
# stranger that took the port first would otherwise answer our client.
listener_is() {
  local pid
  pid=$(ss -Hltnp "sport = :$1" | grep -oE 'pid=[0-9]+' | head -n 1 | cut -d= -f2)
  [[ -n $pid ]] && { [[ $pid == "$2" ]] || [[ $(ps -o ppid= -p "$pid" | tr -d ' ') == "$2" ]]; }
}

next_free_port() {  # advances $port to one no socket uses
  port=$((port + 1))
  while ss -Htan "( sport = :$port )" | grep -q .; do port=$((port + 1)); done
}

# Starts the server side, waits until it listens on a free port, runs the client; both bounded.
# A server that could not listen (the port taken meanwhile, by a stranger now listening on it)
# is started again on another port.
# Sets server_rc, client_rc; output in $work/server.log, $work/client.log.
pair() {  # program server-args... -- client-args...
  local program=$1
  shift
  local server_args=() client_args=()
  while (($# > 0)) && [[ $1 != -- ]]; do server_args+=("$1"); shift; done
  shift
  client_args=("$@")
  local server listening attempt
  for attempt in 1 2 3; do
    next_free_port
    timeout $limit "$program" "${server_args[@]}" -p "$port" >"$work/server.log" 2>&1 &
    server=$!
    listening=0
    for _ in $(seq 400); do
      if ss -Hltn "sport = :$port" | grep -q .; then
        listener_is "$port" $server && listening=1
        break  # ours, or a stranger's: then another port
      fi
      kill -0 $server 2>/dev/null || break
      sleep 0.05
    done
    ((listening)) && break
    kill $server 2>/dev/null
    wait $server 2>/dev/null
  done
  timeout $limit "$program" "${client_args[@]}" -p "$port" localhost >"$work/client.log" 2>&1
  client_rc=$?
  wait $server
  server_rc=$?
}

report() {  # name verdict detail
  printf '%-44s %-5s %s\n' "$1" "$2" "$3"
  [[ $2 == ok ]] || { failed=$((failed + 1)); tail -n 5 "$work/client.log" "$work/server.log" | sed 's/^/    /'; }
}

# A perftest run passed when both sides exited 0 and the client printed a figures line: the
# size then the iteration count, under the "#bytes" header.
expect_figures() {  # name
  local lines
  lines=$(sed -n '/^ *#bytes/,$p' "$work/client.log" | grep -E '^ *[0-9]+ +[0-9]+' | tr -s ' \t' ' ')
  if ((client_rc == 0 && server_rc == 0)) && [[ -n $lines ]]; then
    local count
    count=$(wc -l <<<"$lines")
    if ((count > 1)); then
      report "$1" ok "$count sizes, the last: $(tail -1 <<<"$lines")"
    else
      report "$1" ok "$lines"
    fi
  else
    report "$1" FAIL "client exit $client_rc, server exit $server_rc"
  fi
}

common=(-d bxsim0 -x 0 -n 200)
for program in ib_send_lat ib_write_lat ib_read_lat ib_send_bw ib_write_bw ib_read_bw; do
  for size in 8 4096 65536 1048576; do
    pair "$program" "${common[@]}" -s "$size" -- "${common[@]}" -s "$size"
    expect_figures "$program -s $size"
  done
done
# Every size on one connection (BX_PERFTEST_SWEEP=1, as make conformance sets): 23 ping-pong
# runs, fewer iterations and a longer bound. It takes 11 s on an idle host, nearly all of it
# perftest's own clock calibration (about 0.45 s a size on each side, spinning on gettimeofday),
# so the ctest, which runs alone, has only its largest size (above the loops' 1 MiB).
if [[ ${BX_PERFTEST_SWEEP:-0} == 1 ]]; then
  limit=180
  pair ib_write_lat -d bxsim0 -x 0 -n 50 -a -- -d bxsim0 -x 0 -n 50 -a
  limit=60
  expect_figures "ib_write_lat -a (every size, 2 B - 8 MiB)"
else
  pair ib_write_lat -d bxsim0 -x 0 -n 50 -s 8388608 -- -d bxsim0 -x 0 -n 50 -s 8388608
  expect_figures "ib_write_lat -s 8388608 (BX_PERFTEST_SWEEP=1: every size)"
fi
pair ib_send_bw "${common[@]}" --use-srq -- "${common[@]}" --use-srq
expect_figures "ib_send_bw --use-srq"
pair ib_send_bw "${common[@]}" --use-srq -q 4 -s 4096 -- "${common[@]}" --use-srq -q 4 -s 4096
expect_figures "ib_send_bw --use-srq -q 4 -s 4096"

# rdma-core's examples take -p for the port too.
# -N posts through the extended QP's work-request API (ibv_wr_start ... ibv_wr_complete).
for flags in "" "-N"; do
  pair ibv_rc_pingpong -d bxsim0 -g 0 -n 200 $flags -- -d bxsim0 -g 0 -n 200 $flags
  if ((client_rc == 0 && server_rc == 0)) && grep -q 'iters in' "$work/client.log"; then
    report "ibv_rc_pingpong $flags" ok "$(grep -m1 'bytes in' "$work/client.log")"
  else
    report "ibv_rc_pingpong $flags" FAIL "client exit $client_rc, server exit $server_rc"
  fi
done
pair ibv_srq_pingpong -d bxsim0 -g 0 -n 200 -- -d bxsim0 -g 0 -n 200
if ((client_rc == 0 && server_rc == 0)) && grep -q 'iters in' "$work/client.log"; then
  report "ibv_srq_pingpong (16 QPs, one SRQ)" ok "$(grep -m1 'bytes in' "$work/client.log")"
else
  report "ibv_srq_pingpong (16 QPs, one SRQ)" FAIL "client exit $client_rc, server exit $server_rc"
fi

# Unreliable datagrams: one MTU each, addressed by an AH (ibv_ud_pingpong builds its way back
# from the first datagram's GRH), and perftest's send tests over UD.
pair ibv_ud_pingpong -d bxsim0 -g 0 -n 200 -s 1024 -- -d bxsim0 -g 0 -n 200 -s 1024
if ((client_rc == 0 && server_rc == 0)) && grep -q 'iters in' "$work/client.log"; then
  report "ibv_ud_pingpong -s 1024" ok "$(grep -m1 'bytes in' "$work/client.log")"
else
  report "ibv_ud_pingpong -s 1024" FAIL "client exit $client_rc, server exit $server_rc"
fi
for program in ib_send_lat ib_send_bw; do
  pair "$program" "${common[@]}" -c UD -s 1024 -- "${common[@]}" -c UD -s 1024
  expect_figures "$program -c UD -s 1024"
done

# UCX (Debian's ucx-utils) on the simnic: UCP's tag and put tests over its rc_verbs transport,
# wired up over ud_verbs, in a mount namespace holding the device nodes UCX looks for
# (tools/with-simnic-devices.sh): a slice of UCP's tests, one size each.
if command -v ucx_perftest >/dev/null && unshare -m true 2>/dev/null; then
  ucx=$work/ucx_perftest
  printf '#!/bin/bash\nUCX_TLS=rc_verbs,ud_verbs UCX_NET_DEVICES=bxsim0:1 exec bash %q %q ucx_perftest "$@"\n' \
    "$(dirname "$0")/with-simnic-devices.sh" "$simnic" >"$ucx"
  chmod +x "$ucx"
  for spec in "tag_lat 8 2000" "tag_bw 65536 300" "ucp_put_bw 1048576 100"; do
    read -r test size iterations <<<"$spec"
    pair "$ucx" -- -t "$test" -s "$size" -n "$iterations"
    if ((client_rc == 0 && server_rc == 0)) && grep -q '^Final:' "$work/client.log"; then
      report "ucx_perftest -t $test -s $size" ok "$(grep '^Final:' "$work/client.log" | tr -s ' ')"
    else
      report "ucx_perftest -t $test -s $size" FAIL "client exit $client_rc, server exit $server_rc"
    fi
  done
else
  report "ucx_perftest" FAIL "ucx-utils missing (tools/install-deps.sh), or no mount namespace"
fi

# DAPL's dtest (scm provider, on lo through DAPL_SCM_NETDEV): RDMA WRITE ping-pong of 1 MiB with
# the data checked, and a disconnect right after the last write. That write used to be flushed
# on the server now and then (1 in 20 runs idle, 2 in 20 beside two busy loops): its ACK lost
# the race to the disconnect (Fabric::SettleArrivals). BX_DTEST_RUNS=20 for the full check.
if command -v dtest >/dev/null; then
  echo 'ofa-v2-bxsim0 u2.0 nonthreadsafe default libdaploscm.so.2 dapl.2.0 "bxsim0 1" ""' \
    >"$work/dat.conf"
  dtest_ok=0 runs=${BX_DTEST_RUNS:-2}
  for ((run = 0; run < runs; ++run)); do
    DAPL_SCM_NETDEV=lo DAT_OVERRIDE=$work/dat.conf timeout $limit dtest -s -P ofa-v2-bxsim0 -W -D -b 1048576 -B 100 \
      >"$work/server.log" 2>&1 &
    server=$!
    sleep 0.5
    DAPL_SCM_NETDEV=lo DAT_OVERRIDE=$work/dat.conf timeout $limit dtest -P ofa-v2-bxsim0 -W -D -b 1048576 -B 100 \
      -h 127.0.0.1 >"$work/client.log" 2>&1
    client_rc=$?
    wait $server
    server_rc=$?
    ((client_rc == 0 && server_rc == 0)) && grep -q PASSED "$work/server.log" &&
      grep -q PASSED "$work/client.log" && ! grep -qiE 'error|failed' "$work/server.log" \
      "$work/client.log" && dtest_ok=$((dtest_ok + 1))
  done
  if ((dtest_ok == runs)); then
    report "dtest -W -D -b 1048576 (DAPL scm)" ok "$runs of $runs runs passed on both sides"
  else
    report "dtest -W -D -b 1048576 (DAPL scm)" FAIL "$dtest_ok of $runs runs passed on both sides"
  fi
else
  report "dtest" FAIL "dapl2-utils missing (tools/install-deps.sh)"
fi

timeout $limit ibv_devinfo -v -d bxsim0 >"$work/client.log" 2>&1
client_rc=$? server_rc=0
if ((client_rc == 0)) && grep -q 'GID\[ *0\]' "$work/client.log"; then
  report "ibv_devinfo -v" ok "$(grep -m1 'GID\[ *0\]' "$work/client.log" | tr -s ' \t' ' ')"
else
  report "ibv_devinfo -v" FAIL "exit $client_rc"
fi

echo "perftest: $failed failed"
((failed == 0))
