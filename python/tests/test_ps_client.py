"""bexpress.PsClient against `bx ps serve` processes, over rdma:// (simnic) and tcp://: values,
zero-copy fetches, exceptions with codes, the GIL, futures and asyncio, and PsServer; keys (all
of uint64, never a float or a negative number), fetches of no keys, and the module's log level."""

import asyncio
import gc
import json
import os
import socket
import subprocess
import sys
import threading
import time
import unittest

import numpy as np

import bexpress
from bexpress.testing import LocalCluster, free_port

DIM = 4
TABLES = [{"id": 1, "name": "emb", "kind": "embedding", "dim": DIM,
           "optimizer": {"kind": "sgd", "learning_rate": 1}},
          {"id": 2, "name": "dense", "kind": "dense", "dim": 2, "rows": 8}]
cluster = None


def setUpModule():
    global cluster
    bexpress.init()
    cluster = LocalCluster(shards=2, replicas=1, tables=TABLES)


def tearDownModule():
    cluster.close()


def keys_of_shard(shard, count, start=1):
    keys, k = [], start
    while len(keys) < count:
        if bexpress.shard_of_key(k, 2) == shard:
            keys.append(k)
        k += 1
    return np.array(keys, dtype=np.uint64)


class PsClientTest(unittest.TestCase):
    def each_transport(self):
        for transport in ("rdma", "tcp"):
            with self.subTest(transport=transport):
                with bexpress.PsClient(cluster.path, transport=transport) as client:
                    yield transport, client

    def test_fetch_returns_what_pushes_wrote(self):
        base = 1000
        for transport, client in self.each_transport():
            keys = np.arange(base, base + 64, dtype=np.uint64)
            base += 1000
            grads = (np.arange(64 * DIM, dtype=np.float32).reshape(64, DIM) % 7) - 3
            for _ in range(3):
                client.push("emb", keys, grads)
            rows = client.fetch("emb", keys)
            self.assertEqual(rows.dtype, np.float32)
            self.assertEqual(rows.shape, (64, DIM))
            np.testing.assert_array_equal(rows, -3 * grads)  # learning rate 1: w = -sum(g)
            # By id as well as by name; keys as a list of ints.
            np.testing.assert_array_equal(client.fetch(1, [int(k) for k in keys[:3]]),
                                          -3 * grads[:3])

    def test_fetch_is_a_view_on_the_received_reply_and_outlives_the_client(self):
        for transport, client in self.each_transport():
            keys = keys_of_shard(0, 16, start=50_000 if transport == "rdma" else 60_000)
            client.push("emb", keys, np.full((16, DIM), 2, np.float32))
            rows = client.fetch("emb", keys)
            owner = rows.base
            self.assertIsInstance(owner, bexpress.FetchedRows)
            self.assertFalse(owner.copied)
            begin, end = owner.received_range
            address = rows.__array_interface__["data"][0]
            self.assertEqual(address, owner.address)
            self.assertTrue(begin <= address and address + rows.nbytes <= end,
                            f"rows at {address:#x} are not inside the reply [{begin:#x}, {end:#x})")
            # Keys of both shards are gathered into key order: the one copy that remains.
            both = np.concatenate([keys, keys_of_shard(1, 4)])
            gathered = client.fetch("emb", both)
            self.assertTrue(gathered.base.copied)
            self.assertEqual(gathered.base.received_range, (0, 0))
            np.testing.assert_array_equal(gathered[:16], rows)
            client.close()
            del client
            gc.collect()
            np.testing.assert_array_equal(rows, np.full((16, DIM), -2, np.float32))
            rows[0, 0] = 5  # the caller's memory: writable
            self.assertEqual(rows[0, 0], 5)

    def test_every_status_code_has_its_exception(self):
        from bexpress import _bexpress, errors
        for code in _bexpress.STATUS_CODES[1:]:  # all but OK
            exception = errors.from_status(code, "why")
            self.assertIsNot(type(exception), bexpress.Error, code)
            self.assertEqual(exception.code, code)
        self.assertIsInstance(errors.from_status("PERMISSION_DENIED", "why"), PermissionError)

    def test_exceptions_carry_status_codes(self):
        for transport, client in self.each_transport():
            with self.assertRaises(bexpress.NotFound) as caught:
                client.fetch("no-such-table", [1])
            self.assertEqual(caught.exception.code, "NOT_FOUND")
            self.assertIn("no-such-table", caught.exception.message)
            with self.assertRaises(ValueError) as caught:  # InvalidArgument is a ValueError
                client.push("emb", [1, 2], np.zeros((3, DIM), np.float32))
            self.assertIsInstance(caught.exception, bexpress.InvalidArgument)
            with self.assertRaises(bexpress.InvalidArgument):
                client.fetch("emb", [1], timeout=0)
            # The server's own refusal comes back with its code: row 99 of an 8-row dense table.
            with self.assertRaises(bexpress.Error) as caught:
                client.fetch("dense", [99])
            self.assertEqual(caught.exception.code, "INVALID_ARGUMENT", caught.exception)
            with self.assertRaises(bexpress.Error) as caught:
                client.push("emb", [1], np.zeros((1, DIM + 1), np.float32))
            self.assertEqual(caught.exception.code, "INVALID_ARGUMENT", caught.exception)
            with self.assertRaises(bexpress.InvalidArgument):
                bexpress.PsClient(cluster.path, transport="udp")
            # The server's gradient sanity check: NaN is refused whole, with the key named.
            bad = np.ones((2, DIM), np.float32)
            bad[1, 0] = np.nan
            with self.assertRaises(bexpress.InvalidArgument) as caught:
                client.push("emb", [5, 6], bad)
            self.assertIn("key 6", caught.exception.message)

    def test_a_call_nobody_answers_ends_at_its_deadline_and_releases_the_gil(self):
        # A replica whose port accepts connections (the kernel's backlog) and never answers.
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(16)
            port = silent.getsockname()[1]
            spec = {"version": 1, "tables": TABLES,
                    "shards": [{"replicas": [{"tcp": f"tcp://127.0.0.1:{port}"}]}]}
            self.check_deadline_without_gil(bexpress.Cluster.parse(json.dumps(spec)))

    def check_deadline_without_gil(self, silent_cluster):
        with bexpress.PsClient(silent_cluster, "tcp", connect_timeout=5.0) as client:
            ticks = 0
            stop = threading.Event()

            def count():
                nonlocal ticks
                while not stop.is_set():
                    ticks += 1
                    time.sleep(0.001)
            counter = threading.Thread(target=count)
            counter.start()
            start = time.monotonic()
            with self.assertRaises(bexpress.Error) as caught:
                client.fetch("emb", [1], timeout=1.0)
            elapsed = time.monotonic() - start
            stop.set()
            counter.join()
            self.assertEqual(caught.exception.code, "DEADLINE_EXCEEDED", caught.exception)
            self.assertGreaterEqual(elapsed, 0.9)
            # Holding the GIL for the second would have left the counter at a handful of ticks.
            self.assertGreater(ticks, 100, f"{ticks} ticks in {elapsed:.2f} s")

    def test_futures_and_asyncio(self):
        for transport, client in self.each_transport():
            keys = np.arange(70_000, 70_032, dtype=np.uint64) + (0 if transport == "rdma" else 100)
            futures = [client.push_async("emb", keys, np.ones((32, DIM), np.float32))
                       for _ in range(20)]
            for future in futures:
                self.assertIsNone(future.result(timeout=10))
            np.testing.assert_array_equal(client.fetch_async("emb", keys).result(timeout=10),
                                          np.full((32, DIM), -20, np.float32))

            async def both():
                await client.push_asyncio("emb", keys, np.ones((32, DIM), np.float32))
                return await client.fetch_asyncio("emb", keys)
            np.testing.assert_array_equal(asyncio.run(both()), np.full((32, DIM), -21, np.float32))
            failed = client.fetch_async("dense", [99])
            with self.assertRaises(bexpress.InvalidArgument):
                failed.result(timeout=10)

    def test_stats_and_metrics(self):
        for transport, client in self.each_transport():
            client.fetch("emb", [1, 2, 3])
            stats = client.stats()
            self.assertGreaterEqual(stats["calls"], 1)
            self.assertGreaterEqual(stats["ok"], 1)
            self.assertTrue(stats["latency"], stats)  # per method, successful calls
        self.assertIsInstance(bexpress.metrics(), dict)

    def test_fetching_no_keys_gives_the_tables_dim(self):
        # Once a (0, 0) array, which PsEmbedding then took for a table of dim 0.
        for _, client in self.each_transport():
            for keys in ([], np.array([], np.uint64), np.array([], np.int64)):
                rows = client.fetch("emb", keys)
                self.assertEqual((rows.shape, rows.dtype), ((0, DIM), np.float32))
            self.assertEqual(client.fetch("dense", []).shape, (0, 2))
            self.assertEqual(client.fetch_async("emb", []).result(timeout=10).shape, (0, DIM))
            with self.assertRaisesRegex(bexpress.NotFound, "no table 9 in the cluster file"):
                client.fetch(9, [])
            # A name the file lacks is NotFound naming those it has (PsClient::TableId).
            with self.assertRaisesRegex(bexpress.NotFound, 'its tables: "emb", "dense"'):
                client.fetch("embedding", [1])
            self.assertEqual(client.table_id("dense"), 2)

    def test_keys_above_2_63(self):
        for _, client in self.each_transport():
            keys = np.array([2**63 + 11, 2**64 - 3, 11], np.uint64)
            before = client.fetch("emb", keys)
            client.push("emb", keys[:2], np.ones((2, DIM), np.float32))
            client.push_async("emb", keys[:1], np.ones((1, DIM), np.float32)).result(timeout=10)
            np.testing.assert_array_equal(client.fetch("emb", keys) - before,
                                          [[-2] * DIM, [-1] * DIM, [0] * DIM])

    def test_non_integer_and_negative_keys_are_refused(self):
        # Both used to pass silently: 1.5 was fetched as key 1 and -1 as key 2^64 - 1.
        client = bexpress.PsClient(cluster.path, "tcp")
        self.addCleanup(client.close)
        grads = np.zeros((1, DIM), np.float32)
        calls = {"fetch": lambda k: client.fetch("emb", k),
                 "fetch_async": lambda k: client.fetch_async("emb", k),
                 "push": lambda k: client.push("emb", k, grads),
                 "push_async": lambda k: client.push_async("emb", k, grads)}
        for name, call in calls.items():
            with self.subTest(call=name):
                for keys in ([1.5], np.array([2.0]), np.array([True])):
                    with self.assertRaisesRegex(TypeError, "keys must be integers"):
                        call(keys)
                for keys in ([-1], np.array([-5], np.int32)):
                    with self.assertRaisesRegex(bexpress.InvalidArgument, "must not be negative"):
                        call(keys)


