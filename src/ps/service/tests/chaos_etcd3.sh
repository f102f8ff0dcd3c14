# The three-member etcd faults of chaos_test.sh (sourced by it, not run): scenarios etcd3-*.
# The servers are given all three members (--etcd e0,e1,e2) and start with e0, which is made
# the leader before each run (etcdctl move-leader), so every fault hits the leader: until the
# other two have elected one, no member answers (a follower waits for its leader), whichever
# member a server uses by then (a call that timed out, was refused or was answered "leader
# changed" moved it to the next member).
# A paused follower would stall only the servers using it, which may be none.
#
#   etcd3-kill-leader      SIGKILL of e0, a new leader elected, e0 restarted 2 leases later
#   etcd3-pause-member     SIGSTOP of e0 for 3 leases, then SIGCONT
#   etcd3-partition-member e0 cut off from e1, e2 and every replica for 3 leases
#   etcd3-rolling-restart  e0, e1, e2 killed and restarted in turn, each down a lease
#   etcd3-kill-leader-during-promotion
#                          shard 0's primary paused as e0 is killed; e0 restarted 2 leases
#                          later; the primary resumed once a backup was promoted
#
# The fault must bite: a new etcd leader elected (etcdctl endpoint status) where e0 is killed,
# paused or cut off, an election where all restart, a promotion on shard 0 under the paused
# primary, and, where e0 is paused or cut off, a primary's lease renewal left unanswered, its
# lease held (renewed only after the store answered again) or lost, or a promotion. Every
# member must be healthy afterwards.

ETCD3_FAULTS=(etcd3-kill-leader etcd3-pause-member etcd3-partition-member etcd3-rolling-restart
  etcd3-kill-leader-during-promotion)

etcd3_prepare() {  # fault — a healthy cluster with its leader where the fault wants it
  [[ -n ${ETCD3_URLS:-} ]] || netns_start_etcd3 10 11 12
  etcd3_wait_healthy 0 1 2
  etcd3_move_leader 0
  etcd3ctl --endpoints "$ETCD3_URLS" del --prefix /bexpress >/dev/null
  ETCD3_NOTE=""
}

etcd3_cut() {  # add|del — e0 from the other members and every replica, both ways
  local e0=${ETCD3_HOST[0]} other
  blackhole "$1" "$e0" "${ETCD3_HOST[1]}" "${ETCD3_HOST[2]}" 1 2 3 4 5 6
  for other in "${ETCD3_HOST[1]}" "${ETCD3_HOST[2]}" 1 2 3 4 5 6; do blackhole "$1" "$other" "$e0"; done
}

# What the fault did when, for a failed run's logs ($RUN-fault.log).
fault_log() {  # what...
  echo "$(date +%T.%3N) $*" >>"$WORK/$RUN-fault.log"
}

sleep_until() {  # SECONDS value
  local left=$(($1 - SECONDS))
  ((left <= 0)) || sleep "$left"
}

# The new leader after e0 stopped leading, in ETCD3_NOTE.
etcd3_note_new_leader() {  # term-before
  etcd3_wait_leader 0 30
  ETCD3_NOTE="leader e0 -> e$ETCD3_LEADER, term $1 -> $ETCD3_TERM"
  fault_log "$ETCD3_NOTE"
}

inject_etcd3() {  # fault
  local leader term ids start=$SECONDS i
  read -r leader term ids < <(etcd3_status)
  fault_log "$1: leader e$leader, term $term"
  case $1 in
    etcd3-kill-leader)
      etcd3_kill 0
      etcd3_note_new_leader "$term"
      sleep_until $((start + 2 * LEASE_S))
      fault_log "restarting e0"
      etcd3_start_member 0 existing
      ;;
    etcd3-pause-member)
      etcd3_pause 0
      etcd3_note_new_leader "$term"
      sleep_until $((start + 3 * LEASE_S))
      etcd3_resume 0
      ;;
    etcd3-partition-member)
      etcd3_cut add
      fault_log "e0 cut off"
      etcd3_note_new_leader "$term"
      sleep_until $((start + 3 * LEASE_S))
      etcd3_cut del
      ;;
    etcd3-rolling-restart)
      for i in 0 1 2; do
        etcd3_kill $i
        fault_log "e$i killed"
        sleep "$LEASE_S"
        etcd3_start_member $i existing
        etcd3_wait_healthy 0 1 2  # all three back before the next goes: quorum throughout
        fault_log "e$i back"
        sleep "$LEASE_S"
      done
      local now
      read -r leader now ids < <(etcd3_status)
      ((now > term)) || fail "$RUN: etcd held no election while every member restarted"
      ETCD3_NOTE="term $term -> $now"
      ;;
    etcd3-kill-leader-during-promotion)
      kill -STOP "${SERVER[0.0]}"
      etcd3_kill 0
      etcd3_note_new_leader "$term"
      sleep_until $((start + 2 * LEASE_S))
      etcd3_start_member 0 existing
      local deadline=$((SECONDS + 30))
      until grep -qs "now primary of epoch" "$WORK/$RUN-s0r1.log" "$WORK/$RUN-s0r2.log"; do
        ((SECONDS < deadline)) || fail "$RUN: no backup of shard 0 promoted under the paused primary"
        sleep 0.1
      done
      fault_log "shard 0 promoted"
      kill -CONT "${SERVER[0.0]}"
      ;;
    *) fail "unknown fault $1" ;;
  esac
  fault_log "healed; waiting for every member's health"
  etcd3_wait_healthy 0 1 2
  fault_log "every member healthy"
}

# The servers' side of the bite, counted from their logs: lease renewals left unanswered,
# leases held (renewed only once the store answered again after their deadline) and lost.
etcd3_count_leases() {
  local logs=("$WORK/$RUN"-s*.log)
  ETCD3_UNANSWERED=$(cat "${logs[@]}" | grep -c "lease renewal unanswered" || true)
  ETCD3_HELD=$(cat "${logs[@]}" | grep -c "lease renewed after the store came back" || true)
  ETCD3_LOST=$(cat "${logs[@]}" | grep -c "lease lost" || true)
  ETCD3_NOTE+="${ETCD3_NOTE:+, }renewals unanswered $ETCD3_UNANSWERED, leases held $ETCD3_HELD, lost $ETCD3_LOST"
}

# After the run: the servers' side of the bite, required where e0 stopped answering them
# without a kill; every member healthy.
etcd3_check() {  # fault promotions...
  local fault=$1 promoted=0 n
  shift
  for n in "$@"; do promoted=$((promoted + n)); done
  case $fault in
    etcd3-pause-member | etcd3-partition-member)
      ((ETCD3_UNANSWERED + ETCD3_HELD + ETCD3_LOST + promoted > 0)) ||
        fail "$RUN: no lease renewal unanswered, no lease held, lost or taken over: the fault did not bite"
      ;;
  esac
  local leader term ids
  read -r leader term ids < <(etcd3_status)
  [[ $leader -ge 0 && $ids != *-* ]] || fail "$RUN: etcd not whole afterwards (leader $leader, members $ids)"
}
