#!/usr/bin/env python3
"""`make bench-peer`: bexpress against UCX on the same simnic device, both between two processes,
with perftest's ib_write_lat/ib_write_bw beside them as the device's own ceiling.

  bexpress  `bx bench msg --serve` in one process, `bx bench msg --connect` in the other: round
            trips of one message (latency: half the round trip's median, as the others report),
            then a one-way stream (messages/s, host CPU per message of both processes, the
            simnic's hardware threads taken out, as on a NIC they would be).
  UCX       ucx_perftest's UCP tests over rc_verbs (wired up over ud_verbs), through
            tools/with-simnic-devices.sh: tag_lat (typical one-way latency) and tag_bw
            (messages/s). Its host CPU per message is read from the two processes' own CPU time
            (/usr/bin/time) less the simnic's (BX_SIM_CPU_REPORT), as the difference between a
            run of 2N messages and one of N, so that start-up and wire-up cancel out.
  perftest  ib_write_lat (typical one-way latency) and ib_write_bw (messages/s), raw verbs.

Ratios are bexpress/UCX: below 1 is better for latency and CPU, above 1 for messages/s. The
simnic's costs are a host's, not a NIC's: what compares is the libraries' own work on one device.

  python3 tools/peer_bench.py --build build [--json] [--sizes 8,4096,65536,1048576]
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LIMIT = 180  # seconds per program run


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port):
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], stdout=subprocess.PIPE, text=True)
    return bool(out.stdout.strip())


class Pair:
    """A server program started first, then its client; both bounded, both timed."""

    def __init__(self, work, name):
        self.work, self.name = work, name

    def run(self, server, client, env):
        port = free_port()
        times = [os.path.join(self.work, f"{self.name}.{side}.time") for side in ("s", "c")]
        logs = [os.path.join(self.work, f"{self.name}.{side}.log") for side in ("s", "c")]
        timed = lambda cmd, t: [c if c != "{time}" else t for c in cmd]  # noqa: E731
        with open(logs[0], "w") as slog:
            srv = subprocess.Popen(timed(server(port), times[0]), stdout=slog, stderr=subprocess.STDOUT,
                                   env=env)
            deadline = time.time() + 30
            while not listening(port):
                if srv.poll() is not None or time.time() > deadline:
                    srv.kill()
                    raise RuntimeError(f"{self.name}: the server did not listen on {port}: "
                                       + open(logs[0]).read()[-400:])
                time.sleep(0.05)
            with open(logs[1], "w") as clog:
                crc = subprocess.run(timed(client(port), times[1]), stdout=clog,
                                     stderr=subprocess.STDOUT, env=env, timeout=LIMIT).returncode
            src = srv.wait(timeout=LIMIT)
        if crc != 0 or src != 0:
            raise RuntimeError(f"{self.name}: client exit {crc}, server exit {src}: "
                               + open(logs[1]).read()[-400:] + open(logs[0]).read()[-400:])
        cpu = 0.0
        for t in times:
            user, system = open(t).read().split()[-2:]
            cpu += float(user) + float(system)
        return open(logs[1]).read(), cpu


def hardware_seconds(report):
    """The simnic hardware CPU the processes of one run reported at exit, in seconds."""
    if not os.path.exists(report):
        return 0.0
    total = sum(int(line.split()[3]) for line in open(report) if line.startswith("pid "))
    os.unlink(report)
    return total / 1e9


def counts(size):
    """Round trips and one-way messages for a size: a few hundred MiB, within bounds."""
    trips = max(500, min(5000, (64 << 20) // max(size, 1)))
    messages = max(500, min(50000, (512 << 20) // max(size, 1)))
    return trips, messages


def run_bexpress(args, env, sizes):
    rows = {}
    serve = subprocess.Popen([args.bx, "bench", "msg", "--serve", "rdma://127.0.0.1:0"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        line = serve.stdout.readline()
        match = re.match(r"serving (\S+)", line)
        if not match:
            raise RuntimeError(f"bx bench msg --serve: {line}{serve.stdout.read()[-400:]}")
        for size in sizes:
            trips, messages = counts(size)
            out = subprocess.run([args.bx, "bench", "msg", "--connect", match.group(1), "--size",
                                  str(size), "--iterations", str(trips), "--messages",
                                  str(messages), "--json"], stdout=subprocess.PIPE, text=True,
                                 env=env, timeout=LIMIT, check=True).stdout
            result = json.loads(out)["results"][0]
            rows[size] = {"latency_us": result["p50_us"] / 2, "msgs_per_sec": result["msgs_per_sec"],
                          "host_ns_per_msg": result["host_cpu_ns_per_msg"]}
    finally:
        serve.terminate()
        serve.wait(timeout=30)
    return rows


def ucx_final(output):
    """ucx_perftest's Final line: iterations, latency typical/avg/overall (us), bandwidth avg/overall
    (MB/s), message rate avg/overall (msg/s)."""
    for line in output.splitlines():
        if line.startswith("Final:"):
            return [float(f) for f in line.split()[1:9]]
    raise RuntimeError("ucx_perftest printed no Final line:\n" + output[-400:])


def run_ucx(args, env, work, sizes):
    report = os.path.join(work, "ucx.cpu")
    ucx_env = dict(env, UCX_TLS="rc_verbs,ud_verbs", UCX_NET_DEVICES="bxsim0:1",
                   BX_SIM_CPU_REPORT=report)
    wrap = ["bash", os.path.join(HERE, "with-simnic-devices.sh"), args.simnic, "/usr/bin/time",
            "-f", "%U %S", "-o", "{time}", "timeout", str(LIMIT), "ucx_perftest"]
    rows = {}
    for size in sizes:
        trips, messages = counts(size)
        lat_out, _ = Pair(work, "ucx-lat").run(
            lambda p: wrap + ["-p", str(p)],
            lambda p: wrap + ["-p", str(p), "-t", "tag_lat", "-s", str(size), "-n", str(trips),
                              "localhost"], ucx_env)
        hardware_seconds(report)
        cpu = []
        rate = 0.0
        for n in (messages, 2 * messages):
            out, seconds = Pair(work, "ucx-bw").run(
                lambda p: wrap + ["-p", str(p)],
                lambda p, n=n: wrap + ["-p", str(p), "-t", "tag_bw", "-s", str(size), "-n", str(n),
                                       "localhost"], ucx_env)
            cpu.append(seconds - hardware_seconds(report))
            rate = ucx_final(out)[6]  # the 2N run's average message rate
        rows[size] = {"latency_us": ucx_final(lat_out)[1], "msgs_per_sec": rate,
                      "host_ns_per_msg": max(cpu[1] - cpu[0], 0.0) * 1e9 / messages}
    return rows


def perftest_figures(output):
    """perftest's figures line under '#bytes': the fields as floats."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("#bytes"):
            for row in lines[i + 1:]:
                if re.match(r"^\s*\d+\s+\d+", row):
                    return [float(f) for f in row.split()]
    raise RuntimeError("perftest printed no figures:\n" + output[-400:])


