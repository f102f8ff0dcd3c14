"""`import bexpress` in a fresh Debian interpreter with nothing set up: no GLIBC_TUNABLES, no
LD_PRELOAD, after `import torch` (as a notebook or torchrun would), then a push and a fetch over
rdma:// and a 1 MiB message. Until bemalloc had heaps of its own, the import failed here:
libjemalloc's initial-exec TLS does not fit the reserve glibc keeps for libraries loaded late."""

import os
import subprocess
import sys
import unittest

SCRIPT = r"""
import numpy as np
import torch
import bexpress
from bexpress.testing import LocalCluster

maps = open("/proc/self/maps").read()
assert "libjemalloc" not in maps, "jemalloc is loaded"
bexpress.init()
tables = [{"id": 1, "name": "emb", "kind": "embedding", "dim": 4,
           "optimizer": {"kind": "sgd", "learning_rate": 1}}]
with LocalCluster(shards=2, replicas=1, tables=tables) as cluster:
    with bexpress.PsClient(cluster.path, transport="rdma") as client:
        keys = np.arange(1, 65, dtype=np.uint64)
        grads = np.ones((64, 4), dtype=np.float32)
        client.push("emb", keys, grads)
        client.push("emb", keys, grads)
        rows = client.fetch("emb", keys)
        assert np.array_equal(rows, np.full((64, 4), -2, dtype=np.float32)), rows[:2]
t = bexpress.Transport("rdma")
listener = t.listen("rdma://127.0.0.1:0")
sock = t.connect(listener.url)
payload = bytes(range(256)) * 4096
sock.send(payload)
message = listener.accept().receive(timeout=30)
assert bytes(message) == payload
print("clean import: ok", torch.__version__)
"""


class CleanImportTest(unittest.TestCase):
    def test_import_push_fetch_without_setup(self):
        env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
               "PYTHONPATH": os.environ["PYTHONPATH"], "OMP_NUM_THREADS": "1"}
        if "BX_BIN" in os.environ:
            env["BX_BIN"] = os.environ["BX_BIN"]  # the build tree's bx, for LocalCluster
        result = subprocess.run(["/usr/bin/python3", "-c", SCRIPT], env=env, capture_output=True,
                                text=True, timeout=150)
        sys.stderr.write(result.stderr[-4000:])
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertIn("clean import: ok", result.stdout)


if __name__ == "__main__":
    unittest.main()