# A client's life in a process of its own, to read what the module wrote on its stderr.
LOGGING_SCRIPT = """
import sys, time, bexpress
if len(sys.argv) > 2:
    bexpress.set_log_level(sys.argv[2])
bexpress.init()
with bexpress.PsClient(sys.argv[1], "tcp") as client:
    client.fetch("emb", [1])
# A peer refused for the wrong secret: a warning.
listener = bexpress.Transport("tcp", auth_secret="right").listen("tcp://127.0.0.1:0")
try:
    bexpress.Transport("tcp", auth_secret="wrong").connect(listener.url, timeout=2).receive(1)
except bexpress.Error:
    pass
time.sleep(1)  # the listener's warning may come after the refusal reached the client
"""


class LogLevelTest(unittest.TestCase):
    """Quiet by default: every connection used to print `bx rpc: replica ... connecting -> up`
    on stderr."""

    def run_client(self, *args, env=None):
        return subprocess.run([sys.executable, "-c", LOGGING_SCRIPT, cluster.path, *args],
                              env=dict(os.environ, **(env or {})), capture_output=True,
                              text=True, timeout=60)

    def test_quiet_but_for_warnings_by_default(self):
        run = self.run_client(env={"BX_LOG_LEVEL": ""})
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertNotIn("connecting -> up", run.stderr)
        self.assertIn("refused", run.stderr)

    def test_info_when_asked(self):
        for args, env in (((), {"BX_LOG_LEVEL": "info"}), (("info",), {})):
            with self.subTest(args=args, env=env):
                run = self.run_client(*args, env=env)
                self.assertEqual(run.returncode, 0, run.stderr)
                self.assertIn("connecting -> up", run.stderr)

    def test_a_level_that_does_not_exist_is_refused(self):
        run = self.run_client(env={"BX_LOG_LEVEL": "loud"})
        self.assertNotEqual(run.returncode, 0)
        self.assertIn('BX_LOG_LEVEL: log level must be "debug", "info", "warning" or "error", '
                      'not "loud"', run.stderr)
        with self.assertRaisesRegex(ValueError, "not \"verbose\""):
            bexpress.set_log_level("verbose")


