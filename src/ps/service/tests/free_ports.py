#!/usr/bin/env python3
"""Prints N free loopback TCP ports for a test cluster, from below the kernel's ephemeral range.

A port bound to 0 and closed again comes from the ephemeral range, where any outgoing connection
of another process may take it before the cluster listens on it ("Address already in use" on a
busy machine). Ports below that range are only ever taken by an explicit bind: each one here is
checked free by binding it, and they are chosen at random so that scripts running side by side
rarely pick the same one.
"""
import random
import socket
import sys


def ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def main():
    count = int(sys.argv[1])
    high = ephemeral_low() - 1
    low = 10000 if high > 12000 else 1024
    chosen, held = [], []
    for port in random.sample(range(low, high), min(high - low, 50 * count)):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        held.append(s)
        chosen.append(port)
        if len(chosen) == count:
            break
    for s in held:
        s.close()
    if len(chosen) < count:
        sys.exit(f"free_ports: found {len(chosen)} of {count} free ports below {high + 1}")
    print(" ".join(map(str, chosen)))


if __name__ == "__main__":
    main()
