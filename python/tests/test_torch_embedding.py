"""bexpress.torch.PsEmbedding: forward fetches the batch's distinct ids, backward pushes their
gradients summed per id, no_grad pushes nothing, flush waits, and the fetched rows reach torch
without a copy; PsEmbeddingBag and padding_idx give nn.EmbeddingBag's and nn.Embedding's outputs and
gradients on the same rows; ids it cannot honour (floats, negative, on another device), a move off the CPU
and state_dict are refused with errors that say why; an empty batch, and uint64 ids, work."""

import io

import unittest

import numpy as np
import torch

import bexpress
from bexpress.testing import LocalCluster
from bexpress.torch import PsEmbedding, PsEmbeddingBag

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



class PrefetchTest(unittest.TestCase):
    """prefetch(ids) fetches ahead: the forward with the same ids uses those rows (no second
    fetch), one with other ids fetches anew; gradients still reach the rows' keys."""

    def test_a_forward_takes_the_prefetched_rows(self):
        with bexpress.PsClient(cluster.path, "rdma") as client:
            for bag in (False, True):
                with self.subTest(bag=bag):
                    base = 20_000 + 100 * bag
                    emb = (PsEmbeddingBag(100, DIM, table="emb", client=client, mode="sum",
                                          max_pushes_in_flight=0) if bag else
                           PsEmbedding(100, DIM, table="emb", client=client,
                                       max_pushes_in_flight=0))
                    ids = torch.tensor([[base, base + 1], [base + 1, base + 2]])
                    emb.prefetch(ids)
                    calls = client.stats()["calls"]
                    out = emb(ids)
                    self.assertEqual(client.stats()["calls"], calls, "no fetch in the forward")
                    self.assertEqual((emb.fetches, emb.prefetch_hits), (1, 1))
                    out.sum().backward()  # d/d row = 1 per occurrence: base+1 twice
                    rows = client.fetch("emb", np.array([base, base + 1, base + 2], np.uint64))
                    np.testing.assert_allclose(rows[:, 0], [-0.5, -1.5, -0.5])

                    # Prefetches for two batches ahead, then a forward of other ids: it fetches
                    # anew and leaves them; the forward of the second drops the first (a miss).
                    emb.prefetch(ids + 50)
                    emb.prefetch(ids + 60)
                    with torch.no_grad():
                        again = emb(ids)
                        self.assertEqual((emb.fetches, emb.prefetch_misses), (4, 0))
                        emb(ids + 60)
                    self.assertEqual((emb.fetches, emb.prefetch_hits, emb.prefetch_misses),
                                     (4, 2, 1))
                    torch.testing.assert_close(again[..., 0] if not bag else again[:, 0],
                                               torch.tensor([[-0.5, -1.5], [-1.5, -0.5]])
                                               if not bag else torch.tensor([-2.0, -2.0]))

    def test_a_prefetch_the_client_refuses_raises_at_once(self):
        with bexpress.PsClient(cluster.path, "tcp") as client:
            emb = PsEmbedding(100, DIM, table="no-such-table", client=client)
            with self.assertRaises(bexpress.NotFound):
                emb.prefetch(torch.tensor([1]))
            self.assertEqual(emb.fetches, 0)


