"""PyTorch on the parameter server: PsEmbedding, an embedding layer whose rows live in a bexpress
parameter-server table.

    emb = bexpress.torch.PsEmbedding(1_000_000, 16, table="user", client=client)
    out = emb(ids)                # fetches the batch's distinct ids' rows (one fetch)
    loss(out).backward()          # pushes their gradients, summed per id, asynchronously
    emb.flush()                   # waits for every push (before evaluating, or at exit)

    bag = bexpress.torch.PsEmbeddingBag(1_000_000, 16, table="item", client=client, mode="sum")
    pooled = bag(ids, offsets)    # nn.EmbeddingBag's interface: bags pooled by sum, mean or max
    emb.prefetch(next_ids)        # the next batch's fetch overlaps this batch's compute

The table's optimiser (in the cluster file) applies the pushed gradients on the servers; the
module itself has no parameters. Under torch.no_grad() nothing is pushed (inference).

What it cannot honour it refuses, rather than do something else:
- ids are integers (TypeError for floats and bools), on the CPU (the rows are fetched into
  CPU memory; the module cannot be moved to another device either: RuntimeError), and
  non-negative (ValueError) unless allow_negative_ids=True, which keys an id by its 64-bit two's
  complement (-1 is key 2^64 - 1). A numpy unsigned array (uint64) passes keys up to 2^64 - 1.
- padding_idx is an id, not an index from the end (the table has no end): its entries are not
  fetched, give zeros (PsEmbedding) or are left out of their bag (PsEmbeddingBag), and push no
  gradient. A negative padding_idx needs allow_negative_ids=True, as a negative id does.
- state_dict() and load_state_dict() raise NotImplementedError, as do those of a model
  holding a PsEmbedding: the rows are on the servers, and a state_dict would copy a whole
  table into this process. Checkpoint the tables with bexpress.checkpoint (every shard, while
  training goes on; restored by `bx ps serve --restore`, read by bexpress.export_table) and
  save the model's other submodules' state_dicts beside it.
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

    MAX_PREFETCHES = 4

    def __init__(self, num_embeddings_hint, dim, table, client, timeout=5.0,
                 max_pushes_in_flight=4, allow_negative_ids=False, padding_idx=None):
        super().__init__()
        if padding_idx is not None:
            if isinstance(padding_idx, bool) or not isinstance(padding_idx, (int, np.integer)):
                raise TypeError(f"padding_idx must be an integer id, not {padding_idx!r}")
            if padding_idx < 0 and not allow_negative_ids:
                raise ValueError(f"padding_idx {padding_idx} is negative: it is an id, not an "
                                 "index from the end (the table has none); pass "
                                 "allow_negative_ids=True to mean the id itself")
            padding_idx = int(padding_idx)
        self.padding_idx = padding_idx
        self.num_embeddings_hint = num_embeddings_hint  # informational: the PS rows are unbounded
        self.dim = dim
        self.table = table
        self.client = client
        self.timeout = timeout
        self.max_pushes_in_flight = max_pushes_in_flight
        self.allow_negative_ids = allow_negative_ids
        self._in_flight = collections.deque()
        self._prefetched = collections.deque()  # (keys, future) of prefetch(), oldest first
        self.fetches = 0
        self.pushes = 0
        self.prefetch_hits = 0
        self.prefetch_misses = 0

    def forward(self, ids):
        keys, inverse, shape = self._keys(ids)
        weight = self._weight(keys)
        return weight.index_select(0, inverse).reshape(*shape, self.dim)

    def prefetch(self, ids):
        """Starts the fetch of `ids`' rows now (the next batch's, while this one computes); the
        forward given the same ids then takes them without waiting for a round trip. The rows
        are read when the fetch runs, so a push still in flight (this batch's) may not be in
        them: one step of staleness, as in pipelined PS training. A forward takes the prefetch
        of its ids and drops those issued before it (prefetch_misses); at most MAX_PREFETCHES
        are held (the oldest is dropped). A fetch the client refuses at once (an unknown table)
        raises here; one that fails later raises in the forward that uses it."""
        keys, _, _ = self._keys(ids)
        self._prefetched.append((keys, self.client.fetch_async(self.table, keys, self.timeout)))
        self.fetches += 1
        if len(self._prefetched) > self.MAX_PREFETCHES:
            self._prefetched.popleft()
            self.prefetch_misses += 1

    def _weight(self, keys):
        """The rows of `keys` (one fetch, or the prefetch of the same keys), pushed their gradient
        in backward; with a padding_idx, one more row of zeros after them, which the padding
        entries select."""
        match = next((i for i, (held, _) in enumerate(self._prefetched)
                      if np.array_equal(held, keys)), None)
        if match is not None:
            for _ in range(match):  # issued before this one and not asked for
                self._prefetched.popleft()
                self.prefetch_misses += 1
            rows = self._prefetched.popleft()[1].result()
            self.prefetch_hits += 1
        else:
            rows = self.client.fetch(self.table, keys, self.timeout)
            self.fetches += 1
        if rows.shape[1] != self.dim:
            raise ValueError(f"table {self.table!r} has dim {rows.shape[1]}, not {self.dim}")
        weight = torch.from_numpy(rows)  # shares the fetched memory: no copy
        if torch.is_grad_enabled():
            weight.requires_grad_(True)
            # Autograd sums the gradient of each distinct id (index_select's or embedding_bag's
            # backward) into weight.grad's rows; the hook pushes them, keyed as fetched.
            weight.register_hook(lambda grad: self._push(keys, grad))
        if self.padding_idx is not None:
            weight = torch.cat([weight, weight.new_zeros(1, self.dim)])
        return weight

    def _keys(self, ids):
        """The batch's distinct keys (uint64, the padding id left out), each id's index among
        them (len(keys) for the padding id), and the ids' shape."""
        if isinstance(ids, np.ndarray) and ids.dtype.kind == "u":
            # torch has no uint64 (nor uint16/32): keys above 2^63 stay in numpy.
            flat = ids.reshape(-1).astype(np.uint64)
            pad = (flat == np.uint64(self.padding_idx % 2**64) if self.padding_idx is not None
                   else np.zeros(flat.shape, bool))
            keys, inverse = np.unique(flat[~pad], return_inverse=True)
            full = np.full(flat.shape, len(keys), np.int64)
            full[~pad] = inverse
            return keys, torch.from_numpy(full), ids.shape
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
        flat = ids.reshape(-1)
        if self.padding_idx is None:
            unique, inverse = torch.unique(flat, sorted=False, return_inverse=True)
            return unique.numpy().view(np.uint64), inverse, ids.shape
        pad = flat == self.padding_idx
        unique, inverse = torch.unique(flat[~pad], sorted=False, return_inverse=True)
        full = torch.full_like(flat, len(unique))
        full[~pad] = inverse
        return unique.numpy().view(np.uint64), full, ids.shape

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
                "state_dict would hold none of them: checkpoint the tables with "
                "bexpress.checkpoint(cluster, dir) (restored by `bx ps serve --restore dir`) "
                "and save the state_dicts of the model's other submodules beside it")

    def extra_repr(self):
        return (f"dim={self.dim}, table={self.table!r}, "
                f"max_pushes_in_flight={self.max_pushes_in_flight}"
                + (", allow_negative_ids=True" if self.allow_negative_ids else "")
                + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""))


