"""The DLRM-style example (examples/python/dlrm_train.py) in a small configuration over rdma://:
26 PsEmbeddingBag tables and two MLPs learn (held-out AUC well above chance, loss falling), with
and without prefetch, and with prefetch every step but each epoch's last takes its rows from
the prefetch of every table (no miss, no extra fetch)."""

import json
import os
import subprocess
import sys
import unittest

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "python", "dlrm_train.py")


class DlrmTrainTest(unittest.TestCase):
    def test_it_learns_with_and_without_prefetch(self):
        samples, epochs, batch = 8000, 2, 256
        reply = subprocess.run([sys.executable, EXAMPLE, "--json", "--transports", "rdma",
                                "--samples", str(samples), "--epochs", str(epochs),
                                "--batch", str(batch)],
                               check=True, stdout=subprocess.PIPE, text=True, timeout=150)
        runs = json.loads(reply.stdout)
        self.assertEqual([r["prefetch"] for r in runs], [False, True])
        steps = -(-int(samples * 0.8) // batch)
        for r in runs:
            with self.subTest(prefetch=r["prefetch"]):
                self.assertGreater(r["auc"], 0.62, r)  # chance is 0.5; the truth's ~0.79
                self.assertLess(r["final_loss"], sum(r["steps"][:10]) / 10, r)
                self.assertGreater(r["samples_per_s"], 0)
                self.assertGreater(r["fetch"]["p50_us"], 0)
                self.assertEqual(r["prefetch_misses"], 0)
                self.assertEqual(r["prefetch_hits"], 26 * (steps - 1) * epochs if r["prefetch"]
                                 else 0)


if __name__ == "__main__":
    unittest.main()
