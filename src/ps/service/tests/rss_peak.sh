# rss_peak_sampler OUT STOP INTERVAL PID...: writes the peak VmRSS (kB) of the PIDs to OUT every
# INTERVAL seconds until the file STOP exists (run it in the background). A process that is gone
# counts 0. Sourced by bounded_stream.sh and tools/checkpoint_bench.sh.
rss_peak_sampler() {
  local out=$1 stop=$2 interval=$3 peak=0 pid kb
  shift 3
  until [[ -e $stop ]]; do
    for pid in "$@"; do
      kb=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
      ((${kb:-0} > peak)) && peak=$kb
    done
    echo "$peak" >"$out"
    sleep "$interval"
  done
}
