"""PyTorch on the parameter server: PsEmbedding, an embedding layer whose rows live in a bexpress
parameter-server table.

    emb = bexpress.torch.PsEmbedding(1_000_000, 16, table="user", client=client)
    out = emb(ids)                # fetches the batch's distinct ids' rows (one fetch)
    loss(out).backward()          # pushes their gradients, summed per id, asynchronously
    emb.flush()                   # waits for every push (before evaluating, or at exit)

The table's optimiser (in the cluster file) applies the pushed gradients on the servers; the
module itself has no parameters. Under torch.no_grad() nothing is pushed (inference).

What it cannot honour it refuses, rather than do something else:
- ids are integers (TypeError for floats and bools), on the CPU (the rows are fetched into
  CPU memory; the module cannot be moved to another device either: RuntimeError), and
  non-negative (ValueError) unless allow_negative_ids=True, which keys an id by its 64-bit two's
  complement (-1 is key 2^64 - 1). A numpy unsigned array (uint64) passes keys up to 2^64 - 1.
- state_dict() and load_state_dict() raise NotImplementedError, as do those of a model
  holding a PsEmbedding: the rows are on the servers and are not checkpointed through torch
  (save the model's other submodules' state_dicts instead).
"""

import collections

import numpy as np
import torch
from torch import nn


class PsEmbedding(nn.Module):
    """Rows of `table` (dim floats each) for integer ids of any shape: output shape ids.shape +
    (dim,); an empty batch gives an empty output. At most `max_pushes_in_flight` pushes are
    outstanding (0: each push completes in backward); a push error is raised by the backward or
    flush() that waits for it. `allow_negative_ids`: key a negative id by its 64-bit two's
    complement instead of refusing it."""

    def __init__(self, num_embeddings_hint, dim, table, client, timeout=5.0,
                 max_pushes_in_flight=4, allow_negative_ids=False):
        super().__init__()
        self.num_embeddings_hint = num_embeddings_hint  # informational: the PS rows are unbounded
        self.dim = dim
        self.table = table
        self.client = client
        self.timeout = timeout
        self.max_pushes_in_flight = max_pushes_in_flight
        self.allow_negative_ids = allow_negative_ids
        self._in_flight = collections.deque()
        self.fetches = 0
        self.pushes = 0

    def forward(self, ids):
        keys, inverse, shape = self._keys(ids)
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
        return weight.index_select(0, inverse).reshape(*shape, self.dim)

    def _keys(self, ids):
        """The batch's distinct keys (uint64), each id's index among them, and the ids' shape."""
        if isinstance(ids, np.ndarray) and ids.dtype.kind == "u":
            # torch has no uint64 (nor uint16/32): keys above 2^63 stay in numpy.
            keys, inverse = np.unique(ids.reshape(-1).astype(np.uint64), return_inverse=True)
            return keys, torch.from_numpy(inverse.astype(np.int64)), ids.shape
        ids = torch.as_tensor(ids)
        if ids.device.type != "cpu":
            raise RuntimeError(f"PsEmbedding: ids are on {ids.device}, the rows are fetched into "
                               "CPU memory: pass CPU ids (ids.cpu()) and move the output")
        if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
            raise TypeError(f"PsEmbedding: ids must be integers, not {ids.dtype}")
        ids = ids.to(torch.int64)
        if not self.allow_negative_ids and ids.numel() > 0 and ids.min() < 0:
            raise ValueError(f"PsEmbedding: negative id {int(ids.min())}; pass "
                             "allow_negative_ids=True to key it by its 64-bit two's complement")
        unique, inverse = torch.unique(ids.reshape(-1), sorted=False, return_inverse=True)
        return unique.numpy().view(np.uint64), inverse, ids.shape

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

    # .to(), .cuda(), .cpu(), .half() and the like all come here (for this module and for a model
    # holding it): a move off the CPU would leave a module that still fetches into CPU memory.
    def _apply(self, fn, *args, **kwargs):
        moved = fn(torch.empty(0))
        if moved.device.type != "cpu":
            raise RuntimeError(f"PsEmbedding cannot move to {moved.device}: its rows are fetched "
                               "into CPU memory; keep it on the CPU and move its output")
        return super()._apply(fn, *args, **kwargs)

    # state_dict() and load_state_dict() (this module's, or a model's holding it) come here.
    def _save_to_state_dict(self, destination, prefix, keep_vars):
        raise NotImplementedError(self._no_state(prefix))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        raise NotImplementedError(self._no_state(prefix))

    def _no_state(self, prefix):
        name = prefix.rstrip(".") or "PsEmbedding"
        return (f"{name}: the rows of table {self.table!r} are on the parameter server, and a "
                "state_dict would hold none of them (checkpointing PS tables is not supported "
                "yet); save the state_dicts of the model's other submodules instead")

    def extra_repr(self):
        return (f"dim={self.dim}, table={self.table!r}, "
                f"max_pushes_in_flight={self.max_pushes_in_flight}"
                + (", allow_negative_ids=True" if self.allow_negative_ids else ""))
