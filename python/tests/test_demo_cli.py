"""`bx demo --inference-rate`: open-loop inference, the same offered load over both transports.

The closed-loop demo lets each transport set its own load (the rankers keep their fan-outs in
flight), so its fetch latencies compare different loads. With a rate, the rankers start fetches
at Poisson arrival times drawn from fixed seeds: both transports get the very same schedule.
"""

import json
import math
import os
import subprocess
import unittest

BX = os.environ["BX_BIN"]


class DemoOpenLoopTest(unittest.TestCase):
    def test_both_transports_serve_the_same_offered_load(self):
        rate, duration = 100.0, 8.0  # 2 s for each workload and transport
        run = subprocess.run(
            [BX, "demo", "--duration", str(duration), "--inference-rate", str(rate), "--json"],
            capture_output=True, text=True, timeout=170)
        self.assertEqual(run.returncode, 0, run.stderr)
        inference = json.loads(run.stdout)["inference"]
        self.assertEqual(inference["offered_rate"], rate)
        expected = rate * duration / 4
        for scheme in ("rdma", "tcp"):
            figures = inference[scheme]
            self.assertEqual(figures["errors"], 0, scheme)
            # Every fetch due before the end is sent and waited for: a Poisson count, mean 200
            # (a closed loop would do thousands); five standard deviations either side.
            self.assertLess(abs(figures["requests"] - expected), 5 * math.sqrt(expected),
                            f"{scheme}: {figures['requests']} fetches for {expected:.0f} offered")
        # The same arrival times over both transports: the same number of fetches.
        self.assertEqual(inference["rdma"]["requests"], inference["tcp"]["requests"])

    def test_a_negative_rate_is_refused(self):
        run = subprocess.run([BX, "demo", "--inference-rate", "-5"], capture_output=True,
                             text=True, timeout=30)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("--inference-rate", run.stderr)


if __name__ == "__main__":
    unittest.main()
