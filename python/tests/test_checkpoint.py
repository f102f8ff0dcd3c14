"""Checkpoints from Python against `bx ps serve` processes: bexpress.checkpoint of a 2-shard
cluster, read back with NumPy through bexpress.export_table, restored into 3 shards
(`bx ps serve --restore`, LocalCluster's serve_args) with every row as it was; clear errors for
what is not there."""

import os
import tempfile
import unittest

import numpy as np

import bexpress
from bexpress.testing import LocalCluster

TABLE = {"id": 1, "name": "emb", "kind": "embedding", "dim": 8,
         "optimizer": {"kind": "adagrad", "learning_rate": 0.1, "initial_accumulator": 0.1}}


class CheckpointTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        bexpress.init()

    def test_a_checkpoint_is_read_by_numpy_and_restores_into_another_shard_count(self):
        rng = np.random.default_rng(5)
        keys = rng.choice(10**12, size=5000, replace=False).astype(np.uint64)
        grads = rng.standard_normal((len(keys), 8)).astype(np.float32)
        with tempfile.TemporaryDirectory() as d:
            ckpt, npz = os.path.join(d, "ckpt"), os.path.join(d, "emb.npz")
            with LocalCluster(shards=2, replicas=1, tables=[TABLE]) as cluster:
                with bexpress.PsClient(cluster.path, transport="tcp") as client:
                    client.push("emb", keys, grads, timeout=30.0)
                    client.push("emb", keys, grads, timeout=30.0)
                    before = np.array(client.fetch("emb", keys, timeout=30.0))
                manifest = bexpress.checkpoint(bexpress.Cluster.load(cluster.path), ckpt)
            self.assertEqual(manifest["shard_count"], 2)
            self.assertEqual([s["shard"] for s in manifest["shards"]], [0, 1])
            self.assertEqual(bexpress.read_checkpoint(ckpt), manifest)

            self.assertEqual(bexpress.export_table(ckpt, "emb", npz, optimizer_state=True),
                             len(keys))
            with np.load(npz) as z:
                order, expected = np.argsort(z["keys"]), np.argsort(keys)
                np.testing.assert_array_equal(z["keys"][order], keys[expected])
                np.testing.assert_array_equal(z["rows"][order], before[expected])
                # AdaGrad's accumulators: the initial 0.1 plus the squared gradients, twice.
                np.testing.assert_allclose(z["state"][order], 0.1 + 2 * grads[expected] ** 2,
                                           rtol=1e-5)

            with LocalCluster(shards=3, replicas=1, tables=[TABLE],
                              serve_args=["--restore", ckpt]) as restored:
                with bexpress.PsClient(restored.path, transport="tcp") as client:
                    after = np.array(client.fetch("emb", keys, timeout=30.0))
            np.testing.assert_array_equal(after, before)

            with self.assertRaises(bexpress.NotFound):
                bexpress.export_table(ckpt, "nope", npz)
            with self.assertRaises(bexpress.NotFound):
                bexpress.read_checkpoint(d)  # no manifest there


if __name__ == "__main__":
    unittest.main()