class PsEmbeddingBag(PsEmbedding):
    """nn.EmbeddingBag over a parameter-server table: bags of ids pooled by `mode` ("sum",
    "mean" or "max"), given as a 1-D input with `offsets` (each bag's start; with
    include_last_offset, one more: the end) or as a 2-D input (one bag per row, no offsets);
    `per_sample_weights` scale each id's row (mode "sum" only, as in torch). Output (bags, dim).
    One fetch of the batch's distinct ids; backward pushes their gradients, summed per id. An
    empty bag gives zeros. ids, padding_idx and the other arguments: as PsEmbedding."""

    def __init__(self, num_embeddings_hint, dim, table, client, mode="mean", timeout=5.0,
                 max_pushes_in_flight=4, allow_negative_ids=False, padding_idx=None,
                 include_last_offset=False):
        super().__init__(num_embeddings_hint, dim, table, client, timeout, max_pushes_in_flight,
                         allow_negative_ids, padding_idx)
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"mode must be 'sum', 'mean' or 'max', not {mode!r}")
        self.mode = mode
        self.include_last_offset = include_last_offset

    def forward(self, input, offsets=None, per_sample_weights=None):
        keys, inverse, shape = self._keys(input)
        weight = self._weight(keys)
        # torch's own embedding_bag over the fetched rows: the local indices select them, and
        # the zero row after them (padding_idx) is left out of its bag as nn.EmbeddingBag does.
        return nn.functional.embedding_bag(
            inverse.reshape(shape), weight, offsets=offsets, mode=self.mode,
            per_sample_weights=per_sample_weights, include_last_offset=self.include_last_offset,
            padding_idx=len(keys) if self.padding_idx is not None else None)

    def extra_repr(self):
        return (super().extra_repr() + f", mode={self.mode!r}"
                + (", include_last_offset=True" if self.include_last_offset else ""))
