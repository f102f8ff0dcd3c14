#!/usr/bin/env python3
"""`bx demo --busy`: a short run completes on both transports and both workloads, and
its JSON says it ran busy, with how many compute threads and the calibrated multiply. Figures are
only checked for presence: the ratios are a benchmark's, not a timed test's."""
import json
import subprocess
import sys

FIGURES = ("requests_per_sec", "fetch_mean_us", "fetch_p99_us", "host_cpu_us_per_request",
           "busy_cpu_s", "rss_mib")


def main(bx):
    # --keys: a quarter of the default key space, loaded before each of the four runs' clocks.
    run = subprocess.run([bx, "demo", "--busy", "--duration", "2", "--keys", "65536", "--json"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"bx demo --busy exited {run.returncode}:\n{run.stderr}")
    report = json.loads(run.stdout)
    busy = report["busy"]
    assert busy["enabled"] is True, busy
    assert busy["compute_threads"] >= 1, busy
    assert busy["matrix_n"] >= 4, busy
    assert busy["calibrated_us_per_multiply"] > 0, busy
    assert busy["background_multiplies"] > 0, busy
    for workload in ("inference", "training"):
        for scheme in ("rdma", "tcp"):
            figures = report[workload][scheme]
            for field in FIGURES:
                assert isinstance(figures[field], (int, float)), (workload, scheme, field)
            assert figures["requests"] > 0, (workload, scheme, figures)
            assert figures["errors"] == 0, (workload, scheme, figures)
            if workload == "training":
                assert figures["compute_us_per_step"] > 0, (scheme, figures)
    print(f"bx demo --busy: {busy['compute_threads']} compute threads, {busy['matrix_n']}^2 "
          f"matrices at {busy['calibrated_us_per_multiply']:.0f} us; both transports reported")


if __name__ == "__main__":
    main(sys.argv[1])
