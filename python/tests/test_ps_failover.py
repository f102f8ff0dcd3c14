"""The C++ exactly-once guarantee, seen from Python: a stream of pushes from bexpress.PsClient
to a shard whose primary (a `bx ps serve` process) is SIGKILLed mid-stream is acknowledged in
full and applied once each; the backup takes over under etcd's lease."""

import threading
import unittest

import numpy as np

import bexpress
from bexpress.testing import LocalCluster

DIM = 4
PUSHES = 200
TABLES = [{"id": 1, "name": "emb", "kind": "embedding", "dim": DIM,
           "optimizer": {"kind": "sgd", "learning_rate": 1}}]


class PrimaryKillTest(unittest.TestCase):
    def test_a_push_retried_across_a_primary_kill_is_applied_once(self):
        bexpress.init()
        for transport in ("rdma", "tcp"):
            with self.subTest(transport=transport), \
                    LocalCluster(shards=1, replicas=2, tables=TABLES, etcd=True) as cluster, \
                    bexpress.PsClient(cluster.path, transport=transport) as client:
                key = np.array([42], dtype=np.uint64)
                ones = np.ones((1, DIM), np.float32)
                acked, errors = 0, []
                hundred = threading.Event()

                def push_stream():
                    nonlocal acked
                    try:
                        for _ in range(PUSHES):
                            # Generous: a lease (2 s) must expire before the backup takes over.
                            client.push("emb", key, ones, timeout=30)
                            acked += 1
                            if acked == PUSHES // 4:
                                hundred.set()
                    except bexpress.Error as e:
                        errors.append(e)
                        hundred.set()
                pusher = threading.Thread(target=push_stream)
                pusher.start()
                self.assertTrue(hundred.wait(60), "the pushes did not start")
                cluster.kill(0, 0)
                pusher.join(120)
                self.assertFalse(pusher.is_alive())
                self.assertEqual(errors, [])
                self.assertEqual(acked, PUSHES)
                # Each push applied exactly once on the survivor: w = -PUSHES * 1.
                rows = client.fetch("emb", key, timeout=30)
                np.testing.assert_array_equal(rows, np.full((1, DIM), -PUSHES, np.float32))
                self.assertGreater(client.stats()["push_failovers"], 0)


class ReadyMeansReadyTest(unittest.TestCase):
    """Ready means ready: a LocalCluster returns once every primary is primary with its backups
    linked, so the first pushes go straight to it (they failed over, up to 256 times, while the
    primaries still waited for their backups or for the store)."""

    def test_the_first_pushes_see_no_failover(self):
        bexpress.init()
        for etcd in (False, True):
            with self.subTest(etcd=etcd), \
                    LocalCluster(shards=2, replicas=2, tables=TABLES, etcd=etcd) as cluster, \
                    bexpress.PsClient(cluster.path, transport="tcp") as client:
                keys = np.arange(64, dtype=np.uint64)  # on both shards
                client.push("emb", keys, np.ones((64, DIM), np.float32), timeout=30)
                self.assertEqual(client.stats()["push_failovers"], 0)


if __name__ == "__main__":
    unittest.main()
