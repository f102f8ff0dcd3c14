#!/usr/bin/env python3
"""`bx bench msg --serve` / `--connect`: the benchmark between two processes, as make bench-peer
runs it against UCX. Both transports give rows and ratios; the server outlives a client killed in
the middle of a stream and serves the next one; SIGTERM ends it."""
import json
import re
import signal
import subprocess
import sys
import time


def client(bx, urls, messages):
    args = [bx, "bench", "msg", "--size", "8", "--size", "64KB", "--iterations", "200",
            "--messages", str(messages), "--json"]
    for url in urls:
        args += ["--connect", url]
    return args


def main(bx):
    serve = subprocess.Popen([bx, "bench", "msg", "--serve", "rdma://127.0.0.1:0", "--serve",
                              "tcp://127.0.0.1:0"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        urls = []
        for _ in range(2):
            line = serve.stdout.readline()
            match = re.match(r"serving ((rdma|tcp)://127\.0\.0\.1:\d+)$", line.strip())
            assert match, f"expected 'serving URL', got {line!r}"
            urls.append(match.group(1))

        # A client killed in the middle of a long stream: the server must not mind.
        doomed = subprocess.Popen(client(bx, urls[:1], 5_000_000), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        doomed.kill()
        doomed.wait()

        run = subprocess.run(client(bx, urls, 2000), capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            sys.exit(f"bx bench msg --connect exited {run.returncode}:\n{run.stderr}")
        report = json.loads(run.stdout)
        assert report["processes"] == 2, report["processes"]
        rows = {(r["transport"], r["size"]): r for r in report["results"]}
        assert sorted(rows) == [("rdma", 8), ("rdma", 65536), ("tcp", 8), ("tcp", 65536)], rows
        for key, r in rows.items():
            assert 0 < r["p50_us"] <= r["p99_us"], (key, r)
            assert r["msgs_per_sec"] > 0 and r["host_cpu_ns_per_msg"] > 0, (key, r)
        assert [m["size"] for m in report["ratios_rdma_over_tcp"]] == [8, 65536], report
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            code = serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
            sys.exit("bx bench msg --serve did not end within 30 s of SIGTERM")
    assert code == 0, f"bx bench msg --serve exited {code}: {serve.stdout.read()}"
    print("bench msg between two processes: rdma and tcp rows and ratios; the server outlived a "
          "killed client and ended on SIGTERM")


if __name__ == "__main__":
    main(sys.argv[1])
