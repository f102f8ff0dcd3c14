"""PyTorch on the parameter server: PsEmbedding, an embedding layer whose rows live in a bexpress
parameter-server table.

    emb = bexpress.torch.PsEmbedding(1_000_000, 16, table="user", client=client)
    out = emb(ids)                # fetches the batch's distinct ids' rows (one fetch)
    loss(out).backward()          # pushes their gradients, summed per id, asynchronously
    emb.flush()                   # waits for every push (before evaluating, or at exit)

The table's optimiser (in the cluster file) applies the pushed gradients on the servers; the
module itself has no parameters. Under torch.no_grad() nothing is pushed (inference).
"""

import collections

import numpy as np
import torch
from torch import nn


class PsEmbedding(nn.Module):
    """Rows of `table` (dim floats each) for int64 ids of any shape: output shape ids.shape +
    (dim,). At most `max_pushes_in_flight` pushes are outstanding (0: each push completes in
    backward); a push error is raised by the backward or flush() that waits for it."""

    def __init__(self, num_embeddings_hint, dim, table, client, timeout=5.0,
                 max_pushes_in_flight=4):
        super().__init__()
        self.num_embeddings_hint = num_embeddings_hint  # informational: the PS rows are unbounded
        self.dim = dim
        self.table = table
        self.client = client
        self.timeout = timeout
        self.max_pushes_in_flight = max_pushes_in_flight
        self._in_flight = collections.deque()
        self.fetches = 0
        self.pushes = 0

    def forward(self, ids):
        ids = torch.as_tensor(ids, dtype=torch.int64)
        unique, inverse = torch.unique(ids.reshape(-1), sorted=False, return_inverse=True)
        keys = unique.numpy().view(np.uint64)  # ids as 64-bit keys (negative ids wrap)
        rows = self.client.fetch(self.table, keys, self.timeout)
        self.fetches += 1
        if rows.shape[1] != self.dim:
            raise ValueError(f"table {self.table!r} has dim {rows.shape[1]}, not {self.dim}")
        weight = torch.from_numpy(rows)  # shares the fetched memory: no copy
        if torch.is_grad_enabled():
            weight.requires_grad_(True)
            # Autograd sums the gradient of each distinct id (index_select's backward) into
            # weight.grad's rows; the hook pushes them, keyed as fetched.
            weight.register_hook(lambda grad: self._push(keys, grad))
        return weight.index_select(0, inverse).reshape(*ids.shape, self.dim)

    def _push(self, keys, grad):
        grads = grad.detach().to(torch.float32).contiguous().numpy()
        self.pushes += 1
        if self.max_pushes_in_flight <= 0:
            self.client.push(self.table, keys, grads, self.timeout)
            return None
        while len(self._in_flight) >= self.max_pushes_in_flight:
            self._in_flight.popleft().result()
        # push_async copies keys and grads before it returns: the arrays may go.
        self._in_flight.append(self.client.push_async(self.table, keys, grads, self.timeout))
        return None

    def flush(self):
        """Waits for every push in flight; raises the first one's error."""
        while self._in_flight:
            self._in_flight.popleft().result()

    def extra_repr(self):
        return (f"dim={self.dim}, table={self.table!r}, "
                f"max_pushes_in_flight={self.max_pushes_in_flight}")
