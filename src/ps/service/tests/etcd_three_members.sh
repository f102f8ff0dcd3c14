#!/usr/bin/env bash
# The configuration store as deployed: a three-member etcd cluster, from outside. One shard of
# three `bx ps serve` replicas is given all three members' client URLs (--etcd a,b,c); two
# verifying trainers push; the etcd leader is killed (SIGKILL) 3 s in and restarted 7 s later,
# longer than the 5 s lease. The replicas must ride through on the other two members: no lease
# lost and no promotion, 0 acknowledged pushes lost or doubled, the killed member back and
# healthy.
#
# --control gives the replicas only the member that is killed (a one-endpoint deployment): the
# fault must then bite (a lost lease, a promotion, or a lease renewed only once the store is
# back, while the member is down), and pushes must
# still be neither lost nor doubled. It exits 0 when both hold, so the fault is shown to matter.
#
#   etcd_three_members.sh BX [--transport tcp|rdma] [--control]
#
# Exits 1 on a failed check, 77 when etcd is missing.
set -euo pipefail

BX=$(realpath "$1")
shift
TRANSPORT=tcp
CONTROL=0
while (($#)); do
  case $1 in
    --transport) TRANSPORT=$2; shift 2 ;;
    --control) CONTROL=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/loopback_cluster.sh"
LEASE_MS=5000
DOWN_SECONDS=7

loopback_start_etcd3
loopback_cluster_file 64 0.01
leader=$(loopback_etcd_leader)
((leader >= 0)) || { echo "etcd elected no leader" >&2; exit 1; }
SERVER_ETCD=$ETCD_URLS
((CONTROL)) && SERVER_ETCD=${ETCD_MEMBER_URL[leader]}
for r in 0 1 2; do loopback_start_server $r ""; done
wait_for_line "$WORK/r0.log" "primary of epoch" 60 || { echo "no primary" >&2; exit 1; }
for r in 1 2; do
  wait_for_line "$WORK/r$r.log" "following replica" 60 || { echo "replica $r not following" >&2; exit 1; }
done

loopback_start_trainers $((3 + DOWN_SECONDS + 5))
sleep 3
# The control's replicas lose their store with the member they were given; the others' the
# leader, the member every write goes through.
victim=$leader
((CONTROL)) || victim=$(loopback_etcd_leader)
((victim >= 0)) || { echo "no etcd leader to kill" >&2; exit 1; }
kill -KILL "${ETCD_PID[victim]}"
wait "${ETCD_PID[victim]}" 2>/dev/null || true
deadline=$((SECONDS + 30))
until new_leader=$(loopback_etcd_leader) && ((new_leader >= 0 && new_leader != victim)); do
  ((SECONDS < deadline)) || { echo "the other two members elected no leader" >&2; exit 1; }
  sleep 0.2
done
sleep "$DOWN_SECONDS"
loopback_start_etcd_member "$victim" existing
loopback_wait_trainers
read -r lost doubled acked p99_ms stall_ms < <(loopback_trainer_results)
# Office changes: a lost lease, a promotion. A lease renewed only once the store answered again
# (an etcd leader election holds requests a second or so) keeps the primary: the control counts
# it as the fault biting, the every-member run allows it.
lease_lost=$(cat "$WORK"/r*.log | grep -c "lease lost\|promoted after" || true)
renewed_late=$(cat "$WORK"/r*.log | grep -c "after the store came back" || true)
rejoined=0
etcdctl --endpoints "${ETCD_MEMBER_URL[victim]}" endpoint health >/dev/null 2>&1 && rejoined=1
alive=0
for r in 0 1 2; do kill -0 "${SERVER[$r]}" 2>/dev/null && alive=$((alive + 1)); done
echo "etcd_three_members: control=$CONTROL transport=$TRANSPORT killed member $victim (leader" \
  "$leader at start, $new_leader after); acked $acked, lost $lost, doubled $doubled, push p99" \
  "$p99_ms ms, longest stall $stall_ms ms; lease lost or promotion $lease_lost times, renewed" \
  "late $renewed_late times; member back $rejoined;" \
  "replicas alive $alive of 3"

fail=0
((lost == 0 && doubled == 0)) || { echo "FAIL: $lost lost, $doubled doubled" >&2; fail=1; }
((acked > 0)) || { echo "FAIL: no push acknowledged" >&2; fail=1; }
((alive == 3)) || { echo "FAIL: a replica exited" >&2; fail=1; }
((rejoined)) || { echo "FAIL: the killed member did not come back" >&2; fail=1; }
if ((CONTROL)); then
  ((lease_lost + renewed_late > 0)) || { echo "FAIL: the control's replicas kept their lease: the fault did not bite" >&2; fail=1; }
else
  ((lease_lost == 0)) || { echo "FAIL: a lease lost or a promotion with two etcd members up" >&2; fail=1; }
fi
exit $fail
