"""bexpress.torch.PsEmbedding: forward fetches the batch's distinct ids, backward pushes their
gradients summed per id, no_grad pushes nothing, flush waits, and the fetched rows reach torch
without a copy."""

import unittest

import numpy as np
import torch

import bexpress
from bexpress.testing import LocalCluster
from bexpress.torch import PsEmbedding

DIM = 3
TABLES = [{"id": 1, "name": "emb", "kind": "embedding", "dim": DIM,
           "init": {"kind": "constant", "value": 0.5},
           "optimizer": {"kind": "sgd", "learning_rate": 1}}]
cluster = None


def setUpModule():
    global cluster
    bexpress.init()
    cluster = LocalCluster(shards=2, replicas=1, tables=TABLES)


def tearDownModule():
    cluster.close()


class PsEmbeddingTest(unittest.TestCase):
    def test_backward_pushes_gradients_summed_per_id(self):
        for transport, base in (("rdma", 100), ("tcp", 200)):
            with self.subTest(transport=transport), \
                    bexpress.PsClient(cluster.path, transport) as client:
                emb = PsEmbedding(1000, DIM, table="emb", client=client, max_pushes_in_flight=2)
                ids = torch.tensor([[base, base + 1, base], [base + 2, base, base + 1]])
                out = emb(ids)
                self.assertEqual(out.shape, (2, 3, DIM))
                torch.testing.assert_close(out, torch.full((2, 3, DIM), 0.5))
                weights = torch.arange(1, DIM + 1, dtype=torch.float32)
                (out * weights).sum().backward()  # d/d row = weights, once per occurrence
                emb.flush()
                self.assertEqual((emb.fetches, emb.pushes), (1, 1))
                rows = client.fetch("emb", np.array([base, base + 1, base + 2], np.uint64))
                # id base appears 3 times, base+1 twice, base+2 once: w = 0.5 - count * weights.
                for row, count in zip(rows, (3, 2, 1)):
                    np.testing.assert_allclose(row, 0.5 - count * weights.numpy())

    def test_no_grad_fetches_without_pushing(self):
        with bexpress.PsClient(cluster.path, "rdma") as client:
            emb = PsEmbedding(1000, DIM, table="emb", client=client)
            with torch.no_grad():
                out = emb(torch.tensor([300, 301]))
            self.assertFalse(out.requires_grad)
            self.assertEqual((emb.fetches, emb.pushes), (1, 0))
            before = client.stats()["calls"]
            emb.flush()
            self.assertEqual(client.stats()["calls"], before)

    def test_fetched_rows_reach_torch_without_a_copy(self):
        with bexpress.PsClient(cluster.path, "rdma") as client:
            key = next(k for k in range(400, 500) if bexpress.shard_of_key(k, 2) == 0)
            rows = client.fetch("emb", [key])
            weight = torch.from_numpy(rows)
            self.assertEqual(weight.data_ptr(), rows.base.address)

    def test_a_push_error_surfaces_at_flush(self):
        with bexpress.PsClient(cluster.path, "tcp") as client:
            emb = PsEmbedding(1000, DIM, table="emb", client=client)
            out = emb(torch.tensor([500]))
            emb.table = "no-such-table"  # the push of this backward names a missing table
            with self.assertRaises(bexpress.NotFound):
                out.sum().backward()
                emb.flush()

    def test_a_model_learns_through_it(self):
        # One id per class, a linear head: SGD on the server must separate the two classes.
        torch.manual_seed(0)
        with bexpress.PsClient(cluster.path, "rdma") as client:
            emb = PsEmbedding(10, DIM, table="emb", client=client, max_pushes_in_flight=0)
            head = torch.nn.Linear(DIM, 1)
            optimizer = torch.optim.SGD(head.parameters(), lr=0.1)
            ids = torch.tensor([600, 601])
            labels = torch.tensor([[1.0], [0.0]])
            losses = []
            for _ in range(30):
                loss = torch.nn.functional.binary_cross_entropy_with_logits(head(emb(ids)), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
            self.assertLess(losses[-1], 0.2 * losses[0], losses)


if __name__ == "__main__":
    unittest.main()