class MatchesTorchTest(unittest.TestCase):
    """On the same rows (the table's, copied into the torch module), PsEmbeddingBag's output,
    the gradients it pushes and those of per_sample_weights equal nn.EmbeddingBag's, for every
    mode, 1-D input with offsets (an empty bag among them, with and without the last offset) and
    2-D input, padding_idx and int32 ids; PsEmbedding with padding_idx equals nn.Embedding. The
    table's SGD at learning rate 1 makes a row's change its pushed gradient."""

    N = 12  # ids base .. base + N - 1; local index 3 is the padding id when there is one
    PAD = 3

    def setUp(self):
        self.client = bexpress.PsClient(cluster.path, "tcp")
        self.addCleanup(self.client.close)
        self.rng = np.random.default_rng(7)
        self.next_base = 10_000

    def distinct_rows(self):
        """A fresh key range whose rows differ (a random push moved each), and its rows."""
        base, self.next_base = self.next_base, self.next_base + 100
        keys = np.arange(base, base + self.N, dtype=np.uint64)
        self.client.push("emb", keys, self.rng.standard_normal((self.N, DIM)).astype(np.float32))
        return base, keys, self.client.fetch("emb", keys)

    def assert_pushed(self, keys, before, torch_grad):
        pushed = torch.from_numpy(before - self.client.fetch("emb", keys))
        torch.testing.assert_close(pushed, torch_grad, atol=1e-5, rtol=1e-5)

    def test_embedding_bag_matches_torch(self):
        index = torch.tensor([0, 3, 5, 7, 3, 3, 11, 2, 5, 9])
        cases = []
        for mode in ("sum", "mean", "max"):
            for pad in (False, True):
                cases.append(dict(mode=mode, pad=pad, offsets=[0, 3, 3, 7], last=False))
                cases.append(dict(mode=mode, pad=pad, offsets=[0, 3, 3, 7, 10], last=True))
                cases.append(dict(mode=mode, pad=pad, offsets=None, last=False))  # 2-D
        cases.append(dict(mode="sum", pad=False, offsets=[0, 4, 6], last=False, weights=True))
        cases.append(dict(mode="sum", pad=True, offsets=None, last=False, weights=True))
        for case in cases:
            with self.subTest(**case):
                base, keys, before = self.distinct_rows()
                weights = case.get("weights", False)
                reference = torch.nn.EmbeddingBag(
                    self.N, DIM, mode=case["mode"], include_last_offset=case["last"],
                    padding_idx=self.PAD if case["pad"] else None)
                with torch.no_grad():
                    reference.weight.copy_(torch.from_numpy(before))
                bag = PsEmbeddingBag(1000, DIM, table="emb", client=self.client,
                                     mode=case["mode"], include_last_offset=case["last"],
                                     padding_idx=base + self.PAD if case["pad"] else None,
                                     max_pushes_in_flight=0)
                local = index if case["offsets"] is not None else index.reshape(2, 5)
                offsets = (torch.tensor(case["offsets"]) if case["offsets"] is not None
                           else None)
                psw = [torch.linspace(0.5, 2.0, local.numel()).reshape(local.shape)
                       .requires_grad_(True) for _ in range(2)] if weights else [None, None]
                ids = (local + base).to(torch.int32 if case["pad"] else torch.int64)
                want = reference(local, offsets, per_sample_weights=psw[0])
                got = bag(ids, offsets, per_sample_weights=psw[1])
                torch.testing.assert_close(got, want)
                scale = torch.randn(want.shape, generator=torch.Generator().manual_seed(1))
                (want * scale).sum().backward()
                (got * scale).sum().backward()
                self.assert_pushed(keys, before, reference.weight.grad)
                if weights:
                    torch.testing.assert_close(psw[1].grad, psw[0].grad)
                self.assertEqual((bag.fetches, bag.pushes), (1, 1))

    def test_embedding_with_padding_idx_matches_torch(self):
        base, keys, before = self.distinct_rows()
        reference = torch.nn.Embedding(self.N, DIM, padding_idx=self.PAD)
        with torch.no_grad():
            reference.weight.copy_(torch.from_numpy(before))
            reference.weight[self.PAD] = 0  # nn.Embedding's padding row starts at zero
        emb = PsEmbedding(1000, DIM, table="emb", client=self.client, padding_idx=base + self.PAD,
                          max_pushes_in_flight=0)
        local = torch.tensor([[3, 1, 3], [4, 3, 1]])
        want, got = reference(local), emb(local.to(torch.int32) + base)
        torch.testing.assert_close(got, want)
        self.assertTrue(bool((got[0, 0] == 0).all()))
        (want * 2).sum().backward()
        (got * 2).sum().backward()
        # The padding id's row on the server is unchanged: its torch gradient is zero.
        self.assert_pushed(keys, before, reference.weight.grad)

    def test_bags_refuse_what_torch_refuses_and_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "mode must be"):
            PsEmbeddingBag(10, DIM, table="emb", client=self.client, mode="median")
        with self.assertRaisesRegex(ValueError, "padding_idx -1 is negative.*an id"):
            PsEmbeddingBag(10, DIM, table="emb", client=self.client, padding_idx=-1)
        with self.assertRaisesRegex(TypeError, "padding_idx must be an integer"):
            PsEmbedding(10, DIM, table="emb", client=self.client, padding_idx=1.0)
        bag = PsEmbeddingBag(10, DIM, table="emb", client=self.client, mode="mean")
        with self.assertRaisesRegex((ValueError, RuntimeError), "per_sample_weights"):
            bag(torch.tensor([1, 2]), torch.tensor([0]),
                per_sample_weights=torch.ones(2))  # torch allows them with mode "sum" only
        with self.assertRaisesRegex(TypeError, "must be integers"):
            bag(torch.tensor([1.5]), torch.tensor([0]))


