#!/usr/bin/env python3
"""Trains a DLRM-style model on the bexpress parameter server, per transport, with and without
prefetching the next batch's rows, and compares them.

The data: a synthetic click log shaped like Criteo's (13 dense features, 26 sparse ones with
Criteo's cardinalities scaled by --vocab-scale, multi-hot bags of 1-3 ids, Zipf-like
popularity) drawn from a known ground-truth model, so the ground truth's own held-out AUC is the
ceiling a trained model approaches. The model: one PsEmbeddingBag (sum) per sparse feature, its
rows on a 2-shard x 2-replica `bx ps serve` cluster (Adagrad on the servers), a bottom MLP for
the dense features, the pairwise dot products of the 27 vectors (DLRM's interaction), and a
top MLP (Adam, local). With --prefetch both, each transport trains twice on fresh clusters: the
second time each step prefetches the next batch's rows while it computes.

    PYTHONPATH=build/python \\
        python3 examples/python/dlrm_train.py --plot dlrm.png

It prints per run samples/s, fetch and push P50/P99 (the client's), prefetch hits, the final
loss and the held-out AUC beside the ground truth's; --json prints the same as JSON.
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctr_model import auc  # noqa: E402  (the CTR example's AUC: Mann-Whitney U, ties averaged)

# Criteo Kaggle's 26 categorical cardinalities, scaled by --vocab-scale (at least 3 ids each).
CRITEO_CARDINALITIES = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683,
                        8351593, 3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15,
                        286181, 105, 142572]
DENSE = 13
DIM = 8
MAX_BAG = 3


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--transports", default="rdma,tcp")
    p.add_argument("--prefetch", choices=["off", "on", "both"], default="both")
    p.add_argument("--samples", type=int, default=40000, help="impressions (80%% train)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--vocab-scale", type=float, default=0.001,
                   help="Criteo's cardinalities times this (default: 10 to 10,131 ids)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--plot", help="write the loss plot here (PNG)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    return p.parse_args(argv)


def cardinalities(scale):
    return [max(3, int(c * scale)) for c in CRITEO_CARDINALITIES]


def make_click_log(samples, vocab, seed):
    """dense float32 (samples, 13); per sparse feature (ids int64, offsets int64) of its bags
    (ids offset by feature * 2^32, so the tables' keys are disjoint); clicks; true logits."""
    rng, truth = np.random.default_rng(seed), np.random.default_rng(seed + 1000)
    dense = np.log1p(rng.exponential(2.0, size=(samples, DENSE))).astype(np.float32)
    logit = -1.0 + dense @ truth.normal(0, 0.3, DENSE)
    sparse, pooled = [], []
    for f, size in enumerate(vocab):
        lengths = rng.integers(1, MAX_BAG + 1, size=samples)
        popularity = 1.0 / (np.arange(size) + 3.0)
        ids = rng.choice(size, size=lengths.sum(), p=popularity / popularity.sum())
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        effect = truth.normal(0, 0.6 if f < 4 else 0.2, size)
        vectors = truth.normal(0, 0.5, (size, 4))
        logit += np.add.reduceat(effect[ids], offsets) / lengths
        pooled.append(np.add.reduceat(vectors[ids], offsets, axis=0) / lengths[:, None])
        sparse.append((ids.astype(np.int64) + (f << 32), offsets.astype(np.int64)))
    logit += np.sum(pooled[0] * pooled[1], axis=1) + np.sum(pooled[2] * pooled[3], axis=1)
    clicks = (rng.random(samples) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return dense, sparse, clicks, logit


def take(sparse, rows):
    """The bags of samples `rows` (sorted or not): per feature (ids, offsets) for those bags."""
    out = []
    for ids, offsets in sparse:
        ends = np.append(offsets[1:], len(ids))
        starts, stops = offsets[rows], ends[rows]
        lengths = stops - starts
        index = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
        index += np.arange(lengths.sum())
        out.append((ids[index], np.concatenate([[0], np.cumsum(lengths)[:-1]])))
    return out


def build_model(client, vocab):
    import torch
    from torch import nn

    from bexpress.torch import PsEmbeddingBag

    class Dlrm(nn.Module):
        def __init__(self):
            super().__init__()
            self.bags = nn.ModuleList(
                PsEmbeddingBag(size, DIM, table=f"sparse{f}", client=client, mode="sum")
                for f, size in enumerate(vocab))
            self.bottom = nn.Sequential(nn.Linear(DENSE, 32), nn.ReLU(), nn.Linear(32, DIM),
                                        nn.ReLU())
            vectors = len(vocab) + 1
            self.top = nn.Sequential(nn.Linear(DIM + vectors * (vectors - 1) // 2, 64),
                                     nn.ReLU(), nn.Linear(64, 1))
            self.pairs = torch.triu_indices(vectors, vectors, offset=1)

        def forward(self, dense, bags):
            x = self.bottom(torch.as_tensor(dense))
            vectors = torch.stack([x] + [bag(torch.from_numpy(ids), torch.from_numpy(offsets))
                                         for bag, (ids, offsets) in zip(self.bags, bags)], 1)
            dots = torch.bmm(vectors, vectors.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
            return self.top(torch.cat([x, dots], 1)).squeeze(1)

        def prefetch(self, bags):
            for bag, (ids, _) in zip(self.bags, bags):
                bag.prefetch(torch.from_numpy(ids))

        def flush(self):
            for bag in self.bags:
                bag.flush()

    return Dlrm()


def run(args, transport, prefetch, vocab, data, workdir):
    import torch

    import bexpress
    from bexpress.testing import LocalCluster

    torch.manual_seed(args.seed)
    dense, sparse, clicks, logit = data
    cut = int(len(clicks) * 0.8)
    tables = [{"id": f + 1, "name": f"sparse{f}", "kind": "embedding", "dim": DIM,
               "init": {"kind": "normal", "mean": 0, "stddev": 0.01, "seed": 7 + f},
               "optimizer": {"kind": "adagrad", "learning_rate": 0.05}}
              for f in range(len(vocab))]
    with LocalCluster(shards=2, replicas=2, tables=tables,
                      workdir=tempfile.mkdtemp(dir=workdir)) as cluster, \
            bexpress.PsClient(cluster.path, transport=transport) as client:
        model = build_model(client, vocab)
        optimizer = torch.optim.Adam([p for p in model.parameters()], lr=0.005)
        loss_fn = torch.nn.BCEWithLogitsLoss()
        order_rng = np.random.default_rng(args.seed)
        losses, started, trained = [], time.monotonic(), 0
        for _ in range(args.epochs):
            order = order_rng.permutation(cut)
            batches = [order[i:i + args.batch] for i in range(0, cut, args.batch)]
            bags = take(sparse, batches[0])
            for i, rows in enumerate(batches):
                next_bags = take(sparse, batches[i + 1]) if i + 1 < len(batches) else None
                if prefetch and next_bags is not None:
                    # Issued before this step's forward so that the fetch overlaps its compute;
                    # the rows may miss this step's own push (one step stale).
                    model.prefetch(next_bags)
                loss = loss_fn(model(dense[rows], bags), torch.from_numpy(clicks[rows]))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                trained += len(rows)
                bags = next_bags
        model.flush()
        seconds = time.monotonic() - started
        test = np.arange(cut, len(clicks))
        with torch.no_grad():
            scores = np.concatenate([model(dense[rows], take(sparse, rows)).numpy()
                                     for rows in np.array_split(test, max(1, len(test) // 1024))])
        stats = client.stats()["latency"]
    return {"transport": transport, "prefetch": prefetch, "samples_per_s": trained / seconds,
            "seconds": seconds, "steps": losses, "final_loss": float(np.mean(losses[-20:])),
            "auc": auc(scores, clicks[cut:]), "ground_truth_auc": auc(logit[cut:], clicks[cut:]),
            "fetch": {k: stats.get("ps.Fetch", {}).get(k, 0.0) for k in ("p50_us", "p99_us")},
            "push": {k: stats.get("ps.Push", {}).get(k, 0.0) for k in ("p50_us", "p99_us")},
            "prefetch_hits": sum(b.prefetch_hits for b in model.bags),
            "prefetch_misses": sum(b.prefetch_misses for b in model.bags)}


def plot(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    for r in runs:
        window = min(20, len(r["steps"]))
        smooth = np.convolve(r["steps"], np.ones(window) / window, mode="valid")
        axis.plot(np.arange(len(smooth)) + window, smooth,
                  label=f"{r['transport']}, prefetch {'on' if r['prefetch'] else 'off'}")
    axis.set(xlabel="step", ylabel="training loss (moving mean)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main():
    args = parse_args()
    import bexpress
    bexpress.init(rdma="rdma" in args.transports.split(","))
    vocab = cardinalities(args.vocab_scale)
    data = make_click_log(args.samples, vocab, args.seed)
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.prefetch]
    with tempfile.TemporaryDirectory(prefix="dlrm-train-") as workdir:
        runs = [run(args, transport, prefetch, vocab, data, workdir)
                for transport in args.transports.split(",") for prefetch in modes]
    if args.json:
        print(json.dumps(runs))
    else:
        print(f"{len(vocab)} sparse features ({min(vocab)}-{max(vocab)} ids), {DENSE} dense, "
              f"{args.samples} samples, ground-truth AUC {runs[0]['ground_truth_auc']:.4f}")
        print(f"{'transport':>9} {'prefetch':>8} {'samples/s':>9} {'fetch P50':>9} "
              f"{'P99 us':>7} {'push P50':>8} {'P99 us':>7} {'hits':>6} {'loss':>7} {'AUC':>7}")
        for r in runs:
            print(f"{r['transport']:>9} {'on' if r['prefetch'] else 'off':>8} "
                  f"{r['samples_per_s']:>9.0f} {r['fetch']['p50_us']:>9.0f} "
                  f"{r['fetch']['p99_us']:>7.0f} {r['push']['p50_us']:>8.0f} "
                  f"{r['push']['p99_us']:>7.0f} {r['prefetch_hits']:>6} "
                  f"{r['final_loss']:>7.4f} {r['auc']:>7.4f}")
    if args.plot:
        plot(runs, args.plot)
        print(f"plot: {args.plot}", file=sys.stderr)


if __name__ == "__main__":
    main()
