"""`bx demo`: both transports get the same load.

Closed loop (the default), each completed fetch starts the ranker's next, so both transports
carry the same fan-outs in flight. With `--inference-rate`, the rankers start fetches at Poisson
arrival times drawn from fixed seeds: both transports get the very same schedule.
"""

import json
import math
import os
import subprocess
import unittest

BX = os.environ["BX_BIN"]
# Control: BX_DEMO_EXTRA_ARGS=--refill-from-ranker runs the old closed loop.
EXTRA_ARGS = os.environ.get("BX_DEMO_EXTRA_ARGS", "").split()
# A quarter of the demo's default key space: every run loads each key before its clock starts
# (a push per key and replica), which took most of a run at the default 2^18. The tests below
# count fetches and what is in flight, which the key space does not change.
KEYS = 1 << 16


class DemoLoadTest(unittest.TestCase):
    def run_demo(self, duration, *args):
        """Runs `bx demo --json` for `duration` seconds; returns its inference figures."""
        run = subprocess.run([BX, "demo", "--duration", str(duration), "--keys", str(KEYS), "--json",
                              *args],
                             capture_output=True, text=True, timeout=170)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.stderr = run.stderr  # why requests failed, for the assertions' messages
        return json.loads(run.stdout)["inference"]

    def test_both_transports_serve_the_same_offered_load(self):
        rate, duration = 200.0, 4.0  # 1 s for each workload and transport
        inference = self.run_demo(duration, "--inference-rate", str(rate))
        self.assertEqual(inference["offered_rate"], rate)
        expected = rate * duration / 4
        for scheme in ("rdma", "tcp"):
            figures = inference[scheme]
            self.assertEqual(figures["errors"], 0, f"{scheme}: {self.stderr}")
            # Every fetch due before the end is sent and waited for: a Poisson count, mean 200
            # (a closed loop would do thousands); five standard deviations either side.
            self.assertLess(abs(figures["requests"] - expected), 5 * math.sqrt(expected),
                            f"{scheme}: {figures['requests']} fetches for {expected:.0f} offered")
        # The same arrival times over both transports: the same number of fetches.
        self.assertEqual(inference["rdma"]["requests"], inference["tcp"]["requests"])

    def test_the_closed_loop_keeps_its_fetches_in_flight_on_both_transports(self):
        # 2 rankers x 8 fan-outs: each completed fetch starts the next, so by Little's law the
        # mean in flight (fetches/s x mean latency) is the full 16 on both transports. Refilled
        # by the ranker thread instead (--refill-from-ranker), the busier transport kept fewer.
        duration = 4.0
        inference = self.run_demo(duration, *EXTRA_ARGS)
        for scheme in ("rdma", "tcp"):
            figures = inference[scheme]
            self.assertEqual(figures["errors"], 0, f"{scheme}: {self.stderr}")
            in_flight = figures["requests_per_sec"] * figures["fetch_mean_us"] / 1e6
            self.assertGreater(in_flight, 0.9 * 16, f"{scheme}: {in_flight:.2f} of 16 in flight")

    def test_a_negative_rate_is_refused(self):
        run = subprocess.run([BX, "demo", "--inference-rate", "-5"], capture_output=True,
                             text=True, timeout=30)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("--inference-rate", run.stderr)


if __name__ == "__main__":
    unittest.main()