def run_perftest(args, env, work, sizes):
    pt_env = dict(env, LD_PRELOAD=args.simnic)
    rows = {}
    for size in sizes:
        trips, messages = counts(size)
        base = ["/usr/bin/time", "-f", "%U %S", "-o", "{time}", "timeout", str(LIMIT)]
        common = ["-d", "bxsim0", "-x", "0", "-s", str(size)]
        lat, _ = Pair(work, "write-lat").run(
            lambda p: base + ["ib_write_lat", *common, "-n", str(trips), "-p", str(p)],
            lambda p: base + ["ib_write_lat", *common, "-n", str(trips), "-p", str(p), "localhost"],
            pt_env)
        bw, _ = Pair(work, "write-bw").run(
            lambda p: base + ["ib_write_bw", *common, "-n", str(messages), "-p", str(p)],
            lambda p: base + ["ib_write_bw", *common, "-n", str(messages), "-p", str(p),
                              "localhost"], pt_env)
        # ib_write_lat: bytes iterations t_min t_max t_typical ...; ib_write_bw: bytes iterations
        # BW peak, BW average (MB/s, 2^20 bytes), MsgRate (Mpps).
        rows[size] = {"latency_us": perftest_figures(lat)[4],
                      "msgs_per_sec": perftest_figures(bw)[4] * 1e6}
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--sizes", default="8,4096,65536,1048576")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.bx = os.path.join(args.build, "bin", "bx")
    args.simnic = os.path.realpath(os.path.join(args.build, "lib", "libbx_simnic.so"))
    sizes = [int(s) for s in args.sizes.split(",")]
    for program in ("ucx_perftest", "ib_write_lat", "ib_write_bw"):
        if subprocess.run(["sh", "-c", f"command -v {program}"], stdout=subprocess.DEVNULL).returncode:
            sys.exit(f"peer_bench: {program} missing (tools/install-deps.sh installs ucx-utils, perftest)")
    env = dict(os.environ, BX_VERBS="sim", BX_SIMNIC_LIB=args.simnic)
    env.pop("LD_PRELOAD", None)
    with tempfile.TemporaryDirectory(prefix="bx-peer.") as work:
        results = {"bexpress": run_bexpress(args, env, sizes),
                   "ucx": run_ucx(args, env, work, sizes),
                   "perftest": run_perftest(args, env, work, sizes)}
    ratios = {}
    for size in sizes:
        bx, ucx = results["bexpress"][size], results["ucx"][size]
        ratios[size] = {k: bx[k] / ucx[k] if ucx[k] > 0 else None
                        for k in ("latency_us", "msgs_per_sec", "host_ns_per_msg")}
    ratio = lambda value: f"{value:>5.2f}" if value is not None else "  n/a"  # noqa: E731
    if args.json:
        print(json.dumps({"sizes": sizes, "results": results, "ratios_bexpress_over_ucx": ratios},
                         indent=2))
        return
    print(f"{'size':>8} | {'one-way latency, us':^26} | {'messages/s':^32} | "
          f"{'host ns/msg':^17} | bexpress/UCX")
    print(f"{'':>8} | {'bx':>8} {'UCX':>8} {'verbs':>8} | {'bx':>10} {'UCX':>10} {'verbs':>10} | "
          f"{'bx':>8} {'UCX':>8} | {'lat':>5} {'msg/s':>5} {'cpu':>5}")
    for size in sizes:
        b, u, p, r = (results["bexpress"][size], results["ucx"][size], results["perftest"][size],
                      ratios[size])
        print(f"{size:>8} | {b['latency_us']:>8.1f} {u['latency_us']:>8.1f} {p['latency_us']:>8.1f} | "
              f"{b['msgs_per_sec']:>10.0f} {u['msgs_per_sec']:>10.0f} {p['msgs_per_sec']:>10.0f} | "
              f"{b['host_ns_per_msg']:>8.0f} {u['host_ns_per_msg']:>8.0f} | "
              f"{ratio(r['latency_us'])} {ratio(r['msgs_per_sec'])} {ratio(r['host_ns_per_msg'])}")


if __name__ == "__main__":
    main()
