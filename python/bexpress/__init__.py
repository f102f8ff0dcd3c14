"""bexpress: a socket-like, zero-copy communication layer over RDMA, and the sharded parameter
server it exists for, from Python.

    import bexpress
    bexpress.init()                                   # rdma:// and tcp:// (init(rdma=False): tcp only)
    client = bexpress.PsClient("cluster.json", transport="rdma")
    rows = client.fetch("user", ids)                  # numpy float32 (len(ids), dim), no copy
    client.push("user", ids, grads)                   # grads: float32 (len(ids), dim), read in place
    future = client.push_async("user", ids, grads)    # concurrent.futures.Future
    rows = await client.fetch_asyncio("user", ids)    # inside an asyncio event loop

    t = bexpress.Transport("rdma")                    # the socket-like interface, by URL
    listener = t.listen("rdma://127.0.0.1:0")         # listener.url has the port
    sock = t.connect(listener.url); sock.send(b"hi")  # copied once into registered memory
    msg = listener.accept().receive()                 # uint8 array over the received memory

Errors are exceptions carrying the status code (bexpress.errors). Every blocking call releases
the GIL. The PyTorch layer is bexpress.torch (PsEmbedding).

The library's warnings and errors go to stderr; connection state changes ("bx rpc: replica ...
connecting -> up") too with bexpress.set_log_level("info") or BX_LOG_LEVEL=info in the
environment (levels: debug, info, warning (the default), error).
"""

import asyncio
import atexit
import os

from ._bexpress import Cluster, FetchedRows, PsServer, devices, init, is_initialized, metrics
from ._bexpress import Listener, ReceivedMessage, Socket, Transport, shard_of_key, version
from ._bexpress import checkpoint, export_table, read_checkpoint, set_log_level
from .errors import (Aborted, DataLoss, DeadlineExceeded, Error, FailedPrecondition, Internal,
                     InvalidArgument, NotFound, PermissionDenied, ResourceExhausted, Unavailable,
                     Unimplemented)

__all__ = ["init", "is_initialized", "version", "devices", "metrics", "set_log_level",
           "checkpoint", "read_checkpoint", "export_table",
           "Transport", "Listener", "Socket", "ReceivedMessage", "Cluster", "PsClient",
           "PsServer", "FetchedRows", "shard_of_key", "Error", "InvalidArgument", "NotFound",
           "Unavailable", "ResourceExhausted", "FailedPrecondition", "DeadlineExceeded",
           "Aborted", "DataLoss", "Internal", "Unimplemented", "PermissionDenied"]

if os.environ.get("BX_LOG_LEVEL"):
    try:
        set_log_level(os.environ["BX_LOG_LEVEL"])
    except ValueError as e:
        raise ValueError(f"bexpress: BX_LOG_LEVEL: {e}") from None

# Pending completions are delivered, and their thread stopped, before the interpreter goes.
atexit.register(_bexpress._shutdown)


class PsClient(_bexpress.PsClient):
    """A parameter-server client of one cluster over one transport ("rdma" or "tcp").

    `cluster` is a cluster file's path or a bexpress.Cluster. Tables are named by id or by their
    name in the cluster file. Timeouts are in seconds. `fetch` returns a float32 (len(keys), dim)
    array whose memory is the received reply when every key falls on one shard (array.base is
    a FetchedRows; .copied says whether the rows had to be gathered from several shards);
    `push` applies each gradient exactly once, across replica failures, before it returns.
    Keys are any integer array or list below 2^64 (numpy.uint64 for keys above 2^63); floats
    raise TypeError and negative numbers InvalidArgument, rather than become other keys. No
    keys fetch a (0, dim) array (NotFound for a table not in the cluster file).
    """

    def __init__(self, cluster, transport="rdma", client_id=0, connect_timeout=1.0):
        if not isinstance(cluster, Cluster):
            cluster = Cluster.load(str(cluster))
        super().__init__(cluster, transport, client_id, connect_timeout)

    async def fetch_asyncio(self, table, keys, timeout=5.0):
        return await asyncio.wrap_future(self.fetch_async(table, keys, timeout))

    async def push_asyncio(self, table, keys, grads, timeout=5.0):
        return await asyncio.wrap_future(self.push_async(table, keys, grads, timeout))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