class PsServerTest(unittest.TestCase):
    def test_an_in_process_server_serves_a_client(self):
        rdma, tcp = free_port(), free_port()
        spec = {"version": 1, "tables": TABLES, "shards": [{"replicas": [
            {"rdma": f"rdma://127.0.0.1:{rdma}", "tcp": f"tcp://127.0.0.1:{tcp}"}]}]}
        c = bexpress.Cluster.parse(json.dumps(spec))
        self.assertEqual(c.shard_count, 1)
        self.assertEqual(c.tables["emb"], (1, DIM))
        server = bexpress.PsServer(c)
        server.start([f"rdma://127.0.0.1:{rdma}", f"tcp://127.0.0.1:{tcp}"])
        server.become_primary(1)
        self.assertEqual(server.address["tcp"], f"tcp://127.0.0.1:{tcp}")
        with bexpress.PsClient(c, "rdma") as client:
            client.push("emb", [7], np.ones((1, DIM), np.float32))
            np.testing.assert_array_equal(client.fetch("emb", [7]), -np.ones((1, DIM)))
        counters = server.counters()
        self.assertEqual(counters["pushes_acked"], 1)
        self.assertEqual(counters["fetches"], 1)
        self.assertEqual(server.metrics()["bx_ps_replica_lsn"], 1.0)
        server.stop()
        with self.assertRaises(bexpress.FailedPrecondition):
            server.counters()


if __name__ == "__main__":
    unittest.main()