class PsEmbeddingRefusesWhatItCannotHonourTest(unittest.TestCase):
    """Each of these used to pass silently (1.5 read as row 1, -1 as key 2^64 - 1,
    .to() a no-op, state_dict() {} saved and loaded "successfully")."""

    def setUp(self):
        self.client = bexpress.PsClient(cluster.path, "tcp")
        self.addCleanup(self.client.close)
        self.emb = PsEmbedding(1000, DIM, table="emb", client=self.client)

    def test_non_integer_ids_raise_type_error(self):
        for ids in (torch.tensor([1.5, 2.0]), np.array([1.5]), [1.5], torch.tensor([True])):
            with self.subTest(ids=ids), self.assertRaisesRegex(TypeError, "must be integers"):
                self.emb(ids)
        self.assertEqual(self.emb.fetches, 0)

    def test_negative_ids_raise_value_error_unless_allowed(self):
        with self.assertRaisesRegex(ValueError, "negative id -1.*allow_negative_ids=True"):
            self.emb(torch.tensor([3, -1]))
        # Asked for: -1 is key 2^64 - 1.
        self.client.push("emb", np.array([2**64 - 1], np.uint64), np.ones((1, DIM), np.float32))
        signed = PsEmbedding(1000, DIM, table="emb", client=self.client,
                             allow_negative_ids=True)
        with torch.no_grad():
            torch.testing.assert_close(signed(torch.tensor([-1])), torch.full((1, DIM), -0.5))

    def test_ids_off_the_cpu_are_refused(self):
        with self.assertRaisesRegex(RuntimeError, "ids are on meta.*CPU"):
            self.emb(torch.tensor([1, 2], device="meta"))

    def test_the_module_cannot_move_off_the_cpu(self):
        model = torch.nn.Sequential(self.emb, torch.nn.Linear(DIM, 1))
        for move in (lambda m: m.to("meta"), lambda m: m.to(torch.device("meta"))):
            with self.assertRaisesRegex(RuntimeError, "PsEmbedding cannot move to meta"):
                move(model)
        model.to("cpu")  # honoured: it stays where it is
        self.assertEqual(model(torch.tensor([7])).shape, (1, 1))

    def test_state_dict_and_load_state_dict_raise(self):
        with self.assertRaisesRegex(NotImplementedError, "parameter server.*bexpress.checkpoint"):
            self.emb.state_dict()
        with self.assertRaises(NotImplementedError):
            self.emb.load_state_dict({})
        model = torch.nn.Sequential(torch.nn.Linear(DIM, DIM), self.emb)
        with self.assertRaisesRegex(NotImplementedError, "^1: the rows of table 'emb'"):
            torch.save(model.state_dict(), io.BytesIO())
        dense_only = {"0.weight": torch.zeros(DIM, DIM), "0.bias": torch.zeros(DIM)}
        with self.assertRaises(NotImplementedError):
            model.load_state_dict(dense_only, strict=False)

    def test_an_empty_batch_gives_an_empty_output(self):
        for shape in ((0,), (2, 0)):
            with self.subTest(shape=shape):
                out = self.emb(torch.zeros(shape, dtype=torch.int64))
                self.assertEqual(out.shape, (*shape, DIM))
                out.sum().backward()
                self.emb.flush()

    def test_uint64_ids_above_2_63(self):
        ids = np.array([[2**63 + 7, 2**64 - 2], [2**63 + 7, 5]], np.uint64)
        self.client.push("emb", np.array([2**63 + 7], np.uint64), np.ones((1, DIM), np.float32))
        out = self.emb(ids)
        self.assertEqual(out.shape, (2, 2, DIM))
        torch.testing.assert_close(out[0, 0], torch.full((DIM,), -0.5))
        torch.testing.assert_close(out[1, 1], torch.full((DIM,), 0.5))  # not key 2^63 + 7
        out.sum().backward()  # key 2^63 + 7 twice: w = -0.5 - 2
        self.emb.flush()
        np.testing.assert_allclose(self.client.fetch("emb", ids[0]), [[-2.5] * DIM, [-0.5] * DIM])


if __name__ == "__main__":
    unittest.main()
