"""bexpress.Transport by URL, over rdma:// (simnic) and tcp:// in one process: whole messages in
order, eager and rendezvous sizes, received memory viewed without a copy, and errors with codes."""

import unittest

import numpy as np

import bexpress


def setUpModule():
    bexpress.init()


class TransportTest(unittest.TestCase):
    def pair(self, scheme):
        transport = bexpress.Transport(scheme)
        listener = transport.listen(f"{scheme}://127.0.0.1:0")
        self.assertTrue(listener.url.startswith(f"{scheme}://127.0.0.1:"))
        client = transport.connect(listener.url, timeout=5)
        server = listener.accept(timeout=5)
        return transport, listener, client, server

    def test_messages_arrive_whole_in_order_and_are_viewed_in_place(self):
        for scheme in ("rdma", "tcp"):
            with self.subTest(scheme=scheme):
                _, listener, client, server = self.pair(scheme)
                self.assertEqual((client.scheme, server.scheme), (scheme, scheme))
                sizes = [1, 100, 16 << 10, (16 << 10) + 1, 4 << 20]  # eager and rendezvous
                sent = [np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
                        for n in sizes]
                for payload in sent:
                    client.send(payload)
                client.send(b"bytes too")
                for payload in sent:
                    got = server.receive(timeout=10)
                    self.assertEqual(got.dtype, np.uint8)
                    np.testing.assert_array_equal(got, payload)
                    self.assertIsInstance(got.base, bexpress.ReceivedMessage)
                    self.assertEqual(got.__array_interface__["data"][0], got.base.address)
                self.assertEqual(server.receive(timeout=10).tobytes(), b"bytes too")
                # Replies the other way; a float array's bytes, as they were.
                server.send(np.arange(4, dtype=np.float32))
                reply = client.receive(timeout=10)
                np.testing.assert_array_equal(reply.view(np.float32), np.arange(4))
                self.assertGreaterEqual(client.counters()["messages_sent"], 6)
                client.close()
                listener.close()

    def test_errors_carry_codes(self):
        with self.assertRaises(bexpress.NotFound):
            bexpress.Transport("udp")
        for scheme in ("rdma", "tcp"):
            with self.subTest(scheme=scheme):
                transport, listener, client, server = self.pair(scheme)
                with self.assertRaises(bexpress.DeadlineExceeded):
                    server.receive(timeout=0.05)
                with self.assertRaises(bexpress.DeadlineExceeded):
                    listener.accept(timeout=0.05)
                with self.assertRaises((BufferError, ValueError)):  # not contiguous
                    client.send(np.zeros((4, 4), np.uint8)[:, 1])
                client.close()
                # The peer's close ends the server's socket: receive says why.
                with self.assertRaises(bexpress.Error):
                    server.receive(timeout=10)
                self.assertIsNotNone(server.error)
                listener.close()
                with self.assertRaises(bexpress.FailedPrecondition):
                    listener.accept(timeout=0.05)
                with self.assertRaises(bexpress.Error):
                    transport.connect(f"{scheme}://127.0.0.1:1", timeout=1)

    def test_a_received_message_outlives_its_socket_and_transport(self):
        transport, listener, client, server = self.pair("rdma")
        client.send(b"kept")
        got = server.receive(timeout=10)
        del transport, listener, client, server
        self.assertEqual(got.tobytes(), b"kept")


if __name__ == "__main__":
    unittest.main()
