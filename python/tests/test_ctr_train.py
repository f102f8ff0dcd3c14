"""The CTR training example (examples/python/ctr_train.py) in a small configuration: two
trainer processes against a 2-shard x 2-replica `bx ps serve` cluster over rdma:// and tcp://
learn to within 0.05 of the ground-truth model's held-out AUC; and one synchronous trainer
leaves the same embedding rows over both transports (the PS is deterministic per push order)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "python", "ctr_train.py")


def run(*args):
    reply = subprocess.run([sys.executable, EXAMPLE, "--json", *args], check=True,
                           stdout=subprocess.PIPE, text=True, timeout=150)
    return json.loads(reply.stdout)


class CtrTrainTest(unittest.TestCase):
    def test_trainers_learn_close_to_the_ground_truth_over_both_transports(self):
        with tempfile.TemporaryDirectory() as directory:
            plot = os.path.join(directory, "ctr.png")
            runs = run("--transports", "rdma,tcp", "--trainers", "2", "--samples", "60000",
                       "--epochs", "3", "--rank-batches", "20", "--plot", plot)
            self.assertGreater(os.path.getsize(plot), 10_000)
        self.assertEqual([r["transport"] for r in runs], ["rdma", "tcp"])
        for r in runs:
            truth = r["ground_truth_auc"]
            for trainer in r["trainers"]:
                final = trainer["epochs"][-1]
                first = trainer["epochs"][0]
                self.assertGreater(final["auc"], 0.7, r["transport"])
                self.assertGreater(final["auc"], truth - 0.05,
                                   f"{r['transport']}: {final['auc']:.4f} vs truth {truth:.4f}")
                self.assertLess(final["loss"], first["loss"], r["transport"])
                self.assertGreater(trainer["fetch"]["p50_us"], 0)
                self.assertGreater(trainer["push"]["p50_us"], 0)
            # The ranker scores with the trained model under no_grad: no pushes, same quality.
            self.assertEqual(r["ranker"]["pushes"], 0)
            self.assertGreater(r["ranker"]["auc"], truth - 0.1)

    def test_the_same_seed_gives_the_same_embeddings_over_rdma_and_tcp(self):
        with tempfile.TemporaryDirectory() as directory:
            dump = os.path.join(directory, "rows")
            run("--transports", "rdma,tcp", "--trainers", "1", "--sync", "--samples", "20000",
                "--epochs", "1", "--rank-batches", "0", "--dump", dump)
            rdma, tcp = np.load(dump + ".rdma.npy"), np.load(dump + ".tcp.npy")
        self.assertEqual(rdma.shape, tcp.shape)
        self.assertGreater(np.abs(rdma).max(), 0.02)  # trained, not the initial rows
        np.testing.assert_allclose(rdma, tcp, rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    unittest.main()
