#!/usr/bin/env python3
"""`bx bench msg --rounds`: each round's RDMA/TCP ratio comes from that round's own rows, and the
reported ratio is a round's median with the rounds' range (a wrong pairing or median fails)."""
import json
import subprocess
import sys

ROUNDS = 3
FIELDS = {"p50": "p50_us", "p99": "p99_us", "p999": "p999_us",
          "msgs_per_sec": "msgs_per_sec", "host_cpu_ns_per_msg": "host_cpu_ns_per_msg"}


def main(bx):
    run = subprocess.run([bx, "bench", "msg", "--transport", "all", "--size", "8", "--size", "4KB",
                          "--iterations", "200", "--messages", "2000", "--rounds", str(ROUNDS),
                          "--json"], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"bx bench msg exited {run.returncode}:\n{run.stderr}")
    report = json.loads(run.stdout)
    assert report["rounds"] == ROUNDS, report["rounds"]
    rows = {(r["transport"], r["size"], r["round"]): r for r in report["results"]}
    assert len(rows) == 2 * 2 * ROUNDS, sorted(rows)
    by_round = report["ratios_by_round"]
    assert len(by_round) == 2 * ROUNDS, by_round
    for r in by_round:
        rdma, tcp = rows[("rdma", r["size"], r["round"])], rows[("tcp", r["size"], r["round"])]
        for field, column in FIELDS.items():
            want = rdma[column] / tcp[column]
            assert abs(r[field] - want) <= 1e-9 * max(1.0, want), (r, field, want)
    for m in report["ratios_rdma_over_tcp"]:
        assert m["rounds"] == ROUNDS, m
        for field in FIELDS:
            values = sorted(r[field] for r in by_round if r["size"] == m["size"])
            assert m[field] == values[(len(values) - 1) // 2], (m, field, values)
            assert m["range"][field] == [values[0], values[-1]], (m, field, values)
    print(f"bench msg --rounds {ROUNDS}: ratios paired by round, medians and ranges consistent")


if __name__ == "__main__":
    main(sys.argv[1])
